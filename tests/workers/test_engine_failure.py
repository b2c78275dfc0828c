"""Engine failure is worker failure: when vLLM's engine thread ends with an error, every turn in flight or queued
gets a readable error at once and the worker's serve() ends with the error (run_stage then reports FAILED and
exits, and the supervisor restarts it: tests/test_server_lifecycle.py). A real engine, a fault injected between
its steps (the same path as a step that raises)."""

from __future__ import annotations

import pytest

from tests.workers.test_llm_worker import LONG_REPLY, LlmHarness
from vita.messages import SessionError, TtsPiece, TurnEnded, TurnRequest
from workers.local_engine import EngineFailed


@pytest.fixture(scope="module")
def failing_llm():
    harness = LlmHarness()
    yield harness
    harness.close()


def test_a_failing_engine_fails_its_turns_at_once_and_ends_the_worker(failing_llm):
    llm = failing_llm
    sessions = ("talking", "also-talking")
    for session in sessions:
        llm.inbox.put(TurnRequest(session, 1, text=LONG_REPLY))
    assert llm.wait(lambda: all(llm.of(s, TtsPiece) for s in sessions), 60), llm.events  # both are generating
    engine = llm.worker.engine
    engine_thread = engine.thread
    engine.inject_fault(RuntimeError("injected step failure"))
    for session in sessions:
        ended = llm.wait_ended(session, timeout=15)
        assert ended.reason == "error", ended
        (_, error), = llm.of(session, SessionError)
        assert error.code == "llm_failed" and "restarted" in error.message, error
    llm.loop_thread.join(15)
    assert not llm.loop_thread.is_alive() and isinstance(llm.served, EngineFailed), llm.served
    assert "injected step failure" in str(llm.served)
    assert not engine.healthy()  # the heartbeats stopped with it
    assert engine_thread is not None and not engine_thread.is_alive()
    assert all(len(llm.of(s, TurnEnded)) == 1 for s in sessions)  # one end per turn
