"""Questions that plainly need a built-in tool, recognised before the model is asked: "What time is it?", "What
day is it today?", "What is 347 times 29?". The bundled 1.5B model, given the tools, called them for about half
such questions and answered the rest from nothing ("Today is Monday.", "6912"); these calls are made for it, and
it only says the answer. Anything else (and every MCP tool) is the model's to call."""

from __future__ import annotations

import re

from workers.tools.registry import ToolCall

_TIME = re.compile(r"\b(what(?:'s|’s|s| is)? (?:the )?(?:current )?time(?=\s*(?:now|right now|please|\?|\.|,|!|$))"
                   r"|what time is it\b|(?:tell|give) me the time\b|\bthe time (?:right )?now\b)", re.I)
_DATE = re.compile(r"\b(what(?:'s|’s|s| is)? (?:the |today's )?date\b|today's date\b"
                   r"|what day (?:is (?:it|today)|of the week)\b|which day (?:is (?:it|today))\b"
                   r"|what(?:'s|s| is) (?:the )?day today\b|what (?:month|year) is it\b|what(?: is|'s) today\b)", re.I)
_ELSEWHERE = re.compile(r"\b(?i:in|at|for) (?:the )?[A-Z][A-Za-z]+")  # "in Tokyo": the place's zone is the model's
_ASKS = re.compile(r"\b(what|what's|whats|how much|how many|calculate|compute|work out|tell me|is it)\b|\?", re.I)
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_OPERATOR = (r"(?:\+|-|\*|/|x|×|÷|plus|minus|times|multiplied by|divided by|over|to the power of)")
_EXPRESSION = re.compile(rf"\(?\s*{_NUMBER}\s*\)?(?:\s*{_OPERATOR}\s*\(?\s*{_NUMBER}\s*\)?)+(?:\s*squared)?", re.I)
_VERB = re.compile(rf"\b(multiply|add|subtract|divide)\s+({_NUMBER})\s+(by|and|to|from)\s+({_NUMBER})", re.I)
_ROOT = re.compile(rf"square root of\s+({_NUMBER})", re.I)
_PERCENT = re.compile(rf"({_NUMBER})\s*(?:percent|%)\s+of\s+({_NUMBER})", re.I)


# A question that plainly needs a built-in is short; past this its text is left to the model (the expression
# pattern is quadratic in a run of digits: "what is" and 4,000 digits took 1.6 s on the worker's event loop).
MAX_QUESTION_CHARS = 400


def planned_calls(question: str, available: set[str]) -> list[ToolCall]:
    """The built-in calls `question` plainly needs (only tools in `available`), or none."""
    calls: list[ToolCall] = []
    if len(question) > MAX_QUESTION_CHARS:
        return calls
    if "get_current_time" in available and (_TIME.search(question) or _DATE.search(question)) \
            and not _ELSEWHERE.search(question):
        calls.append(ToolCall("get_current_time", {}))
    if "calculate" in available and (match := _VERB.search(question)) is not None:  # "Multiply 125 by 48."
        verb, a, b = match[1].lower(), match[2], match[4]
        expression = {"multiply": f"{a} * {b}", "add": f"{a} + {b}", "divide": f"{a} / {b}",
                      "subtract": f"{b} - {a}" if match[3].lower() == "from" else f"{a} - {b}"}[verb]
        calls.append(ToolCall("calculate", {"expression": expression}))
    elif "calculate" in available and _ASKS.search(question):
        if (match := _PERCENT.search(question)) is not None:
            calls.append(ToolCall("calculate", {"expression": f"{match[1]} / 100 * {match[2]}"}))
        elif (match := _ROOT.search(question)) is not None:
            calls.append(ToolCall("calculate", {"expression": f"sqrt({match[1]})"}))
        elif (match := _EXPRESSION.search(question)) is not None and not _is_date_or_range(match[0]):
            calls.append(ToolCall("calculate", {"expression": match[0].strip()}))
    return calls


def _is_date_or_range(text: str) -> bool:
    """"2024-05-01", "9-5", "24/7", "9/11": a hyphen or slash between bare numbers is rarely arithmetic in speech."""
    return bool(re.fullmatch(rf"\s*{_NUMBER}\s*-\s*{_NUMBER}(\s*-\s*{_NUMBER})*\s*", text)
                or re.fullmatch(rf"\s*{_NUMBER}/{_NUMBER}(/{_NUMBER})*\s*", text))


MAX_SPOKEN_EXPRESSION_CHARS = 60  # a longer expression is not said back before its result
MAX_SPOKEN_DIGITS = 15  # a longer number is said as "about 1.2346 times 10 to the power of 59"
_SCIENTIFIC = re.compile(r"^(-?)(\d)(?:\.(\d+))?e([+-]?\d+)$")


def spoken_number(result: str) -> str:
    """A result as a voice can say it: scientific notation in words, long numbers shortened."""
    text = result.strip()
    digits = text.lstrip("-").replace(".", "")
    if digits.isdigit() and len(digits) > MAX_SPOKEN_DIGITS:
        from decimal import Decimal

        text = f"{Decimal(text):.4e}"
    match = _SCIENTIFIC.match(text)
    if match is None:
        return result
    sign, whole, fraction, exponent = match.groups()
    mantissa = whole + (f".{fraction.rstrip('0')}" if fraction and fraction.rstrip("0") else "")
    return f"about {'minus ' if sign else ''}{mantissa} times 10 to the power of {int(exponent)}"


_SPOKEN = [("**", " to the power of "), ("*", " times "), ("/", " divided by "), ("+", " plus "), ("-", " minus ")]


def spoken_answer(call: ToolCall, result: str) -> str:
    """The answer to a planned call, said as it is: the model is not asked to rephrase a time or a product
    (given the result it called the same tool again and again in 1 of 2 turns, and it costs a generation)."""
    if call.name == "get_current_time":
        return f"It's {result}."
    if call.name != "calculate":  # an operator's tool: its own words (ending a sentence, to be spoken as one)
        return result if result.rstrip().endswith((".", "!", "?")) else f"{result.rstrip()}."
    expression = str(call.arguments.get("expression", "")).strip()
    result = spoken_number(result)
    if len(expression) > MAX_SPOKEN_EXPRESSION_CHARS:  # a long sum is not read back: only its answer
        return f"The answer is {result}."
    if expression.startswith("sqrt(") and expression.endswith(")"):
        return f"The square root of {expression[5:-1]} is {result}."
    if "/ 100 *" in expression:
        percent, of = expression.split("/ 100 *")
        return f"{percent.strip()} percent of {of.strip()} is {result}."
    for symbol, words in _SPOKEN:
        expression = expression.replace(symbol, words)
    return f"{' '.join(expression.split())} is {result}."
