"""The Realtime push-to-talk buffer (vita/web/realtime/audio_buffer.py): one resampled stream, its commit, and the
cap on what waits for one response. No model."""

from __future__ import annotations

import numpy as np
import pytest

from vita.web.realtime.audio_buffer import PushToTalkBuffer
from vita.web.realtime.protocol import ProtocolError

pytestmark = pytest.mark.fast


def tone(seconds: float, rate: int = 24000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (3000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def test_appends_are_one_stream_at_16_khz_and_a_commit_takes_them_all():
    buffer = PushToTalkBuffer(max_audio_s=30)
    for _ in range(10):
        buffer.append(tone(0.1), 24000)
    speech = buffer.commit()
    assert len(speech.pcm) // 2 == pytest.approx(16000, abs=32)  # 1 s, nothing held back by the resampler
    assert speech.details["audio_s"] == pytest.approx(1.0, abs=0.01)
    assert buffer.chunks == [] and buffer.waiting == len(speech.pcm) // 2  # counted until a response takes it
    buffer.release(len(speech.pcm) // 2)
    assert buffer.waiting == 0


def test_a_commit_under_100_ms_is_refused_and_a_clear_forgets_the_buffer():
    buffer = PushToTalkBuffer(max_audio_s=30)
    buffer.append(tone(0.05), 24000)
    with pytest.raises(ProtocolError) as refused:
        buffer.commit()
    assert refused.value.code == "input_audio_buffer_commit_empty"
    buffer.clear()
    assert buffer.waiting == 0 and buffer.chunks == [] and buffer.resampler is None


def test_what_waits_for_one_response_is_held_to_the_cap():
    buffer = PushToTalkBuffer(max_audio_s=2)
    buffer.hold(16000)  # an audio item of 1 s waits already
    buffer.room_for(1.0)
    with pytest.raises(ProtocolError) as refused:
        buffer.room_for(1.5)
    assert refused.value.code == "input_audio_buffer_full" and "1.00 s do already" in refused.value.message
