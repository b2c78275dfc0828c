"""Text normalization for the voice, in one place: numbers, money, units, symbols, abbreviations -> words.

Piper's espeak front end reads some of these itself, but inconsistently ("$20" as "dollar twenty",
"km" letter by letter); spelling them out here makes every voice say them the same way.
"""

from __future__ import annotations

import re

from workers.llm.speech_pieces import ABBREVIATIONS

_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))


def number_to_words(n: int) -> str:
    if n < 0:
        return "minus " + number_to_words(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {number_to_words(rest)}" if rest else "")
    for value, name in _SCALES:
        if n >= value:
            head, rest = divmod(n, value)
            return f"{number_to_words(head)} {name}" + (f" {number_to_words(rest)}" if rest else "")
    raise AssertionError("unreachable")


def _digits(s: str) -> str:
    return " ".join(_ONES[int(d)] for d in s)


def _decimal(whole: str, frac: str | None) -> str:
    words = number_to_words(int(whole.replace(",", "")))
    return f"{words} point {_digits(frac)}" if frac else words


def _plural(word: str, amount: str) -> str:
    return word if amount in ("1", "1.0") else word + "s"


_UNITS = {
    "km": "kilometer",
    "m": "meter",
    "cm": "centimeter",
    "mm": "millimeter",
    "kg": "kilogram",
    "mg": "milligram",
    "mi": "mile",
    "lb": "pound",
    "lbs": "pound",
    "ft": "foot",
    "ml": "milliliter",
    "hr": "hour",
    "min": "minute",
    "sec": "second",
    "ms": "millisecond",
    "kb": "kilobyte",
    "mb": "megabyte",
    "gb": "gigabyte",
    "tb": "terabyte",
    "ghz": "gigahertz",
    "mhz": "megahertz",
    "khz": "kilohertz",
    "hz": "hertz",
    "mph": "miles per hour",
    "km/h": "kilometers per hour",
    "kph": "kilometers per hour",
    "°c": "degrees Celsius",
    "°f": "degrees Fahrenheit",
    "%": "percent",
}
_IRREGULAR_PLURALS = {"foot": "feet"}
_INVARIANT = {
    "miles per hour",
    "kilometers per hour",
    "degrees Celsius",
    "degrees Fahrenheit",
    "percent",
    "hertz",
    "gigahertz",
    "megahertz",
    "kilohertz",
}
_CURRENCIES = {"$": ("dollar", "cent"), "€": ("euro", "cent"), "£": ("pound", "penny")}
_SYMBOLS = {
    "&": " and ",
    "+": " plus ",
    "=": " equals ",
    "@": " at ",
    "#": " number ",
    "/": " slash ",
    "×": " times ",
    "°": " degrees ",
}

_NUM = r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"
_MONEY = re.compile(r"([$€£])\s?" + _NUM + r"(?:\s?(million|billion|thousand))?")
_UNIT = re.compile(
    _NUM + r"\s?(" + "|".join(sorted((re.escape(u) for u in _UNITS), key=len, reverse=True)) + r")(?![\w])",
    re.IGNORECASE,
)
_ORDINAL = re.compile(r"\b(\d+)(st|nd|rd|th)\b")
_TIME = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b")
_YEAR = re.compile(r"\b(1[1-9]\d\d|20\d\d)\b")
_PLAIN = re.compile(r"(?<![\w.])" + _NUM + r"(?![\w])")


def _money(m: re.Match) -> str:
    unit, sub = _CURRENCIES[m.group(1)]
    whole, frac, scale = m.group(2).replace(",", ""), m.group(3), m.group(4)
    if scale:
        amount = _decimal(whole, frac)
        return f"{amount} {scale} {unit}s"
    text = f"{number_to_words(int(whole))} {_plural(unit, whole)}"
    if frac:
        cents = int((frac + "0")[:2])
        if cents:
            subunit = "pence" if sub == "penny" and cents != 1 else _plural(sub, str(cents))
            text += f" and {number_to_words(cents)} {subunit}"
    return text


def _unit(m: re.Match) -> str:
    whole, frac, unit = m.group(1), m.group(2), _UNITS[m.group(3).lower()]
    amount = f"{whole}.{frac}" if frac else whole
    if unit not in _INVARIANT and amount not in ("1",):
        unit = _IRREGULAR_PLURALS.get(unit, unit + "s")
    return f"{_decimal(whole, frac)} {unit}"


def _ordinal(m: re.Match) -> str:
    words = number_to_words(int(m.group(1)))
    irregular = {
        "one": "first",
        "two": "second",
        "three": "third",
        "five": "fifth",
        "eight": "eighth",
        "nine": "ninth",
        "twelve": "twelfth",
    }
    head, _, last = words.rpartition(" ")
    stem_sep = "-" if "-" in last else ""
    if stem_sep:
        head2, _, last = last.rpartition("-")
        head = f"{head} {head2}".strip()
    if last in irregular:
        last = irregular[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return f"{head}{stem_sep or ' '}{last}".strip() if head else last


def _time(m: re.Match) -> str:
    hours, minutes = int(m.group(1)), int(m.group(2))
    if minutes == 0:
        return f"{number_to_words(hours)} o'clock"
    tail = f"oh {number_to_words(minutes)}" if minutes < 10 else number_to_words(minutes)
    return f"{number_to_words(hours)} {tail}"


def _year(m: re.Match) -> str:
    year = int(m.group(1))
    head, tail = divmod(year, 100)
    if year % 1000 < 10 and year >= 2000:
        return number_to_words(year)
    return f"{number_to_words(head)} " + (
        "hundred" if tail == 0 else (f"oh {number_to_words(tail)}" if tail < 10 else number_to_words(tail))
    )


def normalize_for_speech(text: str) -> str:
    for abbr, full in ABBREVIATIONS.items():
        text = re.sub(r"(?<![\w.])" + re.escape(abbr) + r"(?=\s|$)", full, text)
    text = _TIME.sub(_time, text)
    text = _MONEY.sub(_money, text)
    text = _UNIT.sub(_unit, text)
    text = _ORDINAL.sub(_ordinal, text)
    text = _YEAR.sub(_year, text)
    text = _PLAIN.sub(lambda m: _decimal(m.group(1), m.group(2)), text)
    for symbol, word in _SYMBOLS.items():
        text = text.replace(symbol, word)
    return re.sub(r"\s+", " ", text).strip()
