"""What every worker process does first: device environment, parent-death signal, logging, status reports."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from vita.messages import PUT_TIMEOUT_S, MeasuredSpeed, WorkerHeartbeat, WorkerState, WorkerStatus, put_or_drop

_PR_SET_PDEATHSIG = 1
PUBLISH_BOUND = 1024  # messages an event loop has published and its publisher thread has not yet put


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
    from vita.ops.logs import setup_logging

    setup_logging(name, getattr(server, "log_level", "info"), getattr(server, "log_format", "text"))
    return logging.getLogger(f"vita.{name}")


class StatusReporter:
    """Sends this worker's state to the front process, which serves it at /health."""

    def __init__(self, worker: str, outbox: Any, log: logging.Logger):
        self.worker = worker
        self.outbox = outbox
        self.log = log

    def __call__(self, state: WorkerState, detail: str = "", measured: MeasuredSpeed | None = None) -> None:
        self.log.info("%s%s", state.value, f": {detail}" if detail else "")
        put_or_drop(self.outbox, WorkerStatus(self.worker, state, detail, os.getpid(), measured=measured), self.log)

    def heartbeat(self) -> None:
        """Call from the worker's main loop: the front restarts a worker whose heartbeats stop."""
        with contextlib.suppress(Exception):  # a full or vanished status queue: the front will notice anyway
            self.outbox.put(WorkerHeartbeat(self.worker, os.getpid()), timeout=1.0)


FAULT_SIGNALS_ENV = "VITA_FAULT_SIGNALS"  # "1": SIGUSR1 injects this worker's test fault (fault tests and soak)


def install_fault_signal(inject: Callable[[], None], log: logging.Logger) -> bool:
    """Off unless the environment asks: SIGUSR1 runs ``inject`` (the worker's fault, injected from outside, so
    tests and scripts/bench/soak/faults.py exercise the real recovery path). True if installed."""
    if os.environ.get(FAULT_SIGNALS_ENV) != "1":
        return False

    def on_signal(_signum: int, _frame: Any) -> None:
        log.warning("SIGUSR1: injecting a test fault")
        inject()

    signal.signal(signal.SIGUSR1, on_signal)
    return True


class Publisher:
    """Puts for an event loop, from a thread of its own: ``publish`` never blocks (a bounded hand-over; when even
    that is full the message is dropped and counted), so a full inter-process queue cannot stall the loop that
    every turn runs on."""

    def __init__(self, target: Any, log: logging.Logger, name: str, put_timeout: float = PUT_TIMEOUT_S):
        self.target, self.log, self.put_timeout = target, log, put_timeout
        self.pending: queue.Queue = queue.Queue(PUBLISH_BOUND)
        self.dropped = 0
        self.count_lock = threading.Lock()  # dropped is counted by the publishing and the forwarding thread
        self.thread = threading.Thread(target=self._forward, name=name, daemon=True)
        self.thread.start()

    def publish(self, message: Any) -> None:
        try:
            self.pending.put_nowait(message)
        except queue.Full:
            with self.count_lock:
                self.dropped += 1
            self.log.warning("dropped %s: %d messages waiting to be sent", type(message).__name__, PUBLISH_BOUND)

    def _forward(self) -> None:
        while True:
            message = self.pending.get()
            try:
                if message is None:
                    return
                if not put_or_drop(self.target, message, self.log, self.put_timeout):
                    with self.count_lock:
                        self.dropped += 1
            finally:
                self.pending.task_done()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything published so far has been put (or dropped after its timeout); False if
        ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.pending.all_tasks_done:
            while self.pending.unfinished_tasks:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.pending.all_tasks_done.wait(left)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Send what is waiting (within ``timeout``), then stop the thread."""
        with contextlib.suppress(queue.Full):
            self.pending.put(None, timeout=timeout)
        self.thread.join(timeout)
