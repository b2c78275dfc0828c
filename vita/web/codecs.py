"""Audio codecs the doors share: G.711 μ-law and A-law (8 kHz, one byte a sample), as the Realtime protocol's
``audio/pcmu`` / ``audio/pcma`` and a telephone line carry them.

Table-driven both ways: decoding is one lookup per byte; encoding looks every 16-bit value up in a 64 KiB table of
its nearest code, built once. (Opus needs PyAV and lives with the WebRTC track that uses it,
``vita/web/webrtc/opus_track.py``.)
"""

from __future__ import annotations

from typing import Literal

import numpy as np

G711_RATE = 8000
Law = Literal["ulaw", "alaw"]


def _ulaw_table() -> np.ndarray:
    codes = ~np.arange(256, dtype=np.uint8)
    sign, exponent, mantissa = codes & 0x80, (codes >> 4) & 0x07, codes & 0x0F
    magnitude = ((mantissa.astype(np.int32) << 3) + 0x84) << exponent
    return np.where(sign, 0x84 - magnitude, magnitude - 0x84).astype(np.int16)


def _alaw_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.uint8) ^ 0x55
    sign, exponent, mantissa = codes & 0x80, (codes >> 4) & 0x07, (codes & 0x0F).astype(np.int32)
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(sign, magnitude, -magnitude).astype(np.int16)


def _encode_table(table: np.ndarray) -> np.ndarray:
    """For every 16-bit value, the nearest G.711 code (its codes are monotonic within each sign, so the nearest
    decoded level is the right code)."""
    values = np.arange(-32768, 32768, dtype=np.int32)
    order = np.argsort(table, kind="stable")
    levels = table[order].astype(np.int32)
    right = np.clip(np.searchsorted(levels, values), 1, len(levels) - 1)
    left = right - 1
    nearer_left = (values - levels[left]) <= (levels[right] - values)
    return order[np.where(nearer_left, left, right)].astype(np.uint8)


def _constant(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


ULAW_DECODE, ALAW_DECODE = _constant(_ulaw_table()), _constant(_alaw_table())
_DECODE = {"ulaw": ULAW_DECODE, "alaw": ALAW_DECODE}
_ENCODE = {"ulaw": _constant(_encode_table(ULAW_DECODE)), "alaw": _constant(_encode_table(ALAW_DECODE))}


def g711_encode(pcm: np.ndarray, law: Law) -> bytes:
    """int16 samples → one G.711 byte each."""
    return _ENCODE[law][pcm.astype(np.int32) + 32768].tobytes()


def g711_decode(data: bytes | np.ndarray, law: Law) -> np.ndarray:
    """G.711 bytes → int16 samples, one each."""
    codes = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes | bytearray | memoryview) else data
    return _DECODE[law][codes]
