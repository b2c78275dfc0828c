"""Shared fixtures: a real server process on a free port, started with the bundled models."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

# Servers the tests start have no vision stage unless they ask for it (the shared server does: the camera's tests
# run there): each stage is ~0.3 GB and seconds of start, and the two lanes' engines fill the machine's memory.
os.environ.setdefault("VITA_HARNESS_VISION", "off")

from tests.harness.server import (
    BASE_ENV,
    READY_TIMEOUT_S,
    ROOT,
    RunningServer,
    free_port,
    probe_first_health,
    start_server,
    stop_server,
    wait_no_sessions,
    wait_ready,
)

ARTIFACTS = ROOT / "test-artifacts"



def launch_shared_server(tmp: Path) -> RunningServer:
    """The default server with its turn log below a plain file, where no database can be made: every test on it
    thereby also shows that a broken turn log costs one error line, not a single turn (test_conversation checks
    the line). Its first /health is probed at once, while it loads. Its workers take test faults on SIGUSR1
    (tests/test_faults.py, which leaves it ready again); --max_users 4 leaves room for a test's two sessions."""
    (tmp / "not-a-folder").write_text("")
    running = start_server(tmp, "--turn_log", str(tmp / "not-a-folder" / "turns.sqlite3"), "--max_users", "4",
                           "--vision", "on", env={"VITA_FAULT_SIGNALS": "1"})
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


@pytest.fixture
def client(server):
    """A recording Socket.IO client of its own on the shared server."""
    from tests.harness.client import RecordingClient

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
    from vita.cpu import cpu_dtype, read_cpu
    from workers.llm.engines.vllm_settings import device_env

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


def pytest_addoption(parser):
    parser.addoption("--lane", choices=("shared", "rest"), default=None,
                     help="only the shared server's tests, or only the others (scripts/test.sh runs both at once)")


def keep_lane(config, items) -> None:
    """The shared server's tests wait mostly on real-time audio and replies played out; the rest mostly load
    models and engines. Run as two pytest processes at once (scripts/test.sh), they share the two cores (memory
    peak 17.3 GB of 23: the shared server beside the API server and one more engine at a time)."""
    lane = config.getoption("lane")
    if lane is None:
        return
    kept, left = [], []
    for item in items:
        (kept if on_shared_server(item) == (lane == "shared") else left).append(item)
    config.hook.pytest_deselected(items=left)
    items[:] = kept


def on_shared_server(item) -> bool:
    return "server" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)  # after `-m fast` and `-k` have deselected what will not run
def pytest_collection_modifyitems(config, items):
    """The lane's tests (keep_lane), ordered: those that start no server first, then those of servers that generate
    on the vLLM API server (the small one, the tools one), then those with an engine of their own, then those on the
    vLLM API server or with Flask in this process, then the shared server's. (vLLM's engine start scans every loaded
    module's names and fails on Flask's unbound request/app proxies: no test may import Flask in this process before
    the in-process engines have run.)

    The vLLM API server (the default model, ~5 GB) and the shared server (~7 GB, an engine in process), when a selected
    test needs them, are launched now: their ~40 s starts overlap the first tests instead of adding to the run.
    Memory stays under ~19 GB: the small and tools servers (~1.5 GB each, one at a time) generate on the API
    server, and the in-process engines of the LLM-worker tests come after them.
    """
    def rank(item) -> int:
        names = set(getattr(item, "fixturenames", ()))
        if on_shared_server(item):
            return 4
        if names & {"vllm_api", "web_root_server", "front"}:  # front: Flask in this process, after the engines
            return 3
        if "vllm_api_starting" in names:  # servers that generate on the API server (the small one, the tools one)
            return 1
        return 2 if names & {"llm", "omni_llm"} else 0

    keep_lane(config, items)
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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test on a running server shows what that server logged meanwhile: a failure a busy CI machine
    brings out once in many runs is read from the report, not run again."""
    report = yield
    running = item.funcargs.get("server") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(running, RunningServer):
        with contextlib.suppress(OSError):
            lines = running.log().splitlines()
            noisy = ("Connection(", "InsecureRequestWarning")
            tail = [line for line in lines if not any(n in line for n in noisy)][-80:]
            report.sections.append(("the server's log, its last 80 lines", "\n".join(tail)))
    return report
