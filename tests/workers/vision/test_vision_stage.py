"""The vision stage's scheduling: a picture analysed once however many frames show it, the newest frame winning
over one still waiting, a bad frame failing only its own waiters (real JPEGs; the analysis is a plain function)."""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest

from tests.harness import hostile_images
from vita.messages import Picture
from vita.pictures import check_picture
from workers.vision.stage import (
    WORKING_SIDE,
    VisionStage,
    decode_pixels,
    pixels_signature,
    same_picture,
    signature,
    small_jpeg,
)

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def jpeg(shade: int, noise: int = 0, seed: int = 0) -> Picture:
    """A picture as the front checks it (its structure read; the stage decodes it)."""
    return check_picture(jpeg_bytes(shade, noise, seed))


def sign_of(picture: Picture) -> np.ndarray:
    return pixels_signature(decode_pixels(picture.image))


def jpeg_bytes(shade: int, noise: int = 0, seed: int = 0) -> bytes:
    image = np.full((240, 320, 3), shade, np.uint8)
    cv2.putText(image, "A", (100, 160), cv2.FONT_HERSHEY_SIMPLEX, 4, (255 - shade,) * 3, 8)
    if noise:
        image = np.clip(image + np.random.default_rng(seed).integers(-noise, noise, image.shape), 0, 255)
    ok, data = cv2.imencode(".jpg", image.astype(np.uint8))
    assert ok
    return data.tobytes()


@pytest.fixture
def stage():
    calls: list[np.ndarray] = []
    gate = threading.Event()
    gate.set()

    entered = threading.Event()  # the thread has a picture under way

    def analyse(pixels: np.ndarray) -> str:
        entered.set()
        gate.wait(10)
        calls.append(pixels)
        return f"scene {len(calls)}"

    s = VisionStage(analyse)
    s.calls, s.gate, s.entered = calls, gate, entered
    s.setup()
    yield s
    s.gate.set()
    s.close()


def test_camera_noise_is_the_same_picture_and_a_new_scene_is_not():
    assert same_picture(sign_of(jpeg(60)), sign_of(jpeg(60, noise=12, seed=1)))
    assert not same_picture(sign_of(jpeg(60)), sign_of(jpeg(200)))
    assert signature(jpeg(60)) is None  # a page's frame comes without one
    carried = Picture(jpeg_bytes(60), sign_of(jpeg(60)).astype(np.uint8).tobytes())  # a WebRTC camera's
    assert np.array_equal(signature(carried), sign_of(jpeg(60)))


def test_an_unchanged_picture_is_analysed_once(stage):
    assert stage.seen("s", jpeg(60)).result(10) == "scene 1"
    assert stage.seen("s", jpeg(60, noise=10, seed=2)).result(10) == "scene 1"  # the same picture: no new analysis
    assert stage.seen("s", jpeg(200)).result(10) == "scene 2"
    assert stage.seen("other", jpeg(200)).result(10) == "scene 3"  # each session has its own camera
    assert (stage.analysed, stage.skipped) == (3, 1)
    assert stage.latest("s") == "scene 2"


def test_the_newest_frame_replaces_one_still_waiting_and_answers_its_waiters(stage):
    stage.gate.clear()
    busy = stage.seen("a", jpeg(10))  # the thread holds this one at the gate
    first = stage.seen("s", jpeg(60))
    second = stage.seen("s", jpeg(200))  # replaces the first, which was still waiting
    stage.gate.set()
    assert busy.result(10) == "scene 1"
    assert first.result(10) == second.result(10) == "scene 2"
    assert stage.analysed == 2


def test_a_bad_frame_fails_its_own_future_and_the_stage_goes_on(stage):
    with pytest.raises(ValueError, match="does not decode"):
        stage.seen("s", Picture(b"\xff\xd8 broken")).result(10)
    assert stage.seen("s", jpeg(60)).result(10) == "scene 1"


