"""What every vision part shares: its set-up error, turning a camera frame into a BGR array, and a cheap check of
whether the picture changed since the last one looked at."""

from __future__ import annotations

import time
from dataclasses import dataclass

import cv2
import numpy as np


class VisionSetupError(RuntimeError):
    """A vision part cannot load: its package is missing or its bundled model files are not where they should be.

    The message names the package to install (nothing is ever downloaded at run time)."""


def missing_package(part: str, module: str, install: str) -> VisionSetupError:
    return VisionSetupError(f"vision {part}: cannot import {module!r}; install it with: pip install {install}")


def to_bgr(frame: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """A camera frame as an 8-bit BGR array: encoded bytes (JPEG, PNG) are decoded, a grey or BGRA array is
    converted, a BGR array is returned as it is. Raises ValueError for bytes that are not an image."""
    if isinstance(frame, bytes | bytearray | memoryview):
        image = cv2.imdecode(np.frombuffer(frame, dtype=np.uint8), cv2.IMREAD_COLOR)
        if image is None:
            raise ValueError("camera frame is not a decodable image")
        return image
    image = np.asarray(frame)
    if image.dtype != np.uint8:
        raise ValueError(f"camera frame must be 8-bit, got {image.dtype}")
    if image.ndim == 2:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    if image.ndim == 3 and image.shape[2] == 4:
        return cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
    if image.ndim == 3 and image.shape[2] == 3:
        return image
    raise ValueError(f"camera frame has an unexpected shape {image.shape}")


def fit_within(image: np.ndarray, max_side: int) -> tuple[np.ndarray, float]:
    """The image shrunk (never enlarged) so its longer side is at most max_side, and the factor applied."""
    scale = max_side / max(image.shape[:2])
    if scale >= 1:
        return image, 1.0
    return cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA), scale


@dataclass(frozen=True)
class Change:
    changed: bool
    difference: float  # mean absolute difference of the grey thumbnails, 0..255
    moved: float  # share of thumbnail pixels that changed by more than the pixel threshold, 0..1


class ChangeDetector:
    """Has the picture changed? Compares a small blurred grey thumbnail of each frame with the one of the last frame
    that counted as changed (so a slow drift still adds up to a change). About 1 ms for a 1280×768 frame.

    A frame is "changed" when the thumbnails differ on average by more than `mean_threshold` grey levels, or when
    more than `area_threshold` of the thumbnail moved by more than `pixel_threshold` (a hand raised in one corner
    changes little on average but much locally). JPEG noise and sensor noise of a still camera stay well below both.
    """

    def __init__(self, size: tuple[int, int] = (32, 24), mean_threshold: float = 6.0, pixel_threshold: int = 40,
                 area_threshold: float = 0.015):
        self.size = size
        self.mean_threshold = mean_threshold
        self.pixel_threshold = pixel_threshold
        self.area_threshold = area_threshold
        self.reference: np.ndarray | None = None
        self.seen_at = 0.0

    def thumbnail(self, image: np.ndarray) -> np.ndarray:
        grey = image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
        small = cv2.resize(grey, self.size, interpolation=cv2.INTER_AREA)
        # Exposure drifts a little from frame to frame: compare shapes, not brightness.
        small = cv2.GaussianBlur(small, (3, 3), 0).astype(np.int16)
        return small - int(round(float(small.mean()))) + 128

    def compare(self, image: np.ndarray) -> Change:
        """Compare with the reference without moving it."""
        thumb = self.thumbnail(image)
        if self.reference is None or self.reference.shape != thumb.shape:
            return Change(True, 255.0, 1.0)
        diff = np.abs(thumb - self.reference)
        mean = float(diff.mean())
        moved = float((diff > self.pixel_threshold).mean())
        return Change(mean > self.mean_threshold or moved > self.area_threshold, mean, moved)

    def check(self, image: np.ndarray) -> Change:
        """Compare with the reference; a changed frame becomes the new reference."""
        change = self.compare(image)
        if change.changed:
            self.reference = self.thumbnail(image)
            self.seen_at = time.monotonic()
        return change

    def reset(self) -> None:
        self.reference = None
