"""The LLM worker's sessions: one object each, forgotten when they end; and the fair share: how many turns a
session started lately, and when it must yield."""

from __future__ import annotations

import pytest

from workers.llm.worker_sessions import ServiceLedger, WorkerSessions

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def test_a_turn_every_second_is_over_the_share():
    ledger = ServiceLedger(window_s=10.0, max_turns=8)
    t = 0.0
    for _ in range(12):  # speech cut into words: each pause a turn, withdrawn by the next word
        ledger.started("abuser", t)
        t += 0.9
    assert ledger.recent("abuser", t) == 11  # the first has left the window
    assert ledger.over_share("abuser", t)


def test_a_person_asking_questions_stays_under_it_and_old_turns_leave_the_window():
    ledger = ServiceLedger(window_s=10.0, max_turns=8)
    for t in (0.0, 0.6, 1.2, 5.0, 5.5, 6.1):  # two questions, each with two speculative turns at its pauses
        ledger.started("user", t)
    assert not ledger.over_share("user", 6.5)
    assert ledger.recent("user", 14.0) == 3  # 0.0-1.2 s are out of the window 4..14
    assert ledger.recent("nobody", 14.0) == 0
    ledger.forget("user")
    assert ledger.recent("user", 14.0) == 0


def test_a_sessions_history_begins_with_its_first_turn_and_a_reset_forgets_what_it_held():
    sessions = WorkerSessions(history_turns=4)
    assert sessions.history("s") is None and "s" not in sessions
    history = sessions.conversation("s")
    assert sessions.conversation("s") is history and sessions.history("s") is history
    session = sessions.of("s")
    session.latest_check, session.awaited = (3, 1), object()
    session.forget_conversation()
    assert (sessions.history("s"), sessions.latest_check("s"), session.awaited) == (None, None, None)
    assert sessions.conversation("s") is not history  # a new one, begun by the next turn


def test_an_ended_session_is_forgotten_once_its_turn_in_flight_is_over():
    sessions = WorkerSessions(history_turns=4)
    task = object()  # (a turn's task; only kept here)
    sessions.of("a").turn = (7, task)
    sessions.of("b")
    assert list(sessions.turns()) == [("a", 7, task)] and sessions.any_turn()
    sessions.of("a").ended = True
    sessions.prune("a")
    assert "a" in sessions and sessions.turn_of("a") == (7, task)  # still unwinding
    sessions.of("a").turn = None
    sessions.prune("a")
    sessions.prune("b")  # (not ended: kept)
    assert "a" not in sessions and "b" in sessions and not sessions.any_turn()
