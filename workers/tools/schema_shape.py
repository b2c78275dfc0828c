"""The shape of a client's JSON schema, and nothing a client could make expensive: types, properties, required
keys, items, enums and alternatives, local ``$ref``s inlined, within a budget of nodes and characters. Patterns,
formats and bounds are left out. A grammar is built from it (forced_calls.py), and a client function's arguments are
checked against it (client_tools.py): Python's regex engine took ~40 s on one crafted pattern and a 30-character
argument, on the LLM worker's event loop, and vLLM's grammar compiler 20 s on another, on the engine's thread."""

from __future__ import annotations

from typing import Any

TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
MAX_NODES = 400  # schema nodes kept over all the functions: beyond, a function takes any arguments object
# Characters of names, enum values and constants kept over all the functions: $refs are copied out where they are
# used, so nodes alone did not bound the grammar (20 refs to one enum of long strings made a 3.5 MB schema that
# the grammar compiler worked on for minutes, on the cores the model decodes on).
MAX_CHARS = 8000
MAX_ENUM = 64  # values of one enum kept as a choice; a longer one is left to its type
# Properties of one object: the grammar compiler's time grows with the square of the optional ones (0.85 s for
# 390, 0.07 s for 100); a function with more takes any arguments object.
MAX_PROPERTIES = 64
MAX_ALTERNATIVES = 16
MAX_REF_DEPTH = 6  # $refs followed inside each other (a recursive schema ends there, as any value)


class SchemaTooLarge(Exception):
    """Over the budget: the function then takes any arguments object."""


class ShapeBudget:
    """What is left to keep: nodes, and characters of names and values."""

    def __init__(self, nodes: int, chars: int = MAX_CHARS):
        self.nodes, self.chars = nodes, chars

    def take(self) -> bool:
        self.nodes -= 1
        return self.nodes >= 0

    def spend(self, *values: Any) -> None:
        """Charge the text kept; SchemaTooLarge when over."""
        self.chars -= sum(len(str(v)) for v in values)
        if self.chars < 0:
            raise SchemaTooLarge


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


def shape_of(schema: Any, root: dict[str, Any], budget: ShapeBudget, refs: int = 0) -> dict[str, Any]:
    """`schema`'s shape, its local $refs resolved against `root`; SchemaTooLarge past the budget."""
    if not budget.take():
        raise SchemaTooLarge
    if not isinstance(schema, dict):
        return {}
    if "$ref" in schema:
        target = _resolve(schema["$ref"], root)
        return shape_of(target, root, budget, refs + 1) if target is not None and refs < MAX_REF_DEPTH else {}
    out: dict[str, Any] = {}
    kind = schema.get("type")
    if isinstance(kind, str) and kind in TYPES:
        out["type"] = kind
    elif isinstance(kind, list) and (kinds := [k for k in kind if isinstance(k, str) and k in TYPES]):
        out["type"] = kinds
    properties = schema.get("properties")
    if isinstance(properties, dict):
        if len(properties) > MAX_PROPERTIES:
            raise SchemaTooLarge
        budget.spend(*properties)
        out["properties"] = {str(name): shape_of(sub, root, budget, refs) for name, sub in properties.items()}
        required = schema.get("required")
        if isinstance(required, list):
            out["required"] = [r for r in required if isinstance(r, str) and r in out["properties"]]
    if isinstance(schema.get("items"), dict):
        out["items"] = shape_of(schema["items"], root, budget, refs)
    additional = schema.get("additionalProperties")
    if isinstance(additional, bool):
        out["additionalProperties"] = additional
    elif isinstance(additional, dict):
        out["additionalProperties"] = shape_of(additional, root, budget, refs)
    enum = schema.get("enum")
    if isinstance(enum, list) and 0 < len(enum) <= MAX_ENUM and all(_scalar(v) for v in enum):
        budget.spend(*enum)
        out["enum"] = enum
    if "const" in schema and _scalar(schema["const"]):
        budget.spend(schema["const"])
        out["const"] = schema["const"]
    alternatives = schema.get("anyOf", schema.get("oneOf"))
    if isinstance(alternatives, list) and 0 < len(alternatives) <= MAX_ALTERNATIVES:
        out["anyOf"] = [shape_of(a, root, budget, refs) for a in alternatives]
    return out


def arguments_shape(schema: Any, budget: ShapeBudget | None = None) -> dict[str, Any]:
    """What is kept of one function's parameters: their shape, or any object when there is none to follow or it is
    too large (the budget is then left as it was)."""
    budget = budget or ShapeBudget(MAX_NODES)
    saved = budget.nodes, budget.chars
    try:
        shape = shape_of(schema, schema, budget) if isinstance(schema, dict) else {}
    except (SchemaTooLarge, RecursionError):
        budget.nodes, budget.chars = saved
        shape = {}
    if "anyOf" not in shape:
        shape["type"] = "object"  # the arguments are an object, whatever else the schema says
    return shape
