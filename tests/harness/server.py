"""Start, wait for and stop a real server process, and read its /health: for the tests and the benchmark
scripts alike."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests
import urllib3

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 420

urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
# The environment as the harness found it: servers get this, not whatever an in-process engine added since.
BASE_ENV = dict(os.environ)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RunningServer:
    process: subprocess.Popen
    url: str
    state_dir: Path
    log_path: Path
    first_health: dict = field(default_factory=dict)
    first_health_latency_s: float = 0.0
    ready_after_s: float = 0.0
    probe: threading.Thread | None = None  # probe_first_health, for a server launched before its first test

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, **kw) -> requests.Response:
        return requests.get(self.url + path, verify=False, timeout=5, **kw)


def has_flag(args: tuple[str, ...] | list[str], flag: str) -> bool:
    """Is `flag` among the server arguments, as `--flag value` or `--flag=value`?"""
    return any(a == flag or a.startswith(flag + "=") for a in args)


def start_server(tmp: Path, *args: str, env: dict[str, str] | None = None) -> RunningServer:
    port = free_port()
    state = tmp / "state"
    log_path = tmp / "server.log"
    if not has_flag(args, "--max_users"):
        # (tests and benchmarks count on two seats, whatever this CPU's speed)
        args = (*args, "--max_users", "2")
    if not has_flag(args, "--vision") and os.environ.get("VITA_HARNESS_VISION") in ("on", "off"):
        args = (*args, "--vision", os.environ["VITA_HARNESS_VISION"])  # (the test suite's default: off)
    cmd = [sys.executable, str(ROOT / "server.py"), "--port", str(port), "--state_dir", str(state), *args]
    process = subprocess.Popen(cmd, cwd=ROOT, stdout=log_path.open("w"), stderr=subprocess.STDOUT,
                               env={**BASE_ENV, "PYTHONUNBUFFERED": "1", **(env or {})})
    return RunningServer(process, f"https://127.0.0.1:{port}", state, log_path)


def probe_first_health(server: RunningServer, deadline: float) -> None:
    """Record the first /health the server answers (while its models load) and how long that request took."""
    while not server.first_health and time.monotonic() < deadline and server.process.poll() is None:
        try:
            t = time.monotonic()
            health = server.get("/health").json()
            server.first_health_latency_s, server.first_health = time.monotonic() - t, health
        except requests.ConnectionError:
            time.sleep(0.2)


def wait_ready(server: RunningServer, timeout: float = READY_TIMEOUT_S) -> None:
    started = time.monotonic()
    deadline = started + timeout
    probe_first_health(server, deadline)
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited with {server.process.returncode}:\n{server.log()[-4000:]}")
        try:
            if server.get("/ready").status_code == 200:
                server.ready_after_s = time.monotonic() - started
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"server not ready after {timeout} s:\n{server.log()[-4000:]}")


def stop_server(server: RunningServer) -> None:
    """SIGTERM, as an operator stops it. Every server a test starts thereby also shows that it stops within 15 s
    and leaves no process behind (a server that does not is killed, then the test fails)."""
    if server.process.poll() is not None:
        return
    family = psutil.Process(server.process.pid).children(recursive=True)
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    took = time.monotonic() - started
    _, left = psutil.wait_procs(family, timeout=5)
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()
    assert took < 15 and not left, (f"stopping took {took:.1f} s; left behind: "
                                     f"{[p.pid for p in left]}\n{server.log()[-3000:]}")


@contextlib.contextmanager
def running_server(tmp: Path, *args: str):
    running = start_server(tmp, *args)
    try:
        wait_ready(running)
        yield running
    finally:
        stop_server(running)


def wait_health(server: RunningServer, predicate, timeout: float = 10.0, token: str | None = None) -> dict:
    """/health once predicate(health) holds, or the last one at the deadline (the caller asserts on it); with the
    server's access token when it has one (the detail is behind it)."""
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    while True:
        health = server.get("/health", headers=headers).json()
        if predicate(health) or time.monotonic() > deadline:
            return health
        time.sleep(0.1)


def wait_no_sessions(server: RunningServer) -> None:
    """The shared server is between tests once the last test's client is gone."""
    wait_health(server, lambda h: not h["sessions"], timeout=5)
