"""OCR with the real RapidOCR models from the rapidocr wheel, on rendered signs and scikit-image's printed page."""

from __future__ import annotations

import pytest

from tests.workers.vision.pictures import photo, resized, sign
from workers.vision.ocr import TextReader


def test_setup_uses_the_bundled_models_and_never_downloads(monkeypatch):
    from rapidocr.utils import download_file

    def refuse(*_args, **_kwargs):
        raise AssertionError("RapidOCR tried to download a model")

    monkeypatch.setattr(download_file.DownloadFile, "run", staticmethod(refuse))
    reader = TextReader()
    reader.setup()
    assert reader.read(sign(["EXIT"])).rows() == ["EXIT"]
    assert reader.model_dir().name == "models"


@pytest.mark.parametrize("size", [(640, 480), (1280, 768)])
@pytest.mark.parametrize("lines, background", [
    (["PLATFORM 9"], "coffee.png"),
    (["PLATFORM 9", "Next train 10:42"], "rocket.jpg"),
    (["NO ENTRY", "Staff only"], "astronaut.png"),
    (["Gate B12", "Boarding 14:05"], "motorcycle_left.png"),
])
def test_reads_a_rendered_sign_exactly_in_reading_order(text_reader, size, lines, background):
    reading = text_reader.read(sign(lines, size=size, background=background))
    assert reading.rows() == lines
    assert all(line.score > 0.9 for line in reading.lines)


def test_two_signs_side_by_side_read_left_then_right_on_one_row(text_reader):
    import cv2

    frame = resized(photo("chelsea.png"), (1280, 768))
    for x, text in ((80, "LEFT 1"), (760, "RIGHT 2")):
        cv2.rectangle(frame, (x - 14, 300 - 40), (x + 250, 300 + 14), (250, 250, 250), -1)
        cv2.putText(frame, text, (x, 300), cv2.FONT_HERSHEY_SIMPLEX, 1.2, (20, 20, 20), 2, cv2.LINE_AA)
    reading = text_reader.read(frame)
    assert reading.rows() == ["LEFT 1 RIGHT 2"]
    assert [line.text for line in reading.lines] == ["LEFT 1", "RIGHT 2"]


def test_reads_a_printed_page_line_by_line(text_reader):
    """skimage's page.png: a scanned page of the scikit-image tutorial (grey, 384×191)."""
    rows = text_reader.read(photo("page.png")).rows()
    assert rows[0] == "Region-based segmentation"
    assert rows[1] == "Let us first determine markers of the coins and the"
    assert len(rows) == 7


def test_text_on_a_real_object_is_read(text_reader):
    """The motorcycle's tank says YAMAHA."""
    rows = text_reader.read(photo("motorcycle_left.png")).rows()
    assert rows == ["YAMAHA"]


@pytest.mark.parametrize("name", ["coffee.png", "chelsea.png", "astronaut.png", "rocket.jpg", "camera.png"])
def test_photos_without_text_read_nothing(text_reader, name):
    assert text_reader.read(photo(name)).lines == ()


def test_box_coordinates_are_in_frame_pixels(text_reader):
    frame = sign(["PLATFORM 9"], size=(1280, 768), at=0.5)
    (line,) = text_reader.read(frame).lines
    x0, y0, x1, y1 = line.box
    assert 0 < x0 < 640 < x1 < 1280
    assert 300 < y0 < 384 < y1 < 420
