"""The vision stage's scheduling: a picture analysed once however many frames show it, the newest frame winning
over one still waiting, a bad frame failing only its own waiters (real JPEGs; the analysis is a plain function)."""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest

from workers.vision.stage import VisionStage, same_picture, signature

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def jpeg(shade: int, noise: int = 0, seed: int = 0) -> bytes:
    image = np.full((240, 320, 3), shade, np.uint8)
    cv2.putText(image, "A", (100, 160), cv2.FONT_HERSHEY_SIMPLEX, 4, (255 - shade,) * 3, 8)
    if noise:
        image = np.clip(image + np.random.default_rng(seed).integers(-noise, noise, image.shape), 0, 255)
    ok, data = cv2.imencode(".jpg", image.astype(np.uint8))
    assert ok
    return data.tobytes()


@pytest.fixture
def stage():
    calls: list[bytes] = []
    gate = threading.Event()
    gate.set()

    def analyse(image: bytes) -> str:
        gate.wait(10)
        calls.append(image)
        return f"scene {len(calls)}"

    s = VisionStage(analyse)
    s.calls, s.gate = calls, gate
    s.setup()
    yield s
    s.gate.set()
    s.close()


def test_camera_noise_is_the_same_picture_and_a_new_scene_is_not():
    assert same_picture(signature(jpeg(60)), signature(jpeg(60, noise=12, seed=1)))
    assert not same_picture(signature(jpeg(60)), signature(jpeg(200)))
    assert signature(b"not a picture") is None


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
        stage.seen("s", b"\xff\xd8 broken").result(10)
    assert stage.seen("s", jpeg(60)).result(10) == "scene 1"


def test_forgetting_a_session_cancels_what_it_waits_for(stage):
    stage.gate.clear()
    stage.seen("a", jpeg(10))
    waiting = stage.seen("s", jpeg(60))
    stage.forget("s")
    stage.gate.set()
    assert waiting.cancelled() and stage.latest("s") is None
