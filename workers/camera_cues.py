"""Turn camera frames into a short factual cue a text-only model can use, from what OpenCV really detects.

No captioner ships offline, so the cue only says what a Haar face cascade finds; it never describes more.
"""

from __future__ import annotations

import cv2
import numpy as np

_NUMBERS = {1: "one person is", 2: "two people are", 3: "three people are"}


class FaceCues:
    def __init__(self):
        path = cv2.data.haarcascades + "haarcascade_frontalface_default.xml"
        self.cascade = cv2.CascadeClassifier(path)
        if self.cascade.empty():
            raise RuntimeError(f"could not load {path}")

    def count_faces(self, jpeg: bytes) -> int | None:
        image = cv2.imdecode(np.frombuffer(jpeg, dtype=np.uint8), cv2.IMREAD_GRAYSCALE)
        if image is None:
            return None
        scale = 640 / max(image.shape)
        if scale < 1:
            image = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        faces = self.cascade.detectMultiScale(image, scaleFactor=1.1, minNeighbors=5, minSize=(40, 40))
        return len(faces)

    def describe(self, frames: tuple[bytes, ...]) -> str:
        counts = [c for c in (self.count_faces(f) for f in frames) if c is not None]
        if not counts:
            return ""
        faces = max(counts)
        if faces == 0:
            return "camera on: no one is facing the camera"
        who = _NUMBERS.get(faces, f"{faces} people are")
        return f"camera on: {who} facing the camera"
