"""A turn always ends: faults injected into the default server (vLLM in the LLM worker's own process) while one
of two sessions has a turn in flight.

For each fault: that session gets an error within the stall limit and listens again, its next *spoken* turn is
answered (by the restarted worker where the fault killed one), the other session hears nothing of it and is
answered too, and when both have left the front has no more threads than before. The faults come from outside,
as in production: SIGKILL, SIGSTOP, and the workers' test hooks on SIGUSR1 (on only with VITA_FAULT_SIGNALS=1,
which the shared server sets; workers/common.py install_fault_signal). Each test leaves the server ready.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.harness.client import RecordingClient
from tests.harness.server import RunningServer, wait_health, wait_ready
from tests.harness.speech import silence, spoken, stream
from tests.workers.llm.test_llm_worker import LONG_REPLY
from vita.config import Config

STALL_S = Config().limits.turn_stall_s  # the shared server runs the default configuration
RESTART_S = 240  # a restarted LLM worker loads its engine again


def worker(server: RunningServer, name: str) -> dict:
    return {**server.get("/health").json()["workers"][name], "name": name}


def state(client: RecordingClient, name: str, after: float, turn_id: int | None = None) -> bool:
    return any(n == "state" and t > after and d["state"] == name and (turn_id is None or d["turn_id"] == turn_id)
               for t, n, d in client.events)


def errors(client: RecordingClient, after: float = 0.0) -> list[str]:
    return [d["code"] for t, n, d in client.events if n == "error" and t > after]


def ask_aloud(client: RecordingClient, question: str) -> float:
    """Speak a question like a microphone (our binary frames, real time); returns when it was sent."""
    stream(client.sio, np.concatenate([silence(0.6), spoken(question), silence(1.0)]), chunk_ms=32, binary=True)
    return time.monotonic()


def answered_aloud(client: RecordingClient, question: str) -> None:
    """The next spoken turn gets reply audio and ends with its reply played out."""
    asked = time.monotonic()
    ask_aloud(client, question)
    assert client.wait_for(lambda evs: any(n == "turn" and t > asked for t, n, _ in evs), 20), client.events[-8:]
    turn_id = next(d["turn_id"] for t, n, d in client.events if n == "turn" and t > asked)
    assert client.wait_for(lambda evs: state(client, "listening", asked, turn_id), 90), client.events[-8:]
    assert state(client, "speaking", asked, turn_id), client.events[-8:]
    assert any(n == "audio" and t > asked for t, n, _ in client.events)
    assert not errors(client, asked), errors(client, asked)


@contextlib.contextmanager
def two_sessions(server: RunningServer):
    """Two sessions on a ready server; on the way out, both gone and the front's threads back where they were."""
    wait_ready(server, timeout=RESTART_S)
    RecordingClient(server.url).connect().close()  # engine.io starts its one service thread at a first connection
    before = wait_health(server, lambda h: h["sessions"] == 0)
    assert before["sessions"] == 0
    a, b = RecordingClient(server.url).connect(), RecordingClient(server.url).connect()
    try:
        yield a, b
    finally:
        a.close()
        b.close()
    after = wait_health(server, lambda h: h["sessions"] == 0 and h["vad_threads"] == 0
                        and h["threads"] <= before["threads"], timeout=15)
    assert after["sessions"] == 0 and after["vad_threads"] == 0
    assert after["threads"] <= before["threads"], (before["threads"], after["threads"])


