"""A picture a client sends (a camera frame, an image in a message): data-URL decoding, and what it costs to decode,
read from its structure before any pixel is. The front checks every picture with it before it is kept, and the
vision stage reads the same structure and signature: both processes stand on it."""

from __future__ import annotations

import base64
import binascii
import re
import time
import zlib
from dataclasses import dataclass

import numpy as np

from vita.messages import Picture
from vita.rate_budget import RateBudget

ACCEPTED_TYPES = ("image/jpeg", "image/png", "image/webp")


class FrameError(ValueError):
    """The frame cannot be used; the text is shown to the user as is."""


# What a picture may hold besides its pixels. A decoder's cost grows with more than the pixel count: every scan
# of a progressive JPEG is a pass over the whole picture (an empty one is a 10-byte header: 5,000 of them made a
# 130 KB frame that took seconds), and libpng inflates every compressed text or colour-profile chunk.
MAX_JPEG_SCANS = 16  # libjpeg's and mozjpeg's progressive scripts write 6-12 for colour; baseline writes 1 (3 unmixed)
MAX_CMYK_JPEG_SCANS = 24  # ...and 18 for a four-component (CMYK) picture
MAX_JPEG_SEGMENTS = 256  # markers of every kind (APPn, tables, scans): a photo with EXIF and an ICC profile has ~20
MAX_PNG_CHUNKS = 4096  # IDAT chunks of 512 bytes still fit a 2 MB frame
MAX_PNG_PACKED_BYTES = 16_384  # zTXt, iTXt and iCCP together, compressed (an ICC profile is ~0.5-3 KB)
# What decoding a picture costs, in megapixels of a baseline JPEG (the unit of a session's image budget), measured
# on a 2-core Zen 4 with OpenCV's libjpeg-turbo, libpng and libwebp (scripts/bench/stages/image_cost.py): a progressive
# JPEG ~2x (each scan is a pass over the picture's coefficients), a WebP ~4x, a PNG of a photo 8-14x.
SCAN_COST = 0.12
JPEG_BYTES_PER_MP = 200_000  # a JPEG's entropy decoding grows with its bytes: 1.6 MB of 1.9 MP at quality 95 cost
# 4.2 baseline megapixels; one is charged the larger of its pixels and its bytes at this rate
PNG_COST, WEBP_COST = 8.0, 4.0
PNG_ROW_COST = 2e-5  # per row: a 1x1,000,000 PNG cost 2.6 times its pixels' charge
PACKED_BYTE_COST = 0.002  # a compressed PNG text byte: 7.8 KB inflated to libpng's 8 MB limit took 17 ms
SIGNATURE_SIZE = (32, 24)  # width, height of a picture's grey signature (vita.messages.Picture)


@dataclass(frozen=True)
class ImageLayout:
    """What a picture's structure says before any pixel is decoded."""

    kind: str  # "jpeg", "png" or "webp"
    width: int
    height: int
    scans: int = 1  # a JPEG's scans (progressive: several passes over the whole picture; 0: it has no data)
    progressive: bool = False  # a progressive JPEG or an interlaced PNG
    packed: int = 0  # a PNG's compressed text and colour-profile bytes, which libpng inflates
    size: int = 0  # bytes of the file
    bytes_per_pixel: float = 3.0  # a PNG's, decoded (RGBA at 16 bits: 8)

    @property
    def megapixels(self) -> float:
        return self.width * self.height / 1e6

    @property
    def cost(self) -> float:
        """Decoding it, in megapixels of a baseline JPEG."""
        if self.kind == "png":
            depth = max(1.0, self.bytes_per_pixel / 3)
            return (self.megapixels * PNG_COST * depth * (1.5 if self.progressive else 1.0)
                    + self.height * PNG_ROW_COST + self.packed * PACKED_BYTE_COST)
        if self.kind == "webp":
            return self.megapixels * WEBP_COST
        base = max(self.megapixels, self.size / JPEG_BYTES_PER_MP)
        return base * (1.0 + SCAN_COST * self.scans if self.progressive else 1.0)


