"""Which of the operator's tools a question may need: the ones that share a word with it.

The model is shown only those, in a system message just before the question (workers/prompting.py): a plain
question then gets the very prompt it would get with no tools configured (no ~200 tokens of tool section to
prefill, and the bundled 1.5B model's plain answers unchanged: with the tools in every system prompt they lost 2-3
of 42), and a question about the shop gets the tools next to it, where a small model in a long session sees them
(in the system prompt, twelve exchanges up, it called none of 10; beside the question, 8 of 10 and no false call
among 10 plain questions: scripts/eval_tools.py). A word match is generous on purpose: an offered tool is only
offered, the model still decides.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from workers.tools.registry import Tool, ToolBox

_WORD = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Words that say nothing of what a question is about (question words, pronouns, auxiliaries, fillers).
_STOP_WORDS_TEXT = """
a about all also am an and any anything are as at be been but by can could did do does doing done for from get
give got had has have having he her here him his how i if in into is it its just know let like many may me might
more most much my no not now of off on one or our out please right she should so some something tell than that
the their them then there these they this those to too up us very want was we were what when where which who
whom whose why will with would yes you your
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())


def stem(word: str) -> str:
    """A crude English stem, enough to meet "widgets" with "widget" and "opening" with "open"."""
    if word.endswith(("ss", "us", "is")):  # glass, status, analysis: no plural to take off
        return word
    for suffix, keep, least in (("ies", "y", 2), ("ches", "ch", 2), ("shes", "sh", 2), ("xes", "x", 2),
                                ("ing", "", 3), ("s", "", 3)):
        if word.endswith(suffix) and len(word) - len(suffix) >= least:
            return word[:-len(suffix)] + keep
    return word


def content_words(text: str) -> set[str]:
    words = _WORD.findall(_CAMEL.sub(" ", text).replace("_", " ").lower())
    return {stem(w) for w in words if w not in STOP_WORDS and len(w) > 1}


def _schema_text(schema: Any) -> Iterable[str]:
    """Property names, titles, descriptions and enum values of a JSON schema, however nested."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                yield from value.keys()
            if key in ("title", "description") and isinstance(value, str):
                yield value
            elif key == "enum" and isinstance(value, list):
                yield from (str(v) for v in value)
            else:
                yield from _schema_text(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _schema_text(item)


def tool_words(tool: Tool) -> set[str]:
    return content_words(" ".join([tool.name, tool.description, *_schema_text(tool.parameters)]))


def relevant(question: str, tools: ToolBox) -> ToolBox:
    """The tools that share a content word with the question (none for an empty question)."""
    asked = content_words(question)
    return ToolBox([t for t in tools.tools.values() if asked & tool_words(t)])
