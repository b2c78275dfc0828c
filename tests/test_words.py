"""How a transcript's words are compared: numbers as Whisper writes them, and the reply's own words heard back."""

from __future__ import annotations

import pytest

from vita.words import after_stop_command, echoes, only_asks_to_stop, said_words

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(("said", "written"), [
    ("What is eight times eight?", "What is 8x8?"), ("What is twenty five plus seven?", "What is 25 + 7?"),
    ("Two hundred and one dogs.", "201 dogs"), ("I have one thousand cats.", "I have 1,000 cats."),
    ("What is twenty percent of fifty?", "What is 20% of 50?"), ("It’s nine o'clock.", "It's 9 o'clock"),
])
def test_a_number_written_in_words_or_digits_is_the_same_words(said, written):
    assert said_words(said) == said_words(written)


@pytest.mark.parametrize(("text", "expected"), [
    ("one and two", ["1", "and", "2"]), ("five six seven", ["5", "6", "7"]), ("Add 34.56 and 789.",
                                                                              ["add", "34.56", "and", "789"]),
    ("a hundred", ["a", "hundred"]), ("The end.", ["the", "end"]), ("ten five", ["10", "5"]),
    ("twenty, one", ["20", "1"]), ("zero zero seven", ["0", "0", "7"]), ("2019,2020", ["2019", "2020"]),
    ("one thousand two hundred thirty four", ["1234"]),
])
def test_numbers_are_joined_only_where_they_are_one_number(text, expected):
    assert said_words(text) == expected


@pytest.mark.parametrize(("heard", "said", "echo"), [
    ("2 plus 2 equals 4.", "Two plus two equals four.", True),  # the reply's numbers heard back in digits
    ("There are twelve months in a year.", "There are 12 months in a year.", True),
    ("What is 2 plus 2?", "Two plus two equals four.", False),  # the question again, in its own order
    ("And 3 plus 3?", "Two plus two equals four.", False),
    ("5pm?", "The meeting is at 5pm.", False),  # one word of the reply's: may well be the user's own
    ("2 plus 2 equals 4.", "Two plus two equals four — easy.", True),  # (a dash, a typographic apostrophe)
    ("It's 20 degrees.", "It’s twenty degrees.", True),
    ("Die Hauptstadt ist Berlin.", "Die Hauptstadt ist Berlin.", True),
    ("Столица Франции Париж.", "Столица Франции — Париж.", True),  # another script's words as they are
])
def test_the_replys_echo_is_heard_whichever_way_its_numbers_are_written(heard, said, echo):
    assert echoes(heard, (said,)) is echo


STOP_PHRASES = ("stop", "wait", "hold on", "never mind")


@pytest.mark.parametrize(("text", "asked"), [
    ("Wait, stop. What animal says moo?", "What animal says moo?"),
    ("We stop. What animal says moo?", "What animal says moo?"),  # "Wait," misheard over the echo
    ("So wait, stop. Good morning.", "Good morning."), ("Stop, do cats bark?", "do cats bark?"),
    ("Stop. Hold on, please. How far is the moon?", "How far is the moon?"),
    ("Wait a second, what is the capital of Japan?", "what is the capital of Japan?"),
    ("Wait \u2014 what about Spain?", "what about Spain?"), ("Stop\u2026 what about Spain?", "what about Spain?"),
    # run on, unpunctuated, over a reply's echo (the command misheard, "Wheat stop", or heard)
    ("Wheat stop is water wet.", "is water wet."), ("Wait stop do cats bark", "do cats bark"),
    ("So wait stop how far is the moon", "how far is the moon"),
    ("Hold on what is two plus two", "what is two plus two"),
    ("Wait and stop. Is water wet?", "Is water wet?"),
])
def test_the_request_after_a_stop_command_is_what_follows_it(text, asked):
    assert after_stop_command(text, STOP_PHRASES) == asked


@pytest.mark.parametrize("text", [
    "What is stop motion?", "Stop the timer, please.", "No, I mean Spain.", "Okay so, what about Spain?",
    "Stop.", "Wait, stop.", "Never mind the weather, where is Paris?", "",
    "Stop that noise.", "Stop the timer please", "Don't stop the music please", "Wait for me please", "Bus stop where?",
    "Please stop talking about the weather", "Please cancel all my timers", "Please wait for me", "Bus stop near me",
])
def test_speech_without_a_stop_command_before_more_words_is_read_whole(text):
    assert after_stop_command(text, STOP_PHRASES) == text.strip()


def test_and_joins_two_stop_phrases_but_makes_no_question_a_command():
    assert only_asks_to_stop("Wait and stop.", STOP_PHRASES)
    for asked in ("Wait, and you?", "Stop, and now?", "Wait, and that one?"):
        assert not only_asks_to_stop(asked, STOP_PHRASES), asked


def test_a_stop_command_may_open_with_a_misheard_word_only_when_asked():
    assert not only_asks_to_stop("Reef stop.", STOP_PHRASES)
    assert only_asks_to_stop("Reef stop.", STOP_PHRASES, first_word_misheard=True)
    assert only_asks_to_stop("Stop, please.", STOP_PHRASES, first_word_misheard=True)
    for request in ("Stop the timer.", "Bus stop where?", "Stop.  Where is Paris?", "Reef", ""):
        assert not only_asks_to_stop(request, STOP_PHRASES, first_word_misheard=True), request
    # A first word that turns the command round is the user's own
    for turned in ("Don't stop.", "Don\u2019t stop.", "Why wait?", "Can't wait!", "Never stop."):
        assert not only_asks_to_stop(turned, STOP_PHRASES, first_word_misheard=True), turned


@pytest.mark.parametrize("heard", ["Sorry. I did catch that. Did you say that?",
                                   "Sorry, I didn't mention that. Did he say it again?"])
def test_over_the_echo_a_stock_phrase_heard_wrong_letter_by_letter_is_its_echo(heard):
    """"Sorry, I didn't catch that. Could you say it again?" is ours alone: whatever the speech's level, speech over
    its echo alike it letter by letter is that echo (two such were answered); a reply of the model's own is not
    judged so for speech at the user's level ("See you later." after "Bye! Talk to you later." is theirs)."""
    asked_again = "Sorry, I didn't catch that. Could you say it again?"
    assert echoes(heard, (asked_again,), over_echo=True)
    assert not echoes(heard, (asked_again,), over_echo=False)  # (not over its echo: the user's own)
    assert not echoes(heard, ("Sorry, I can't find that. Could you name the city?",), over_echo=True)
    assert not echoes("See you later.", ("Bye! Talk to you later.",), over_echo=True)
