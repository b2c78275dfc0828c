"""Questions that plainly need a built-in tool are recognised before the model is asked; others are not."""

from __future__ import annotations

import pytest

from workers.tools.intents import planned_calls
from workers.tools.registry import ToolCall

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

BUILTIN = {"get_current_time", "calculate"}


@pytest.mark.parametrize("question, call", [
    ("What is 347 times 29?", ToolCall("calculate", {"expression": "347 times 29"})),
    ("what's 12 x 12", ToolCall("calculate", {"expression": "12 x 12"})),
    ("What is 100 divided by 8?", ToolCall("calculate", {"expression": "100 divided by 8"})),
    ("What is the square root of 144?", ToolCall("calculate", {"expression": "sqrt(144)"})),
    ("What is 15 percent of 200?", ToolCall("calculate", {"expression": "15 / 100 * 200"})),
    ("What time is it?", ToolCall("get_current_time", {})),
    ("Whats the date today?", ToolCall("get_current_time", {})),
    ("What day of the week is it today?", ToolCall("get_current_time", {})),
    ("What year is it?", ToolCall("get_current_time", {})),
    ("Multiply 125 by 48.", ToolCall("calculate", {"expression": "125 * 48"})),
    ("Add 3456 and 789.", ToolCall("calculate", {"expression": "3456 + 789"})),
    ("Subtract 17 from 100.", ToolCall("calculate", {"expression": "100 - 17"})),
])
def test_plain_tool_questions_get_their_call(question, call):
    assert planned_calls(question, BUILTIN) == [call]


@pytest.mark.parametrize("question", [
    "What is the capital of France?", "How many legs does a spider have?", "Tell me about World War 2.",
    "I was born in 1990.", "Count from 1 to 10.", "The shop is open 9-5.", "What time is it in Tokyo?",
    "Who wrote Romeo and Juliet?", "What is a good time to visit Paris?", "I work 24/7.", "What happened on 9/11?",
    "I rated it 4 x 4 stars.", "What is the time complexity of quicksort?", "In Tokyo, what time is it?",
    "What time is it in the UK?",
])
def test_other_questions_are_left_to_the_model(question):
    assert planned_calls(question, BUILTIN) == []


def test_only_the_sessions_tools_are_planned():
    assert planned_calls("What is 2 + 2?", {"get_current_time"}) == []
    assert planned_calls("What time is it?", set()) == []


def test_a_planned_calls_result_is_said_plainly():
    from workers.tools.intents import spoken_answer

    assert spoken_answer(ToolCall("calculate", {"expression": "347 times 29"}), "10063") == "347 times 29 is 10063."
    assert spoken_answer(ToolCall("calculate", {"expression": "144 / 12"}), "12") == "144 divided by 12 is 12."
    assert spoken_answer(ToolCall("calculate", {"expression": "sqrt(1764)"}), "42") == "The square root of 1764 is 42."
    assert spoken_answer(ToolCall("calculate", {"expression": "15 / 100 * 260"}), "39") == "15 percent of 260 is 39."
    assert spoken_answer(ToolCall("get_current_time", {}), "Wednesday, November 25, 2026, 7:48 PM") == (
        "It's Wednesday, November 25, 2026, 7:48 PM.")


def test_a_long_text_is_left_to_the_model_at_once():
    """The expression pattern is quadratic in a run of digits: a question is short, a paste is not one."""
    import time

    started = time.monotonic()
    assert planned_calls("what is " + "1" * 4000, {"calculate"}) == []
    assert time.monotonic() - started < 0.05
