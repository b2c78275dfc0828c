"""The built-in tools: the current date and time, and exact arithmetic. A 1.5B model multiplies 347 by 29 wrong
and does not know what day it is; these answer instead of it."""

from __future__ import annotations

import ast
import datetime as dt
import math
import operator
import re
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from workers.tools.registry import Tool

MAX_EXPRESSION_CHARS = 200
MAX_POWER = 1000  # 2**1000 is printable; 9**9**9 is not
MAX_DIGITS = 60

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"sqrt": math.sqrt, "abs": abs, "round": round, "floor": math.floor, "ceil": math.ceil}
_CONSTANTS = {"pi": math.pi, "e": math.e}
# "347 times 29", as a spoken question (and a small model) writes it
SPOKEN_OPERATORS = [(r"\bmultiplied by\b|\btimes\b|(?<=\d)\s*x\s*(?=\d)", "*"), (r"\bdivided by\b|\bover\b", "/"),
                    (r"\bplus\b", "+"), (r"\bminus\b", "-"), (r"\bto the power of\b", "**"),
                    (r"\bsquared\b", "**2"), (r"\bpercent of\b", "/100*")]


class ToolInputError(ValueError):
    """The arguments cannot be used; the text goes back to the model as the tool's error."""


def calculate(expression: str) -> str:
    """Evaluate arithmetic exactly where it can be (integers and decimals), never with eval: only numbers, + - * /
    // % ** (powers up to 1000), parentheses, and sqrt, abs, round, floor, ceil, pi, e."""
    text = str(expression).strip().lower().replace("×", "*").replace("÷", "/").replace("^", "**")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # "1,000" (a thousands separator; round(2.5, 1) keeps its comma)
    for words, symbol in SPOKEN_OPERATORS:
        text = re.sub(words, symbol, text)
    if not text:
        raise ToolInputError("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolInputError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ToolInputError(f"not an arithmetic expression: {expression!r}") from None
    value = _evaluate(tree.body)
    return _format(value)


def _evaluate(node: ast.AST):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise ToolInputError("the number is too large")
        return Decimal(str(node.value)) if isinstance(node.value, float) else node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > MAX_POWER or (
                abs(left) > 1 and float(abs(right)) * math.log10(abs(left)) > MAX_POWER)):
            raise ToolInputError(f"results of more than {MAX_POWER} digits are not computed")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ToolInputError("division by zero")
        if isinstance(node.op, ast.Div) and isinstance(left, int) and isinstance(right, int):
            left = Decimal(left)  # 7 / 2 = 3.5 exactly, not a float
        if isinstance(left, float) or isinstance(right, float):
            left, right = float(left), float(right)
        elif isinstance(left, Decimal) or isinstance(right, Decimal):
            left, right = Decimal(left), Decimal(right)
        try:
            return _BINARY[type(node.op)](left, right)
        except (InvalidOperation, OverflowError, ValueError) as exc:
            raise ToolInputError(f"cannot compute that: {exc}") from None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
            and not node.keywords and 1 <= len(node.args) <= 2):
        args = [_evaluate(a) for a in node.args]
        try:
            return _FUNCTIONS[node.func.id](*[float(a) if isinstance(a, Decimal) else a for a in args])
        except (ValueError, TypeError, OverflowError) as exc:
            raise ToolInputError(f"cannot compute {node.func.id}: {exc}") from None
    raise ToolInputError("only numbers, + - * / // % **, parentheses and sqrt, abs, round, floor, ceil are allowed")


def _format(value) -> str:
    if isinstance(value, int) and value.bit_length() > 3 * MAX_POWER:
        raise ToolInputError(f"the result has more than {MAX_POWER} digits")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolInputError("the result is not a finite number")
        value = Decimal(repr(value))
    if isinstance(value, Decimal):
        if value == value.to_integral_value():
            value = int(value)
        else:
            value = round(value, 10).normalize()  # 10/3: ten decimals are plenty to say
            return format(value, "f") if abs(value.adjusted()) < MAX_DIGITS else f"{value:.6e}"
    text = str(value)
    return f"{Decimal(value):.6e}" if len(text) > MAX_DIGITS else text


def current_time(timezone: str | None = None, default_zone: str | None = None,
                 now: dt.datetime | None = None) -> str:
    """The date, day of the week and time in `timezone` (an IANA name such as "Europe/Paris"), else in the user's
    zone (`default_zone`, from their page), else the server's."""
    zone_name = (timezone or default_zone or "").strip()
    moment = now or dt.datetime.now(dt.UTC)
    if zone_name:
        try:
            zone = ZoneInfo(zone_name)
        except (ZoneInfoNotFoundError, ValueError):
            raise ToolInputError(f"unknown time zone {zone_name!r}; use an IANA name such as Europe/Paris") from None
        local = moment.astimezone(zone)
        place = f" in {zone_name.rsplit('/', 1)[-1].replace('_', ' ')}" if timezone else ""
    else:
        local = moment.astimezone()
        place = ""
    clock = f"{local.hour % 12 or 12}:{local.minute:02d} {'AM' if local.hour < 12 else 'PM'}"
    return f"{local:%A, %B} {local.day}, {local.year}, {clock}{place}"


def builtin_tools() -> list[Tool]:
    return [
        Tool("get_current_time",
             "The current date, day of the week and time. Use it for any question about today, the date, the day "
             "of the week or the time.",
             {"type": "object", "additionalProperties": False,
              "properties": {"timezone": {"type": "string",
                                          "description": "an IANA time zone such as Europe/Paris, only when the "
                                                         "user names a place; omit it for the user's own time"}}},
             _time_tool, timeout_s=1.0),
        Tool("calculate",
             "Exact arithmetic: + - * / ** and parentheses. Use it for every calculation.",
             {"type": "object", "additionalProperties": False, "required": ["expression"],
              "properties": {"expression": {"type": "string", "description": "for example 347 * 29"}}},
             calculate, timeout_s=1.0),
    ]


def _time_tool(timezone: str | None = None, context: dict | None = None) -> str:
    return current_time(timezone, (context or {}).get("timezone"))
