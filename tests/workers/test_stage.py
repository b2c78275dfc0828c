"""workers/stage.py: how every stage is run, and the cancel ledger. No model."""

from __future__ import annotations

import logging
import queue

import pytest

from vita.messages import WorkerState, WorkerStatus
from workers.common import StatusReporter
from workers.stage import CancelLedger, run_stage

pytestmark = pytest.mark.fast


class Recorded:
    def __init__(self, fail_in: str | None = None):
        self.calls: list[str] = []
        self.fail_in = fail_in

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if name == self.fail_in:
            raise RuntimeError(f"{name} broke")

    def setup(self) -> None:
        self._step("setup")

    def serve(self) -> None:
        self._step("serve")

    def close(self) -> None:
        self._step("close")


def test_a_stage_is_set_up_served_and_closed():
    stage = Recorded()
    run_stage(StatusReporter("tts", queue.Queue(), logging.getLogger("test.stage")), stage)
    assert stage.calls == ["setup", "serve", "close"]


def test_a_stage_that_fails_says_why_is_closed_and_exits_1():
    status: queue.Queue = queue.Queue()
    stage = Recorded(fail_in="setup")
    with pytest.raises(SystemExit) as ended:
        run_stage(StatusReporter("tts", status, logging.getLogger("test.stage")), stage)
    assert ended.value.code == 1 and stage.calls == ["setup", "close"]
    reported: WorkerStatus = status.get_nowait()
    assert reported.state is WorkerState.FAILED and reported.detail == "RuntimeError: setup broke"


def test_a_cancel_covers_the_earlier_turns_and_an_ended_session_all_of_them():
    ledger = CancelLedger()
    ledger.cancel("a", 5)
    assert ledger.is_cancelled("a", 5) and ledger.is_cancelled("a", 1) and not ledger.is_cancelled("a", 6)
    ledger.cancel("a", 2)  # an older cancel arriving late takes nothing back
    assert ledger.is_cancelled("a", 5)
    ledger.cancel("b")
    assert ledger.is_cancelled("b", 10**6) and not ledger.is_cancelled("c", 0)
