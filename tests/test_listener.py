"""The per-session VAD thread with the real Silero model: resampling, events, reset, idle ticks, stopping."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.speech import silence, spoken
from vita.config import Config
from vita.listener import ListenerEvents, SpeechListener
from vita.vad import VadSegmenter


class Recorder:
    def __init__(self):
        self.starts, self.utterances, self.ticks, self.dropped = 0, [], 0, 0
        self.done = threading.Event()

    def events(self) -> ListenerEvents:
        def utterance(heard):
            self.utterances.append(heard)
            self.done.set()

        def start():
            self.starts += 1

        def tick():
            self.ticks += 1

        def dropped():
            self.dropped += 1

        return ListenerEvents(start, dropped, utterance, tick)


def listener(recorder: Recorder, tick_s: float = 1.0, max_buffered: int = 2000) -> SpeechListener:
    config = Config()
    seg = VadSegmenter.from_config(config.vad, config.vad_model_path())
    return SpeechListener("test", seg, recorder.events(), max_buffered=max_buffered, tick_s=tick_s)


def test_a_short_burst_is_reported_then_dropped():
    recorder = Recorder()
    target = listener(recorder)
    target.start()
    try:
        burst = spoken("Please tell me a joke about cats.")[3200:5600]  # 150 ms out of the middle of a word
        push_all(target, np.concatenate([silence(0.5), burst, silence(1.0)]), 16000, 512)
        deadline = threading.Event()
        deadline.wait(1.0)
        assert recorder.starts == 1 and recorder.dropped == 1 and not recorder.utterances
    finally:
        target.stop()


def push_all(target: SpeechListener, audio: np.ndarray, rate: int, step: int) -> None:
    for i in range(0, len(audio), step):
        assert target.push(audio[i:i + step], rate)


@pytest.mark.parametrize("rate", [16000, 48000, 44100])
def test_speech_at_any_rate_becomes_one_utterance(rate):
    recorder = Recorder()
    target = listener(recorder)
    target.start()
    try:
        speech = spoken("What is the capital of France?", rate)
        push_all(target, np.concatenate([silence(1.0, rate), speech, silence(1.0, rate)]), rate, rate // 50)
        assert recorder.done.wait(10)
        (heard,) = recorder.utterances
        assert recorder.starts == 1
        assert abs(heard.utterance.start_sample / 16000 - 1.0) < 0.4
        # 16 kHz audio of about the speech's length is handed on, whatever the input rate was.
        assert abs(len(heard.utterance.pcm) / 2 / 16000 - len(speech) / rate) < 0.6
        assert heard.started_at < heard.ended_at
    finally:
        target.stop()
        target.join(2)
    assert not target.thread.is_alive()


def test_reset_forgets_half_heard_speech():
    recorder = Recorder()
    target = listener(recorder)
    target.start()
    try:
        speech = spoken("Please tell me a joke about cats.")
        push_all(target, np.concatenate([silence(0.5), speech[: len(speech) // 2]]), 16000, 512)
        target.reset()
        push_all(target, silence(1.0), 16000, 512)
        assert not recorder.done.wait(1.5)
        assert recorder.utterances == []
    finally:
        target.stop()


def test_idle_thread_ticks_and_stops_promptly():
    recorder = Recorder()
    target = listener(recorder, tick_s=0.1)
    target.start()
    threading.Event().wait(0.55)
    target.stop()
    target.join(1)
    assert not target.thread.is_alive()
    assert 3 <= recorder.ticks <= 7


def test_a_full_buffer_drops_audio_instead_of_blocking():
    recorder = Recorder()
    target = listener(recorder, max_buffered=4)  # never started: nothing drains it
    results = [target.push(silence(0.01), 16000) for _ in range(6)]
    assert results == [True] * 4 + [False] * 2


def test_ticks_keep_coming_while_room_noise_streams_in():
    """The idle timeout is checked on ticks: a microphone that never stops sending must not hold them off."""
    from tests.speech import noise

    recorder = Recorder()
    target = listener(recorder, tick_s=0.1)
    target.start()
    try:
        room = noise(2.0, level=100)
        started = threading.Event()
        for i in range(0, len(room), 512):  # real-time pace: 32 ms frames
            assert target.push(room[i:i + 512], 16000)
            started.wait(0.032)
        assert recorder.ticks >= 10 and not recorder.utterances
    finally:
        target.stop()