def fault_mid_turn(server: RunningServer, inject, in_phase: str, question: str, codes: set[str],
                   within_s: float, replaced: dict | None = None) -> None:
    """`replaced`: the /health entry of the worker the fault takes down; the next turns wait for its successor
    (asked while a failed worker is still on its way out, a turn is cancelled with `worker_failed`)."""
    with two_sessions(server) as (a, b):
        started = time.monotonic()
        a.sio.emit("text_input", {"text": question})
        assert a.wait_for(lambda evs: state(a, in_phase, started), 60), a.events[-8:]
        turn_id = next(d["turn_id"] for t, n, d in a.events if n == "state" and t > started)
        injected = time.monotonic()
        undo = inject()
        try:
            assert a.wait_for(lambda evs: set(errors(a, injected)) & codes, within_s), a.events[-8:]
            told = next(t for t, n, d in a.events if n == "error" and t > injected and d["code"] in codes)
            assert told - injected <= within_s
            assert a.wait_for(lambda evs: state(a, "listening", injected, turn_id), 5), a.events[-8:]
        finally:
            if undo is not None:
                undo()
        if replaced is not None:
            name, pid = replaced["name"], replaced["pid"]
            health = wait_health(server, lambda h: h["workers"][name]["pid"] not in (pid, None), RESTART_S)
            assert health["workers"][name]["pid"] not in (pid, None), health["workers"][name]
        wait_ready(server, timeout=RESTART_S)
        assert not errors(b) and not b.named("turn_cancelled"), b.events  # the other session: untouched
        with ThreadPoolExecutor(2) as both:  # each asks its next question, at the same time
            asked = [both.submit(answered_aloud, a, "What is the capital of France?"),
                     both.submit(answered_aloud, b, "Hello, how are you today?")]
            for question in asked:
                question.result()
        assert a.sio.connected and b.sio.connected


def test_a_killed_llm_worker_ends_the_turn_and_its_restart_answers_the_next(server):
    wait_ready(server, timeout=RESTART_S)
    before = worker(server, "llm")
    fault_mid_turn(server, lambda: os.kill(before["pid"], signal.SIGKILL), "thinking", LONG_REPLY,
                   {"worker_failed"}, within_s=5, replaced=before)
    after = worker(server, "llm")
    assert after["pid"] != before["pid"] and after["restarts"] == before["restarts"] + 1


def test_an_engine_step_that_raises_fails_the_worker_which_is_restarted(server):
    wait_ready(server, timeout=RESTART_S)
    before = worker(server, "llm")
    fault_mid_turn(server, lambda: os.kill(before["pid"], signal.SIGUSR1), "speaking", LONG_REPLY,
                   {"llm_failed", "worker_failed"}, within_s=STALL_S, replaced=before)
    after = worker(server, "llm")
    assert after["pid"] != before["pid"] and after["restarts"] == before["restarts"] + 1
    assert "injected engine fault" in server.log()


def test_a_frozen_voice_worker_mid_reply_ends_the_turn_and_is_replaced(server):
    wait_ready(server, timeout=RESTART_S)
    before = worker(server, "tts")

    def freeze():
        os.kill(before["pid"], signal.SIGSTOP)
        return lambda: _resume(before["pid"])

    fault_mid_turn(server, freeze, "speaking", LONG_REPLY, {"worker_failed", "turn_stalled"}, within_s=STALL_S + 2,
                   replaced=before)
    assert worker(server, "tts")["pid"] != before["pid"]


def test_a_lost_turn_end_is_ended_by_the_watchdog(server):
    wait_ready(server, timeout=RESTART_S)
    before = {name: worker(server, name) for name in ("llm", "tts")}
    # The next turn to finish in the voice worker never sends its end; the reply is short, so the turn is the
    # question's own. Its audio plays, then nothing: the watchdog ends it stall_s after the playback.
    fault_mid_turn(server, lambda: os.kill(before["tts"]["pid"], signal.SIGUSR1), "thinking",
                   "Hello, how are you today?", {"turn_stalled"}, within_s=STALL_S + 30)
    assert {name: worker(server, name)["pid"] for name in before} == {n: w["pid"] for n, w in before.items()}
    assert "test fault: the end of turn" in server.log()


def _resume(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


@pytest.fixture(autouse=True)
def _ready_after(server):
    """Whatever a test here did to the workers, the next test (here or elsewhere) finds the server ready."""
    yield
    wait_ready(server, timeout=RESTART_S)
