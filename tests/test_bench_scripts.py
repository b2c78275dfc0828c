"""The benchmark scripts still speak the workers' protocol: the TTS benchmark runs the real TTS worker through
the helper every worker benchmark uses (it broke once when worker status moved to its own queue)."""

from __future__ import annotations

import subprocess
import sys

from tests.harness.server import ROOT


def test_tts_benchmark_runs_the_real_worker_and_reports():
    result = subprocess.run([sys.executable, "-m", "scripts.bench.tts", "--runs", "1"], cwd=ROOT, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "first chunk p50" in result.stdout and "RTF p50" in result.stdout, result.stdout
