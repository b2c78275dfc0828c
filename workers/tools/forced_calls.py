"""A reply that must call one of the client's functions (a Realtime client's ``tool_choice`` "required", or a
named function): the prompt ends with the model's own call opening, and the engine's grammar lets it write only a
call of those functions. Asked only in words (the opening alone), the bundled 0.5B model still answered "Hello
there!" in text; under the grammar it wrote the call every time.

The grammar follows the shape of each function's schema only: types, properties, required keys, items, enums and
alternatives, local ``$ref``s inlined. What else a schema may say (a pattern, a format, bounds) is the client's to
check: vLLM builds and checks a grammar on the engine's own thread, and one pattern with a long repeat took it 20 s
there (every session waiting)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vita.messages import ClientTool
from workers.tools.client_tools import parameters_of
from workers.tools.registry import OPENING

FORCED_CALL_TOKENS = 256  # a call's JSON, whatever llm.max_tokens keeps spoken replies to (a client's cap still holds)
TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
MAX_NODES = 400  # schema nodes kept over all the functions: beyond, a function takes any arguments object
MAX_ENUM = 64  # values of one enum kept as a choice; a longer one is left to its type
MAX_ALTERNATIVES = 16
MAX_REF_DEPTH = 6  # $refs followed inside each other (a recursive schema ends there, as any value)


@dataclass(frozen=True)
class ForcedCall:
    """How this turn's first generation round is made to call: the text the reply starts with (the model's own
    opening, already written for it) and the JSON schema the rest must follow."""

    opening: str
    schema: str


class RequiredCallFailed(RuntimeError):
    """The model's required call came out unreadable (cut off by the client's token cap): the turn fails, rather
    than answering in words what the client required to be a call."""


class _Budget:
    def __init__(self, nodes: int):
        self.nodes = nodes

    def take(self) -> bool:
        self.nodes -= 1
        return self.nodes >= 0


class SchemaTooLarge(Exception):
    pass


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _resolve(ref: Any, root: dict[str, Any]) -> Any:
    """A local $ref ("#", "#/$defs/Item", "#/definitions/Item", "#/properties/a"), or None."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    target: Any = root
    for part in (p for p in ref[1:].split("/") if p):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            return None
        target = target[part]
    return target


def _shape(schema: Any, root: dict[str, Any], budget: _Budget, refs: int = 0) -> dict[str, Any]:
    if not budget.take():
        raise SchemaTooLarge
    if not isinstance(schema, dict):
        return {}
    if "$ref" in schema:
        target = _resolve(schema["$ref"], root)
        return _shape(target, root, budget, refs + 1) if target is not None and refs < MAX_REF_DEPTH else {}
    out: dict[str, Any] = {}
    kind = schema.get("type")
    if isinstance(kind, str) and kind in TYPES:
        out["type"] = kind
    elif isinstance(kind, list) and (kinds := [k for k in kind if isinstance(k, str) and k in TYPES]):
        out["type"] = kinds
    properties = schema.get("properties")
    if isinstance(properties, dict):
        out["properties"] = {str(name): _shape(sub, root, budget, refs) for name, sub in properties.items()}
        required = schema.get("required")
        if isinstance(required, list):
            out["required"] = [r for r in required if isinstance(r, str) and r in out["properties"]]
    if isinstance(schema.get("items"), dict):
        out["items"] = _shape(schema["items"], root, budget, refs)
    additional = schema.get("additionalProperties")
    if isinstance(additional, bool):
        out["additionalProperties"] = additional
    elif isinstance(additional, dict):
        out["additionalProperties"] = _shape(additional, root, budget, refs)
    enum = schema.get("enum")
    if isinstance(enum, list) and 0 < len(enum) <= MAX_ENUM and all(_scalar(v) for v in enum):
        out["enum"] = enum
    if "const" in schema and _scalar(schema["const"]):
        out["const"] = schema["const"]
    alternatives = schema.get("anyOf", schema.get("oneOf"))
    if isinstance(alternatives, list) and 0 < len(alternatives) <= MAX_ALTERNATIVES:
        out["anyOf"] = [_shape(a, root, budget, refs) for a in alternatives]
    return out


def arguments_schema(tool: ClientTool, budget: _Budget) -> dict[str, Any]:
    """What a grammar makes of one function's parameters: their shape, or any object when there is none to follow
    or it is too large."""
    schema = parameters_of(tool)
    saved = budget.nodes
    try:
        shape = _shape(schema, schema, budget)
    except (SchemaTooLarge, RecursionError):
        budget.nodes = saved
        shape = {}
    if "anyOf" not in shape:
        shape["type"] = "object"  # the arguments are an object, whatever else the schema says
    return shape


def call_schema(tools: list[ClientTool]) -> dict[str, Any]:
    """A call of one of `tools` as Qwen's (Hermes') template writes it: {"name": ..., "arguments": {...}}."""
    budget = _Budget(MAX_NODES)
    options = [{"type": "object", "properties": {"name": {"const": tool.name},
                                                 "arguments": arguments_schema(tool, budget)},
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
