from __future__ import annotations

from vita.speech_pieces import PieceSplitter, clean_for_speech


def stream(text: str, step: int = 3) -> list[str]:
    splitter = PieceSplitter()
    pieces = []
    for i in range(0, len(text), step):
        pieces += splitter.feed(text[i:i + step])
    return pieces + splitter.flush()


def test_first_piece_ends_at_first_clause_then_sentences():
    pieces = stream("Sure, the capital of France is Paris. It is lovely in spring, they say. Bye!")
    assert pieces == ["Sure,", "the capital of France is Paris.", "It is lovely in spring, they say.", "Bye!"]


def test_piece_is_released_as_soon_as_boundary_is_certain():
    splitter = PieceSplitter()
    assert splitter.feed("Well,") == []  # the comma might still be part of "Well,5"? wait for whitespace
    assert splitter.feed(" I") == ["Well,"]


def test_decimals_and_abbreviations_are_not_cut():
    assert stream("It is 3.5 km from Dr. Smith's house. Okay.") == ["It is 3.5 km from Dr. Smith's house.", "Okay."]


def test_markup_special_tokens_and_emoji_are_removed():
    assert clean_for_speech("**Hello** <end_of_turn> there 😀 `code`") == "Hello there code"


def test_run_on_reply_is_cut_at_a_space():
    pieces = stream("word " * 100)
    assert all(len(p) <= 220 for p in pieces) and len(pieces) > 1
