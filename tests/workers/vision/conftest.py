"""Each vision part loaded once per test session (pictures: tests/workers/vision/pictures.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def text_reader():
    from workers.vision.ocr import TextReader

    reader = TextReader()
    reader.setup()
    return reader


@pytest.fixture(scope="session")
def object_classifier(tmp_path_factory):
    from workers.vision.objects import ObjectClassifier

    classifier = ObjectClassifier()
    classifier.setup()
    return classifier


@pytest.fixture(scope="session")
def people_and_hands():
    from workers.vision.people import PeopleAndHands

    part = PeopleAndHands(backend="auto")
    part.setup()
    return part
