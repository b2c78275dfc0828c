"""What every worker stage is and shares: ``setup()`` (load, warm up), ``serve()`` (a loop over its inbox until a
Shutdown), ``close()`` (stop its threads), run by ``run_stage``; and the one ledger of which turns are cancelled.

The inbox loop itself is ``vita.messages.read_messages`` (blocking reads, stoppable), heartbeats go through
``StatusReporter.heartbeat`` (workers/common.py): a stage that stops beating is restarted by the front.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import Protocol

from vita.messages import ALL_TURNS, WorkerState
from workers.common import StatusReporter

CANCELLED_KEPT = 4096  # sessions whose cancelled turn ids a ledger remembers


class Stage(Protocol):
    def setup(self) -> None: ...

    def serve(self) -> None: ...

    def close(self) -> None: ...


def run_stage(report: StatusReporter, stage: Stage) -> None:
    """setup() then serve() until Shutdown, close() whatever happened; a failure is reported (so /health shows
    why) and exits 1."""
    try:
        stage.setup()
        stage.serve()
    except Exception as exc:
        report.log.exception("%s worker failed", report.worker)
        with contextlib.suppress(Exception):
            report(WorkerState.FAILED, f"{exc.__class__.__name__}: {exc}")
        raise SystemExit(1) from exc
    finally:
        stage.close()
    report.log.info("stopped")


class CancelLedger:
    """Which turns are cancelled: per session, the highest cancelled turn id (a session's turn ids only grow, so a
    cancel covers every earlier turn too). Asked from the inbox reader and the stage's loop at once: locked. The
    least recently cancelled sessions go first past ``kept``, so ended sessions do not add up (an active session's
    entry is fresh: its latest cancel touched it)."""

    def __init__(self, kept: int = CANCELLED_KEPT):
        self.kept = kept
        self._highest: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def cancel(self, session_id: str, up_to_turn: int = ALL_TURNS) -> None:
        """Turns up to ``up_to_turn`` are cancelled (all of them: the session ended)."""
        with self._lock:
            self._highest[session_id] = max(up_to_turn, self._highest.get(session_id, -1))
            self._highest.move_to_end(session_id)
            while len(self._highest) > self.kept:
                self._highest.popitem(last=False)

    def is_cancelled(self, session_id: str, turn_id: int) -> bool:
        with self._lock:
            return turn_id <= self._highest.get(session_id, -1)

    def __len__(self) -> int:
        with self._lock:
            return len(self._highest)