def test_forgetting_a_session_cancels_what_it_waits_for(stage):
    stage.gate.clear()
    stage.seen("a", jpeg(10))
    waiting = stage.seen("s", jpeg(60))
    stage.forget("s")
    stage.gate.set()
    assert waiting.cancelled() and stage.latest("s") is None


def test_the_analysis_gets_the_pictures_pixels_decoded_once(stage):
    assert stage.seen("s", jpeg(60)).result(10) == "scene 1"
    pixels = stage.calls[0]
    assert isinstance(pixels, np.ndarray) and pixels.shape == (240, 320, 3)
    thumbnail = cv2.imdecode(np.frombuffer(small_jpeg(pixels), np.uint8), cv2.IMREAD_COLOR)
    assert thumbnail.shape == (240, 320, 3)  # (under the page's size: kept as it is)


def test_a_picture_larger_than_any_part_looks_at_is_decoded_smaller():
    big = hostile_images.jpeg(2 * WORKING_SIDE + 16, 1200)
    assert decode_pixels(big).shape[1] == (2 * WORKING_SIDE + 16) // 2
    assert decode_pixels(hostile_images.jpeg(1280, 768)).shape == (768, 1280, 3)
    with pytest.raises(ValueError, match="does not decode"):
        decode_pixels(b"\x89PNG\r\n\x1a\n broken")


def test_a_picture_a_turn_waits_for_goes_ahead_of_the_others(stage):
    """One user's stream of pictures must not hold up another's question."""
    stage.gate.clear()
    busy = stage.seen("a", jpeg(10))  # under way: the thread holds it at the gate
    assert stage.entered.wait(10)
    waiting = [stage.seen(f"camera {n}", jpeg(30 + 20 * n)) for n in range(4)]
    asked = stage.seen("asker", jpeg(220), urgent=True)
    stage.gate.set()
    assert busy.result(10) == "scene 1"
    assert asked.result(10) == "scene 2"  # next, ahead of the four queued before it
    assert [f.result(10) for f in waiting] == ["scene 3", "scene 4", "scene 5", "scene 6"]


def test_a_queued_picture_a_turn_starts_waiting_for_is_hurried(stage):
    stage.gate.clear()
    stage.seen("a", jpeg(10))
    assert stage.entered.wait(10)
    other = stage.seen("b", jpeg(90))
    later = stage.seen("s", jpeg(60))  # queued behind b, no one waiting
    asked = stage.seen("s", jpeg(200), urgent=True)  # now a turn waits: the newest frame, ahead of b
    stage.gate.set()
    assert later.result(10) == asked.result(10) == "scene 2"
    assert other.result(10) == "scene 3" and stage.analysed == 3


def test_a_picture_that_comes_with_its_signature_is_not_decoded_when_unchanged(stage, monkeypatch):
    import workers.vision.stage as module

    first = Picture(jpeg_bytes(60), sign_of(jpeg(60)).astype(np.uint8).tobytes())
    assert stage.seen("s", first).result(10) == "scene 1"
    decoded = []
    monkeypatch.setattr(module, "decode_pixels", lambda image: decoded.append(image))
    again = Picture(b"not even a picture", first.signature)  # the same signature: known to be unchanged
    assert stage.seen("s", again).result(10) == "scene 1" and decoded == [] and stage.skipped == 1


def test_a_session_pushed_out_by_too_many_cameras_has_its_waiting_cancelled_not_forgotten(stage, monkeypatch):
    import workers.vision.stage as module

    monkeypatch.setattr(module, "MAX_SESSIONS", 2)
    stage.gate.clear()
    stage.seen("a", jpeg(10))
    assert stage.entered.wait(10)  # a's picture under way: a has nothing waiting now
    waiting = stage.seen("b", jpeg(60), urgent=True)
    third = stage.seen("c", jpeg(200))  # a goes first (nothing waiting), then, for a fourth, b must
    fourth = stage.seen("d", jpeg(120))
    stage.gate.set()
    assert waiting.cancelled() and not third.cancelled() and not fourth.cancelled()
    assert third.result(10) and fourth.result(10)
