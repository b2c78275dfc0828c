"""Tools the client runs itself (a Realtime client's ``session.tools``): offered to the model like the operator's,
but a call goes back to the client instead of running here. The turn ends with the call; the client's result
comes with its next turn (``TurnRequest.tool_outputs``), which goes on from the same question."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from vita.messages import ClientTool, ToolOutput
from workers.tools.registry import Tool, ToolCall
from workers.tools.schema_shape import arguments_shape

SOURCE = "client"


def _runs_on_the_client(**_: Any) -> str:
    raise RuntimeError("a client's tool runs on the client")  # never called: its calls are forwarded


def parameters_of(spec: ClientTool) -> dict[str, Any]:
    """A declared function's parameters schema ({} when it has none, or it is not a JSON object)."""
    try:
        parameters = json.loads(spec.parameters) if spec.parameters else {}
    except ValueError:
        return {}
    return parameters if isinstance(parameters, dict) else {}


def as_tools(declared: tuple[ClientTool, ...]) -> list[Tool]:
    """The client's declarations as tools the model is shown (a schema that is not JSON becomes an open one). The
    model's arguments are checked against each schema's shape only (schema_shape.py): a client's pattern could
    stall the worker's event loop in Python's regex engine."""
    tools = []
    for spec in declared:
        parameters = parameters_of(spec)
        tools.append(Tool(spec.name, spec.description, parameters or {"type": "object", "properties": {}},
                          _runs_on_the_client, source=SOURCE, read_only=True,  # nothing runs here, even speculatively
                          check=arguments_shape(parameters)))
    return tools


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:20]}"


@dataclass(frozen=True)
class AwaitedCalls:
    """A turn that stopped at the client's tool calls: its question and its tool exchange so far, for the turn
    that brings the results."""

    user_text: str
    messages: tuple[dict[str, Any], ...]  # ending with the assistant's calls
    names: dict[str, str]  # call_id -> tool name

    @classmethod
    def of(cls, user_text: str, earlier: list[dict[str, Any]], calls: list[tuple[str, ToolCall]]) -> AwaitedCalls:
        message = {"role": "assistant", "content": "",
                   "tool_calls": [{"id": call_id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}} for call_id, c in calls]}
        return cls(user_text, (*earlier, message), {call_id: c.name for call_id, c in calls})

    def answers(self, outputs: tuple[ToolOutput, ...]) -> bool:
        """Results for these calls (any other call_id belongs to a turn that is gone)."""
        return any(o.call_id in self.names for o in outputs)

    def answered(self, outputs: tuple[ToolOutput, ...], said: str = "") -> list[dict[str, Any]]:
        """The exchange with the client's results appended (as tool messages, in the order given), and what the
        user said meanwhile, if anything, after them."""
        results = [{"role": "tool", "name": self.names[o.call_id], "tool_call_id": o.call_id, "content": o.output}
                   for o in outputs if o.call_id in self.names]
        return [*self.messages, *results, *([{"role": "user", "content": said}] if said else [])]
