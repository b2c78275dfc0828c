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


def test_without_a_tokenizer_a_character_other_than_a_letter_counts_as_a_token():
    cost = TextCost(None)
    assert cost("plain text") == len("plain text")
    assert cost("日本語") == 3 * 4
    assert cost("1234567890") == 10 * 4  # digits: a token each, at most
    assert TextCost(Config().state_path() / "no-such-tokenizer.json")("abc") == 3


def test_a_long_or_capped_text_is_not_read_past_what_it_can_cost():
    cost = TextCost(local_tokenizer_file(Config()))
    assert cost(chr(0xF0000) * 5000, cap=1200) == 1200  # (as long as the cap: not read at all)
    assert cost(chr(0xF0000) * 100, cap=1200) == 1200
    huge = "word " * 10_000  # past TOKENIZED_MOST: the rest priced by its bytes, four tokens a byte at most
    assert cost(huge) >= len(huge)
    assert cost("\ud800 lone surrogate") > 0  # not UTF-8: priced by its bytes, never an error


def test_at_most_so_many_characters_of_an_events_texts_are_tokenized_the_rest_priced_by_their_bytes():
    from vita.text_cost import TOKENIZED_MOST

    cost = TextCost(local_tokenizer_file(Config()))
    outputs = [("word " * 1600, None)] * 4  # 32,000 characters: half tokenized, half priced by bytes
    assert cost.of(outputs) == 2 * 8000 + 2 * 8000 * 4
    assert TOKENIZED_MOST == 16_000
    assert cost.of([(chr(0xF0000) * 100, 1200.0), ("x" * 5000, 1200.0)]) == 2 * 1200
