"""Tools in a process of their own: a runaway computation is killed at its deadline and never holds the
caller's GIL; the next call gets a fresh process. Real child processes, no model."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from workers.tools.builtin import builtin_tools, isolated_arithmetic
from workers.tools.isolated import IsolatedCallError, IsolatedCalls
from workers.tools.registry import ToolBox, ToolCall

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


@pytest.fixture
def spinner():
    calls = IsolatedCalls(["tests.workers.tools.slow_function:spin"])
    calls.start()
    yield calls
    calls.close()


def test_a_runaway_call_is_killed_at_its_deadline_while_the_caller_runs_on(spinner):
    ticks = 0
    stop = threading.Event()

    def count() -> None:  # would stall if the wait held the GIL
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            spinner.call("spin", {"seconds": 30}, timeout_s=0.5)
    finally:
        stop.set()
        counter.join()
    assert time.monotonic() - started < 10  # killed, not waited out (30 s)
    assert ticks > 50 and spinner.restarts == 1
    assert spinner.call("spin", {"seconds": 0}, timeout_s=10) == "done"  # a fresh process answers


def test_a_failing_call_brings_its_message_back_and_unknown_functions_are_refused(spinner):
    with pytest.raises(IsolatedCallError, match="unexpected keyword"):
        spinner.call("spin", {"secs": 1}, timeout_s=10)
    with pytest.raises(IsolatedCallError, match="calculate"):
        spinner.call("calculate", {"expression": "1"}, timeout_s=10)  # only what it was started with


def test_the_calculator_tool_runs_in_its_process_and_says_why_it_refuses():
    arithmetic = isolated_arithmetic()
    try:
        box = ToolBox(builtin_tools(arithmetic))
        good = asyncio.run(box.call(ToolCall("calculate", {"expression": "347 * 29"})))
        assert good.ok and good.result == "10063"
        tiny = "0." + "0" * 185 + "1"
        bad = asyncio.run(box.call(ToolCall("calculate", {"expression": f"1 / {tiny} ** 1000"})))
        assert not bad.ok and bad.outcome == "failed" and "too small to say" in bad.result
        hang = asyncio.run(box.call(ToolCall("calculate", {"expression": "round(1, -10**9)"})))
        assert not hang.ok and "round's second argument" in hang.result
    finally:
        arithmetic.close()
    assert arithmetic._process is None


def test_what_a_function_prints_never_becomes_an_answer():
    calls = IsolatedCalls(["tests.workers.tools.slow_function:chatty"])
    try:
        assert [calls.call("chatty", {"text": t}, timeout_s=10) for t in ("a", "b", "c")] == ["A", "B", "C"]
    finally:
        calls.close()
