"""Exact arithmetic for the `calculate` tool, under bounds that keep every step small.

Only numbers, + - * / // % ** (powers up to MAX_POWER), parentheses, and sqrt, abs, round, floor, ceil, pi, e are
read; never eval. Every intermediate result must stay within 10**±MAX_EXPONENT: a huge value is refused as "too
large to say" before it is built, never converted or printed (turning a 186,000-digit Decimal into an int took
seconds with the GIL held). This module imports nothing but the standard library: it also runs in the isolated
tool process (workers/tools/isolated.py).
"""

from __future__ import annotations

import ast
import decimal
import math
import operator
import re
from decimal import Decimal

MAX_EXPRESSION_CHARS = 200
MAX_POWER = 1000  # the largest exponent taken; 2**1000 is sayable, 9**9**9 is not
MAX_EXPONENT = 1000  # every intermediate value within 10**±1000
MAX_DIGITS = 60  # a result longer than this is said in scientific notation
MAX_ROUND_DIGITS = 60  # round(x, n) with |n| beyond this is refused (round(1, -10**9) computes 10**(10**9))
MAX_INT_BITS = int(MAX_EXPONENT * math.log2(10)) + 1

# Precision well beyond what is said; exponents bounded; every exceptional condition raises instead of producing
# inf, nan or a subnormal.
CONTEXT = decimal.Context(prec=50, Emax=MAX_EXPONENT, Emin=-MAX_EXPONENT, rounding=decimal.ROUND_HALF_EVEN,
                          traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow,
                                 decimal.Underflow, decimal.Subnormal])

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


TOO_LARGE = f"the result is too large to say (beyond 10 to the power of {MAX_EXPONENT})"
TOO_SMALL = f"the result is too small to say (below 10 to the power of -{MAX_EXPONENT})"


def calculate(expression: str) -> str:
    """Evaluate arithmetic exactly where it can be (integers and decimals)."""
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
    except (SyntaxError, ValueError):
        raise ToolInputError(f"not an arithmetic expression: {expression!r}") from None
    with decimal.localcontext(CONTEXT):
        return _format(_evaluate(tree.body))


def _bounded(value):
    """`value` when it is within 10**±MAX_EXPONENT (or zero); ToolInputError otherwise."""
    if isinstance(value, bool):
        raise ToolInputError("only numbers are allowed")
    if isinstance(value, complex):  # (-1) ** 0.5
        raise ToolInputError("the result is not a real number")
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise ToolInputError(TOO_LARGE)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ToolInputError(TOO_LARGE)
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise ToolInputError(TOO_LARGE)
        if value and value.adjusted() > MAX_EXPONENT:
            raise ToolInputError(TOO_LARGE)
        if value and value.adjusted() < -MAX_EXPONENT:
            raise ToolInputError(TOO_SMALL)
    return value


def _digits(value) -> float:
    """log10 of |value| (0 for 0), without building anything large."""
    if not value:
        return 0.0
    if isinstance(value, Decimal):
        return float(value.copy_abs().log10())
    if isinstance(value, int):
        return (value.bit_length() - 1) * math.log10(2) if abs(value) > 2 ** 1000 else math.log10(abs(value))
    return math.log10(abs(value))


def _evaluate(node: ast.AST):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        if isinstance(node.value, float):
            if not math.isfinite(node.value):
                raise ToolInputError(TOO_LARGE)
            return _bounded(Decimal(str(node.value)))
        return _bounded(node.value)
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_POWER:
                raise ToolInputError(f"powers above {MAX_POWER} are not computed")
            if left < 0 and right != int(right):
                raise ToolInputError("the result is not a real number")
            if abs(float(right) * _digits(left)) > MAX_EXPONENT:
                raise ToolInputError(TOO_LARGE if (float(right) * _digits(left)) > 0 else TOO_SMALL)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ToolInputError("division by zero")
        if isinstance(node.op, ast.Div) and isinstance(left, int) and isinstance(right, int):
            left = Decimal(left)  # 7 / 2 = 3.5 exactly, not a float
        try:
            if isinstance(left, float) or isinstance(right, float):
                left, right = float(left), float(right)
            elif isinstance(left, Decimal) or isinstance(right, Decimal):
                left, right = Decimal(left), Decimal(right)
            return _bounded(_BINARY[type(node.op)](left, right))
        except ToolInputError:
            raise
        except decimal.Overflow:
            raise ToolInputError(TOO_LARGE) from None
        except (decimal.Underflow, decimal.Subnormal):
            raise ToolInputError(TOO_SMALL) from None
        except (decimal.InvalidOperation, ArithmeticError, ValueError) as exc:
            raise ToolInputError(f"cannot compute that: {_reason(exc)}") from None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
            and not node.keywords and 1 <= len(node.args) <= 2):
        name = node.func.id
        args = [_evaluate(a) for a in node.args]
        if len(args) == 2 and (name != "round" or not isinstance(args[1], int)
                               or abs(args[1]) > MAX_ROUND_DIGITS):
            raise ToolInputError(f"{name} takes one number" if name != "round" else
                                 f"round's second argument must be a whole number from -{MAX_ROUND_DIGITS} "
                                 f"to {MAX_ROUND_DIGITS}")
        try:
            return _bounded(_FUNCTIONS[name](*[float(a) if isinstance(a, Decimal) else a for a in args]))
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise ToolInputError(f"cannot compute {name}: {_reason(exc)}") from None
    raise ToolInputError("only numbers, + - * / // % **, parentheses and sqrt, abs, round, floor, ceil are allowed")


def _reason(exc: Exception) -> str:
    """decimal's exceptions carry a list of condition classes as their text; say what happened instead."""
    if isinstance(exc, decimal.DivisionByZero):
        return "division by zero"
    if isinstance(exc, decimal.InvalidOperation):
        return "the operation has no exact answer of a sayable size"
    return str(exc) or type(exc).__name__


def _format(value) -> str:
    value = _bounded(value)
    if isinstance(value, float):
        value = Decimal(repr(value))
    if isinstance(value, Decimal):
        if value and value.adjusted() >= MAX_DIGITS:
            return f"{value:.6e}"
        if value == value.to_integral_value():
            value = int(value)  # fewer than MAX_DIGITS digits: cheap
        elif value.adjusted() + 11 > CONTEXT.prec or value.adjusted() < -6:  # too long for ten decimals, or so
            return f"{value:.6e}"  # small that they would say 0
        else:
            value = round(value, 10).normalize()  # 10/3: ten decimals are plenty to say
            return format(value, "f") if abs(value.adjusted()) < MAX_DIGITS else f"{value:.6e}"
    if value.bit_length() > 4 * MAX_DIGITS:  # more than MAX_DIGITS digits, surely
        return f"{Decimal(value):.6e}"
    text = str(value)
    return f"{Decimal(value):.6e}" if len(text) > MAX_DIGITS else text
