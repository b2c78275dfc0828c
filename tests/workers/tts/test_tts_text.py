from __future__ import annotations

import pytest

from workers.tts.text import normalize_for_speech, number_to_words

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


@pytest.mark.parametrize(("text", "spoken"), [
    ("3.5 km", "three point five kilometers"),
    ("$20", "twenty dollars"),
    ("$3.50", "three dollars and fifty cents"),
    ("Dr. Smith", "Doctor Smith"),
    ("45%", "forty-five percent"),
    ("1 kg", "one kilogram"),
    ("the 21st time", "the twenty-first time"),
    ("at 10:05", "at ten oh five"),
    ("in 1999", "in nineteen ninety-nine"),
    ("1,200 people", "one thousand two hundred people"),
    ("salt & pepper", "salt and pepper"),
])
def test_spoken_as_words(text, spoken):
    assert normalize_for_speech(text) == spoken


def test_number_words():
    assert number_to_words(0) == "zero"
    assert number_to_words(115) == "one hundred fifteen"
    assert number_to_words(2_000_001) == "two million one"
