"""Helpers shared by the benchmark scripts (importable because scripts/ is on sys.path when they run)."""

from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary_ms(values: list[float]) -> str:
    """'p50 x ms, p90 y ms, max z ms' for values in seconds."""
    return (f"p50 {statistics.median(values) * 1000:.3f} ms, p90 {percentile(values, 0.9) * 1000:.3f} ms, "
            f"max {max(values) * 1000:.3f} ms")
