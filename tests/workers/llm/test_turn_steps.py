"""The LLM worker's turn steps, their pure part: why a turn ends before its prompt, and that only a misheard one
is asked again (a stop command Whisper was unsure of stops the reply and asks nothing)."""

from __future__ import annotations

import pytest

from vita.messages import TurnEnded, TurnRequest
from workers.llm.turn_run import TurnRun
from workers.llm.turn_steps import MISHEARD, TurnSteps

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


class Published(list):
    def publish(self, message) -> None:
        self.append(message)


def steps() -> TurnSteps:
    made = TurnSteps.__new__(TurnSteps)  # (nothing_to_answer uses only the output)
    made.out = Published()
    return made


def run_with(text: str, misheard: bool = False) -> TurnRun:
    run = TurnRun("s:1", 0.0, user_text=text)
    run.misheard = misheard
    return run


def test_a_stop_command_ends_the_turn_even_when_whisper_was_unsure_of_it():
    s = steps()
    request = TurnRequest("s", 1, unless_command=("stop",))
    assert s.nothing_to_answer(request, run_with("No, stop.", misheard=True)) == "stop command"
    (ended,) = s.out
    assert isinstance(ended, TurnEnded) and ended.reason == "stop command"


def test_misheard_words_are_asked_again_and_nothing_is_told_before_that():
    s = steps()
    assert s.nothing_to_answer(TurnRequest("s", 1), run_with("We try to move the salon trunk.", misheard=True)) \
        == MISHEARD
    assert s.out == []  # (asking again tells the turn's end itself)


def test_no_speech_ends_the_turn_and_words_go_on_to_be_answered():
    s = steps()
    assert s.nothing_to_answer(TurnRequest("s", 1), run_with("")) == "no speech"
    assert s.out[-1].reason == "no speech recognised"
    assert s.nothing_to_answer(TurnRequest("s", 2, unless_command=("stop",)), run_with("What is two plus two?")) is None


@pytest.mark.parametrize("heard", ["Reef stop.", "Great stop.", "Awesome! Wait!"])
def test_a_stop_command_whisper_misheard_the_first_word_of_is_not_asked_again(heard):
    """Over a reply's echo "Wait, stop." comes out with a wrong first word and Whisper unsure: it stopped the reply,
    and a "Sorry, I didn't catch that" started while the user goes on to their question would talk over them."""
    s = steps()
    request = TurnRequest("s", 1, unless_command=("stop", "wait"))
    assert s.nothing_to_answer(request, run_with(heard, misheard=True)) == "stop command"
    assert s.nothing_to_answer(TurnRequest("s", 2), run_with(heard, misheard=True)) == MISHEARD  # stopped nothing
    # Heard with confidence, those words are the user's: answered
    assert s.nothing_to_answer(TurnRequest("s", 3, unless_command=("stop", "wait")), run_with(heard)) is None
