"""Pictures a client sends: data-URL decoding really checks the image, its cost is read from its structure first."""

from __future__ import annotations

import base64
import contextlib
import time
import zlib

import cv2
import numpy as np
import pytest

from tests.harness import hostile_images
from vita.pictures import (
    MAX_JPEG_SCANS,
    FrameError,
    FrameOverBudget,
    check_picture,
    decode_frame,
    image_dimensions,
    image_layout,
)
from vita.rate_budget import RateBudget

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def data_url(image: bytes, media: str = "image/jpeg") -> str:
    return f"data:{media};base64," + base64.b64encode(image).decode()


def jpeg() -> bytes:
    ok, data = cv2.imencode(".jpg", np.full((48, 64, 3), 120, dtype=np.uint8))
    assert ok
    return data.tobytes()


def test_a_real_jpeg_is_checked_to_its_bytes():
    picture = decode_frame(data_url(jpeg()), 1_000_000)
    assert picture.image == jpeg() and picture.signature == b""  # (the vision stage makes it when it decodes)


def png_noise() -> bytes:
    ok, data = cv2.imencode(".png", np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8))
    assert ok
    return data.tobytes()


@pytest.mark.parametrize("value, needle", [
    ("hello", "data URL"),
    (None, "data URL"),
    ("data:text/plain;base64,aGk=", "base64 data URL of"),
    ("data:image/jpeg,rawdata", "base64 data URL of"),
    ("data:image/jpeg;base64,@@@@", "not valid base64"),
    (data_url(b"\xff\xd8\xff\xe0 truncated"), "JPEG without a readable frame header"),
    (data_url(b"GIF89a\x01\x00\x01\x00"), "must be one of"),
    (data_url(jpeg()[: len(jpeg()) // 3]), "without picture data"),
    (data_url(png_noise()[: len(png_noise()) // 2], "image/png"), "PNG cut short"),
    (data_url(png_noise()[:50] + bytes([png_noise()[50] ^ 1]) + png_noise()[51:], "image/png"), "damaged 'IDAT' chunk"),
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
        data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")  # a well-formed header that lies
        return bytes(data)
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


def test_a_sessions_images_are_charged_their_pixels_before_they_are_decoded():
    """Checking that an image decodes costs ~1 ms a megapixel: small files of many pixels could take a core."""
    url = data_url(hostile_images.jpeg(1000, 1000, flat=True))  # 1 MP, a few KB
    budget = RateBudget(0.001, 2.0, time.monotonic())  # megapixels: two, refilled too slowly for a pause to matter
    assert decode_frame(url, 10**7, budget=budget) and decode_frame(url, 10**7, budget=budget)
    with pytest.raises(FrameOverBudget):
        decode_frame(url, 10**7, budget=budget)
    assert decode_frame(url, 10**7)  # without a budget (an operator's own check), as before


@pytest.mark.parametrize("image, times", [
    (hostile_images.jpeg(1000, 1000, progressive=True), 1.8),  # a progressive JPEG's ten scans: ~2x a baseline's
    (cv2.imencode(".png", np.zeros((1000, 1000), np.uint8))[1].tobytes(), 4.0),
])
def test_a_picture_is_charged_what_decoding_it_costs_not_its_pixels(image, times):
    layout = image_layout(image)
    assert layout.megapixels == 1.0 and layout.cost >= times
    budget = RateBudget(1.0, 2 * times, time.monotonic())
    assert decode_frame(data_url(image, "image/png" if image[1:4] == b"PNG" else "image/jpeg"), 10**7,
                        budget=budget)
    assert budget.left <= times  # (a baseline JPEG of the same pixels leaves 2 * times - 1)


def test_a_progressive_jpeg_counts_its_scans():
    layout = image_layout(hostile_images.jpeg(320, 240, progressive=True))
    assert layout.progressive and 6 <= layout.scans <= 12 and (layout.width, layout.height) == (320, 240)
    baseline = image_layout(hostile_images.jpeg(320, 240))
    assert not baseline.progressive and baseline.scans == 1 and baseline.cost == pytest.approx(0.0768)


def test_a_scan_bomb_is_refused_before_any_decoding():
    """Thousands of 10-byte empty scans: seconds of libjpeg for a 130 KB frame, on the thread of every camera."""
    bomb = hostile_images.scan_bomb(4000, 3000, 5000)
    started = time.perf_counter()
    with pytest.raises(FrameError, match=f"more than {MAX_JPEG_SCANS} scans"):
        decode_frame(data_url(bomb), 10**7)
    assert time.perf_counter() - started < 0.25  # refused from its structure (decoding it takes seconds)
    refused = hostile_images.scan_bomb(400, 300, MAX_JPEG_SCANS)
    with pytest.raises(FrameError, match="scans"):
        decode_frame(data_url(refused), 10**7)
    assert decode_frame(data_url(hostile_images.scan_bomb(400, 300, MAX_JPEG_SCANS - 12)), 10**7).image


def test_a_jpeg_of_thousands_of_segments_is_refused():
    with pytest.raises(FrameError, match="segments"):
        decode_frame(data_url(hostile_images.marker_flood(segments=5000)), 10**7)


def test_a_png_whose_text_inflates_to_gigabytes_is_refused():
    """libpng inflates each zTXt chunk up to 8 MB (17 ms): 200 of them took seconds."""
    with pytest.raises(FrameError, match="compressed text"):
        decode_frame(data_url(hostile_images.packed_text_png(chunks=200), "image/png"), 10**7)
    one = image_layout(hostile_images.packed_text_png(chunks=1))
    assert one.packed > 7000 and one.cost > 10  # one such chunk is allowed, and charged what inflating it costs


@pytest.mark.parametrize("damage, needle", [
    (lambda b: b[:2] + b"\x00\x00" + b[2:], "between its markers"),
    (lambda b: b[:b.index(b"\xff\xda")] + b[b.index(b"\xff\xc0"):b.index(b"\xff\xc4")] + b[b.index(b"\xff\xda"):],
     "two frame headers"),
])
def test_broken_jpeg_structures_are_named(damage, needle):
    with pytest.raises(FrameError, match=needle):
        image_layout(damage(jpeg()))


def test_a_jpeg_without_a_scan_is_refused():
    with pytest.raises(FrameError, match="without picture data"):
        decode_frame(data_url(jpeg()[:jpeg().index(b"\xff\xda")] + b"\xff\xd9"), 10**6)  # tables, then its end


def test_an_animated_webp_is_refused():
    ok, data = cv2.imencode(".webp", np.zeros((37, 53, 3), np.uint8), [cv2.IMWRITE_WEBP_QUALITY, 80])
    simple = data.tobytes()  # a "VP8 " file: rewrapped as VP8X with the animation flag set
    vp8x = b"VP8X" + (10).to_bytes(4, "little") + bytes([0x02, 0, 0, 0]) + (52).to_bytes(3, "little") + \
        (36).to_bytes(3, "little")
    body = b"WEBP" + vp8x + simple[12:]
    animated = b"RIFF" + len(body).to_bytes(4, "little") + body
    assert image_dimensions(simple) == (53, 37)
    with pytest.raises(FrameError, match="animated"):
        image_layout(animated)


def test_a_png_with_every_chunk_intact_passes_and_a_webp_cut_short_does_not():
    assert decode_frame(data_url(png_noise(), "image/png"), 10**7).image == png_noise()
    ok, webp = cv2.imencode(".webp", np.zeros((37, 53, 3), np.uint8), [cv2.IMWRITE_WEBP_QUALITY, 80])
    with pytest.raises(FrameError, match="WebP cut short"):
        image_layout(webp.tobytes()[:-10])


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


def test_an_animated_png_is_refused():
    """OpenCV decodes every frame of an APNG: 100 frames of 1600x1200 took half a second, charged as one."""
    still = png_noise()
    animated = still[:33] + png_chunk(b"acTL", (2).to_bytes(4, "big") + bytes(4)) + still[33:]
    with pytest.raises(FrameError, match="animated PNG"):
        decode_frame(data_url(animated, "image/png"), 10**7)


@pytest.mark.parametrize("marker", [0xC3, 0xC9, 0xCA, 0xCB])  # lossless, arithmetic-coded (sequential,
def test_a_jpeg_of_a_kind_no_camera_writes_is_refused(marker):  # progressive, lossless)
    data = bytearray(jpeg())
    data[data.index(b"\xff\xc0") + 1] = marker
    with pytest.raises(FrameError, match="kind cameras do not write"):
        image_layout(bytes(data))
    twelve_bit = bytearray(jpeg())
    twelve_bit[twelve_bit.index(b"\xff\xc0") + 4] = 12
    with pytest.raises(FrameError, match="12-bit"):
        image_layout(bytes(twelve_bit))


def test_a_jpeg_of_many_bytes_for_its_pixels_is_charged_its_bytes():
    """Entropy decoding grows with the bytes: 1.6 MB of 1.9 MP at quality 95 cost 4.2 baseline megapixels."""
    noisy = np.random.default_rng(0).integers(0, 255, (600, 800, 3), dtype=np.uint8)
    dense = cv2.imencode(".jpg", noisy, [cv2.IMWRITE_JPEG_QUALITY, 100])[1].tobytes()
    layout = image_layout(dense)
    assert layout.megapixels == 0.48 and len(dense) > 500_000 and layout.cost == pytest.approx(len(dense) / 200_000)


def test_a_png_is_charged_for_its_depth_and_rows():
    wide = cv2.imencode(".png", np.zeros((48, 64, 4), np.uint16))[1].tobytes()  # RGBA at 16 bits
    narrow = cv2.imencode(".png", np.zeros((3000, 1), np.uint8))[1].tobytes()
    assert image_layout(wide).cost == pytest.approx(64 * 48 / 1e6 * 8 * 8 / 3 + 48 * 2e-5)
    assert image_layout(narrow).cost > 2.5 * 3000 / 1e6 * 8  # (its rows: a 1x1,000,000 PNG cost 2.6x its pixels')


def test_a_progressive_cmyk_jpeg_of_its_eighteen_scans_passes():
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("CMYK", (64, 48), (10, 20, 30, 40)).save(out, "JPEG", progressive=True)
    layout = image_layout(out.getvalue())
    assert layout.progressive and layout.scans > MAX_JPEG_SCANS


@pytest.mark.parametrize("kind, params", [(".jpg", []), (".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]), (".png", []),
                                          (".webp", [cv2.IMWRITE_WEBP_QUALITY, 80]),
                                          (".webp", [cv2.IMWRITE_WEBP_QUALITY, 101])])
def test_every_cut_and_many_damaged_copies_of_a_picture_give_a_clear_error_or_pass(kind, params):
    """The structure is read from bytes anyone can send: no prefix or damage may raise anything but FrameError."""
    whole = cv2.imencode(kind, hostile_images.photo(40, 30), params)[1].tobytes()
    rng = np.random.default_rng(1)
    damaged = []
    for _ in range(300):
        copy = bytearray(whole)
        for at in rng.integers(0, len(copy), rng.integers(1, 4)):
            copy[at] = int(rng.integers(0, 256))
        damaged.append(bytes(copy))
    cuts = [whole[:n] for n in range(len(whole) + 1)]
    if whole[:4] == b"RIFF":  # ...and cut with its size field saying so
        cuts += [b"RIFF" + max(0, n - 8).to_bytes(4, "little") + whole[8:n] for n in range(8, len(whole) + 1)]
    for image in cuts + damaged + [b"RIFF\x04\x00\x00\x00WEBPVP8X"]:
        with contextlib.suppress(FrameError):
            check_picture(image)
