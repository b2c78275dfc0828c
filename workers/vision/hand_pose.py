"""Fingers raised and simple gestures from a hand's 21 landmarks (MediaPipe's hand model numbering), as pure geometry.

Landmarks: 0 wrist; thumb 1 CMC, 2 MCP, 3 IP, 4 tip; index 5 MCP, 6 PIP, 7 DIP, 8 tip; middle 9-12; ring 13-16;
pinky 17-20. Coordinates are (x, y, z) in one unit on all three axes (pixels: MediaPipe's normalised x times the
image width, y times the height, z times the width), y pointing down the image. The rules use 3-D angles and
distances relative to the palm, so they hold whatever the hand's roll, size and place in the image.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FINGERS = ("thumb", "index", "middle", "ring", "pinky")
# (MCP, PIP, DIP, tip) of the four long fingers.
_LONG_FINGERS = {"index": (5, 6, 7, 8), "middle": (9, 10, 11, 12), "ring": (13, 14, 15, 16), "pinky": (17, 18, 19, 20)}

# A long finger is raised when its two upper joints bend less than this in all (degrees; a relaxed straight
# finger bends 10-30, a half-curled one 90 and more) and its tip lies farther from the wrist than its PIP joint.
LONG_FINGER_MAX_BEND = 70.0
# The thumb is raised when it is fairly straight (its two joints bend less than this in all, degrees), its tip is
# farther from the pinky's knuckle than its IP joint is, and its tip stands out sideways past the index finger's
# knuckle by this share of the palm's length (wrist to the middle finger's knuckle), measured across the palm from
# the pinky side to the index side: a thumb folded over the palm or resting along the index finger does not.
THUMB_MAX_BEND = 60.0
THUMB_MIN_SIDEWAYS = 0.2
# A gesture's pointing direction must be within this of straight up / down the image (degrees).
THUMB_UP_MAX_ANGLE = 50.0


@dataclass(frozen=True)
class HandPose:
    raised: tuple[str, ...]  # names of the raised fingers, thumb first
    gesture: str | None  # "thumbs up", "thumbs down", "pointing", "victory", "open palm", "fist", or None

    @property
    def count(self) -> int:
        return len(self.raised)


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    """Angle between two vectors, degrees (0 when either is null)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na < 1e-9 or nb < 1e-9:
        return 0.0
    return float(np.degrees(np.arccos(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))))


def _bend(points: np.ndarray, joints: tuple[int, ...]) -> float:
    """Sum of the bends at each inner joint of a chain of landmarks (0 for a straight chain)."""
    total = 0.0
    for before, joint, after in zip(joints, joints[1:], joints[2:], strict=False):
        total += _angle(points[joint] - points[before], points[after] - points[joint])
    return total


def long_finger_raised(points: np.ndarray, finger: str) -> bool:
    mcp, pip, dip, tip = _LONG_FINGERS[finger]
    wrist = points[0]
    straight = _bend(points, (mcp, pip, dip, tip)) < LONG_FINGER_MAX_BEND
    reaches = np.linalg.norm(points[tip] - wrist) > np.linalg.norm(points[pip] - wrist)
    return bool(straight and reaches)


def thumb_raised(points: np.ndarray) -> bool:
    along = points[9] - points[0]
    palm = float(np.linalg.norm(along))
    if palm < 1e-9:
        return False
    along /= palm
    across = points[5] - points[17]  # pinky side to index side, square to the palm's length
    across = across - np.dot(across, along) * along
    if np.linalg.norm(across) < 1e-9:
        return False
    across /= np.linalg.norm(across)
    straight = _bend(points, (1, 2, 3, 4)) < THUMB_MAX_BEND
    sideways = float(np.dot(points[4] - points[5], across)) / palm
    away = np.linalg.norm(points[4] - points[17]) > np.linalg.norm(points[3] - points[17])
    return bool(straight and away and sideways > THUMB_MIN_SIDEWAYS)


def _vertical(vector: np.ndarray) -> str | None:
    """'up' or 'down' when a 2-D image direction is within THUMB_UP_MAX_ANGLE of the vertical."""
    flat = np.array([vector[0], vector[1], 0.0])
    if _angle(flat, np.array([0.0, -1.0, 0.0])) <= THUMB_UP_MAX_ANGLE:
        return "up"
    if _angle(flat, np.array([0.0, 1.0, 0.0])) <= THUMB_UP_MAX_ANGLE:
        return "down"
    return None


def hand_pose(landmarks: np.ndarray) -> HandPose:
    """Which fingers are raised and what simple gesture they make. `landmarks`: shape (21, 3) (or (21, 2): z = 0)."""
    points = np.asarray(landmarks, dtype=np.float64)
    if points.shape == (21, 2):
        points = np.hstack([points, np.zeros((21, 1))])
    if points.shape != (21, 3):
        raise ValueError(f"a hand has 21 landmarks of 2 or 3 coordinates, got shape {points.shape}")
    raised = tuple(f for f in FINGERS if (thumb_raised(points) if f == "thumb" else long_finger_raised(points, f)))
    return HandPose(raised, _gesture(points, raised))


def _gesture(points: np.ndarray, raised: tuple[str, ...]) -> str | None:
    fingers = set(raised)
    if not fingers:
        return "fist"
    if fingers == {"thumb"}:
        # The thumb's direction from its knuckle to its tip, as seen in the image.
        direction = _vertical(points[4] - points[2])
        return f"thumbs {direction}" if direction else None
    if fingers in ({"index"}, {"thumb", "index"}):
        return "pointing"
    if fingers == {"index", "middle"}:
        return "victory"
    if fingers == set(FINGERS):
        return "open palm"
    return None