# In a JPEG's entropy-coded data a 0xFF byte is followed by 0x00 (a stuffed byte) or a restart marker; anything
# else is the next marker (fill bytes before it are 0xFF too: the match is at the last). A literal first byte lets
# the regex engine skip ahead: 2 ms for a 1.2 MB, 12-megapixel photo (a leading `\xff+` took 31 ms).
_NEXT_JPEG_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_PACKED_PNG_CHUNKS = (b"zTXt", b"iTXt", b"iCCP")
_ANIMATED_PNG_CHUNKS = (b"acTL", b"fcTL", b"fdAT")  # an APNG's frames: OpenCV decodes every one
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # by colour type
_JPEG_FRAMES = (0xC0, 0xC1, 0xC2)  # baseline, extended and progressive Huffman: what cameras and encoders write


def image_layout(image: bytes) -> ImageLayout:
    """The picture's format, size and structure from its bytes, without decoding a pixel: a 500-byte file may claim
    30000x30000 pixels, and a 130 KB JPEG may hold thousands of scans. Raises FrameError for a structure no camera
    writes, naming what is wrong."""
    if image[:8] == b"\x89PNG\r\n\x1a\n":
        return _png_layout(image)
    if image[:4] == b"RIFF" and image[8:12] == b"WEBP":
        return _webp_layout(image)
    if image[:2] == b"\xff\xd8":
        return _jpeg_layout(image)
    raise FrameError(f"video_frame must be one of {', '.join(ACCEPTED_TYPES)}")


def image_dimensions(image: bytes) -> tuple[int, int]:
    """(width, height) from the picture's header (see image_layout)."""
    layout = image_layout(image)
    return layout.width, layout.height


