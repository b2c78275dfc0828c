"""The camera in a text-only model's turns: the vision stage (workers/vision/) loaded as the config asks, every
frame analysed as it comes, and for a question about the camera what it shows, said beside the question or
answered from it at once. An omni model sees the frames themselves and has none of this."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from vita.messages import Picture, TurnRequest, WorkerState
from workers.llm.camera_questions import (
    CAMERA_OFF,
    STILL_LOOKING,
    asks_about_camera,
    follows_on,
    may_ask_about_camera,
)
from workers.llm.turn_output import TurnOutput
from workers.llm.turn_run import TurnRun
from workers.vision.stage import VisionStage, scene_seen, seeing

if TYPE_CHECKING:
    from vita.config import VisionConfig


class Looking:
    def __init__(self, config: VisionConfig, out: TurnOutput, log: logging.Logger):
        self.config, self.out, self.log = config, out, log
        self.stage: VisionStage | None = None  # None: nothing of the camera is seen
        self.parts: tuple[str, ...] = ()  # the vision parts loaded (for /health)

    def setup(self, report: Any) -> None:
        """The vision parts the config turns on, loaded now (seconds): a camera question must not wait for them."""
        v = self.config
        if not (v.text or v.objects or v.people or v.hands):
            return
        from workers.vision.scene import SceneDescriber
        from workers.vision.scene import VisionConfig as Parts

        parts = [name for name in ("text", "objects", "people", "hands") if getattr(v, name)]
        report(WorkerState.LOADING, f"loading vision ({', '.join(parts)})")
        describer = SceneDescriber(Parts(text=v.text, objects=v.objects, people=v.people or v.hands, hands=v.hands,
                                         threads=v.threads, run_all=True))
        seconds = describer.setup()
        self.log.info("vision ready: %s", ", ".join(f"{k} {t:.1f} s" for k, t in seconds.items()))
        stage = VisionStage(seeing(describer.analyse))
        stage.setup()
        self.parts = describer.enabled
        self.stage = stage

    def describe(self) -> str:
        return f"; vision {', '.join(self.parts)}" if self.stage is not None else "; no vision"

    def seen(self, session_id: str, picture: Picture) -> None:
        """A camera frame, analysed now at low priority (skipped when the picture has not changed)."""
        if self.stage is not None:
            self.stage.seen(session_id, picture)

    def scene_for(self, req: TurnRequest) -> asyncio.Future | None:
        """The analysis of the turn's newest picture: usually done already, while the question was said."""
        if not req.frames or self.stage is None:
            return None
        scene = asyncio.wrap_future(self.stage.seen(req.session_id, req.frames[-1], urgent=True))
        scene.add_done_callback(lambda f: f.cancelled() or f.exception())  # (handled where awaited, or of no use)
        return scene

    def forget(self, session_id: str) -> None:
        if self.stage is not None:
            self.stage.forget(session_id)

    def close(self) -> None:
        if self.stage is not None:
            self.stage.close()

    async def look(self, req: TurnRequest, run: TurnRun, scene: asyncio.Future | None,
                   after_camera: bool = False) -> None:
        """For a question about the camera: what it shows, rendered for the question ("what does it say?": the
        text read), or that it is off; a plain one ("What is this?") answered from it (run.direct). Any other
        question gets nothing: a camera that is on must not change the answer to "What is the capital of Italy?".
        Words that may be about something else ("How much does it cost?") are about the picture only when it shows
        what they ask for, or (after_camera) when they follow on from a question about it ("And the other one?")."""
        if self.stage is None:
            return  # (the picture is analysed all the same: the next question may be about it)
        question = run.user_text
        sure = asks_about_camera(question)
        follow_up = not sure and after_camera and follows_on(question)
        if not (sure or follow_up or may_ask_about_camera(question)):
            return
        from workers.vision.answers import direct_answer
        from workers.vision.scene import render

        if scene is None:
            if sure:
                run.about_camera = True
                run.direct = direct_answer(question, None, camera_on=False) or ""
                run.camera_note = CAMERA_OFF if run.direct else ""  # (a question that names the camera or a thing)
            return
        started, late = time.monotonic(), False
        try:
            seen = await asyncio.wait_for(asyncio.shield(scene), self.config.wait_ms / 1000)
        except TimeoutError:  # the picture's analysis is late: the last one of this camera, if any
            seen, late = self.stage.latest(req.session_id), True
            run.timings["vision_late"] = 1.0
        except Exception as exc:  # a picture that does not decode: the question is answered without it
            self.log.warning("camera frame not analysed: %s", exc)
            seen = None
        run.timings["vision_wait_s"] = time.monotonic() - started
        if not (sure or follow_up or (seen is not None and shows_what_is_asked(question, seen.scene))):
            return
        run.about_camera = True
        if seen is None:
            # Nothing of this camera is analysed yet: say so, rather than let the model answer blind (it invents).
            run.direct = STILL_LOOKING if late and self.config.wait_ms > 0 else ""  # (0: go on without)
            return
        run.cues = render(seen.scene, question)
        if run.cues:
            self.out.publish(scene_seen(req.session_id, req.turn_id, run.cues, seen.scene, seen.thumbnail))
        if not late:  # an earlier picture's analysis is a hint for the model, not an answer to say as fact
            run.direct = direct_answer(question, seen.scene, camera_on=True) or ""


def shows_what_is_asked(question: str, scene: Any) -> bool:
    """Does the picture hold a value of the kind asked for ("How much does it cost?": a price read)?"""
    from workers.vision.answers import value_kind, values_in

    kind = value_kind(question)
    return bool(kind and scene.text is not None and values_in(scene.text.rows(), kind))
