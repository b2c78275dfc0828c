"""What a text costs the engine, in the text budget's characters (the bundled model's real tokenizer; pure)."""

from __future__ import annotations

import pytest

from vita.config import Config
from vita.text_cost import TextCost, local_tokenizer_file

pytestmark = pytest.mark.fast


def test_english_costs_its_length_and_dense_characters_their_tokens():
    cost = TextCost(local_tokenizer_file(Config()))
    english = "How many widgets do you have in stock today? " * 20
    assert cost(english) == len(english)  # (four characters a token or more: its length)
    assert cost(chr(0xF0000) * 100) == 100 * 4 * 4  # four tokens a character, four budget characters a token
    assert cost("") == 0


def test_without_a_tokenizer_a_character_outside_ascii_counts_as_a_token():
    cost = TextCost(None)
    assert cost("plain text") == len("plain text")
    assert cost("日本語") == pytest.approx(3 * 4 + 3 / 4 * 4)
    assert TextCost(Config().state_path() / "no-such-tokenizer.json")("abc") == 3
