"""The vision stage's models: a camera frame -> a short factual description for a text-only model.

Parts, each loadable on its own (workers/vision/scene.py VisionConfig switches them): text (ocr.TextReader,
RapidOCR), objects (objects.ObjectClassifier, EfficientNet-Lite0 on ImageNet-1k), people and hands
(people.PeopleAndHands, MediaPipe or OpenCV's Haar cascade). scene.SceneDescriber runs them and renders what they
found for a question. Importing this package loads no model and imports none of the model packages.
"""

from workers.vision.frames import ChangeDetector, VisionSetupError, to_bgr
from workers.vision.scene import SceneDescriber, VisionConfig, focus_of, render

__all__ = ["ChangeDetector", "SceneDescriber", "VisionConfig", "VisionSetupError", "focus_of", "render", "to_bgr"]
