"""Frame decoding and the "has the picture changed?" check, on real photos (no model)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from tests.workers.vision.pictures import jpeg, photo
from workers.vision.frames import ChangeDetector, fit_within, to_bgr

pytestmark = pytest.mark.fast


def resized(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Stretched to fill the frame: every pixel is photo, none is surround."""
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)


def test_to_bgr_decodes_jpeg_and_converts_arrays():
    image = resized(photo("coffee.png"), (640, 480))
    decoded = to_bgr(jpeg(image))
    assert decoded.shape == (480, 640, 3) and decoded.dtype == np.uint8
    assert np.abs(decoded.astype(int) - image.astype(int)).mean() < 4
    assert to_bgr(image) is image
    assert to_bgr(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)).shape == (480, 640, 3)
    assert to_bgr(cv2.cvtColor(image, cv2.COLOR_BGR2BGRA)).shape == (480, 640, 3)
    with pytest.raises(ValueError):
        to_bgr(b"not an image")
    with pytest.raises(ValueError):
        to_bgr(image.astype(np.float32))


def test_fit_within_only_shrinks():
    image = np.zeros((768, 1280, 3), np.uint8)
    small, scale = fit_within(image, 640)
    assert small.shape == (384, 640, 3) and scale == 0.5
    same, scale = fit_within(image, 2000)
    assert same is image and scale == 1.0


def _noisy(image: np.ndarray, sigma: float, seed: int = 0) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(0, sigma, image.shape)
    return np.clip(image.astype(np.float64) + noise, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("name", ["coffee.png", "astronaut.png", "motorcycle_left.png", "rocket.jpg"])
def test_a_still_camera_is_unchanged_through_noise_recompression_exposure_and_a_small_shake(name):
    frame = resized(photo(name), (640, 480))
    detector = ChangeDetector()
    assert detector.check(frame).changed  # the first frame always counts
    same_scene = [
        to_bgr(jpeg(frame, quality=60)),  # recompressed
        _noisy(frame, 6.0),  # sensor noise
        cv2.convertScaleAbs(frame, alpha=1.0, beta=12),  # exposure a little brighter
        cv2.warpAffine(frame, np.float32([[1, 0, 3], [0, 1, 2]]), (640, 480), borderMode=cv2.BORDER_REFLECT),
    ]
    for variant in same_scene:
        change = detector.check(variant)
        assert not change.changed, change


@pytest.mark.parametrize("before, after", [("coffee.png", "chelsea.png"), ("astronaut.png", "camera.png"),
                                           ("rocket.jpg", "motorcycle_left.png")])
def test_another_picture_is_a_change(before, after):
    detector = ChangeDetector()
    detector.check(resized(photo(before), (640, 480)))
    change = detector.check(resized(photo(after), (640, 480)))
    assert change.changed and change.difference > 10


@pytest.mark.parametrize("side", [100, 180])
def test_something_new_in_one_corner_is_a_change(side):
    """A cup brought into one corner (3 % or 10 % of the frame) barely moves the mean, but is a change."""
    frame = resized(photo("astronaut.png"), (640, 480))
    detector = ChangeDetector()
    detector.check(frame)
    held = frame.copy()
    held[480 - side:480, 640 - side:640] = resized(photo("coffee.png"), (side, side))
    change = detector.check(held)
    assert change.changed, change


def test_the_reference_moves_only_on_a_change_so_a_slow_drift_adds_up():
    frame = resized(photo("motorcycle_left.png"), (640, 480))
    detector = ChangeDetector()
    detector.check(frame)
    # Slide the camera 4 px per frame: each step alone is small, but against the reference it adds up.
    changes = []
    for step in range(1, 16):
        moved = cv2.warpAffine(frame, np.float32([[1, 0, 4 * step], [0, 1, 0]]), (640, 480),
                               borderMode=cv2.BORDER_REFLECT)
        changes.append(detector.check(moved).changed)
    assert not changes[0] and any(changes)


def test_the_check_keeps_a_thumbnail_not_the_frame():
    """What makes the check cheap on every frame (about 1 ms for 1280x768, scripts/eval/vision.py): a 32x24 grey
    thumbnail is compared and kept, never the picture itself."""
    frame = resized(photo("coffee.png"), (1280, 768))
    detector = ChangeDetector()
    assert detector.check(frame).changed
    assert detector.reference.shape == (24, 32) and detector.reference.nbytes <= 2 * 32 * 24
    assert not detector.check(frame.copy()).changed
