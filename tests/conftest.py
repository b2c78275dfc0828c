"""Shared fixtures: a real server process on a free port, started with the bundled models."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import requests
import urllib3

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
READY_TIMEOUT_S = 420

urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
# The environment as the test run found it: servers get this, not whatever an in-process engine added since.
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


def start_server(tmp: Path, *args: str, env: dict[str, str] | None = None) -> RunningServer:
    port = free_port()
    state = tmp / "state"
    log_path = tmp / "server.log"
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


def launch_shared_server(tmp: Path) -> RunningServer:
    """The default server with its turn log below a plain file, where no database can be made: every test on it
    thereby also shows that a broken turn log costs one error line, not a single turn (test_conversation checks
    the line). Its first /health is probed at once, while it loads. Its workers take test faults on SIGUSR1
    (tests/test_faults.py, which leaves it ready again); --max_users 4 leaves room for a test's two sessions."""
    (tmp / "not-a-folder").write_text("")
    running = start_server(tmp, "--turn_log", str(tmp / "not-a-folder" / "turns.sqlite3"), "--max_users", "4",
                           env={"VITA_FAULT_SIGNALS": "1"})
    running.probe = threading.Thread(target=probe_first_health, name="first-health",
                                     args=(running, time.monotonic() + READY_TIMEOUT_S), daemon=True)
    running.probe.start()
    return running


EARLY_SERVER = pytest.StashKey[RunningServer]()


@pytest.fixture(scope="session")
def server(request, tmp_path_factory) -> RunningServer:
    """The default server, shared by every test that does not stop or reconfigure it; launched while the run's
    first tests ran if any selected test needs it."""
    running = request.config.stash.get(EARLY_SERVER, None) or launch_shared_server(tmp_path_factory.mktemp("server"))
    try:
        running.probe.join()
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


@pytest.fixture
def client(server):
    """A recording Socket.IO client of its own on the shared server."""
    from tests.helpers import RecordingClient

    wait_no_sessions(server)
    c = RecordingClient(server.url).connect()
    yield c
    c.close()


@dataclass
class VllmApiServer:
    """vLLM's own OpenAI-compatible server (NOTES §2: `python -m vllm.entrypoints.openai.api_server`)."""

    process: subprocess.Popen
    url: str  # ends in /v1
    log_path: Path

    def metric(self, name: str) -> float:
        """Sum of one Prometheus metric over its labels (e.g. vllm:generation_tokens_total)."""
        text = requests.get(self.url.removesuffix("/v1") + "/metrics", timeout=5).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))


def launch_vllm_api(folder: Path) -> VllmApiServer:
    """Start a real vLLM API server on loopback serving the bundled default model; it is ready ~40 s later.

    It is started with a chat template of ours (a plain transcript, as a base model would need), so both of its
    endpoints can be exercised: /v1/completions and /v1/chat/completions.
    """
    from vita.config import Config
    from vita.machine.cpu import cpu_dtype, read_cpu
    from workers.llm_worker import device_env

    config = Config()
    port = free_port()
    log_path = folder / "api_server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(config.llm_model_path()),
           "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--enforce-eager",
           "--dtype", cpu_dtype("auto", read_cpu()), "--distributed-executor-backend", "uni",
           "--chat-template", str(ROOT / "tests" / "data" / "transcript_chat.jinja")]
    env = {**BASE_ENV, **device_env(config), "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(cmd, cwd=folder, stdout=log_path.open("w"), stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    return VllmApiServer(process, f"http://127.0.0.1:{port}/v1", log_path)


def wait_vllm_api(api: VllmApiServer) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if api.process.poll() is not None:
            raise RuntimeError(f"vLLM API server exited {api.process.returncode}:\n{api.log_path.read_text()[-4000:]}")
        with contextlib.suppress(requests.ConnectionError):
            if requests.get(api.url + "/models", timeout=5).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"vLLM API server not ready:\n{api.log_path.read_text()[-4000:]}")
        time.sleep(1)


def stop_vllm_api(api: VllmApiServer) -> None:
    if api.process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(api.process.pid, signal.SIGTERM)
    try:
        api.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(api.process.pid, signal.SIGKILL)
        api.process.wait()


EARLY_VLLM_API = pytest.StashKey[VllmApiServer]()


def vllm_api_launched(config) -> VllmApiServer:
    """The vLLM API server, launched now if it was not yet; not waited for (a server given its URL waits itself)."""
    if EARLY_VLLM_API not in config.stash:
        config.stash[EARLY_VLLM_API] = launch_vllm_api(Path(tempfile.mkdtemp(prefix="vita-vllm-api-")))
    return config.stash[EARLY_VLLM_API]


@pytest.fixture(scope="session")
def vllm_api_starting(request) -> VllmApiServer:
    """The vLLM API server, perhaps still loading: for servers given its URL, which wait for it themselves.

    (A fixture, not an import: test modules import this file as `tests.conftest`, a second copy whose stash
    keys are not pytest's.)"""
    return vllm_api_launched(request.config)


@pytest.fixture(scope="session")
def vllm_api(vllm_api_starting) -> VllmApiServer:
    """The vLLM API server, ready; launched while earlier tests ran if any selected test needs it (stopped when
    the run ends)."""
    wait_vllm_api(vllm_api_starting)
    return vllm_api_starting


@pytest.hookimpl(trylast=True)  # after `-m fast` and `-k` have deselected what will not run
def pytest_collection_modifyitems(config, items):
    """The tests that start no server first, then the small server's, then those with an engine of their own,
    then those on the vLLM API server or with Flask in this process, then the shared server's. (vLLM's engine start
    scans every loaded module's names and fails on Flask's unbound request/app proxies: no test may import Flask in
    this process before the in-process engines have run.)

    The vLLM API server (the default model, ~5 GB) and the shared server (~7 GB, an engine in process), when a selected
    test needs them, are launched now: their ~40 s starts overlap the first tests instead of adding to the run.
    Memory stays under ~19 GB: the small server (~1.5 GB) generates on the API server, and the in-process
    engines of the LLM-worker tests come after it.
    """
    def rank(item) -> int:
        names = set(getattr(item, "fixturenames", ()))
        if "server" in names:
            return 4
        if names & {"small_server", "small_server_lives"}:
            return 1
        if names & {"vllm_api", "web_root_server", "front"}:  # front: Flask in this process, after the engines
            return 3
        return 2 if names & {"llm", "omni_llm", "failing_llm"} else 0

    items.sort(key=rank)
    if config.option.collectonly:
        return
    needed = set().union(*(getattr(i, "fixturenames", ()) for i in items))
    if "vllm_api_starting" in needed:
        vllm_api_launched(config)
    if "server" in needed:
        config.stash[EARLY_SERVER] = launch_shared_server(Path(tempfile.mkdtemp(prefix="vita-server-")))


def pytest_unconfigure(config):
    """A run that ends before any test used an early server (a failure with -x, Ctrl-C) still stops it."""
    api = config.stash.get(EARLY_VLLM_API, None)
    if api is not None:
        stop_vllm_api(api)
    running = config.stash.get(EARLY_SERVER, None)
    if running is not None:
        stop_server(running)
