"""The camera's side of a turn for a text-only model: each session's latest picture, analysed before it is asked
about.

The front forwards a frame while the user speaks (``CameraFrame``); this stage analyses it on a thread of its own,
at a lower CPU priority than the engine, and only when the picture changed (a small grey thumbnail, compared with
the last one analysed). When the turn starts, the scene of its latest frame is usually ready: the same picture was
analysed while the question was being said. A turn with no analysis under way (a typed question) gets one at once,
ahead of the pictures no turn waits for.

Each picture is decoded once, here: the front read only its structure (vita/pictures.py), and the analysis,
the change check and the page's thumbnail share one array. A WebRTC camera's picture comes with the signature of
its own pixels, so an unchanged one is not decoded at all.

The stage is fair between sessions: each has at most one picture waiting, and a picture a turn waits for goes
ahead of those no one waits for, so one user's stream of pictures delays another's question by at most the
analysis already under way.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from vita.messages import Picture
from vita.pictures import SIGNATURE_SIZE, image_dimensions, picture_signature

log = logging.getLogger("vita.vision")

SAME_PICTURE_LEVELS = 6.0  # mean absolute difference (0-255 grey levels) under which two frames show the same thing
MAX_SESSIONS = 256  # sessions whose cameras are remembered at once
LOWER_PRIORITY_BY = 5  # the stage's thread yields the cores to the engine and ASR (not to other programs: the
                       # server runs at server.nice, and an absolute nice 10 lost the cores to anything at 0)
WORKING_SIDE = 1920  # the longest side any vision part looks at (OCR's); a larger JPEG is decoded at 1/2 to 1/8
URGENT, BACKGROUND = 0, 1  # a picture a turn waits for, one analysed ahead of a question


def signature(picture: Picture) -> np.ndarray | None:
    """The signature the picture came with (a WebRTC camera's, made from its own pixels), or None."""
    if len(picture.signature) != SIGNATURE_SIZE[0] * SIGNATURE_SIZE[1]:
        return None
    return np.frombuffer(picture.signature, np.uint8).reshape(SIGNATURE_SIZE[::-1]).astype(np.float32)


def pixels_signature(pixels: np.ndarray) -> np.ndarray:
    """A decoded picture's signature: its grey SIGNATURE_SIZE thumbnail (a fraction of a millisecond)."""
    grey = cv2.cvtColor(pixels, cv2.COLOR_BGR2GRAY) if pixels.ndim == 3 else pixels
    return np.frombuffer(picture_signature(grey), np.uint8).reshape(SIGNATURE_SIZE[::-1]).astype(np.float32)


def same_picture(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Whether two signatures show the same thing: camera noise and small movements are not a new picture."""
    return a is not None and b is not None and float(np.mean(np.abs(a - b))) < SAME_PICTURE_LEVELS


def decode_pixels(image: bytes) -> np.ndarray:
    """The picture's one decode, as BGR: a JPEG larger than the vision parts look at is decoded at 1/2, 1/4 or 1/8
    of its size (cheaper, and what they would shrink it to anyway). Raises ValueError if it does not decode."""
    reduce = cv2.IMREAD_COLOR
    if image[:2] == b"\xff\xd8":
        with contextlib.suppress(ValueError):
            longest = max(image_dimensions(image))
            for factor, flag in ((8, cv2.IMREAD_REDUCED_COLOR_8), (4, cv2.IMREAD_REDUCED_COLOR_4),
                                 (2, cv2.IMREAD_REDUCED_COLOR_2)):
                if longest // factor >= WORKING_SIDE:
                    reduce = flag
                    break
    try:
        pixels = cv2.imdecode(np.frombuffer(image, dtype=np.uint8), reduce)
    except cv2.error:
        pixels = None
    if pixels is None or pixels.size == 0:
        raise ValueError("the frame does not decode as an image")
    return pixels


@dataclass
class _Sight:
    """What the stage knows of one session's camera."""

    signature: np.ndarray | None = None  # of the picture last analysed
    scene: Any = None  # its analysis
    analysed_at: float = 0.0
    pending: tuple[Picture, Future] | None = None  # the newest frame waiting for the thread
    urgent: bool = False  # a turn waits for the pending frame
    waiters: list[Future] = field(default_factory=list)  # turns waiting for the pending frame's scene


class VisionStage:
    """`analyse(bgr_pixels) -> scene` runs here, one picture at a time, on the stage's own low-priority thread."""

    def __init__(self, analyse: Callable[[np.ndarray], Any], name: str = "vision"):
        self.analyse = analyse
        self.name = name
        self._sights: dict[str, _Sight] = {}
        self._lock = threading.Lock()
        # (priority, order, session id): a session is queued again when a turn starts waiting for its frame, and an
        # entry whose frame has gone is skipped
        self._jobs: queue.PriorityQueue[tuple[int, int, str | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.analysed = 0  # pictures analysed (for /health and tests)
        self.skipped = 0  # frames skipped as the same picture

    def setup(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def seen(self, session_id: str, picture: Picture, urgent: bool = False) -> Future:
        """A new frame of the session's camera; the future is its scene (that of the same picture, if unchanged).
        A frame still waiting is replaced by this one, and its waiters get this one's scene. `urgent`: a turn
        waits for it, so it goes ahead of the frames that only prepare for a question."""
        future: Future = Future()
        with self._lock:
            if session_id not in self._sights and len(self._sights) >= MAX_SESSIONS:
                # (a frame that came after its session ended left one behind): of those with nothing waiting, the
                # one analysed longest ago goes; what it waited for, if all wait, is cancelled
                oldest = min(self._sights, key=lambda sid: (self._sights[sid].pending is not None,
                                                            self._sights[sid].analysed_at))
                gone = self._sights.pop(oldest)
                if gone.pending is not None:
                    for waiting in (gone.pending[1], *gone.waiters):
                        waiting.cancel()
            sight = self._sights.setdefault(session_id, _Sight())
            queued, hurried = sight.pending is not None, urgent and not sight.urgent
            if queued:
                sight.waiters.append(sight.pending[1])
            sight.pending = (picture, future)
            sight.urgent = sight.urgent or urgent
        if not queued or hurried:
            self._jobs.put((URGENT if urgent else BACKGROUND, next(self._order), session_id))
        return future

    def latest(self, session_id: str) -> Any:
        """The session's last analysed scene (None if none)."""
        with self._lock:
            sight = self._sights.get(session_id)
            return sight.scene if sight is not None else None

    def forget(self, session_id: str) -> None:
        with self._lock:
            sight = self._sights.pop(session_id, None)
        if sight is not None and sight.pending is not None:
            for future in (sight.pending[1], *sight.waiters):
                future.cancel()

    def close(self) -> None:
        self._stop.set()
        self._jobs.put((-1, -1, None))
        if self._thread is not None:
            self._thread.join(5)

    # --- the stage's thread --------------------------------------------------------------------------------
    def _loop(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # Linux: a thread's own priority, below its process's
            me = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, me, os.getpriority(os.PRIO_PROCESS, me) + LOWER_PRIORITY_BY)
        while not self._stop.is_set():
            session_id = self._jobs.get()[2]
            if session_id is None:
                break
            with self._lock:
                sight = self._sights.get(session_id)
                if sight is None or sight.pending is None:
                    continue  # (analysed already, from an earlier entry of its own)
                (picture, future), sight.pending, sight.urgent = sight.pending, None, False
                waiters, sight.waiters = sight.waiters, []
                known, scene = sight.signature, sight.scene
            futures = [future, *waiters]
            try:
                pixels, mark = None, signature(picture)
                if mark is None:  # (a page's frame: the front read only its structure)
                    pixels = decode_pixels(picture.image)
                    mark = pixels_signature(pixels)
                if not same_picture(mark, known) or scene is None:
                    started = time.monotonic()
                    scene = self.analyse(decode_pixels(picture.image) if pixels is None else pixels)
                    self.analysed += 1
                    log.debug("analysed a frame in %.0f ms", 1000 * (time.monotonic() - started))
                    with self._lock:
                        if self._sights.get(session_id) is sight:
                            sight.signature, sight.scene, sight.analysed_at = mark, scene, time.monotonic()
                else:
                    self.skipped += 1
            except Exception as exc:  # one bad picture must not end the stage
                log.warning("could not analyse a camera frame: %s", exc)
                for f in futures:
                    if f.set_running_or_notify_cancel():
                        f.set_exception(exc)
                continue
            for f in futures:
                if f.set_running_or_notify_cancel():
                    f.set_result(scene)


PAGE_IMAGE_SIDE = 320  # the picture shown on the page beside what was read in it


@dataclass(frozen=True)
class Seen:
    """One picture's analysis, and the small copy of it the page shows (both made on the stage's thread)."""

    scene: Any
    thumbnail: bytes


def seeing(analyse: Callable[[np.ndarray], Any]) -> Callable[[np.ndarray], Seen]:
    """`analyse`, with the page's copy of the picture made beside it from the same pixels."""
    return lambda pixels: Seen(analyse(pixels), small_jpeg(pixels))


def scene_seen(session_id: str, turn_id: int, note: str, scene: Any, thumbnail: bytes) -> Any:
    """The page's view of what the model was told about the camera (vita.messages.SceneSeen): the note, what each
    part found, and a small copy of the picture."""
    from vita.messages import SceneSeen

    text = tuple(scene.text.rows()) if getattr(scene, "text", None) is not None else ()
    objects = tuple(g.plain for g in scene.objects.guesses) if getattr(scene, "objects", None) is not None else ()
    people = hands = None
    if getattr(scene, "people", None) is not None:
        people = scene.people.people
        if scene.people.hands:
            hands = sum(h.fingers for h in scene.people.hands)
    return SceneSeen(session_id, turn_id, note, text, objects, people, hands, thumbnail)


def small_jpeg(pixels: np.ndarray) -> bytes:
    """The picture at most PAGE_IMAGE_SIDE pixels a side, as a JPEG (empty if it cannot be encoded)."""
    scale = PAGE_IMAGE_SIDE / max(pixels.shape[:2])
    if scale < 1:
        pixels = cv2.resize(pixels, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    ok, data = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 75])
    return data.tobytes() if ok else b""
