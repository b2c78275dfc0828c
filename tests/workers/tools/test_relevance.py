"""Which tools a question is shown beside it: those that share a content word with it (pure logic)."""

from __future__ import annotations

import pytest

from workers.llm.tool_turns import ToolTurns
from workers.tools.client_tools import SOURCE as CLIENT_TOOL
from workers.tools.registry import Tool, ToolBox
from workers.tools.relevance import MAX_OFFERED, content_words, relevant, stem, tool_words

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

STOCK = Tool("stock_count", "How many of an item the shop has in stock (widgets, gadgets, sprockets, gizmos).",
             {"type": "object", "properties": {"item": {"type": "string", "title": "Item"}}}, str, source="mcp:shop")
HOURS = Tool("opening_hours", "The shop's opening hours on a day of the week.",
             {"type": "object", "properties": {"day": {"type": "string", "enum": ["Monday", "Sunday"]}}}, str,
             source="mcp:shop")
SHOP = ToolBox([STOCK, HOURS])


@pytest.mark.parametrize("word, expected", [("widgets", "widget"), ("opening", "open"), ("hours", "hour"),
                                            ("batteries", "battery"), ("boxes", "box"), ("glass", "glass"),
                                            ("is", "is"), ("gas", "gas")])
def test_stems_meet_plural_and_verb_forms(word, expected):
    assert stem(word) == expected


def test_a_tools_words_come_from_its_name_description_and_schema():
    assert {"stock", "count", "widget", "gizmo", "item", "shop"} <= tool_words(STOCK)
    assert {"open", "hour", "day", "week", "monday", "sunday"} <= tool_words(HOURS)
    assert "the" not in tool_words(HOURS) and "how" not in tool_words(STOCK)  # question words say nothing
    assert content_words("getOrderStatus") == {"order", "status"}  # camelCase names are words too


@pytest.mark.parametrize("question, offered", [
    ("How many widgets are in stock?", ["stock_count"]),
    ("Is there any gizmo left?", ["stock_count"]),
    ("Are you open on Saturday?", ["opening_hours"]),
    ("Is the shop open on Sunday?", ["stock_count", "opening_hours"]),
    ("What is the capital of Italy?", []),
    ("Can fish breathe underwater?", []),
    ("What time is it?", []),
    ("", []),
])
def test_only_the_tools_that_share_a_word_with_the_question_are_offered(question, offered):
    assert list(relevant(question, SHOP).tools) == offered


def test_beside_a_question_a_clients_functions_and_the_operators_tools_are_shown_when_relevant_never_builtins():
    """(A client's functions are also in the prompt's prefix, all session: ToolTurns.prefix_tools.)"""
    theirs = Tool("lookup_order", "An order's status.", {"type": "object"}, str, source=CLIENT_TOOL)
    builtin = Tool("get_current_time", "The current date and time.", {"type": "object"}, str)
    box = ToolBox([builtin, STOCK, HOURS, theirs])
    assert list(ToolTurns.offered(box, "How many widgets are in stock?").tools) == ["stock_count"]
    assert list(ToolTurns.offered(box, "Where is my order?").tools) == ["lookup_order"]
    assert ToolTurns.offered(box, "What time is it today?") is None
    assert ToolTurns.offered(ToolBox([builtin, STOCK]), "What is the capital of Italy?") is None
    assert ToolTurns.offered(None, "How many widgets?") is None


def test_what_is_shown_beside_a_question_is_bounded_whatever_a_client_declares():
    """It is prefilled again every turn: a client's long functions stay in the prompt's prefix only."""
    from vita.text_cost import estimated_tokens
    from workers.llm.tool_turns import MOST_BESIDE_TOKENS

    long = Tool("order_history", "Every order of the shop. " * 200, {"type": "object"}, str, source=CLIENT_TOOL)
    short = Tool("order_status", "An order's status.", {"type": "object"}, str, source=CLIENT_TOOL)
    assert estimated_tokens(str(long.schema())) > MOST_BESIDE_TOKENS
    assert list(ToolTurns.offered(ToolBox([long, short]), "Where is my order?").tools) == ["order_status"]
    assert ToolTurns.offered(ToolBox([long]), "Where is my order?") is None


def test_questions_are_not_matched_by_generic_words_examples_or_sums():
    clock = Tool("convert_time", "Convert a time between zones. Use this when you need a new time.",
                 {"type": "object", "properties": {"zone": {"type": "string",
                                                            "description": "e.g. 'Europe/London'"}}}, str)
    box = ToolBox([clock])
    assert list(relevant("What time is it in Tokyo?", box).tools) == ["convert_time"]
    assert not relevant("What is five times six?", box)  # a sum, not the time
    assert not relevant("Which ocean lies between Europe and America?", box)  # an argument's example
    assert not relevant("What do I need to use to write a new letter?", box)  # the words every tool says


def test_a_follow_up_gets_the_tool_just_used_and_at_most_four_are_offered():
    assert list(relevant("And on Saturday?", SHOP, recent=["opening_hours"]).tools) == ["opening_hours"]
    many = ToolBox([Tool(f"shop_tool_{i}", "Something about the shop.", {"type": "object"}, str) for i in range(9)])
    assert len(relevant("Is the shop open?", many).tools) == MAX_OFFERED
    best = Tool("shop_opening_hours", "When the shop is open.", {"type": "object"}, str)
    assert "shop_opening_hours" in relevant("When is the shop open?", ToolBox([*many.tools.values(), best])).tools


def test_words_of_any_script_are_words():
    hours = Tool("öffnungszeiten", "Öffnungszeiten des Ladens.", {"type": "object"}, str)
    assert list(relevant("Wie sind die Öffnungszeiten?", ToolBox([hours])).tools) == ["öffnungszeiten"]


def test_with_no_question_to_match_every_operator_tool_is_offered():
    box = ToolBox([Tool("get_current_time", "Now.", {"type": "object"}, str), STOCK, HOURS])
    assert list(ToolTurns.offered(box, None).tools) == ["stock_count", "opening_hours"]
