"""The session's mailbox thread: one item at a time, follow-ups before the next item, timers, ticks, stopping.
Pure logic: the behaviour is a recorder (no model)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from vita.turns.session_actor import AudioIn, ClockTick, SessionActor

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


class Recorder:
    def __init__(self):
        self.seen: list = []
        self.actor: SessionActor | None = None
        self.changed = threading.Condition()
        self.inside = False
        self.nested = False

    def receive(self, item):
        if self.inside:
            self.nested = True
        self.inside = True
        try:
            if isinstance(item, tuple) and item[0] == "spawn":  # an item whose handling sets off follow-ups
                for follow in item[1]:
                    self.actor.follow(follow)
            if isinstance(item, tuple) and item[0] == "fail":
                raise RuntimeError("a bad item")
            with self.changed:
                self.seen.append(item)
                self.changed.notify_all()
        finally:
            self.inside = False

    def wait_for(self, predicate, timeout: float = 5.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: predicate(self.seen), timeout)


def actor(tick_s: float = 60.0, max_audio: int = 2000) -> tuple[SessionActor, Recorder]:
    recorder = Recorder()
    recorder.actor = SessionActor("test", recorder.receive, tick_s=tick_s, max_audio=max_audio)
    return recorder.actor, recorder


def test_follow_ups_are_handled_after_their_item_and_before_the_next_item_never_inside():
    target, recorder = actor()
    release = threading.Event()
    target.call(release.wait)  # hold the thread so that everything below is queued before it runs
    target.start()
    target.post(("spawn", ["a1", ("spawn", ["a2"])]))
    target.post("b")
    release.set()
    assert recorder.wait_for(lambda seen: "b" in seen)
    items = [s if isinstance(s, str) else s[0] for s in recorder.seen]
    assert items == ["spawn", "a1", "spawn", "a2", "b"]
    assert not recorder.nested
    target.stop()
    target.join(2)


def test_a_timer_fires_in_turn_and_stop_handles_what_was_posted_before_it():
    target, recorder = actor()
    target.start()
    target.call(lambda: target.after(0.05, "late"))
    assert recorder.wait_for(lambda seen: "late" in seen, 2)
    for i in range(50):
        target.post(i)
    target.stop()
    target.post("after stop")
    target.join(2)
    assert not target.thread.is_alive()
    assert recorder.seen == ["late", *range(50)]


def test_an_item_that_raises_does_not_end_the_thread():
    target, recorder = actor()
    target.start()
    target.post(("fail",))
    target.post("next")
    assert recorder.wait_for(lambda seen: "next" in seen)
    target.stop()


def test_ticks_come_while_idle_and_while_mail_keeps_arriving():
    target, recorder = actor(tick_s=0.05)
    target.start()
    assert recorder.wait_for(lambda seen: sum(isinstance(s, ClockTick) for s in seen) >= 3, 2)
    stop = threading.Event()

    def stream():  # a microphone that never stops sending must not hold the ticks off
        while not stop.is_set():
            target.post_audio(np.zeros(128, np.int16), 16000)
            stop.wait(0.002)

    feeder = threading.Thread(target=stream)
    feeder.start()
    try:
        ticks = sum(isinstance(s, ClockTick) for s in recorder.seen)
        assert recorder.wait_for(lambda seen: sum(isinstance(s, ClockTick) for s in seen) >= ticks + 3, 2)
        assert any(isinstance(s, AudioIn) for s in recorder.seen)
    finally:
        stop.set()
        feeder.join()
        target.stop()
        target.join(2)
    assert not target.thread.is_alive()


def test_a_full_audio_backlog_drops_audio_but_other_mail_still_gets_in():
    target, recorder = actor(max_audio=4)  # never started: nothing drains it
    results = [target.post_audio(np.zeros(160, np.int16), 16000) for _ in range(6)]
    assert results == [True] * 4 + [False] * 2
    target.post("an output")  # worker outputs and events are never dropped for the audio's sake
    target.start()
    assert recorder.wait_for(lambda seen: "an output" in seen)
    assert sum(isinstance(s, AudioIn) for s in recorder.seen) == 4
    assert target.post_audio(np.zeros(160, np.int16), 16000)  # drained: room again
    target.stop()


def test_call_and_wait_returns_once_run_and_runs_inline_on_its_own_thread():
    target, recorder = actor()
    target.start()
    ran = []
    assert target.call_and_wait(lambda: ran.append(threading.current_thread() is target.thread), 2)
    assert ran == [True]
    target.call(lambda: target.call_and_wait(lambda: ran.append("inline"), 2))
    assert target.call_and_wait(lambda: None, 2) and ran == [True, "inline"]
    target.stop()
    target.join(2)
    assert not target.call_and_wait(lambda: None, 0.1)  # stopped: nothing runs it
