"""The session's ears with the real Silero model: resampling, events in the order they happened, reset."""

from __future__ import annotations

import numpy as np
import pytest

from tests.speech import silence, spoken
from vita.config import Config
from vita.listener import SpeechListener
from vita.turn_taking import SpeechDropped, SpeechStarted, UtteranceEnded
from vita.vad import VadSegmenter


def listener() -> SpeechListener:
    config = Config()
    return SpeechListener(VadSegmenter.from_config(config.vad, config.vad_model_path()))


def hear_all(target: SpeechListener, audio: np.ndarray, rate: int, step: int, arrived: float = 100.0) -> list:
    events = []
    for i in range(0, len(audio), step):
        events += target.hear(audio[i:i + step], rate, arrived + i / rate, now=arrived + i / rate)
    return events


def test_a_short_burst_in_one_message_is_started_then_dropped_in_that_order():
    """One message holding a cough's whole life: the machine must see its start before its drop (the other way
    round it would think the user started speaking and never stopped)."""
    burst = spoken("Please tell me a joke about cats.")[3200:5600]  # 150 ms out of the middle of a word
    audio = np.concatenate([silence(0.5), burst, silence(1.0)])
    events = listener().hear(audio, 16000, arrived=10.0, now=10.0)
    assert [type(e) for e in events] == [SpeechStarted, SpeechDropped]


@pytest.mark.parametrize("rate", [16000, 48000, 44100])
def test_speech_at_any_rate_becomes_one_utterance(rate):
    speech = spoken("What is the capital of France?", rate)
    events = hear_all(listener(), np.concatenate([silence(1.0, rate), speech, silence(1.0, rate)]), rate, rate // 50)
    ended = [e for e in events if isinstance(e, UtteranceEnded)]
    assert sum(isinstance(e, SpeechStarted) for e in events) == 1 and len(ended) == 1
    heard = ended[0].speech
    assert abs(heard.details["start_s"] - 1.0) < 0.4
    # 16 kHz audio of about the speech's length is handed on, whatever the input rate was.
    assert abs(len(heard.pcm) / 2 / 16000 - len(speech) / rate) < 0.6
    # On the arrival clock (the stream started arriving at 100.0): spoken from about 1 s in, for about its length.
    assert abs(heard.started_at - 101.0) < 0.4 and heard.started_at < heard.ended_at
    assert abs((heard.ended_at - heard.started_at) - len(speech) / rate) < 0.6


def test_reset_forgets_half_heard_speech():
    target = listener()
    speech = spoken("Please tell me a joke about cats.")
    before = hear_all(target, np.concatenate([silence(0.5), speech[: len(speech) // 2]]), 16000, 512)
    assert any(isinstance(e, SpeechStarted) for e in before)
    target.reset()
    after = hear_all(target, silence(1.5), 16000, 512)
    assert not any(isinstance(e, UtteranceEnded) for e in after)
