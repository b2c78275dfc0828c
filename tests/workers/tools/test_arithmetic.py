"""The calculator's bounds: every intermediate value stays small, so no sum can take long (pure logic)."""

from __future__ import annotations

import pytest

from workers.tools.arithmetic import MAX_ROUND_DIGITS, ToolInputError, calculate

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

TINY = "0." + "0" * 185 + "1"


@pytest.mark.parametrize("expression, says", [
    (f"1 / {TINY} ** 1000", "too small to say"),  # a 186,000-digit quotient took seconds to turn into an int
    (f"1 divided by {TINY} to the power of 1000", "too small to say"),
    ("10 ** 999 * 10 ** 999", "too large to say"),
    ("1e999 * 1e999", "too large to say"),
    ("9 ** 9 ** 9", "powers above"),
    ("2 ** 4000", "powers above"),
    ("(1 / 0.000000001) ** 200", "too large to say"),
    ("round(1, -1000000000)", "round's second argument"),  # round(int, -N) computes 10**N
    ("round(2.5, 10 ** 9)", "round's second argument"),
    ("round(1, 0.5)", "round's second argument"),
    ("floor(1, 2)", "takes one number"),
    ("10 ** 900 // 7 ** -3", "cannot compute"),
    ("sqrt(10 ** 999)", "cannot compute sqrt"),
])
def test_huge_values_are_refused_before_they_are_built(expression, says):
    with pytest.raises(ToolInputError, match=says):
        calculate(expression)


@pytest.mark.parametrize("expression, result", [
    ("round(3.14159, 2)", "3.14"), ("round(1234, -2)", "1200"), (f"round(1, {MAX_ROUND_DIGITS})", "1"),
    ("10 ** 100", "1.000000e+100"), ("1 / 3", "0.3333333333"), ("2 ** -2", "0.25"),
    ("10 ** 70 + 0.5", "1.000000e+70"),
    ("0.5 ** 3", "0.125"), ("floor(7 / 2)", "3"), ("-2 ** 3", "-8"),
])
def test_ordinary_sums_still_come_out_right(expression, result):
    assert calculate(expression) == result


@pytest.mark.parametrize("expression, says", [("(-1) ** 0.5", "not a real number"), ("(-8) ** (1/3)", "not a real"),
                                                ("(-1) ** pi", "not a real")])
def test_complex_results_are_refused(expression, says):
    with pytest.raises(ToolInputError, match=says):
        calculate(expression)


def test_tiny_results_are_said_in_scientific_notation_not_as_zero():
    assert calculate("0.1 ** 1000") == "1.000000e-1000"
    assert calculate("1e-5 * 1e-6") == "1.000000e-11"
