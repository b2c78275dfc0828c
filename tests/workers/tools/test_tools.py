"""Tools: the built-ins, reading the model's tool calls, and every way a call can go wrong becoming an error text
the model can read (pure logic: no model, no server; the MCP server and the model's calls are in
test_tool_turns.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest

from workers.tools.builtin import ToolInputError, builtin_tools, calculate, current_time
from workers.tools.in_turn import CallDetector
from workers.tools.registry import RESULT_CHARS, Tool, ToolBox, ToolCall, parse_calls, starts_tool_call

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


@pytest.mark.parametrize("expression, result", [
    ("347 * 29", "10063"), ("1234 * 5678", "7006652"), ("7 / 2", "3.5"), ("10 / 3", "3.3333333333"),
    ("0.1 + 0.2", "0.3"), ("(3 + 4) * 5", "35"), ("2 ** 10", "1024"), ("2^10", "1024"), ("12 × 12", "144"),
    ("1,000 * 3", "3000"), ("-3 % 2", "1"), ("sqrt(16)", "4"), ("2 ** 200", "1.606938e+60"),
])
def test_arithmetic_is_exact(expression, result):
    assert calculate(expression) == result


@pytest.mark.parametrize("expression", [
    "__import__('os').system('true')", "open('/etc/passwd')", "(1).__class__", "9 ** 9 ** 9", "1 / 0", "",
    "x + 1", "lambda: 1", "[1] * 10", "2 ** 0.5 ** 999999", "1" * 300,
])
def test_anything_but_arithmetic_is_refused_with_a_reason(expression):
    with pytest.raises(ToolInputError):
        calculate(expression)


def test_the_time_is_the_users_zone_then_a_named_one_then_the_servers():
    moment = dt.datetime(2026, 11, 25, 23, 30, tzinfo=dt.UTC)
    assert current_time(None, "Asia/Tokyo", now=moment) == "Thursday, November 26, 2026, 8:30 AM"
    assert current_time("Europe/Paris", "Asia/Tokyo", now=moment) == "Thursday, November 26, 2026, 12:30 AM in Paris"
    assert "2026" in current_time(now=moment)
    with pytest.raises(ToolInputError, match="unknown time zone"):
        current_time("Mars/Olympus", now=moment)


def test_tool_calls_are_read_from_the_models_text():
    assert starts_tool_call("<tool_call>\n{") is True
    assert starts_tool_call("  <tool") is None  # too early to tell
    assert starts_tool_call("Paris is") is False
    assert starts_tool_call("```json\n{") is None and starts_tool_call('```json\n{"name": "x"') is True
    assert starts_tool_call('{{"name": "x"') is True  # doubled braces, as Qwen's template shows the call
    text = ('<tool_call>\n{"name": "calculate", "arguments": {"expression": "2+2"}}\n</tool_call>\n'
            '<tool_call>{"name": "get_current_time", "arguments": "{}"}</tool_call><tool_call>{"name": broken')
    calls = parse_calls(text)
    assert calls[0] == ToolCall("calculate", {"expression": "2+2"})
    assert calls[1] == ToolCall("get_current_time", {})
    assert calls[2].error.startswith("the tool call is not valid JSON")
    assert parse_calls('{{"name": "calculate", "arguments": {"expression": "1+1"}}}') == [
        ToolCall("calculate", {"expression": "1+1"})]
    assert parse_calls('```json\n{"name": "a", "arguments": {}}\n```') == [ToolCall("a", {})]


def test_a_call_written_in_the_tags_of_a_tools_result_is_a_call():
    """The 1.5B model, with an earlier call's result in its history, once wrote its call in <tool_response> tags,
    and the JSON was spoken (scripts/eval/tools.py)."""
    streamed = ["<", "tool", "_response", ">\n", '{"', "name", '":', ' "opening_hours", "arguments": {"day": ',
                '"Sunday"}}\n', "</", "tool", "_response", ">"]
    detector = CallDetector(enabled=True)
    assert "".join(detector.feed(piece) for piece in streamed) + detector.finish() == ""  # nothing spoken
    assert detector.is_call
    assert parse_calls(detector.pending) == [ToolCall("opening_hours", {"day": "Sunday"})]
    assert starts_tool_call("<tool_res") is None and starts_tool_call("<tools are") is False
    after_a_call = ('<tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
                    '<tool_response>{"open": true}</tool_response>')
    assert parse_calls(after_a_call) == [ToolCall("a", {})]  # a result it made up is not a second call
    spoken = CallDetector(enabled=True)
    assert spoken.feed("Closed on Sundays. <tool_response>") == "Closed on Sundays. " and spoken.cut


def run(coro):
    return asyncio.run(coro)


def test_every_failure_is_an_error_the_model_can_read():
    def slow(**_):
        time.sleep(0.5)
        return "late"

    def broken(**_):
        raise RuntimeError("the database is down")

    box = ToolBox([*builtin_tools(),
                   Tool("slow", "", {"type": "object"}, slow, timeout_s=0.05),
                   Tool("broken", "", {"type": "object"}, broken),
                   Tool("huge", "", {"type": "object"}, lambda: "x" * 10_000)])
    cases = [
        (ToolCall("", error="the tool call is not valid JSON (Expecting value)"), "bad_call"),
        (ToolCall("weather", {}), "unknown_tool"),
        (ToolCall("calculate", {"expr": "1+1"}), "bad_arguments"),
        (ToolCall("calculate", {"expression": "1/0"}), "failed"),
        (ToolCall("slow", {}), "timeout"),
        (ToolCall("broken", {}), "failed"),
    ]
    for request, kind in cases:
        outcome = run(box.call(request))
        assert outcome.outcome == kind and not outcome.ok and outcome.result.startswith("Error: "), request
    assert "the database is down" in run(box.call(ToolCall("broken", {}))).result
    huge = run(box.call(ToolCall("huge", {})))
    assert huge.ok and len(huge.result) <= RESULT_CHARS + 10
    good = run(box.call(ToolCall("calculate", {"expression": "347 * 29"})))
    assert good.ok and good.result == "10063" and good.as_message() == {"role": "tool", "name": "calculate",
                                                                         "content": "10063"}


def test_the_users_time_zone_reaches_the_time_tool_and_a_session_may_narrow_its_tools():
    box = ToolBox(builtin_tools())
    outcome = run(box.call(ToolCall("get_current_time", {}), context={"timezone": "Asia/Tokyo"}))
    tokyo = current_time(None, "Asia/Tokyo")
    assert outcome.ok and outcome.result.rsplit(":", 1)[0] == tokyo.rsplit(":", 1)[0]  # (the minute may turn)
    assert list(box.only(["calculate"]).tools) == ["calculate"] and not box.only([])
    assert [s["function"]["name"] for s in box.schemas()] == ["get_current_time", "calculate"]


def test_a_tool_with_a_broken_schema_fails_its_call_readably_and_acting_tools_stay_out_of_speculative_turns():
    box = ToolBox([Tool("odd", "", {"type": "nonsense"}, lambda: "x"),
                   Tool("order", "", {"type": "object"}, lambda: "ordered", read_only=False),
                   *builtin_tools()])
    outcome = run(box.call(ToolCall("odd", {})))
    assert outcome.outcome == "failed" and "schema is invalid" in outcome.result
    assert "order" not in box.only(None, read_only=True).tools and "calculate" in box.only(None, read_only=True).tools


def test_a_tool_call_after_spoken_words_is_cut_even_split_across_deltas():
    from workers.tools.in_turn import CallDetector

    detector = CallDetector(enabled=True)
    assert detector.feed("Let me see.") == "Let me see." and not detector.is_call
    assert detector.feed(" Now <tool") == " Now <tool"  # cannot be told yet
    assert detector.feed('_call>{"name": "x"}') == "" and detector.cut  # the rest is never spoken


def test_a_client_functions_arguments_are_checked_by_shape_never_by_its_pattern():
    """A client's pattern is run by nobody here: one crafted pattern took Python's regex engine ~40 s on a
    30-character argument, on the worker's event loop (every session's turn waiting)."""
    import json

    from vita.messages import ClientTool
    from workers.tools.client_tools import as_tools

    schema = {"type": "object", "properties": {"expression": {"type": "string", "pattern": "^([0-9 +]+)+x$"}},
              "required": ["expression"]}
    (tool,) = as_tools((ClientTool("calculate", "", json.dumps(schema)),))
    assert tool.parameters == schema  # the model is shown the client's own schema
    box = ToolBox([tool])
    started = time.monotonic()
    outcome = asyncio.run(box.call(ToolCall("calculate", {"expression": "1" * 40 + " + 1"})))
    assert time.monotonic() - started < 5.0  # (26 characters took 2.6 s; 40, hours)
    assert outcome.outcome != "bad_arguments"  # the shape holds: it goes to the client, which checks its own pattern
    wrong = asyncio.run(box.call(ToolCall("calculate", {"expression": 7})))
    assert wrong.outcome == "bad_arguments"


def test_a_call_nested_a_thousand_deep_fails_only_itself():
    (call,) = parse_calls("<tool_call>" + '{"name": "f", "arguments": ' + "[" * 5000 + "]" * 5000 + "}</tool_call>")
    assert call.error
