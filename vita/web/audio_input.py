"""Inbound microphone audio: the two wire formats of the `audio` event, checked and turned into int16 PCM.

VITA's page sends a JSON string {"sample_rate": N, "audio": [byte, byte, ...]} every 8 ms; our page sends
raw little-endian int16 bytes at the rate it announced with `audio_format`. Both end up as the same array.
"""

from __future__ import annotations

import json

import numpy as np

MIN_RATE, MAX_RATE = 8000, 96000
JSON_CHARS_PER_BYTE = 5  # "255, " (Python's json.dumps; a browser's JSON.stringify writes "255,")
# VITA's page sends 256 bytes every 8 ms. A JSON message becomes a Python list and several copies of its text on
# the way in; capped at 0.5 s of 16 kHz audio, a flood of them stays small in the heap (at the binary limit the
# front kept ~25 MB of heap after the flood ended).
JSON_MAX_BYTES = 16_000


class AudioFormatError(ValueError):
    """The message is not audio we can use; the text is shown to the user as is."""


def check_rate(rate: object) -> int:
    if isinstance(rate, bool) or not isinstance(rate, int) or not MIN_RATE <= rate <= MAX_RATE:
        raise AudioFormatError(f"sample_rate must be an integer between {MIN_RATE} and {MAX_RATE}, got {rate!r}")
    return rate


def pcm_from_bytes(data: bytes | bytearray | memoryview) -> np.ndarray:
    if len(data) % 2:
        raise AudioFormatError(f"audio must be whole 16-bit samples; got {len(data)} bytes")
    return np.frombuffer(bytes(data), dtype="<i2").astype(np.int16, copy=False)


def decode_vita_audio(payload: str, max_bytes: int | None = None) -> tuple[np.ndarray, int]:
    """VITA's JSON string: returns (int16 samples, sample rate)."""
    try:
        message = json.loads(payload)
    except (json.JSONDecodeError, RecursionError):
        raise AudioFormatError("audio text is not JSON; expected {\"sample_rate\": N, \"audio\": [bytes]}") from None
    if not isinstance(message, dict) or not isinstance(message.get("audio"), list):
        raise AudioFormatError("audio JSON needs an \"audio\" list of byte values")
    rate = check_rate(message.get("sample_rate", 16000))
    try:
        values = np.array(message["audio"], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise AudioFormatError("\"audio\" must hold byte values (integers 0-255)") from None
    if values.ndim != 1 or (values.size and (values.min() < 0 or values.max() > 255)):
        raise AudioFormatError("\"audio\" must hold byte values (integers 0-255)")
    if max_bytes is not None and values.size > max_bytes:
        raise AudioFormatError(f"an audio message may hold at most {max_bytes} bytes")
    return pcm_from_bytes(values.astype(np.uint8).tobytes()), rate


def decode_audio_message(data: object, binary_rate: int, max_bytes: int) -> tuple[np.ndarray, int]:
    """Either format; binary frames are at binary_rate (what the session announced, 16 kHz by default)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        if len(data) > max_bytes:
            raise AudioFormatError(f"an audio message may hold at most {max_bytes} bytes")
        return pcm_from_bytes(data), binary_rate
    if isinstance(data, str):
        max_bytes = min(max_bytes, JSON_MAX_BYTES)
        # Before parsing: "255, " is the longest a byte is written; the decoded bytes are then counted exactly
        # ("0," is two characters: a length check alone let three times the limit through).
        if len(data) > JSON_CHARS_PER_BYTE * max_bytes + 64:
            raise AudioFormatError(f"an audio message may hold at most {max_bytes} bytes")
        return decode_vita_audio(data, max_bytes)
    raise AudioFormatError("audio must be binary int16 PCM or VITA's JSON string")

