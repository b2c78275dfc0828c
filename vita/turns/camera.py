"""Camera frames of one session: a short buffer, and sampling across an utterance (each picture checked already:
vita/pictures.py)."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from vita.messages import Picture


@dataclass(frozen=True)
class Frame:
    picture: Picture
    at: float  # monotonic arrival time


class FrameBuffer:
    """The last `size` frames; a gap longer than `gap_s` means the camera stopped, so older frames go."""

    def __init__(self, size: int = 8, gap_s: float = 1.0):
        self.gap_s = gap_s
        self._frames: deque[Frame] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, picture: Picture, at: float) -> None:
        with self._lock:
            if self._frames and at - self._frames[-1].at > self.gap_s:
                self._frames.clear()
            self._frames.append(Frame(picture, at))

    def __len__(self) -> int:
        with self._lock:
            return len(self._frames)

    def sample(self, start: float, end: float, count: int = 4) -> tuple[Picture, ...]:
        """Up to `count` frames spread evenly over [start, end]; frames from a stopped camera are left out."""
        with self._lock:
            frames = list(self._frames)
        if not frames or end - frames[-1].at > self.gap_s + 0.5:
            return ()
        window = [f for f in frames if start - self.gap_s <= f.at <= end + 0.5] or frames[-1:]
        if len(window) <= count:
            return tuple(f.picture for f in window)
        picks = np.linspace(0, len(window) - 1, count).round().astype(int)
        return tuple(window[i].picture for i in picks)
