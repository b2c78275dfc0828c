"""What one picture costs the server, by kind, against a baseline JPEG of the same pixels: the front's check (its
structure read; nothing decoded) and the vision stage's one decode, each the best of --repeat runs on this CPU. A
refused picture costs only the reading of its structure. No model, no server.

Usage: .venv/bin/python -m scripts.bench.stages.image_cost [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import cv2

from tests.harness import hostile_images
from vita.pictures import MAX_JPEG_SCANS, FrameError, check_picture, image_layout
from workers.vision.stage import decode_pixels


def best_ms(work: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return 1000 * best


def encoded(ext: str, width: int, height: int, params: list[int] | None = None) -> bytes:
    ok, data = cv2.imencode(ext, hostile_images.photo(width, height), params or [])
    assert ok
    return data.tobytes()


def pictures(width: int, height: int) -> dict[str, bytes]:
    scans = MAX_JPEG_SCANS - 10  # the most extra empty scans a picture may carry (it has 10 of its own)
    return {
        "baseline JPEG": hostile_images.jpeg(width, height),
        "progressive JPEG": hostile_images.jpeg(width, height, progressive=True),
        f"progressive + {scans} empty scans": hostile_images.jpeg(width, height, progressive=True)[:-2]
        + hostile_images.EMPTY_AC_SCAN * scans + b"\xff\xd9",
        "PNG": encoded(".png", width, height),
        "WebP": encoded(".webp", width, height, [cv2.IMWRITE_WEBP_QUALITY, 80]),
        "scan bomb (5,000 scans)": hostile_images.scan_bomb(width, height, 5000),
        "marker flood (20,000)": hostile_images.marker_flood(width, height, 20_000),
    }


def cost(image: bytes, repeat: int) -> dict:
    try:
        check_picture(image, max_pixels=10**9)
    except FrameError as exc:
        return {"refused": str(exc), "check_ms": best_ms(lambda: _refuse(image), repeat), "decode_ms": 0.0}
    return {"refused": None, "cost_units": round(image_layout(image).cost, 2),
            "check_ms": best_ms(lambda: check_picture(image, max_pixels=10**9), repeat),
            "decode_ms": best_ms(lambda: decode_pixels(image), repeat)}


def _refuse(image: bytes) -> None:
    with contextlib.suppress(FrameError):
        check_picture(image, max_pixels=10**9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args()
    rows = []
    for width, height in ((1280, 768), (4000, 3000)):
        base = None
        for name, image in pictures(width, height).items():
            row = {"size": f"{width}x{height}", "kind": name, "bytes": len(image), **cost(image, args.repeat)}
            total = row["check_ms"] + row["decode_ms"]
            base = base or total
            row["vs_baseline"] = round(total / base, 2)
            rows.append(row)
            print(f"{row['size']:>9} {name:32} {len(image):>9} B  check {row['check_ms']:7.1f} ms  decode"
                  f" {row['decode_ms']:7.1f} ms  = {row['vs_baseline']:5.2f}x baseline"
                  f"  {'refused: ' + row['refused'] if row['refused'] else ''}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
