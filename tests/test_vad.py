"""The per-session VAD segmenter with the real Silero ONNX model on real (Piper-spoken) speech."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from vita.config import Config
from vita.vad import SAMPLE_RATE, SileroVad, VadSegmenter


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    from workers.tts_worker import PiperEngine

    engine = PiperEngine(Config().models_path() / "piper" / "joe-us")
    audio = np.concatenate(list(engine.synthesize("What is the capital of France?")))
    return soxr.resample(audio, engine.sample_rate, SAMPLE_RATE).astype(np.int16)


def segmenter() -> VadSegmenter:
    v = Config().vad
    vad = SileroVad(Config().models_path() / "silero-vad" / "silero_vad.onnx")
    return VadSegmenter(vad, v.start_threshold, v.end_threshold, v.end_silence_ms, v.pre_roll_ms,
                        v.min_utterance_ms, v.max_utterance_s)


def voiced_span(audio: np.ndarray, offset: int) -> tuple[int, int]:
    loud = np.flatnonzero(np.abs(audio.astype(np.int32)) > 800)
    return offset + loud[0], offset + loud[-1]


def run(stream: np.ndarray, step: int = 128):
    seg = segmenter()
    onsets, utterances = 0, []
    for i in range(0, len(stream), step):  # VITA's page sends 128-sample (8 ms) messages
        started, done = seg.feed(stream[i:i + step])
        onsets += started
        utterances += done
    return onsets, utterances


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SAMPLE_RATE), dtype=np.int16)


def test_one_utterance_covers_the_speech(speech):
    stream = np.concatenate([silence(1.0), speech, silence(1.0)])
    onsets, utterances = run(stream)
    assert onsets == 1 and len(utterances) == 1
    truth_start, truth_end = voiced_span(speech, SAMPLE_RATE)
    u = utterances[0]
    assert u.start_sample <= truth_start and truth_start - u.start_sample < 0.3 * SAMPLE_RATE + 512
    assert abs(u.speech_end_sample - truth_end) < 0.3 * SAMPLE_RATE
    assert u.end_sample >= truth_end  # the audio handed on contains the whole utterance
    assert len(u.pcm) // 2 == u.end_sample - u.start_sample


def test_two_utterances_one_second_apart(speech):
    stream = np.concatenate([silence(0.5), speech, silence(1.0), speech, silence(1.0)])
    onsets, utterances = run(stream)
    assert onsets == 2 and len(utterances) == 2


def test_silence_and_noise_yield_nothing():
    rng = np.random.default_rng(0)
    noise = (rng.normal(0, 300, 3 * SAMPLE_RATE)).astype(np.int16)
    assert run(np.concatenate([silence(2.0), noise, silence(1.0)])) == (0, [])


def test_end_of_speech_is_reported_within_half_a_second(speech):
    seg = segmenter()
    stream = np.concatenate([silence(0.5), speech, silence(2.0)])
    _, truth_end = voiced_span(speech, int(0.5 * SAMPLE_RATE))
    for i in range(0, len(stream), 128):
        _, done = seg.feed(stream[i:i + 128])
        if done:
            detected_at = i + 128
            break
    else:
        pytest.fail("no utterance")
    assert (detected_at - truth_end) / SAMPLE_RATE < 0.5
