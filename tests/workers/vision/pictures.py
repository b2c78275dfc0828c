"""Real pictures for the vision tests (and for scripts/eval/vision.py).

The photos are the ones scikit-image's wheel carries in skimage/data/ (a coffee cup, a motorcycle, a cat, a rocket
on its pad, the astronaut Eileen Collins, a cameraman, a printed page), read straight from the installed package.
Signs are rendered with cv2.putText onto a white panel laid over one of those photos.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import cv2
import numpy as np


def skimage_data() -> Path:
    spec = importlib.util.find_spec("skimage")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("scikit-image is not installed: its wheel carries the test photos "
                                "(pip install scikit-image)")
    return Path(spec.origin).parent / "data"


def photo(name: str) -> np.ndarray:
    """A photo from skimage/data/ as a BGR array (grey ones converted)."""
    path = skimage_data() / name
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise FileNotFoundError(f"cannot read {path}")
    return image


def resized(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A frame of exactly (width, height) showing the whole photo, scaled to fit without distortion and centred on
    a plain grey surround (as if the photo were held up in front of a wall)."""
    width, height = size
    scale = min(width / image.shape[1], height / image.shape[0])
    inner = cv2.resize(image, (round(image.shape[1] * scale), round(image.shape[0] * scale)),
                       interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    frame = np.full((height, width, 3), 96, np.uint8)
    top, left = (height - inner.shape[0]) // 2, (width - inner.shape[1]) // 2
    frame[top:top + inner.shape[0], left:left + inner.shape[1]] = inner
    return frame


def sign(lines: list[str], size: tuple[int, int] = (640, 480), background: str = "coffee.png",
         scale: float = 1.2, at: float = 0.3) -> np.ndarray:
    """A frame of `size` showing a photo with a white sign on it carrying `lines` in black Hershey Simplex capitals
    (scale 1.2: letters ~26 px tall), centred, the first line at `at` of the height."""
    image = resized(photo(background), size)
    width, height = size
    thickness = max(2, round(scale * 2))
    y = int(height * at)
    for text in lines:
        (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
        x = (width - tw) // 2
        cv2.rectangle(image, (x - 14, y - th - 14), (x + tw + 14, y + 14), (250, 250, 250), -1)
        cv2.putText(image, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (20, 20, 20), thickness, cv2.LINE_AA)
        y += th + 44
    return image


def jpeg(image: np.ndarray, quality: int = 85) -> bytes:
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return data.tobytes()
