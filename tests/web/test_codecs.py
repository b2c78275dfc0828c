"""G.711 as telephone lines and the Realtime protocol carry it."""

import numpy as np
import pytest

from vita.web.codecs import ALAW_DECODE, ULAW_DECODE, g711_decode, g711_encode

pytestmark = pytest.mark.fast


def test_the_standard_code_points_decode_to_their_levels():
    assert ULAW_DECODE[0xFF] == 0 and ULAW_DECODE[0x7F] == 0  # μ-law's two zeros
    assert ULAW_DECODE[0x00] == -32124 and ULAW_DECODE[0x80] == 32124  # its loudest
    assert ALAW_DECODE[0xD5] == 8 and ALAW_DECODE[0x55] == -8  # A-law's quietest (even bits inverted)
    assert ALAW_DECODE[0xAA] == 32256 and ALAW_DECODE[0x2A] == -32256


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_a_voice_comes_back_within_the_codecs_step(law):
    t = np.arange(8000) / 8000
    pcm = (12000 * np.sin(2 * np.pi * 440 * t) * np.linspace(0.01, 1, t.size)).astype(np.int16)
    coded = g711_encode(pcm, law)
    assert len(coded) == pcm.size  # one byte a sample
    back = g711_decode(coded, law).astype(np.int32)
    error = np.abs(back - pcm)
    assert np.all(error <= np.maximum(16, np.abs(pcm.astype(np.int32)) // 16))  # logarithmic: ~6 % of the level
    again = g711_decode(g711_encode(back.astype(np.int16), law), law)
    assert np.array_equal(again, back)  # a decoded level encodes to a code of that level


def test_each_code_is_the_nearest_level():
    for table, law in ((ULAW_DECODE, "ulaw"), (ALAW_DECODE, "alaw")):
        values = np.arange(-32768, 32768, 97, dtype=np.int32)
        chosen = table[np.frombuffer(g711_encode(values.astype(np.int16), law), dtype=np.uint8)].astype(np.int32)
        nearest = np.min(np.abs(table.astype(np.int32)[None, :] - values[:, None]), axis=1)
        assert np.array_equal(np.abs(chosen - values), nearest)