def _jpeg_layout(image: bytes) -> ImageLayout:
    at, segments, scans, size, progressive, components = 2, 0, 0, None, False, 3
    while at + 1 < len(image):
        if image[at] != 0xFF:
            raise FrameError("video_frame is a JPEG with bytes between its markers")
        marker = image[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker == 0xD9:  # end of image
            break
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            at += 2
            continue
        segments += 1
        if segments > MAX_JPEG_SEGMENTS:
            raise FrameError(f"video_frame is a JPEG of more than {MAX_JPEG_SEGMENTS} segments")
        if at + 4 > len(image):
            break
        length = int.from_bytes(image[at + 2:at + 4], "big")
        if length < 2:
            raise FrameError("video_frame is a JPEG with a broken segment length")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # start of frame
            if size is not None:
                raise FrameError("video_frame is a JPEG with two frame headers")
            if at + 10 > len(image):
                break
            if marker not in _JPEG_FRAMES or image[at + 4] != 8:  # lossless, arithmetic-coded, 12-bit: no camera
                raise FrameError("video_frame is a JPEG of a kind cameras do not write (lossless, arithmetic-coded "
                                 "or 12-bit); send a baseline or progressive 8-bit JPEG")
            size = int.from_bytes(image[at + 7:at + 9], "big"), int.from_bytes(image[at + 5:at + 7], "big")
            progressive, components = marker == 0xC2, image[at + 9]
        at += 2 + length
        if marker == 0xDA:  # start of scan: its entropy-coded data runs to the next marker
            scans += 1
            most = MAX_CMYK_JPEG_SCANS if components >= 4 else MAX_JPEG_SCANS
            if scans > most:
                raise FrameError(f"video_frame is a JPEG of more than {most} scans")
            found = _NEXT_JPEG_MARKER.search(image, at)
            if found is None:
                break  # data to the end without an end marker: the decoder reads what there is
            at = found.start()
    if size is None:
        raise FrameError("video_frame is a JPEG without a readable frame header")
    return ImageLayout("jpeg", size[0], size[1], scans, progressive, size=len(image))


def _png_layout(image: bytes) -> ImageLayout:
    if image[12:16] != b"IHDR" or len(image) < 29:
        raise FrameError("video_frame is a PNG without a readable header")
    width, height = int.from_bytes(image[16:20], "big"), int.from_bytes(image[20:24], "big")
    interlaced = image[28] == 1
    bytes_per_pixel = _PNG_CHANNELS.get(image[25], 4) * max(1, image[24]) / 8
    at, chunks, packed, data, ended = 8, 0, 0, False, False
    while at + 8 <= len(image):
        length, kind = int.from_bytes(image[at:at + 4], "big"), image[at + 4:at + 8]
        if at + 12 + length > len(image):
            raise FrameError("video_frame is a PNG cut short")
        if zlib.crc32(image[at + 4:at + 8 + length]) != int.from_bytes(image[at + 8 + length:at + 12 + length], "big"):
            raise FrameError(f"video_frame is a PNG with a damaged {kind.decode('latin-1')!r} chunk")
        data = data or kind == b"IDAT"
        if kind in _ANIMATED_PNG_CHUNKS:
            raise FrameError("video_frame is an animated PNG; send one picture at a time")
        chunks += 1
        if chunks > MAX_PNG_CHUNKS:
            raise FrameError(f"video_frame is a PNG of more than {MAX_PNG_CHUNKS} chunks")
        if kind in _PACKED_PNG_CHUNKS:
            packed += length
            if packed > MAX_PNG_PACKED_BYTES:
                raise FrameError("video_frame is a PNG with too much compressed text or colour profile")
        if kind == b"IEND":
            ended = True
            break
        at += 12 + length
    if not data or not ended:
        raise FrameError("video_frame is a PNG cut short")
    return ImageLayout("png", width, height, 1, interlaced, packed, len(image), bytes_per_pixel)


def _webp_layout(image: bytes) -> ImageLayout:
    if len(image) < 30 or int.from_bytes(image[4:8], "little") + 8 > len(image):
        raise FrameError("video_frame is a WebP cut short")
    chunk = image[12:16]
    if chunk == b"VP8X":
        if image[20] & 0x02:  # the animation flag
            raise FrameError("video_frame is an animated WebP; send one picture at a time")
        width, height = 1 + int.from_bytes(image[24:27], "little"), 1 + int.from_bytes(image[27:30], "little")
    elif chunk == b"VP8L" and image[20:21] == b"\x2f":
        bits = int.from_bytes(image[21:25], "little")
        width, height = 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    elif chunk == b"VP8 " and image[23:26] == b"\x9d\x01\x2a":
        width, height = int.from_bytes(image[26:28], "little") & 0x3FFF, int.from_bytes(image[28:30], "little") & 0x3FFF
    else:
        raise FrameError("video_frame is not a WebP image we can read")
    return ImageLayout("webp", width, height, size=len(image))


class FrameOverBudget(FrameError):
    """The session's image budget is spent: refused before decoding."""


def decode_frame(data_url: object, max_bytes: int, max_pixels: int = 12_000_000,
                 budget: RateBudget | None = None) -> Picture:
    """A `data:image/jpeg;base64,...` string → the checked picture (check_picture). With `budget` (the session's,
    in megapixels of a baseline JPEG) it is charged what decoding it costs, which for a progressive JPEG, a PNG or
    a WebP is several times its pixels."""
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
    return check_picture(image, max_pixels, budget)


def check_picture(image: bytes, max_pixels: int = 12_000_000, budget: RateBudget | None = None) -> Picture:
    """An image file's bytes → a Picture, checked from its structure alone: within its pixel limit, nothing in it
    that costs a decoder more than its pixels, and what decoding it will cost charged to `budget`. Nothing is
    decoded here: a camera's frames come twice a second and most are never looked at; the vision stage decodes
    the one it analyses, once."""
    layout = image_layout(image)
    width, height = layout.width, layout.height
    if width * height > max_pixels or not width or not height:
        raise FrameError(f"video_frame is {width}x{height}; at most {max_pixels} pixels, please")
    if layout.kind == "jpeg" and not layout.scans:
        raise FrameError("video_frame is a JPEG without picture data")
    if budget is not None and not budget.admit(layout.cost, time.monotonic()):
        raise FrameOverBudget(f"images may bring at most {budget.rate:g} megapixels a second; this one was dropped")
    return Picture(image)


def picture_signature(grey: np.ndarray) -> bytes:
    """A picture's signature: its SIGNATURE_SIZE grey thumbnail, from any grey copy of it (uint8 bytes)."""
    import cv2

    return cv2.resize(grey, SIGNATURE_SIZE, interpolation=cv2.INTER_AREA).astype(np.uint8).tobytes()
