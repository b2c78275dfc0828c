"""Helpers shared by the benchmark scripts: percentiles, a worker started as the server starts it, /metrics.
(The microphone, the server and the client are in tests/harness.)"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from pathlib import Path
from typing import Any

RATE = 16000  # what the microphones send


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_description() -> dict:
    """Which CPU the numbers are from: its name, family/model (hosts name many kinds just "AMD EPYC"), and the
    instructions that choose the LLM's kernels."""
    text = Path("/proc/cpuinfo").read_text()

    def field(name: str) -> str:
        return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(name)), "?")

    flags = set(field("flags").split())
    if "avx512_bf16" in flags:
        isa = "AVX512-BF16" + (" and AVX512-VNNI" if "avx512_vnni" in flags else "") + (
            " and AMX" if "amx_tile" in flags else ", no AMX")
    else:
        isa = "AVX2 only" if "avx2" in flags else "no AVX2"
    return {"model": field("model name"), "family": field("cpu family"), "model_number": field("model\t"),
            "cores": os.cpu_count(), "isa": isa, "load_average": os.getloadavg()}


def summary_ms(values: list[float]) -> str:
    """'p50 x ms, p90 y ms, max z ms' for values in seconds."""
    return (f"p50 {statistics.median(values) * 1000:.3f} ms, p90 {percentile(values, 0.9) * 1000:.3f} ms, "
            f"max {max(values) * 1000:.3f} ms")


def start_worker(target: Any, inbox: str, config: Any, daemon: bool) -> tuple[Any, dict[str, Any], Any, float]:
    """Start one worker process the way the server does (spawn, Manager queues) and wait until it is ready.

    Returns (manager, queues, process, seconds to ready).
    """

    from vita.messages import WorkerState, WorkerStatus
    from vita.process_graph import QUEUES

    ctx = multiprocessing.get_context("spawn")
    manager = ctx.Manager()
    queues = {name: manager.Queue() for name in QUEUES}
    process = ctx.Process(target=target, args=(config, queues[inbox], queues), daemon=daemon)
    started = time.monotonic()
    process.start()
    while True:
        message = queues["status"].get(timeout=config.llm.ready_timeout_s)
        if isinstance(message, WorkerStatus) and message.state is WorkerState.READY:
            return manager, queues, process, time.monotonic() - started
        if isinstance(message, WorkerStatus) and message.state is WorkerState.FAILED:
            raise RuntimeError(f"worker failed: {message.detail}")


# --- reading the server's /metrics (Prometheus text) ---------------------------------------------------------
def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as {(sample name, sorted labels): value}."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(url + "/metrics", verify=False, timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def histogram_quantile(before: dict, after: dict, name: str, q: float) -> float | None:
    """Quantile of the observations made between two scrapes, interpolated within buckets (as PromQL does)."""
    buckets = sorted((float(dict(labels)["le"]), after[(n, labels)] - before.get((n, labels), 0.0))
                     for (n, labels) in after if n == f"{name}_bucket")
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if bound == float("inf"):
                return lower
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cumulative
    return lower


def cpu_seconds(pid: int | None) -> float:
    """CPU time a process has used so far (user + system); 0 without one."""
    import psutil

    if pid is None:
        return 0.0
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system
