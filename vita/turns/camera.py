"""Camera frames of one session: data-URL decoding, a short buffer, and sampling across an utterance."""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from vita.rate_budget import RateBudget

ACCEPTED_TYPES = ("image/jpeg", "image/png", "image/webp")


class FrameError(ValueError):
    """The frame cannot be used; the text is shown to the user as is."""


def image_dimensions(image: bytes) -> tuple[int, int]:
    """(width, height) from a JPEG, PNG or WebP header, without decoding: a 500-byte file may claim 30000x30000
    pixels, and decoders allocate for the claim before they find the data missing."""
    if image[:8] == b"\x89PNG\r\n\x1a\n" and image[12:16] == b"IHDR":
        return int.from_bytes(image[16:20], "big"), int.from_bytes(image[20:24], "big")
    if image[:4] == b"RIFF" and image[8:12] == b"WEBP":
        chunk = image[12:16]
        if chunk == b"VP8X":
            return 1 + int.from_bytes(image[24:27], "little"), 1 + int.from_bytes(image[27:30], "little")
        if chunk == b"VP8L" and image[20:21] == b"\x2f":
            bits = int.from_bytes(image[21:25], "little")
            return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
        if chunk == b"VP8 " and image[23:26] == b"\x9d\x01\x2a":
            return int.from_bytes(image[26:28], "little") & 0x3FFF, int.from_bytes(image[28:30], "little") & 0x3FFF
        raise FrameError("video_frame is not a WebP image we can read")
    if image[:2] == b"\xff\xd8":
        at = 2
        while at + 9 <= len(image):
            if image[at] != 0xFF:
                break
            marker = image[at + 1]
            if marker == 0xFF:  # fill byte
                at += 1
                continue
            if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
                at += 2
                continue
            length = int.from_bytes(image[at + 2:at + 4], "big")
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # start of frame
                return int.from_bytes(image[at + 7:at + 9], "big"), int.from_bytes(image[at + 5:at + 7], "big")
            if length < 2:
                break
            at += 2 + length
        raise FrameError("video_frame is a JPEG without a readable frame header")
    raise FrameError(f"video_frame must be one of {', '.join(ACCEPTED_TYPES)}")


class FrameOverBudget(FrameError):
    """The session's image budget is spent: refused before decoding."""


def decode_frame(data_url: object, max_bytes: int, max_pixels: int = 12_000_000,
                 budget: RateBudget | None = None) -> bytes:
    """A `data:image/jpeg;base64,...` string → the image file's bytes, checked to really decode. With `budget`
    (megapixels, the session's), the frame is charged its pixels first: checking that an image decodes costs ~3 ms a
    megapixel (35 ms for a 16 KB, 12 MP PNG), so a client sending small images of many pixels could take a core."""
    if not isinstance(data_url, str) or not data_url.startswith("data:"):
        raise FrameError("video_frame must be a data URL such as data:image/jpeg;base64,...")
    if len(data_url) > max_bytes:
        raise FrameError(f"a video frame may be at most {max_bytes} bytes")
    header, sep, body = data_url.partition(",")
    media = header[5:].split(";")
    if not sep or media[0] not in ACCEPTED_TYPES or "base64" not in media[1:]:
        raise FrameError(f"video_frame must be a base64 data URL of {', '.join(ACCEPTED_TYPES)}")
    try:
        image = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise FrameError("video_frame is not valid base64") from None
    width, height = image_dimensions(image)
    if width * height > max_pixels or not width or not height:
        raise FrameError(f"video_frame is {width}x{height}; at most {max_pixels} pixels, please")
    if budget is not None and not budget.admit(width * height / 1e6, time.monotonic()):
        raise FrameOverBudget(f"images may bring at most {budget.rate:g} megapixels a second; this one was dropped")
    import cv2

    # Decoding at 1/8 size checks the whole entropy-coded stream at a fraction of the cost.
    try:
        pixels = cv2.imdecode(np.frombuffer(image, dtype=np.uint8), cv2.IMREAD_REDUCED_GRAYSCALE_8)
    except cv2.error:  # some malformed PNG/WebP headers make the decoder raise instead of returning None
        pixels = None
    if pixels is None or pixels.size == 0:
        raise FrameError("video_frame does not decode as an image")
    return image


@dataclass(frozen=True)
class Frame:
    image: bytes
    at: float  # monotonic arrival time


class FrameBuffer:
    """The last `size` frames; a gap longer than `gap_s` means the camera stopped, so older frames go."""

    def __init__(self, size: int = 8, gap_s: float = 1.0):
        self.gap_s = gap_s
        self._frames: deque[Frame] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, image: bytes, at: float) -> None:
        with self._lock:
            if self._frames and at - self._frames[-1].at > self.gap_s:
                self._frames.clear()
            self._frames.append(Frame(image, at))

    def __len__(self) -> int:
        with self._lock:
            return len(self._frames)

    def sample(self, start: float, end: float, count: int = 4) -> tuple[bytes, ...]:
        """Up to `count` frames spread evenly over [start, end]; frames from a stopped camera are left out."""
        with self._lock:
            frames = list(self._frames)
        if not frames or end - frames[-1].at > self.gap_s + 0.5:
            return ()
        window = [f for f in frames if start - self.gap_s <= f.at <= end + 0.5] or frames[-1:]
        if len(window) <= count:
            return tuple(f.image for f in window)
        picks = np.linspace(0, len(window) - 1, count).round().astype(int)
        return tuple(window[i].image for i in picks)
