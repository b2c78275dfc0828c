"""The per-session VAD segmenter with the real Silero ONNX model on real (Piper-spoken) speech."""

from __future__ import annotations

import numpy as np
import pytest

from tests.speech import noise, silence, spoken, voiced_span
from vita.config import Config
from vita.vad import CHUNK, SAMPLE_RATE, SileroModel, SileroVad, VadSegmenter


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return spoken("What is the capital of France?")


def segmenter() -> VadSegmenter:
    config = Config()
    return VadSegmenter.from_config(config.vad, config.vad_model_path())


def truth(audio: np.ndarray, offset: int) -> tuple[int, int]:
    """First and last clearly audible sample of `audio`, as offsets into a stream where it starts at `offset`."""
    first, last = voiced_span(audio)
    return offset + round(first * SAMPLE_RATE), offset + round(last * SAMPLE_RATE)


def run(stream: np.ndarray, step: int = 128):
    seg = segmenter()
    onsets, utterances = 0, []
    for i in range(0, len(stream), step):  # VITA's page sends 128-sample (8 ms) messages
        started, done = seg.feed(stream[i:i + step])
        onsets += started
        utterances += done
    return onsets, utterances


def test_one_utterance_covers_the_speech(speech):
    stream = np.concatenate([silence(1.0), speech, silence(1.0)])
    onsets, utterances = run(stream)
    assert onsets == 1 and len(utterances) == 1
    truth_start, truth_end = truth(speech, SAMPLE_RATE)
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
    assert run(np.concatenate([silence(2.0), noise(3.0), silence(1.0)])) == (0, [])


def test_end_of_speech_is_reported_within_half_a_second(speech):
    seg = segmenter()
    stream = np.concatenate([silence(0.5), speech, silence(2.0)])
    _, truth_end = truth(speech, int(0.5 * SAMPLE_RATE))
    for i in range(0, len(stream), 128):
        _, done = seg.feed(stream[i:i + 128])
        if done:
            detected_at = i + 128
            break
    else:
        pytest.fail("no utterance")
    assert (detected_at - truth_end) / SAMPLE_RATE < 0.5


def test_sessions_sharing_one_model_keep_their_own_state(speech):
    """One ONNX session serves every session's VAD: interleaved use gives what private models give."""
    model_path = Config().vad_model_path()
    shared = SileroModel(model_path)
    a_audio = np.concatenate([silence(0.3), speech]).astype(np.float32) / 32768
    b_audio = noise(len(a_audio) / SAMPLE_RATE, level=2000, seed=3).astype(np.float32) / 32768
    a_shared, b_shared = SileroVad(shared), SileroVad(shared)
    a_alone, b_alone = SileroVad(model_path), SileroVad(model_path)
    for i in range(0, len(a_audio) - CHUNK, CHUNK):
        a, b = a_audio[i:i + CHUNK], b_audio[i:i + CHUNK]
        assert a_shared.probability(a) == pytest.approx(a_alone.probability(a), abs=1e-6)
        assert b_shared.probability(b) == pytest.approx(b_alone.probability(b), abs=1e-6)
    assert not np.allclose(a_shared.state, b_shared.state)
