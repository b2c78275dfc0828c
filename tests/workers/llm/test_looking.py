"""A camera question in a text-only model's turn (workers/llm/looking.py): what the turn learns of the picture when
its analysis is ready, late, or missing, with the vision stage's real thread and a gated analysis function (the
vision parts themselves are tested in tests/workers/vision/)."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading

import cv2
import numpy as np
import pytest

from vita.config import VisionConfig
from vita.messages import Picture, SceneSeen, TurnRequest
from vita.pictures import check_picture
from workers.common import Publisher
from workers.llm.camera_questions import CAMERA_OFF, STILL_LOOKING
from workers.llm.looking import Looking
from workers.llm.turn_output import TurnOutput
from workers.llm.turn_run import TurnRun
from workers.vision.ocr import TextLine, TextReading
from workers.vision.scene import Scene
from workers.vision.stage import VisionStage, seeing

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

QUESTION = "What does the sign say?"


def picture(shade: int) -> Picture:
    """A real JPEG, checked as the front does (the stage skips a picture it has seen by its signature)."""
    image = np.full((120, 160, 3), shade, np.uint8)
    cv2.putText(image, "A", (50, 80), cv2.FONT_HERSHEY_SIMPLEX, 2, (255 - shade,) * 3, 4)
    return check_picture(cv2.imencode(".jpg", image)[1].tobytes())


BEFORE, NOW = picture(40), picture(210)
SHADES = {BEFORE: 40, NOW: 210}  # how the analysis, given pixels, tells the two pictures apart


def sign(*rows: str) -> Scene:
    lines = tuple(TextLine(r, 0.99, (0, 40 * i, 100, 40 * i + 30), i) for i, r in enumerate(rows))
    return Scene((640, 480), text=TextReading(lines, 0.1))


@pytest.fixture
def looking():
    """A Looking whose stage analyses each picture as the test says (`scenes`), once the test opens the gate."""
    outbox: queue.Queue = queue.Queue()
    publisher = Publisher(outbox, logging.getLogger("test.looking"), "test-publish")
    part = Looking(VisionConfig(wait_ms=300), TurnOutput(queue.Queue(), publisher, 40), logging.getLogger("test"))
    gate, scenes = threading.Event(), {}

    def analyse(pixels: np.ndarray) -> Scene:
        gate.wait(10)
        return next(scene for key, scene in scenes.items() if abs(int(pixels[0, 0, 0]) - SHADES[key]) < 8)

    part.stage = VisionStage(seeing(analyse))
    part.stage.setup()
    part.gate, part.scenes, part.outbox, part.publisher = gate, scenes, outbox, publisher
    yield part
    gate.set()
    part.close()
    publisher.close()


def turn(looking: Looking, frames: tuple[Picture, ...], question: str = QUESTION) -> TurnRun:
    req = TurnRequest("s", 1, text=question, frames=frames)
    run = TurnRun(request_id="s:1", started=0.0, user_text=question)

    async def scenario() -> None:
        await looking.look(req, run, looking.scene_for(req))

    asyncio.run(scenario())
    return run


def test_a_picture_analysed_in_time_is_answered_from_and_shown_to_the_page(looking):
    looking.scenes[NOW] = sign("PLATFORM 9")
    looking.gate.set()
    run = turn(looking, (NOW,))
    assert "PLATFORM 9" in run.cues and "PLATFORM 9" in run.direct and run.about_camera
    assert run.camera_note == ""  # what it shows is data in the user's message, never a word to the model
    looking.publisher.flush()
    assert [m.text for m in list(looking.outbox.queue) if isinstance(m, SceneSeen)] == [("PLATFORM 9",)]


def test_a_late_analysis_with_nothing_earlier_says_it_is_still_looking(looking):
    looking.scenes[NOW] = sign("PLATFORM 9")  # the gate stays shut past vision.wait_ms
    run = turn(looking, (NOW,))
    assert run.direct == STILL_LOOKING and not run.cues and run.timings["vision_late"] == 1.0


def test_a_late_analysis_falls_back_to_the_last_picture_as_a_hint_not_an_answer(looking):
    looking.scenes[BEFORE], looking.scenes[NOW] = sign("EXIT"), sign("PLATFORM 9")
    looking.gate.set()
    assert looking.stage.seen("s", BEFORE).result(10).scene.text.rows() == ["EXIT"]
    looking.gate.clear()  # the new picture's analysis is late
    run = turn(looking, (NOW,))
    assert "EXIT" in run.cues and run.direct == ""  # the model is told what was last seen, and answers itself


def test_with_the_camera_off_a_question_about_it_is_told_so(looking):
    run = turn(looking, (), "What am I holding up to the camera?")
    assert run.camera_note == CAMERA_OFF and run.direct


def test_a_question_not_about_the_camera_gets_nothing_of_it(looking):
    looking.scenes[NOW] = sign("PLATFORM 9")
    looking.gate.set()
    run = turn(looking, (NOW,), "What is the capital of Italy?")
    assert (run.cues, run.camera_note, run.direct) == ("", "", "")
