"""Helpers shared by the benchmark scripts (importable because scripts/ is on sys.path when they run)."""

from __future__ import annotations

import multiprocessing
import statistics
from typing import Any


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary_ms(values: list[float]) -> str:
    """'p50 x ms, p90 y ms, max z ms' for values in seconds."""
    return (f"p50 {statistics.median(values) * 1000:.3f} ms, p90 {percentile(values, 0.9) * 1000:.3f} ms, "
            f"max {max(values) * 1000:.3f} ms")


def start_worker(target: Any, inbox: str, config: Any, daemon: bool) -> tuple[Any, dict[str, Any], Any, float]:
    """Start one worker process the way the server does (spawn, Manager queues) and wait until it is ready.

    Returns (manager, queues, process, seconds to ready).
    """
    import time

    from vita.messages import WorkerState, WorkerStatus

    ctx = multiprocessing.get_context("spawn")
    manager = ctx.Manager()
    queues = {name: manager.Queue() for name in ("requests", "tts", "outputs")}
    process = ctx.Process(target=target, args=(config, queues[inbox], queues), daemon=daemon)
    started = time.monotonic()
    process.start()
    while True:
        message = queues["outputs"].get(timeout=config.llm.ready_timeout_s)
        if isinstance(message, WorkerStatus) and message.state is WorkerState.READY:
            return manager, queues, process, time.monotonic() - started
        if isinstance(message, WorkerStatus) and message.state is WorkerState.FAILED:
            raise RuntimeError(f"worker failed: {message.detail}")
