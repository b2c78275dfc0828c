"""The benchmark scripts still speak the workers' protocol: the TTS benchmark runs the real TTS worker through
the helper every worker benchmark uses (it broke once when worker status moved to its own queue)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.harness.server import ROOT


def test_tts_benchmark_runs_the_real_worker_and_reports():
    result = subprocess.run([sys.executable, "-m", "scripts.bench.stages.tts", "--runs", "1"], cwd=ROOT,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "first chunk p50" in result.stdout and "RTF p50" in result.stdout, result.stdout


PROBE = """
import os, sys, time
from vita.cpu import name_os_thread
name_os_thread(sys.argv[2])
os.sched_setaffinity(0, {int(sys.argv[1])})
print("pinned", flush=True)
sys.stdin.readline()  # spin when told
until = time.monotonic() + 0.5
while time.monotonic() < until:
    pass
print("spun", flush=True)
sys.stdin.readline()  # alive (in /proc) until the budget is read
"""


@pytest.mark.fast
def test_the_cpu_budget_says_which_threads_waited_for_a_core():
    """Two processes spinning on one core for 0.5 s each wait for it about as long as they run; a third, spinning
    there alone afterwards, runs without waiting (so what is read is the wait, not the run time)."""
    import os
    import threading

    from scripts.bench.latency import thread_cpu

    core = str(min(os.sched_getaffinity(0)))
    names = ("budget-shared", "budget-shared", "budget-alone")
    probes = [subprocess.Popen([sys.executable, "-c", PROBE, core, name], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True) for name in names]
    watchdog = threading.Timer(60, lambda: [probe.kill() for probe in probes])  # a hung probe fails, not hangs
    watchdog.start()

    def spin(*chosen: subprocess.Popen) -> None:
        for probe in chosen:
            probe.stdin.write("go\n")
            probe.stdin.flush()
        for probe in chosen:
            assert probe.stdout.readline().strip() == "spun"

    try:
        for probe in probes:
            assert probe.stdout.readline().strip() == "pinned"
        spin(*probes[:2])  # together
        spin(probes[2])  # alone
        cpu, waited = thread_cpu(os.getpid())
    finally:
        watchdog.cancel()
        for probe in probes:
            probe.kill()
            probe.wait()
    (shared,) = [n for n in cpu if n.endswith("/budget-shared")]
    (alone,) = [n for n in cpu if n.endswith("/budget-alone")]
    assert cpu[shared] >= 0.25 and cpu[alone] >= 0.15, cpu  # ~0.5 s of the core each time (ticks of 10 ms)
    assert waited[shared] >= 0.25, (cpu[shared], waited[shared])  # each waited while the other ran
    assert waited[alone] < 0.5 * waited[shared], (waited[alone], waited[shared])  # it had the core to itself


@pytest.mark.fast
def test_the_tracing_benchmark_sends_every_turns_spans_and_reports_each_process():
    result = subprocess.run([sys.executable, "-m", "scripts.bench.stages.tracing", "--turns", "40"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    # 40 turns of 9 spans each (turn, vad, end_of_turn, delivery, asr, vision, llm, a tool, tts) and the conversation
    assert "361 spans reached the collector" in result.stdout, result.stdout
    for process in ("front", "llm", "tts"):
        assert result.stdout.count(f"  {process} ") == 2, result.stdout  # tracing off and on


@pytest.mark.fast
def test_the_decoding_benchmark_grades_a_transcript_by_its_distance_from_the_question():
    from scripts.bench.stages.asr_decoding import graded, tally

    assert graded("What is two plus two?", "What is 2 plus 2?") == "exact"  # numbers compared as said
    assert graded("How many legs does a spider have?", "How many legs does the spider have?") == "close"
    assert graded("Is a whale a mammal?", "is a whale and mellow.") == "part"
    assert graded("Can penguins fly?", "Kinting will spy.") == "garbled"
    assert tally(["exact", "asked", "exact"]) == "exact 2 close 0 part 0 garbled 0 asked 1 silent 0"


@pytest.mark.fast
def test_the_decoding_benchmark_judges_words_as_the_server_does():
    from scripts.bench.stages.asr_decoding import best_passing, server_asks
    from workers.llm.engines.asr import MisheardRule, Transcription

    rule = MisheardRule()  # the server's defaults: ask again under -0.9, a second opinion under -0.6, a reading -0.3
    assert not server_asks(rule, Transcription("What is the capital of France?", -0.1), None, None)
    assert server_asks(rule, Transcription("Kinting will spy.", -1.2), None, None)  # too unsure
    doubted = Transcription("Can penguins fly?", -0.7)
    assert server_asks(rule, doubted, Transcription("Ken ping wins supply.", -0.5), -1.5)  # the second model disagrees
    assert not server_asks(rule, doubted, Transcription("can penguins fly", -0.3), -1.5)
    read = Transcription("What colors grass?", -0.39)
    assert server_asks(rule, read, None, -8.2)  # -0.39 + 0.1 * -8.2 under -0.9: implausible
    assert not server_asks(rule, read, None, None)  # the model could not read them: answered, as the server does
    better, same = Transcription("What color is grass?", -0.45), Transcription("what colors grass", -0.4)
    readings = {"What color is grass?": -2.0, "what colors grass": -1.0}
    assert best_passing(rule, read, [same, better], None, readings) == better
    assert best_passing(rule, read, [same], None, readings) is None  # the same words are no other hypothesis
    assert best_passing(rule, read, [better], None, {"What color is grass?": -6.0}) is None  # implausible too


@pytest.mark.fast
def test_the_interruptions_benchmark_times_events_from_the_onset_and_summarises_what_never_came():
    from scripts.bench.stages.interruptions import first_after, spread
    from vita.hearing.utterance import Heard

    events = [(1.0, Heard.START), (1.7, Heard.CONFIRM), (1.9, Heard.PAUSE), (2.5, Heard.CONFIRM)]
    assert first_after(events, Heard.CONFIRM, 1.0) == 0.7
    assert first_after(events, Heard.END, 1.0) is None
    assert spread([0.7, 1.2, None, 0.8]) == "p50 0.800 s, max 1.200 s, over 1.0 s 1 of 4, never 1"
    assert spread([None]) == "none of 1"


class ScriptedEars:
    """A segmenter's events at set seconds of what it is fed (for the benchmark's own logic: no model), each with
    whether the speech open then goes on with an ended one."""

    def __init__(self, script: list[tuple[float, str, bool]]):
        self.script, self.position, self.going_on, self.ended = list(script), 0, False, []

    def feed(self, pcm):
        from vita.hearing.utterance import Heard, VadEvent

        self.position += pcm.size
        events = []
        while self.script and self.script[0][0] * 16000 <= self.position:
            _, kind, self.going_on = self.script.pop(0)
            events.append(VadEvent(Heard[kind]))
        return events

    def end_now(self, at_pause=False):
        self.ended.append((self.position / 16000, at_pause))
        return []


@pytest.mark.fast
def test_the_interruptions_benchmark_ends_a_question_at_its_pause_and_tells_the_room_going_on_from_its_own():
    from scripts.bench.stages.interruptions import PlaceInRoom, after_the_end

    speech = np.zeros(16000, np.int16)
    speech[4000:12000] = 5000  # (the last word ends at 0.75 s)
    ears = ScriptedEars([(0.1, "START", False), (0.4, "PAUSE", False), (0.45, "RESUME", False),
                         (0.85, "PAUSE", False), (1.95, "START", True), (2.2, "START", False),
                         (2.3, "DROPPED", False), (2.6, "START", False)])
    session = PlaceInRoom(None, 0, lambda: ears)
    after = after_the_end(session, speech)
    assert after.ended and after.going_on == pytest.approx(1.2, abs=0.01)  # (the question's own START is not counted)
    assert after.new == pytest.approx(1.85, abs=0.01)  # (the dropped one is not)
    assert ears.ended == [(pytest.approx(0.856, abs=0.01), True), (3.0, False)]  # (at the pause after the last word)
    ears.script = [(3.3, "START", False), (3.45, "PAUSE", False), (4.9, "END", False)]
    after = after_the_end(session, speech)  # (a second question: timed from its own start, 3.0 s into the stream)
    assert (after.ended, after.going_on, after.new) == (False, None, None)  # (its only pause was inside it)


class ScriptedRoom(ScriptedEars):
    """ScriptedEars among other people talking, guarded by the server while the reply plays: the request's utterance
    at its end at a pause, and `heard` (int16) as the utterance of whatever is confirmed or ends later."""

    def __init__(self, script: list[tuple[float, str, bool]], request: np.ndarray, heard: np.ndarray):
        from types import SimpleNamespace

        super().__init__(script)
        self.request, self.heard, self.guarded, self.speaking = request, heard, False, True
        self.gate = SimpleNamespace(others_talk=True)

    def feed(self, pcm):
        from vita.hearing.utterance import Heard, Utterance, VadEvent

        return [VadEvent(e.kind, Utterance(self.heard.tobytes(), 0, 0, 0))
                if e.kind in (Heard.CONFIRM, Heard.END) else e for e in super().feed(pcm)]

    def end_now(self, at_pause=False):
        from vita.hearing.utterance import Heard, Utterance, VadEvent

        super().end_now(at_pause)
        ended = self.request if len(self.ended) == 1 else self.heard  # (the request's end, then what went on)
        return [VadEvent(Heard.END, Utterance(ended.tobytes(), 0, 0, 0))] if at_pause else []


@pytest.mark.fast
def test_the_interruptions_benchmark_tells_the_room_going_on_with_a_request_as_its_reply_begins():
    from scripts.bench.stages.interruptions import PlaceInRoom, as_the_reply_begins

    speech = np.zeros(16000, np.int16)
    speech[4000:12000] = 8000  # (the last word ends at 0.75 s; its final pause at 0.85 s; the first audio at 1.5 s)
    quieter = (speech // 4)[4000:12000]  # (12 dB under it)

    def heard(script, voice=quieter, final_pause=(0.85, "PAUSE", False)):
        return as_the_reply_begins(PlaceInRoom(None, 0, lambda: ScriptedRoom(
            [(0.1, "START", False), *([final_pause] if final_pause else []), *script], speech, voice)), speech,
            grace_s=0.8)

    went_on = heard([(1.6, "START", True), (2.0, "CONFIRM", False)])
    assert (went_on.ended, went_on.held, went_on.went_on, went_on.rooms) == (True, False, True, True)
    assert heard([(1.6, "START", True), (2.0, "CONFIRM", False)], voice=speech[4000:12000]).rooms is False
    assert heard([(2.2, "START", False), (2.9, "END", False)]).went_on  # (begun within the grace, kept after)
    assert not heard([(2.5, "START", False), (3.0, "CONFIRM", False)]).went_on  # (after the grace: over the reply)
    held = heard([(1.1, "START", True), (1.4, "END", False)])  # (before the reply: held for it, whatever its level)
    assert (held.held, held.held_under, held.went_on, held.rooms) == (True, True, False, False)
    assert heard([(1.3, "START", True), (2.0, "CONFIRM", False)]).held  # (confirmed once the reply was due: held)
    ended_there = heard([(1.1, "START", True), (1.3, "PAUSE", False), (2.0, "CONFIRM", False)])
    assert ended_there.held and not ended_there.went_on  # (ended at its pause, before the reply)
    assert heard([(1.6, "START", True), (1.8, "PAUSE", False)]).rooms  # (ended at its pause, once the reply played)
    assert not heard([(1.6, "START", True), (1.7, "DROPPED", False), (2.0, "CONFIRM", False)]).went_on
    assert not heard([(0.4, "PAUSE", False), (1.3, "START", True), (2.0, "CONFIRM", False)], final_pause=None).ended


@pytest.mark.fast
def test_the_interruptions_benchmark_tells_how_the_second_part_of_a_request_said_with_a_pause_was_heard():
    from scripts.bench.stages.interruptions import PlaceInRoom, said_with_a_pause

    part = np.zeros(16000, np.int16)
    part[4000:12000] = 5000  # (voiced from 0.25 to 0.75 s: 0.8 s between the parts' voices puts the second's at 1.55 s)

    def heard(script):
        ears = ScriptedEars([(0.1, "START", False), *script])
        how = said_with_a_pause(PlaceInRoom(None, 0, lambda: ears), part, 0.8, part)
        return how, [at_pause for _, at_pause in ears.ended]

    assert heard([(0.85, "PAUSE", False), (1.6, "START", True)]) == ("went on", [True, False])
    assert heard([(0.85, "PAUSE", False), (1.6, "START", False)])[0] == "split"
    assert heard([(0.85, "PAUSE", False)])[0] == "lost"
    assert heard([(0.85, "PAUSE", False), (1.0, "START", True)])[0] == "went on"  # (opened again before it, still open)
    assert heard([(0.85, "PAUSE", False), (1.0, "START", False)])[0] == "split"  # (...as a request of the room's)
    assert heard([(1.6, "PAUSE", False)]) == ("one utterance", [False])  # (no pause between the parts)
    assert heard([(0.4, "PAUSE", False), (1.6, "START", True)])[0] == "one utterance"  # (a pause inside the first)
    assert heard([(0.05, "DROPPED", False), (0.85, "PAUSE", False), (1.6, "START", True)])[0] == "went on"
    assert heard([(0.85, "PAUSE", False), (3.0, "START", False)])[0] == "lost"  # (the room's, after it)
