"""Which of the operator's tools a question may need: the ones that share a word with it, and those the
conversation has just used (a follow-up, "And on Saturday?", shares no word with the tool it needs).

The model is shown only those, in a system message just before the question (workers/llm/prompting.py): a plain
question then gets the very prompt it would get with no tools configured (no tool section to prefill, and the
bundled 1.5B model's plain answers unchanged: with the tools in every system prompt they lost 2-3 of 42), and a
question about the shop gets the tools beside it, where a small model in a long session sees them (in the system
prompt it called none of the 5 shop questions of scripts/eval/tools.py; beside the question, 4 of 5). A word
match is generous on purpose: an offered tool is only offered, the model still decides. English words: for another
language the LLM worker offers every tool, as before (see ToolTurns.offered).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from workers.tools.registry import Tool, ToolBox

MAX_OFFERED = 4  # the tools sharing most words with the question, at most: a server with dozens stays short
_WORD = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Words that say nothing of what a question or a tool is about: question words, pronouns, auxiliaries, fillers,
# and the words every tool description uses ("Returns the name of the value to use...").
_STOP_WORDS_TEXT = """
a about all also am an and any anything are as at be been but by can could did do does doing done for from get
give got had has have having he her here him his how i if in into is it its just know let like many may me might
more most much my no not now of off on one or our out please right she should so some something tell than that
the their them then there these they this those to too up us very want was we were what when where which who
whom whose why will with would yes you your
default e eg example given list name need new none number object optional return returns set string system
true false use used uses using value values
after before between during each every only other over per same such through under via within without
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
NOT_PLURALS = frozenset({"times"})  # "five times six" is not about the time


def stem(word: str) -> str:
    """A crude English stem, enough to meet "widgets" with "widget" and "opening" with "open"."""
    if word in NOT_PLURALS or word.endswith(("ss", "us", "is")):  # glass, status, analysis: no plural to take off
        return word
    for suffix, keep, least in (("ies", "y", 2), ("ches", "ch", 2), ("shes", "sh", 2), ("xes", "x", 2),
                                ("ing", "", 3), ("s", "", 3)):
        if word.endswith(suffix) and len(word) - len(suffix) >= least:
            return word[:-len(suffix)] + keep
    return word


def content_words(text: str) -> set[str]:
    words = _WORD.findall(_CAMEL.sub(" ", text).lower())
    return {stem(w) for w in words if w not in STOP_WORDS and len(w) > 1}


def _schema_words(schema: Any) -> Iterable[str]:
    """Argument names, titles and allowed values of a JSON schema, however nested (not their descriptions: their
    examples, "e.g. 'Europe/London'", matched questions about Europe)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                yield from value.keys()
            if key == "title" and isinstance(value, str):
                yield value
            elif key == "enum" and isinstance(value, list):
                yield from (str(v) for v in value)
            elif key != "description":
                yield from _schema_words(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _schema_words(item)


def tool_words(tool: Tool) -> set[str]:
    return content_words(" ".join([tool.name, tool.description, *_schema_words(tool.parameters)]))


def relevant(question: str, tools: ToolBox, recent: Iterable[str] = ()) -> ToolBox:
    """The tools named in `recent` (used in the last exchanges), then those sharing most content words with the
    question, at most MAX_OFFERED in all."""
    asked = content_words(question)
    recent = set(recent)
    scored = [(len(asked & tool_words(t)) + (1000 if t.name in recent else 0), i, t)
              for i, t in enumerate(tools.tools.values())]
    chosen = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:MAX_OFFERED]
    return ToolBox([t for _, _, t in sorted(chosen, key=lambda s: s[1])])
