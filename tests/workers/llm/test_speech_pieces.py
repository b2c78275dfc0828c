from __future__ import annotations

import pytest

from workers.llm.speech_pieces import (
    PieceSplitter,
    ReplyShaper,
    SpeechClock,
    WordBudget,
    clean_for_speech,
    end_cleanly,
)

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


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


def test_word_budget_keeps_whole_sentences_and_cuts_a_long_first_one_at_a_word():
    budget = WordBudget(8)
    assert budget.take("Paris is the capital.") == ("Paris is the capital.", False)
    assert budget.take("It has many old museums and parks.") == ("", True)  # would pass 8 words: end before it
    first = WordBudget(5)
    assert first.take("One two three four five six seven, eight.") == ("One two three four five.", True)
    exact = WordBudget(3)
    assert exact.take("Yes, it is.") == ("Yes, it is.", True)


def test_word_budget_finishes_a_sentence_begun_by_an_early_first_piece():
    budget = WordBudget(6)
    assert budget.take("The capital of France") == ("The capital of France", False)
    assert budget.take("is Paris, a city of lights.") == ("is Paris.", True)


def test_first_piece_may_be_its_first_words_when_no_clause_ends_sooner():
    def pieces(text: str) -> list[str]:
        splitter = PieceSplitter(first_piece_words=4)
        out = []
        for i in range(0, len(text), 2):
            out += splitter.feed(text[i:i + 2])
        return out + splitter.flush()

    assert pieces("The capital of France is Paris.") == ["The capital of France", "is Paris."]
    assert pieces("Yes, it is. Fish swim.") == ["Yes,", "it is.", "Fish swim."]  # a clause came first
    assert pieces("It is Paris.") == ["It is Paris."]  # short replies stay whole


def test_a_reply_cut_by_the_token_limit_loses_its_possibly_split_last_word():
    assert end_cleanly("The capital of Fra") == "The capital of."
    assert end_cleanly("It is Paris.") == "It is Paris."
    assert end_cleanly("Hmm") == ""


def test_reply_shaper_stops_a_run_on_reply_at_its_word_budget():
    shaper = ReplyShaper(max_words=10, first_piece_words=4)
    said = []
    for token in ("The ", "sky ", "is ", "blue ", "today. ", "It ", "has ", "no ", "clouds ", "at ", "all. ",
                  "And ", "the ", "sun ", "shines."):
        said += shaper.feed(token)
    assert said == ["The sky is blue", "today."]  # "It has no clouds at all." would pass 10 words
    assert shaper.complete  # the worker aborts generation here
    assert shaper.feed("More words. ") == [] and shaper.finish(cut_by_token_limit=False) == []


def test_reply_shaper_ends_a_token_limited_reply_on_a_whole_word():
    shaper = ReplyShaper(max_words=25)
    assert shaper.feed("Paris is the capital of Fra") == []
    assert shaper.finish(cut_by_token_limit=True) == ["Paris is the capital of."]


def test_a_due_cut_takes_the_pending_words_at_their_last_clause():
    splitter = PieceSplitter(first_piece_words=3)
    assert splitter.feed("A rainbow is a beautiful") == ["A rainbow is"]
    assert splitter.feed(" arc, made of light and") == []  # the sentence goes on: no boundary yet
    assert splitter.cut_due() == ["a beautiful arc,"]
    assert splitter.feed(" rain. Next") == ["made of light and rain."]


def test_a_due_cut_without_a_clause_does_not_end_on_a_leading_word():
    splitter = PieceSplitter(first_piece_words=3)
    splitter.feed("Mars is a planet in the solar system of ")
    assert splitter.cut_due() == ["planet in the solar system"]  # not "... system of"
    assert splitter.flush() == ["of"]


def test_a_due_cut_needs_two_words_and_never_cuts_the_first_piece():
    splitter = PieceSplitter(first_piece_words=3)
    assert splitter.cut_due() == []  # the first piece keeps its own rule
    splitter.feed("Once upon a time there")
    assert splitter.cut_due() == []
    splitter = PieceSplitter(first_piece_words=3)
    splitter.feed("Sure, the ")
    assert splitter.cut_due() == []  # only "the", which leads into what follows


def test_speech_clock_is_due_just_before_the_handed_words_have_been_spoken():
    clock = SpeechClock(seconds_per_word=0.3, margin_s=0.4, voice_latency_s=0.1)
    assert not clock.due(0.0)  # nothing handed over: nothing can run out
    clock.handed("The capital of", 0.0)  # plays 0.1 .. 1.0
    assert not clock.due(0.55)
    assert clock.due(0.6)
    clock.handed("France is", 0.6)  # queued behind it: 1.0 .. 1.6
    assert not clock.due(1.1)
    assert clock.due(1.2)
    clock.handed("Paris.", 5.0)  # the voice had fallen silent: it starts afresh
    assert clock.ends_at == pytest.approx(5.4)


def test_shaper_cuts_due_pieces_within_its_word_budget():
    shaper = ReplyShaper(max_words=5, first_piece_words=2)
    assert shaper.feed("One two three four five six seven ") == ["One two"]
    assert shaper.cut_due() == ["three four five."]  # the budget's last words, ended cleanly
    assert shaper.complete


def test_a_due_cut_goes_past_a_clause_too_short_to_be_a_piece():
    splitter = PieceSplitter(first_piece_words=3)
    assert splitter.feed("Once upon a time") == ["Once upon a"]
    assert splitter.feed(", there was a brave little dog ") == []
    assert splitter.cut_due() == ["time, there was a brave little dog"]  # "time," alone is one word


def test_a_first_piece_that_waited_long_enough_goes_with_two_words():
    splitter = PieceSplitter(first_piece_words=3)
    assert splitter.feed("The capital ") == []  # two words: the rule waits for a third
    assert splitter.cut_due() == []  # a voice running out is about later pieces
    assert splitter.cut_due(first=True) == ["The capital"]
    splitter = PieceSplitter(first_piece_words=3)
    splitter.feed("It ")
    assert splitter.cut_due(first=True) == []  # one word is too little to start with


def test_a_reply_cut_by_its_word_budget_does_not_end_on_a_leading_word():
    budget = WordBudget(max_words=5)
    assert budget.take("A rainbow is") == ("A rainbow is", False)  # a piece cut early: no sentence end
    assert budget.take("made of light and rain.") == ("made.", True)  # two words fit: "made of." would dangle


def test_a_budget_cut_that_leaves_only_leading_words_says_nothing_more():
    budget = WordBudget(max_words=4)
    assert budget.take("Mars is a") == ("Mars is a", False)
    assert budget.take("the red planet.") == ("", True)  # "the." alone would dangle
