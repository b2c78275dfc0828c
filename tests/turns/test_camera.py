"""Camera frames: data-URL decoding really checks the image, and the buffer keeps recent frames only."""

from __future__ import annotations

import base64

import cv2
import numpy as np
import pytest

from vita.turns.camera import FrameBuffer, FrameError, decode_frame, image_dimensions

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def data_url(image: bytes, media: str = "image/jpeg") -> str:
    return f"data:{media};base64," + base64.b64encode(image).decode()


def jpeg() -> bytes:
    ok, data = cv2.imencode(".jpg", np.full((48, 64, 3), 120, dtype=np.uint8))
    assert ok
    return data.tobytes()


def test_a_real_jpeg_decodes_to_its_bytes():
    assert decode_frame(data_url(jpeg()), 1_000_000) == jpeg()


@pytest.mark.parametrize("value, needle", [
    ("hello", "data URL"),
    (None, "data URL"),
    ("data:text/plain;base64,aGk=", "base64 data URL of"),
    ("data:image/jpeg,rawdata", "base64 data URL of"),
    ("data:image/jpeg;base64,@@@@", "not valid base64"),
    (data_url(b"\xff\xd8\xff\xe0 truncated"), "JPEG without a readable frame header"),
    (data_url(b"GIF89a\x01\x00\x01\x00"), "must be one of"),
    (data_url(jpeg()[: len(jpeg()) // 3]), "does not decode"),
])
def test_bad_frames_are_named(value, needle):
    with pytest.raises(FrameError, match=needle):
        decode_frame(value, 1_000_000)


def image_bomb(kind: str) -> bytes:
    """A few hundred bytes whose header claims 30000 x 30000 pixels (header patched, no pixel data)."""
    ok, data = cv2.imencode(kind, np.zeros((8, 8, 3), dtype=np.uint8))
    data = bytearray(data.tobytes())
    if kind == ".png":
        data[16:24] = (30000).to_bytes(4, "big") * 2
    else:
        sof = data.index(b"\xff\xc0")
        data[sof + 5:sof + 9] = (30000).to_bytes(2, "big") * 2
    return bytes(data[:600])


@pytest.mark.parametrize("kind, media", [(".png", "image/png"), (".jpg", "image/jpeg")])
def test_an_image_bomb_is_refused_from_its_header(kind, media):
    bomb = image_bomb(kind)
    assert image_dimensions(bomb) == (30000, 30000)
    with pytest.raises(FrameError, match="30000x30000"):
        decode_frame(data_url(bomb, media), 1_000_000, max_pixels=12_000_000)


@pytest.mark.parametrize("kind, params", [(".jpg", []), (".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]), (".png", []),
                                          (".webp", [cv2.IMWRITE_WEBP_QUALITY, 80]),
                                          (".webp", [cv2.IMWRITE_WEBP_QUALITY, 101])])
def test_dimensions_come_from_the_header_of_each_format(kind, params):
    ok, data = cv2.imencode(kind, np.zeros((37, 53, 3), dtype=np.uint8), params)
    assert image_dimensions(data.tobytes()) == (53, 37)


def test_oversized_frames_are_refused_before_decoding():
    with pytest.raises(FrameError, match="at most"):
        decode_frame(data_url(jpeg()), 100)


def test_buffer_keeps_the_last_eight_and_clears_after_a_gap():
    buffer = FrameBuffer(size=8, gap_s=1.0)
    for i in range(10):
        buffer.add(bytes([i]), i * 0.5)
    assert len(buffer) == 8
    buffer.add(b"late", 4.5 + 1.5)  # the camera paused for 1.5 s
    assert len(buffer) == 1


def test_sampling_spreads_up_to_four_frames_over_the_utterance():
    buffer = FrameBuffer()
    for i in range(8):
        buffer.add(bytes([i]), 10 + i * 0.5)  # frames at 10.0 … 13.5
    picked = buffer.sample(11.0, 13.5, 4)
    assert len(picked) == 4
    assert picked[0][0] < picked[-1][0] and picked[-1] == bytes([7])
    assert buffer.sample(11.0, 11.2, 4)  # a short utterance still gets the frames around it


def test_no_frames_from_a_camera_that_stopped_long_ago():
    buffer = FrameBuffer()
    buffer.add(b"old", 1.0)
    assert buffer.sample(20.0, 22.0) == ()


def test_a_sessions_images_are_charged_their_pixels_before_they_are_decoded():
    """Checking that an image decodes costs ~3 ms a megapixel: small files of many pixels could take a core."""
    import time

    from vita.rate_budget import RateBudget
    from vita.turns.camera import FrameOverBudget

    ok, png = cv2.imencode(".png", np.zeros((1000, 1000), np.uint8))  # 1 MP, a few KB
    url = "data:image/png;base64," + base64.b64encode(png.tobytes()).decode()
    budget = RateBudget(0.5, 2.0, time.monotonic())  # megapixels: a second's worth, then 0.5 a second
    assert decode_frame(url, 10**7, budget=budget) and decode_frame(url, 10**7, budget=budget)
    with pytest.raises(FrameOverBudget):
        decode_frame(url, 10**7, budget=budget)
    assert decode_frame(url, 10**7)  # without a budget (an operator's own check), as before
