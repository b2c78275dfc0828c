"""A reply that must call one of the client's functions (a Realtime client's ``tool_choice`` "required", or a
named function): the prompt ends with the model's own call opening, and the engine's grammar lets it write only a
call of those functions. Asked only in words (the opening alone), the bundled 0.5B model still answered "Hello
there!" in text; under the grammar it wrote the call every time.

The grammar follows the shape of each function's schema only (schema_shape.py): what else a schema may say (a
pattern, a format, bounds) is the client's to check: vLLM builds and checks a grammar on the engine's own thread,
and one pattern with a long repeat took it 20 s there (every session waiting)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vita.messages import ClientTool
from workers.tools.client_tools import parameters_of
from workers.tools.registry import OPENING
from workers.tools.schema_shape import MAX_NODES, ShapeBudget, arguments_shape

FORCED_CALL_TOKENS = 256  # a call's JSON, whatever llm.max_tokens keeps spoken replies to (a client's cap still holds)


@dataclass(frozen=True)
class ForcedCall:
    """How this turn's first generation round is made to call: the text the reply starts with (the model's own
    opening, already written for it) and the JSON schema the rest must follow."""

    opening: str
    schema: str


class RequiredCallFailed(RuntimeError):
    """The model's required call came out unreadable (cut off by the client's token cap): the turn fails, rather
    than answering in words what the client required to be a call."""


def call_schema(tools: list[ClientTool]) -> dict[str, Any]:
    """A call of one of `tools` as Qwen's (Hermes') template writes it: {"name": ..., "arguments": {...}}."""
    budget = ShapeBudget(MAX_NODES)  # over all the functions
    options = [{"type": "object", "properties": {"name": {"const": tool.name},
                                                 "arguments": arguments_shape(parameters_of(tool), budget)},
                "required": ["name", "arguments"], "additionalProperties": False} for tool in tools]
    return options[0] if len(options) == 1 else {"anyOf": options}


def forced_call(must_call: tuple[str, ...], declared: tuple[ClientTool, ...], chat_template: str | None
                ) -> ForcedCall | None:
    """The forced call for a turn that must call one of `must_call` (names of the client's functions), or None:
    nothing is required, none of them was declared, or the model's template does not write calls in tags this
    server reads as they stream (then the model decides, as with "auto")."""
    tools = [t for t in declared if t.name in must_call]
    if not tools or not chat_template or OPENING not in chat_template:
        return None
    return ForcedCall(f"{OPENING}\n", json.dumps(call_schema(tools)))
