"""The LLM worker's fair share: how many turns a session started lately, and when it must yield."""

from __future__ import annotations

import pytest

from workers.llm.worker_sessions import ServiceLedger

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
