"""Finger counting and gestures as pure geometry, on hand-made 21-landmark hands (no picture, no model).

`make_hand` builds a right hand, palm to the camera, fingers up the image, in units of the palm's length (wrist to
the middle finger's knuckle), with each finger either raised (nearly straight) or curled (bent at all three
joints toward the camera, as in a fist); then rolls, turns, scales, moves it and adds jitter, as a real detector's
landmarks would vary.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from workers.vision.hand_pose import FINGERS, hand_pose

pytestmark = pytest.mark.fast

# Knuckle (MCP) positions and segment lengths (MCP->PIP, PIP->DIP, DIP->tip) of the four long fingers.
_MCP = {"index": (-0.25, -0.95), "middle": (0.0, -1.0), "ring": (0.22, -0.93), "pinky": (0.42, -0.82)}
_SEGMENTS = {"index": (0.42, 0.24, 0.21), "middle": (0.46, 0.27, 0.22), "ring": (0.42, 0.25, 0.21),
             "pinky": (0.30, 0.18, 0.17)}
_DIRECTION = {"index": (-0.10, -1.0), "middle": (0.0, -1.0), "ring": (0.08, -1.0), "pinky": (0.18, -1.0)}
_TOWARD_CAMERA = np.array([0.0, 0.0, -1.0])  # MediaPipe's z: smaller is nearer the camera
_THUMB_CMC = np.array([-0.22, -0.15, 0.0])
_THUMB_SEGMENTS = (0.33, 0.28, 0.24)
# Thumb bone directions (CMC->MCP, MCP->IP, IP->tip): sticking out sideways and up; folded over the palm;
# resting straight along the index finger (a fist's thumb).
_THUMB_POSES = {
    "raised": ((-0.62, -0.78, -0.05), (-0.60, -0.80, -0.10), (-0.55, -0.83, -0.12)),
    "folded": ((-0.30, -0.90, -0.30), (0.60, -0.50, -0.60), (0.90, -0.10, -0.40)),
    "along": ((-0.20, -1.0, -0.20), (0.10, -1.0, -0.30), (0.30, -1.0, -0.30)),
}


def _unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def _finger(mcp, direction, lengths, bends_deg) -> list[np.ndarray]:
    """MCP, PIP, DIP, tip of a finger whose joints bend by bends_deg (MCP, PIP, DIP) toward the camera."""
    base = _unit((*direction, 0.0))
    points = [np.array([*mcp, 0.0])]
    total = 0.0
    for length, bend in zip(lengths, bends_deg, strict=True):
        total += np.radians(bend)
        step = np.cos(total) * base + np.sin(total) * _TOWARD_CAMERA
        points.append(points[-1] + length * step)
    return points


def make_hand(raised: set[str], thumb: str | None = None, roll_deg: float = 0.0, yaw_deg: float = 0.0,
              scale: float = 120.0, at=(320.0, 300.0), jitter: float = 0.0, seed: int = 0,
              curl=(75.0, 100.0, 60.0), straight=(8.0, 6.0, 4.0)) -> np.ndarray:
    """(21, 3) landmarks in pixels. thumb: "raised", "folded" or "along" (default: raised if in `raised`)."""
    points = np.zeros((21, 3))
    thumb = thumb or ("raised" if "thumb" in raised else "folded")
    joint = _THUMB_CMC.copy()
    points[1] = joint
    for i, (length, direction) in enumerate(zip(_THUMB_SEGMENTS, _THUMB_POSES[thumb], strict=True)):
        joint = joint + length * _unit(direction)
        points[2 + i] = joint
    for n, finger in enumerate(("index", "middle", "ring", "pinky")):
        bends = straight if finger in raised else curl
        points[5 + 4 * n: 9 + 4 * n] = _finger(_MCP[finger], _DIRECTION[finger], _SEGMENTS[finger], bends)
    yaw, roll = np.radians(yaw_deg), np.radians(roll_deg)
    turn = np.array([[np.cos(yaw), 0, np.sin(yaw)], [0, 1, 0], [-np.sin(yaw), 0, np.cos(yaw)]])
    spin = np.array([[np.cos(roll), -np.sin(roll), 0], [np.sin(roll), np.cos(roll), 0], [0, 0, 1]])
    points = points @ turn.T @ spin.T
    rng = np.random.default_rng(seed)
    points += rng.normal(0.0, jitter, points.shape)
    return points * scale + np.array([at[0], at[1], 0.0])


ALL_SUBSETS = [set(c) for r in range(6) for c in itertools.combinations(FINGERS, r)]


@pytest.mark.parametrize("raised", ALL_SUBSETS, ids=lambda s: "+".join(sorted(s)) or "none")
def test_counts_every_combination_of_raised_fingers(raised):
    pose = hand_pose(make_hand(raised))
    assert set(pose.raised) == raised
    assert pose.count == len(raised)


@pytest.mark.parametrize("roll", [-150, -90, -35, 0, 40, 90, 180])
@pytest.mark.parametrize("yaw", [-40, 0, 35])
def test_count_holds_whatever_the_hands_roll_turn_size_and_place(roll, yaw):
    rng = np.random.default_rng(abs(roll * 7 + yaw))
    for raised in (set(), {"index"}, {"index", "middle"}, {"thumb", "index", "pinky"}, set(FINGERS)):
        scale = float(rng.uniform(40, 300))
        at = rng.uniform(0, 1200, 2)
        hand = make_hand(raised, roll_deg=roll, yaw_deg=yaw, scale=scale, at=at, jitter=0.015, seed=abs(roll + yaw))
        assert set(hand_pose(hand).raised) == raised, (roll, yaw, raised)


def test_thumb_folded_over_the_palm_or_along_the_index_is_not_raised():
    for thumb in ("folded", "along"):
        assert hand_pose(make_hand({"index", "middle"}, thumb=thumb)).raised == ("index", "middle")
        assert hand_pose(make_hand(set(), thumb=thumb)).gesture == "fist"


def test_half_curled_fingers_are_not_raised():
    claw = make_hand(set(), curl=(10.0, 55.0, 45.0))  # bent at the two upper joints only
    assert hand_pose(claw).raised == ()


def test_gestures():
    assert hand_pose(make_hand(set(FINGERS))).gesture == "open palm"
    assert hand_pose(make_hand(set())).gesture == "fist"
    assert hand_pose(make_hand({"index"})).gesture == "pointing"
    assert hand_pose(make_hand({"index", "middle"})).gesture == "victory"
    assert hand_pose(make_hand({"index", "middle", "ring"})).gesture is None


def test_thumbs_up_and_down_follow_the_thumbs_direction_in_the_image():
    # The raised thumb leans 38° left of the hand's axis: roll the fist so that it points straight up / down.
    up = hand_pose(make_hand({"thumb"}, roll_deg=38.0))
    assert up.raised == ("thumb",) and up.gesture == "thumbs up"
    down = hand_pose(make_hand({"thumb"}, roll_deg=218.0))
    assert down.gesture == "thumbs down"
    sideways = hand_pose(make_hand({"thumb"}, roll_deg=128.0))
    assert sideways.raised == ("thumb",) and sideways.gesture is None


def test_two_dimensional_landmarks_are_accepted_and_bad_shapes_refused():
    flat = make_hand({"index", "middle"})[:, :2]
    assert hand_pose(flat).raised == ("index", "middle")
    with pytest.raises(ValueError):
        hand_pose(np.zeros((20, 3)))
