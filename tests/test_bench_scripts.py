"""The benchmark scripts still speak the workers' protocol: the TTS benchmark runs the real TTS worker through
the helper every worker benchmark uses (it broke once when worker status moved to its own queue)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness.server import ROOT


def test_tts_benchmark_runs_the_real_worker_and_reports():
    result = subprocess.run([sys.executable, "-m", "scripts.bench.tts", "--runs", "1"], cwd=ROOT, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "first chunk p50" in result.stdout and "RTF p50" in result.stdout, result.stdout


PROBE = """
import os, sys, time
from vita.machine.cpu import name_os_thread
name_os_thread("budget-probe")
os.sched_setaffinity(0, {int(sys.argv[1])})
print("pinned", flush=True)
sys.stdin.readline()  # both pinned: spin
until = time.monotonic() + 0.5
while time.monotonic() < until:
    pass
print("spun", flush=True)
sys.stdin.readline()  # alive (in /proc) until the budget is read
"""


@pytest.mark.fast
def test_the_cpu_budget_says_which_threads_waited_for_a_core():
    """Two processes spinning on one core for 0.5 s each: between them they get about that core's 0.5 s, and the
    budget says they waited for it about as long."""
    import os

    from scripts.bench.latency import thread_cpu

    core = str(min(os.sched_getaffinity(0)))
    probes = [subprocess.Popen([sys.executable, "-c", PROBE, core], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for probe in probes:
            assert probe.stdout.readline().strip() == "pinned"
        for probe in probes:
            probe.stdin.write("go\n")
            probe.stdin.flush()
        for probe in probes:
            assert probe.stdout.readline().strip() == "spun"
        cpu, waited = thread_cpu(os.getpid())
    finally:
        for probe in probes:
            probe.kill()
            probe.wait()
    (name,) = [n for n in cpu if n.endswith("/budget-probe")]
    assert 0.4 <= cpu[name] <= 1.2, cpu[name]  # ~0.5-1 s of one core between them (ticks of 10 ms)
    assert waited[name] >= 0.25, (cpu[name], waited[name])  # each waited while the other ran
