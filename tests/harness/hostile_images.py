"""Pictures made to cost a decoder far more than their size suggests, for the tests and the abuse benchmark: each
is a valid file that OpenCV decodes (slowly) unless the server refuses it first."""

from __future__ import annotations

import zlib

import cv2
import numpy as np

EMPTY_AC_SCAN = b"\xff\xda\x00\x08\x01\x01\x00\x01\x3f\x00"  # one component, AC band 1-63, no data: 10 bytes


def photo(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A busy BGR picture (gradients and noise), so that an encoder cannot squeeze it to nothing."""
    y, x = np.mgrid[0:height, 0:width]
    image = np.stack([(x * 255 // max(width - 1, 1)), (y * 255 // max(height - 1, 1)), (x + y) % 256], axis=-1)
    noise = np.random.default_rng(seed).integers(0, 24, (height, width, 3))
    return np.clip(image + noise, 0, 255).astype(np.uint8)


def jpeg(width: int, height: int, progressive: bool = False, quality: int = 70, flat: bool = False) -> bytes:
    pixels = np.full((height, width, 3), 128, np.uint8) if flat else photo(width, height)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] + ([cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if progressive else [])
    ok, data = cv2.imencode(".jpg", pixels, params)
    assert ok
    return data.tobytes()


def scan_bomb(width: int = 4000, height: int = 3000, scans: int = 5000) -> bytes:
    """A flat progressive JPEG with `scans` extra empty AC scans before its end: each is a pass over the whole
    picture for libjpeg (~0.5 ms for 12 MP), at 10 bytes apiece."""
    data = jpeg(width, height, progressive=True, flat=True)
    return data[:-2] + EMPTY_AC_SCAN * scans + b"\xff\xd9"


def marker_flood(width: int = 640, height: int = 480, segments: int = 20_000) -> bytes:
    """A JPEG with thousands of empty comment segments before its frame header."""
    data = jpeg(width, height)
    return data[:2] + b"\xff\xfe\x00\x02" * segments + data[2:]


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


def packed_text_png(width: int = 64, height: int = 48, chunks: int = 200) -> bytes:
    """A small PNG carrying `chunks` zTXt chunks, each a few KB that inflate to 8 MB."""
    ok, data = cv2.imencode(".png", photo(width, height))
    assert ok
    data = data.tobytes()
    body = b"Comment\x00\x00" + zlib.compress(bytes(8_000_000), 9)
    return data[:33] + _png_chunk(b"zTXt", body) * chunks + data[33:]
