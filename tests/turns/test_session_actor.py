"""The session's mailbox thread: one item at a time, follow-ups before the next item, timers, ticks, stopping.
Pure logic: the behaviour is a recorder (no model)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from vita.turns.session_actor import AudioGatherer, AudioIn, ClockTick, SessionActor

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
    results = [target.post_audio(np.zeros(512, np.int16), 16000) for _ in range(6)]  # a VAD step each
    assert results == [True] * 4 + [False] * 2
    target.post("an output")  # worker outputs and events are never dropped for the audio's sake
    target.start()
    assert recorder.wait_for(lambda seen: "an output" in seen)
    assert sum(isinstance(s, AudioIn) for s in recorder.seen) == 4
    assert target.post_audio(np.zeros(512, np.int16), 16000)  # drained: room again
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


def test_vita_s_8_ms_messages_reach_the_vad_one_step_at_a_time_as_each_step_completes():
    gatherer = AudioGatherer()
    posted = []
    for i in range(12):  # 12 x 128 samples: three 512-sample steps
        due = gatherer.add(np.full(128, i, np.int16), 16000, arrived=float(i))
        posted.append(due)
    assert [len(d) for d in posted] == [0, 0, 0, 1] * 3  # posted the moment a step is complete, not later
    first = posted[3][0]
    assert first.pcm.tolist() == [0] * 128 + [1] * 128 + [2] * 128 + [3] * 128 and first.arrived == 3.0
    assert gatherer.take() == []


def test_steps_are_counted_from_the_first_sample_whatever_the_message_sizes():
    gatherer = AudioGatherer()
    sizes = [300, 300, 100, 400, 1200, 10]  # ends at 300, 600, 700, 1100, 2300, 2310
    due = [len(gatherer.add(np.zeros(n, np.int16), 16000, 0.0)) for n in sizes]
    assert due == [0, 1, 0, 1, 1, 0]  # past 512, past 1024, past 1536 (and 2048)
    assert sum(m.pcm.size for m in gatherer.take()) == 10


def test_a_new_rate_posts_what_was_gathered_at_the_old_one_first():
    gatherer = AudioGatherer()
    assert gatherer.add(np.zeros(100, np.int16), 16000, 1.0) == []
    due = gatherer.add(np.ones(800, np.int16), 24000, 2.0)  # 800 at 24 kHz: past a 768-sample step
    assert [(m.rate, m.pcm.size, m.arrived) for m in due] == [(16000, 100, 1.0), (24000, 800, 2.0)]


def test_other_mail_and_stop_come_after_the_audio_gathered_before_them():
    target, recorder = actor()
    target.post_audio(np.full(128, 7, np.int16), 16000)  # less than a step: gathered, not yet posted
    target.post("recording stopped")
    target.post_audio(np.full(64, 8, np.int16), 16000)
    target.start()
    target.stop()
    target.join(2)
    kinds = [s.pcm.tolist() if isinstance(s, AudioIn) else s for s in recorder.seen]
    assert kinds == [[7] * 128, "recording stopped", [8] * 64]


def test_a_microphone_that_stops_mid_step_still_reaches_the_vad_by_the_next_tick():
    target, recorder = actor(tick_s=0.05)
    target.start()
    target.post_audio(np.full(100, 3, np.int16), 16000)
    assert recorder.wait_for(lambda seen: any(isinstance(s, AudioIn) for s in seen), 2)
    audio = [s for s in recorder.seen if isinstance(s, AudioIn)]
    assert [a.pcm.size for a in audio] == [100]
    target.stop()
    target.join(2)


def test_after_a_vad_reset_the_audio_is_posted_where_the_vad_s_new_steps_end():
    gatherer = AudioGatherer()
    gatherer.add(np.zeros(128, np.int16), 16000, 0.0)
    gatherer.vad_at(handled=0, needed=256)  # e.g. the VAD was reset with 256 samples of a step already read
    due = [len(gatherer.add(np.zeros(128, np.int16), 16000, 0.0)) for _ in range(5)]
    assert due == [1, 0, 0, 0, 1]  # at 256, then at 256 + 512 = 768


def test_audio_at_another_rate_is_not_gathered():
    gatherer = AudioGatherer()
    assert [m.pcm.size for m in gatherer.add(np.zeros(960, np.int16), 48000, 0.0)] == [960]  # resampled later


class SteppedVad(Recorder):
    """The VAD's part in this: it reads 512-sample steps, keeps the rest, and forgets it on "reset"."""

    def __init__(self):
        super().__init__()
        self.pending = 0
        self.sizes: list[int] = []

    def receive(self, item):
        if isinstance(item, AudioIn):
            self.pending = (self.pending + item.pcm.size) % 512
            self.sizes.append(item.pcm.size)
        elif item == "reset":
            self.pending = 0
        super().receive(item)


def test_the_actor_follows_the_vad_s_steps_through_a_reset():
    vad = SteppedVad()
    target = SessionActor("test", vad.receive, tick_s=60.0, vad_needs=lambda: 512 - vad.pending)
    vad.actor = target
    target.start()
    for _ in range(6):  # 768 samples: one step read, 256 left
        target.post_audio(np.zeros(128, np.int16), 16000)
    target.post("reset")  # posts the 256 gathered, then the reset drops them from the VAD
    assert target.call_and_wait(lambda: None, 2)  # (the reset's iteration has told the actor where steps lie)
    assert vad.pending == 0 and vad.sizes == [512, 256]
    for _ in range(4):
        target.post_audio(np.zeros(128, np.int16), 16000)
    assert vad.wait_for(lambda seen: len(vad.sizes) == 3)
    assert vad.sizes[2] == 512  # one step exactly: steps count from the reset, not from the session's start
    target.stop()
    target.join(2)


def test_the_backlog_counts_the_client_s_messages_not_the_joined_ones():
    target, recorder = actor(max_audio=4)  # never started
    results = [target.post_audio(np.zeros(160, np.int16), 16000) for _ in range(6)]
    assert results == [True] * 4 + [False] * 2  # 2000 of VITA's 8 ms messages are still 16 s, not 64
    target.start()
    target.stop()
    target.join(2)
    assert sum(s.parts for s in recorder.seen if isinstance(s, AudioIn)) == 4


def test_audio_gathered_while_the_vad_was_reset_is_posted_once_the_new_step_end_is_known():
    gatherer = AudioGatherer()
    for _ in range(6):  # one step posted at 512, 256 gathered
        gatherer.add(np.zeros(128, np.int16), 16000, 0.0)
    assert gatherer.gathered == 256
    assert gatherer.vad_at(handled=512, needed=512) == []  # the step ends at 1024: not yet
    due = gatherer.vad_at(handled=256, needed=512)  # (reset after 256: the step ends at 768, already gathered)
    assert [m.pcm.size for m in due] == [256] and gatherer.gathered == 0
