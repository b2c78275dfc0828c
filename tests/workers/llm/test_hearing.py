"""The LLM worker's hearing, its pure part: when a second model's words disagree with Whisper's."""

from __future__ import annotations

import asyncio
import logging

import pytest

from vita.config import Config
from vita.messages import TurnRequest
from workers.llm.engines.asr import MisheardRule, Transcription
from workers.llm.hearing import Hearing
from workers.llm.turn_run import TurnRun

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


class HeardAs:
    """A second model that hears the given words (a fake for this unit test of the rule's inputs)."""

    def __init__(self, text: str):
        self.text = text

    def hear(self, _pcm: bytes, _rate: int) -> Transcription:
        return Transcription(self.text, -0.3)


class Kit:
    def __init__(self, second: str):
        self.second_asr = HeardAs(second)
        self.misheard_rule = MisheardRule.from_config(Config().asr)

    async def in_thread(self, fn, *args):
        return fn(*args)


def disagree(heard: str, second: str, unless_command: tuple[str, ...]) -> tuple[bool, float]:
    hearing = Hearing(Kit(second), None, logging.getLogger("test"), lambda _sid: None)
    run = TurnRun("s:1", 0.0)
    request = TurnRequest("s", 1, audio=b"\0\0" * 1600, unless_command=unless_command)
    said = asyncio.run(hearing.disagree(request, run, Transcription(heard, -0.8)))
    return said, run.timings["asr_disagreement"]


def test_speech_that_stopped_a_reply_is_compared_by_the_request_after_its_command():
    """Over the echo the two models hear "Wait, stop." each its own way; the question after it decides."""
    heard, second = "Wait, stop. Can Penguin's fly.", "Weighed up, can penguins fly?"
    assert disagree(heard, second, ("stop", "wait")) == (False, pytest.approx(1 / 3, abs=0.001))
    assert disagree(heard, second, ())[0]  # the whole: most of the words differ
    assert disagree("Wait, stop. Can penguins fly?", "Wait, stop. Can pigeons cry?", ("stop", "wait"))[0]


def test_the_words_compared_are_counted_as_compared_numbers_as_digits():
    """"twenty five" is one word compared ("25"): counted as written, the other's window took in "what" too."""
    assert disagree("Stop. What is twenty five plus two?", "Stop, what is 25 plus 2?", ("stop",)) == (False, 0.0)


def test_speech_that_stopped_a_reply_is_judged_by_whispers_confidence_in_the_request_after_its_command():
    """Over the echo the command is where Whisper is least sure ("Mate stop."): the request alone is judged."""
    tokens = ((" Mate", -3.0), (" stop", -0.5), (".", -1.0), (" Is", -0.3), (" the", -0.1), (" earth", -0.6),
              (" round", -0.2), ("?", -0.4), ("", -0.2))
    heard = Transcription("Mate stop. Is the earth round?", -0.92, tokens=tokens)
    run = TurnRun("s:1", 0.0)
    judged = Hearing.request_heard(TurnRequest("s", 1, unless_command=("stop", "wait")), run, heard)
    assert judged.avg_logprob == pytest.approx(-0.3) and judged.text == heard.text
    assert run.timings["asr_request_logprob"] == pytest.approx(-0.3)
    rule = MisheardRule.from_config(Config().asr)
    assert rule.unsure(heard) and not rule.unsure(judged)
    # not after a reply, or no command opening it: the whole is judged
    assert Hearing.request_heard(TurnRequest("s", 1), TurnRun("s:1", 0.0), heard) is heard
    plain = Transcription("Is the earth round?", -0.92, tokens=tokens[3:])
    assert Hearing.request_heard(TurnRequest("s", 1, unless_command=("stop",)), TurnRun("s:1", 0.0), plain) is plain
