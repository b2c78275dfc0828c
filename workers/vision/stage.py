"""The camera's side of a turn for a text-only model: each session's latest picture, analysed before it is asked
about.

The front forwards a frame while the user speaks (``CameraFrame``); this stage analyses it on a thread of its own,
at a lower CPU priority than the engine, and only when the picture changed (a small grey thumbnail, compared with
the last one analysed). When the turn starts, the scene of its latest frame is usually ready: the same picture was
analysed while the question was being said. A turn with no analysis under way (a typed question) gets one at once,
ahead of nothing but the work already queued.
"""

from __future__ import annotations

import contextlib
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

log = logging.getLogger("vita.vision")

THUMB_SIZE = (32, 24)  # width, height of the picture's signature
SAME_PICTURE_LEVELS = 6.0  # mean absolute difference (0-255 grey levels) under which two frames show the same thing
MAX_SESSIONS = 256  # sessions whose cameras are remembered at once
LOWER_PRIORITY_BY = 5  # the stage's thread yields the cores to the engine and ASR (not to other programs: the
                       # server runs at server.nice, and an absolute nice 10 lost the cores to anything at 0)


def signature(image: bytes) -> np.ndarray | None:
    """A 32×24 grey thumbnail of an encoded picture, decoded at 1/8 size (about a millisecond); None if it does not
    decode."""
    try:
        grey = cv2.imdecode(np.frombuffer(image, dtype=np.uint8), cv2.IMREAD_REDUCED_GRAYSCALE_8)
    except cv2.error:
        grey = None
    if grey is None or grey.size == 0:
        return None
    return cv2.resize(grey, THUMB_SIZE, interpolation=cv2.INTER_AREA).astype(np.float32)


def same_picture(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Whether two signatures show the same thing: camera noise and small movements are not a new picture."""
    return a is not None and b is not None and float(np.mean(np.abs(a - b))) < SAME_PICTURE_LEVELS


@dataclass
class _Sight:
    """What the stage knows of one session's camera."""

    signature: np.ndarray | None = None  # of the picture last analysed
    scene: Any = None  # its analysis
    analysed_at: float = 0.0
    pending: tuple[bytes, Future] | None = None  # the newest frame waiting for the thread
    waiters: list[Future] = field(default_factory=list)  # turns waiting for the pending frame's scene


class VisionStage:
    """`analyse(image_bytes) -> scene` runs here, one picture at a time, on the stage's own low-priority thread."""

    def __init__(self, analyse: Callable[[bytes], Any], name: str = "vision"):
        self.analyse = analyse
        self.name = name
        self._sights: dict[str, _Sight] = {}
        self._lock = threading.Lock()
        self._jobs: queue.Queue[str | None] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.analysed = 0  # pictures analysed (for /health and tests)
        self.skipped = 0  # frames skipped as the same picture

    def setup(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def seen(self, session_id: str, image: bytes) -> Future:
        """A new frame of the session's camera; the future is its scene (that of the same picture, if unchanged).
        A frame still waiting is replaced by this one, and its waiters get this one's scene."""
        future: Future = Future()
        with self._lock:
            if session_id not in self._sights and len(self._sights) >= MAX_SESSIONS:
                # (a frame that came after its session ended left one behind): the one analysed longest ago goes
                oldest = min(self._sights, key=lambda sid: self._sights[sid].analysed_at)
                self._sights.pop(oldest)
            sight = self._sights.setdefault(session_id, _Sight())
            queued = sight.pending is not None
            if queued:
                sight.waiters.append(sight.pending[1])
            sight.pending = (image, future)
        if not queued:
            self._jobs.put(session_id)
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
        self._jobs.put(None)
        if self._thread is not None:
            self._thread.join(5)

    # --- the stage's thread --------------------------------------------------------------------------------
    def _loop(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # Linux: a thread's own priority, below its process's
            me = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, me, os.getpriority(os.PRIO_PROCESS, me) + LOWER_PRIORITY_BY)
        while not self._stop.is_set():
            session_id = self._jobs.get()
            if session_id is None:
                break
            with self._lock:
                sight = self._sights.get(session_id)
                if sight is None or sight.pending is None:
                    continue
                (image, future), sight.pending = sight.pending, None
                waiters, sight.waiters = sight.waiters, []
                known, scene = sight.signature, sight.scene
            futures = [future, *waiters]
            try:
                mark = signature(image)
                if mark is None:
                    raise ValueError("the frame does not decode as an image")
                if not same_picture(mark, known) or scene is None:
                    started = time.monotonic()
                    scene = self.analyse(image)
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


def seeing(analyse: Callable[[bytes], Any]) -> Callable[[bytes], Seen]:
    """`analyse`, with the page's copy of the picture made beside it."""
    return lambda image: Seen(analyse(image), small_jpeg(image))


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


def small_jpeg(image: bytes) -> bytes:
    """The picture at most PAGE_IMAGE_SIDE pixels a side, as a JPEG (empty if it does not decode)."""
    try:  # a large picture is decoded at a half or a quarter of its size: cheaper, and enough for a thumbnail
        reduce = cv2.IMREAD_COLOR if len(image) < 200_000 else cv2.IMREAD_REDUCED_COLOR_4
        pixels = cv2.imdecode(np.frombuffer(image, dtype=np.uint8), reduce)
    except cv2.error:
        pixels = None
    if pixels is None or pixels.size == 0:
        return b""
    scale = PAGE_IMAGE_SIDE / max(pixels.shape[:2])
    if scale < 1:
        pixels = cv2.resize(pixels, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    ok, data = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 75])
    return data.tobytes() if ok else b""
