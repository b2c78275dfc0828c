"""A session's camera frames: the last few kept, sampled across an utterance."""

from __future__ import annotations

import pytest

from vita.messages import Picture
from vita.turns.camera import FrameBuffer

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def test_buffer_keeps_the_last_eight_and_clears_after_a_gap():
    buffer = FrameBuffer(size=8, gap_s=1.0)
    for i in range(10):
        buffer.add(Picture(bytes([i])), i * 0.5)
    assert len(buffer) == 8
    buffer.add(Picture(b"late"), 4.5 + 1.5)  # the camera paused for 1.5 s
    assert len(buffer) == 1


def test_sampling_spreads_up_to_four_frames_over_the_utterance():
    buffer = FrameBuffer()
    for i in range(8):
        buffer.add(Picture(bytes([i])), 10 + i * 0.5)  # frames at 10.0 … 13.5
    picked = buffer.sample(11.0, 13.5, 4)
    assert len(picked) == 4
    assert picked[0].image[0] < picked[-1].image[0] and picked[-1].image == bytes([7])
    assert buffer.sample(11.0, 11.2, 4)  # a short utterance still gets the frames around it


def test_no_frames_from_a_camera_that_stopped_long_ago():
    buffer = FrameBuffer()
    buffer.add(Picture(b"old"), 1.0)
    assert buffer.sample(20.0, 22.0) == ()
