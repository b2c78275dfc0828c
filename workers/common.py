"""What every worker process does first: device environment, parent-death signal, logging, status reports."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from vita.messages import WorkerHeartbeat, WorkerState, WorkerStatus

_PR_SET_PDEATHSIG = 1


def prepare_process(name: str, env: dict[str, str], server: Any = None) -> logging.Logger:
    """Call at the top of a worker's entry point, before torch / vLLM / onnxruntime are imported.

    The device variables must be in the environment before those libraries initialise (VITA set
    CUDA_VISIBLE_DEVICES after importing torch, so its workers all landed on GPU 0).
    """
    os.environ.update(env)
    # Ctrl-C reaches the whole foreground process group; the front process owns shutdown and tells
    # workers to stop, so a worker must not die half-way through with a KeyboardInterrupt trace.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # If the front process is killed outright, take this worker down with it (Linux only).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    try:
        import setproctitle

        setproctitle.setproctitle(f"vita-{name}-worker")
    except ImportError:
        pass
    from vita.logs import setup_logging

    setup_logging(name, getattr(server, "log_level", "info"), getattr(server, "log_format", "text"))
    return logging.getLogger(f"vita.{name}")


class StatusReporter:
    """Sends this worker's state to the front process, which serves it at /health."""

    def __init__(self, worker: str, outbox: Any, log: logging.Logger):
        self.worker = worker
        self.outbox = outbox
        self.log = log

    def __call__(self, state: WorkerState, detail: str = "") -> None:
        self.log.info("%s%s", state.value, f": {detail}" if detail else "")
        self.outbox.put(WorkerStatus(self.worker, state, detail, os.getpid()))

    def heartbeat(self) -> None:
        """Call from the worker's main loop: the front restarts a worker whose heartbeats stop."""
        with contextlib.suppress(Exception):  # a full or vanished status queue: the front will notice anyway
            self.outbox.put(WorkerHeartbeat(self.worker, os.getpid()), timeout=1.0)


def run_stage(report: StatusReporter, setup: Callable[[], None], serve: Callable[[], None],
              close: Callable[[], None]) -> None:
    """setup() then serve() until Shutdown; a failure is reported (so /health shows why) and exits 1."""
    try:
        setup()
        serve()
    except Exception as exc:
        report.log.exception("%s worker failed", report.worker)
        with contextlib.suppress(Exception):
            report(WorkerState.FAILED, f"{exc.__class__.__name__}: {exc}")
        raise SystemExit(1) from exc
    finally:
        close()
    report.log.info("stopped")
