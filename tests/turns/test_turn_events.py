"""One request said in two parts: a silence between them, at most 0.3 s."""

from __future__ import annotations

import numpy as np
import pytest

from vita.turns.turn_events import Speech, joined


def part(start: int, end: int) -> Speech:
    """Speech of the stream's samples [start, end): each sample's value is its position (mod 2**15)."""
    pcm = (np.arange(start, end) % 32768).astype(np.int16).tobytes()
    return Speech(pcm, start / 16000, end / 16000, {}, (start, end, end))


@pytest.mark.fast
def test_parts_apart_get_the_silence_between_them_capped():
    near = np.frombuffer(joined(part(0, 4000), part(5600, 8000)).pcm, np.int16)
    assert len(near) == 4000 + 1600 + 2400 and not near[4000:5600].any()
    far = np.frombuffer(joined(part(0, 4000), part(40000, 42000)).pcm, np.int16)
    assert len(far) == 4000 + 4800 + 2000  # 0.3 s of silence, whatever the gap
