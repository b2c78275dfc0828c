"""Helpers shared by the benchmark scripts (importable because scripts/ is on sys.path when they run)."""

from __future__ import annotations

import collections
import multiprocessing
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

RATE = 16000  # what the microphones send


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


# --- an open microphone over Socket.IO ------------------------------------------------------------------------
@dataclass
class Said:
    """One utterance handed to the microphone, and when its voiced part went out."""

    speech: np.ndarray
    onset_sent: float = 0.0
    end_sent: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)


class Microphone:
    """Always open, like a page's: real-time frames of silence, or of what `say` was given."""

    def __init__(self, client: Any, binary: bool):
        self.client, self.binary = client, binary
        self.step = RATE * (32 if binary else 8) // 1000
        self.queue: collections.deque[Said] = collections.deque()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="mic", daemon=True)
        self.thread.start()

    def say(self, speech: np.ndarray) -> Said:
        said = Said(speech)
        self.queue.append(said)
        return said

    def _run(self) -> None:
        started, sent = time.monotonic(), 0
        current, pos, voiced = None, 0, (0, 0)
        while not self.stop.is_set():
            if current is None and self.queue:
                current, pos = self.queue.popleft(), 0
                loud = np.flatnonzero(np.abs(current.speech.astype(np.int32)) > 800)
                voiced = (int(loud[0]), int(loud[-1])) if loud.size else (0, len(current.speech) - 1)
            if current is not None:
                chunk = current.speech[pos:pos + self.step]
                if len(chunk) < self.step:
                    chunk = np.concatenate([chunk, np.zeros(self.step - len(chunk), np.int16)])
            else:
                chunk = np.zeros(self.step, np.int16)
            self.client.sio.emit("audio", chunk.astype("<i2").tobytes() if self.binary else _vita_message(chunk))
            if current is not None:
                now = time.monotonic()
                if pos <= voiced[0] < pos + self.step:
                    current.onset_sent = now
                if pos <= voiced[1] < pos + self.step:
                    current.end_sent = now
                pos += self.step
                if pos >= len(current.speech):
                    current.done.set()
                    current = None
            sent += self.step
            delay = started + sent / RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)



def _vita_message(pcm: np.ndarray) -> str:
    """VITA's page format: a JSON string with the PCM's bytes as a list of numbers."""
    import json

    return json.dumps({"sample_rate": RATE, "audio": list(pcm.astype("<i2").tobytes())})
