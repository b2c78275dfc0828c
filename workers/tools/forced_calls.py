"""A reply that must call one of the client's functions (a Realtime client's ``tool_choice`` "required", or a
named function): the prompt ends with the model's own call opening, and the engine's grammar lets it write only a
call of those functions, with arguments of their schemas. Asked only in words (the opening alone), the bundled
0.5B model still answered "Hello there!" in text; under the grammar it wrote the call every time."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vita.messages import ClientTool
from workers.tools.registry import OPENING


@dataclass(frozen=True)
class ForcedCall:
    """How this turn's first generation round is made to call: the text the reply starts with (the model's own
    opening, already written for it) and the JSON schema the rest must follow."""

    opening: str
    schema: str


def call_schema(tools: list[ClientTool]) -> dict[str, Any]:
    """A call of one of `tools` as Qwen's (Hermes') template writes it: {"name": ..., "arguments": {...}}."""
    options = []
    for tool in tools:
        try:
            parameters = json.loads(tool.parameters) if tool.parameters else {}
        except ValueError:
            parameters = {}
        if not isinstance(parameters, dict) or not parameters:
            parameters = {"type": "object"}
        options.append({"type": "object", "properties": {"name": {"const": tool.name}, "arguments": parameters},
                        "required": ["name", "arguments"], "additionalProperties": False})
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
