"""The worker processes behind the front: a Manager with the queues, the LLM and TTS workers, their states
for /health (from the status queue), restarts with backoff when one dies or stops sending heartbeats, and a
shutdown that leaves no process behind (vLLM's own children included).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.managers import SyncManager
from typing import Any

import psutil

from vita.config import Config
from vita.messages import MeasuredSpeed, Shutdown, WorkerHeartbeat, WorkerState, WorkerStatus, read_messages

log = logging.getLogger("vita.graph")

QUEUE_BOUND = 256  # per queue; a stuck consumer makes producers block briefly instead of eating memory
QUEUES = ("requests", "tts", "outputs", "status")  # front -> LLM, LLM -> TTS, workers -> front (x2)


def _manager_init() -> None:
    # The front handles Ctrl-C; the queues must outlive it until the workers have been told to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass
class WorkerSpec:
    """How to start one worker: a module-level entry point called as target(config, inbox, outbox...)."""

    name: str
    target: Callable[..., None]
    inbox: str  # name of the queue the worker reads
    # vLLM's engine starts processes of its own, which a daemonic process may not do.
    daemon: bool = False
    # A ready worker silent this long (no heartbeat) is stuck: it is killed and restarted. None = not watched.
    liveness_s: float | None = None


@dataclass
class RestartBackoff:
    """Delay before restarting a dead worker: doubles with each death in a row, capped; a worker that stayed
    up for `healthy_after_s` starts again from `base_s`. A worker that keeps dying is thereby restarted less
    and less often, never in a tight loop.
    """

    base_s: float = 1.0
    max_s: float = 60.0
    healthy_after_s: float = 60.0
    deaths_in_a_row: int = 0

    def next_delay(self, lived_s: float) -> float:
        if lived_s >= self.healthy_after_s:
            self.deaths_in_a_row = 0
        delay = min(self.max_s, self.base_s * 2 ** self.deaths_in_a_row)
        self.deaths_in_a_row += 1
        return delay


@dataclass
class WorkerHandle:
    spec: WorkerSpec
    process: multiprocessing.process.BaseProcess | None = None
    state: WorkerState = WorkerState.STARTING
    detail: str = ""
    since: float = field(default_factory=time.time)
    started_at: float = field(default_factory=time.time)
    ready_after_s: float | None = None
    restarts: int = 0
    backoff: RestartBackoff = field(default_factory=RestartBackoff)
    descendants: list[psutil.Process] = field(default_factory=list)  # vLLM's engine core, once ready
    heard_at: float = field(default_factory=time.monotonic)  # last status or heartbeat

    def set_state(self, state: WorkerState, detail: str) -> None:
        self.state, self.detail, self.since = state, detail, time.time()
        if state is WorkerState.READY and self.ready_after_s is None:
            self.ready_after_s = round(self.since - self.started_at, 2)


class ProcessGraph:
    """Owns the Manager queues and the worker processes; thread-safe to query from request handlers."""

    def __init__(self, config: Config, specs: list[WorkerSpec],
                 on_death: Callable[[str, str], None] = lambda name, detail: None):
        self.config = config
        self.on_death = on_death  # (worker name, what happened), called from the monitor thread
        # (worker name, the speed it measured), called from the status thread when a worker reports it with READY
        self.on_measured: Callable[[str, MeasuredSpeed], None] = lambda name, speed: None
        self._ctx = multiprocessing.get_context("spawn")
        self._specs = specs
        self._workers: dict[str, WorkerHandle] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._monitor: threading.Thread | None = None
        self.manager: SyncManager | None = None
        self.queues: dict[str, Any] = {}

    # --- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> None:
        self.manager = SyncManager(ctx=self._ctx)
        self.manager.start(_manager_init)
        self.queues = {name: self.manager.Queue(QUEUE_BOUND) for name in QUEUES}
        for spec in self._specs:
            self._workers[spec.name] = WorkerHandle(spec)
            self._spawn(self._workers[spec.name])
        self._monitor = threading.Thread(target=self._watch, name="worker-monitor", daemon=True)
        self._monitor.start()
        threading.Thread(target=self._read_status, name="worker-status", daemon=True).start()

    def _read_status(self) -> None:
        for message in read_messages(self.queues["status"], self._stopping, poll_s=0.5):
            if isinstance(message, (WorkerStatus, WorkerHeartbeat)):
                self.on_status(message)

    def _spawn(self, handle: WorkerHandle) -> None:
        spec = handle.spec
        process = self._ctx.Process(
            target=spec.target,
            name=f"vita-{spec.name}",
            args=(self.config, self.queues[spec.inbox], self.queues),
            daemon=spec.daemon,
        )
        process.start()
        with self._lock:
            handle.process = process
            handle.started_at = time.time()
            handle.ready_after_s = None
            handle.descendants = []
            handle.heard_at = time.monotonic()
            handle.set_state(WorkerState.STARTING, f"pid {process.pid}")
        log.info("started %s worker (pid %d)", spec.name, process.pid)
        with contextlib.suppress(OSError):
            self._wake_w.send(b"w")  # the monitor must now watch the new process

    def _watch(self) -> None:
        """Block on the workers' sentinels: a worker that exits while we are not stopping is dead, and is
        restarted after a backoff delay. Once a second, a ready worker that stopped sending heartbeats is killed
        (its sentinel then fires)."""
        while not self._stopping.is_set():
            with self._lock:
                live = {h.process.sentinel: h for h in self._workers.values()
                        if h.process is not None and h.state not in (WorkerState.DEAD, WorkerState.STOPPED)}
            self._kill_silent(live.values())
            ready = multiprocessing.connection.wait([*live, self._wake_r], timeout=1.0)
            for sentinel in ready:
                if sentinel is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(64)
                    continue
                handle = live.get(sentinel)
                if handle is None or self._stopping.is_set():
                    continue
                self._on_exit(handle)

    def _kill_silent(self, handles: Any) -> None:
        now = time.monotonic()
        for handle in handles:
            limit = handle.spec.liveness_s
            if limit is None or handle.state is not WorkerState.READY or now - handle.heard_at <= limit:
                continue
            log.error("%s worker sent nothing for %.0f s: stuck; killing it", handle.spec.name, now - handle.heard_at)
            with self._lock:
                handle.set_state(WorkerState.FAILED, f"stuck: no heartbeat for {limit:g} s")
            with contextlib.suppress(Exception):
                handle.process.kill()

    def _on_exit(self, handle: WorkerHandle) -> None:
        handle.process.join(timeout=1)
        code = handle.process.exitcode
        delay = handle.backoff.next_delay(time.time() - handle.started_at)
        detail = f"exited with code {code}; restarting in {delay:g} s"
        with self._lock:
            handle.set_state(WorkerState.DEAD, detail)
        log.error("%s worker died (%s)", handle.spec.name, detail)
        with contextlib.suppress(Exception):
            self.on_death(handle.spec.name, detail)  # users first: reaping can take seconds
        _reap(handle.descendants)  # an engine core whose worker was killed must not linger
        self._restart_after(handle, delay)

    def _restart_after(self, handle: WorkerHandle, delay: float) -> None:
        timer = threading.Timer(delay, self._restart, args=(handle,))
        timer.daemon = True
        timer.start()

    def _restart(self, handle: WorkerHandle) -> None:
        if self._stopping.is_set():
            return
        handle.restarts += 1
        try:
            self._spawn(handle)
        except Exception as exc:  # e.g. the manager is gone; try again later rather than never
            log.error("could not restart %s worker: %s", handle.spec.name, exc)
            self._restart_after(handle, handle.backoff.next_delay(0))

    def on_status(self, status: WorkerStatus | WorkerHeartbeat) -> None:
        with self._lock:
            handle = self._workers.get(status.worker)
            if handle is None or handle.state in (WorkerState.DEAD, WorkerState.STOPPED):
                return
            if handle.process is not None and status.pid and status.pid != handle.process.pid:
                return  # a late report from a previous incarnation
            handle.heard_at = time.monotonic()
            if isinstance(status, WorkerHeartbeat):
                return
            handle.set_state(status.state, status.detail)
            process = handle.process
        if status.state is WorkerState.READY and process is not None:
            with contextlib.suppress(psutil.Error):
                handle.descendants = psutil.Process(process.pid).children(recursive=True)
        if status.measured is not None:
            try:
                self.on_measured(status.worker, status.measured)
            except Exception:  # the seats stay as they were: never the status reader's end
                log.exception("could not take the measured speed of the %s worker", status.worker)

    def stop(self, timeout: float = 10.0) -> None:
        """Ask every worker to finish, then terminate whatever is left, descendants included."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake_w.send(b"x")
        deadline = time.monotonic() + timeout
        descendants: list[psutil.Process] = []
        for handle in self._workers.values():
            if handle.process is not None and handle.process.is_alive():
                with contextlib.suppress(psutil.NoSuchProcess):
                    descendants += psutil.Process(handle.process.pid).children(recursive=True)
        for name in ("requests", "tts"):
            try:
                self.queues[name].put(Shutdown(), timeout=1)
            except Exception:  # manager already gone (e.g. killed); termination below still applies
                log.warning("could not send Shutdown on the %s queue", name)
        for handle in self._workers.values():
            if handle.process is not None:
                handle.process.join(timeout=max(0.1, deadline - time.monotonic() - 2))
                if handle.process.is_alive():
                    log.warning("%s worker did not stop in time; terminating", handle.spec.name)
                    handle.process.terminate()
                    handle.process.join(timeout=2)
                if handle.process.is_alive():
                    handle.process.kill()
                    handle.process.join(timeout=1)
            with self._lock:
                handle.set_state(WorkerState.STOPPED, "server stopped")
        _reap(descendants)
        if self.manager is not None:
            self.manager.shutdown()
        # Whatever is still below us now (an engine process a restarted worker was starting when the stop came,
        # started after the list above was taken) goes too.
        with contextlib.suppress(psutil.Error):
            _reap([p for p in psutil.Process().children(recursive=True) if not _is_resource_tracker(p)])
        self._wake_r.close()
        self._wake_w.close()

    # --- queries -----------------------------------------------------------------------------------------
    def health(self) -> dict[str, dict]:
        with self._lock:
            return {
                name: {
                    "state": h.state.value,
                    "detail": h.detail,
                    "pid": h.process.pid if h.process else None,
                    "since": round(h.since, 3),
                    "ready_after_s": h.ready_after_s,
                    "restarts": h.restarts,
                }
                for name, h in self._workers.items()
            }

    def queue_depths(self) -> dict[str, int]:
        depths = {}
        for name, q in list(self.queues.items()):
            with contextlib.suppress(Exception):  # the manager may be gone while stopping
                depths[name] = q.qsize()
        return depths

    def ready(self) -> bool:
        with self._lock:
            return bool(self._workers) and all(h.state is WorkerState.READY for h in self._workers.values())


def _is_resource_tracker(process: psutil.Process) -> bool:
    """multiprocessing's own tracker: it must outlive us to unlink shared memory, and ends by itself."""
    with contextlib.suppress(psutil.Error):
        return "resource_tracker" in " ".join(process.cmdline())
    return False


def _reap(processes: list[psutil.Process], grace: float = 3.0) -> None:
    alive = [p for p in processes if p.is_running()]
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(alive, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=1)
