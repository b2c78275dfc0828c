"""Evaluate the vision stage (workers/vision/) on real photos and rendered signs, with a typed question each.

Each item is a camera frame (a scikit-image photo, or a sign rendered with cv2.putText over one, sent as JPEG like
the page's camera), a question, and what the describer's answer must contain (and must not). It prints each
answer, right/wrong, accuracy per part, then each part's set-up time and its latency on 640×480 and 1280×768
frames (median of --repeat runs), on this CPU.

    .venv/bin/python -m scripts.eval.vision                 # everything enabled
    .venv/bin/python -m scripts.eval.vision --parts text,objects --repeat 3
    .venv/bin/python -m scripts.eval.vision --json results.json

Needs the vision packages (docs/vision.md) and scikit-image (its wheel carries the photos).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.workers.vision.pictures import jpeg, photo, resized, sign
from workers.vision.frames import to_bgr
from workers.vision.scene import SceneDescriber, VisionConfig


@dataclass
class Item:
    part: str  # what the question is about: text, objects, people, hands, summary
    question: str | None
    picture: str  # a description of the frame, for the report
    frame: bytes
    must: str  # a regular expression the answer must match (case-insensitive)
    must_not: str | None = None  # one it must not match


def photo_frame(name: str, size=(640, 480)) -> bytes:
    return jpeg(resized(photo(name), size))


def items() -> list[Item]:
    wide = (1280, 768)
    return [
        # Text: read verbatim.
        Item("text", "What does the sign say?", "sign PLATFORM 9 on coffee.png 640x480",
             jpeg(sign(["PLATFORM 9"])), r'"PLATFORM 9"'),
        Item("text", "Read this for me", "sign NO ENTRY / Staff only on rocket.jpg 1280x768",
             jpeg(sign(["NO ENTRY", "Staff only"], size=wide, background="rocket.jpg")),
             r'"NO ENTRY" / "Staff only"'),
        Item("text", "What's written here?", "sign Gate B12 / Boarding 14:05 on astronaut.png 640x480",
             jpeg(sign(["Gate B12", "Boarding 14:05"], background="astronaut.png", scale=1.0)),
             r'"Gate B12" / "Boarding 14:05"'),
        Item("text", "What does the page say?", "page.png 640x480", photo_frame("page.png"),
             r'"Region-based segmentation"'),
        # Hard: the tank's YAMAHA logo, letters ~12 px high. Read from the PNG (score 0.80), lost to JPEG.
        Item("text", "What does it say on the tank?", "motorcycle_left.png as JPEG, 741x500 (small logo: hard)",
             jpeg(photo("motorcycle_left.png")), r'"YAMAHA"'),
        Item("text", "What does it say?", "chelsea.png (no text) 640x480", photo_frame("chelsea.png"),
             r"no text visible", r'text read'),
        # Objects: name the main thing.
        Item("objects", "What is this?", "coffee.png 640x480", photo_frame("coffee.png"), r"coffee|espresso|cup"),
        Item("objects", "What am I holding?", "coffee.png 1280x768", photo_frame("coffee.png", wide),
             r"coffee|espresso|cup"),
        Item("objects", "What is this?", "motorcycle_left.png 640x480", photo_frame("motorcycle_left.png"),
             r"moped|motor"),
        Item("objects", "What animal is this?", "chelsea.png 640x480", photo_frame("chelsea.png"), r"\bcat\b"),
        Item("objects", "What is that?", "rocket.jpg 1280x768", photo_frame("rocket.jpg", wide),
             r"rocket|missile|shuttle|projectile"),
        Item("objects", "What is this?", "astronaut.png (a portrait) 640x480", photo_frame("astronaut.png"),
             r"no object recognised", r"main object"),
        # People: how many, looking at the camera or not.
        Item("people", "Can you see me?", "astronaut.png 640x480", photo_frame("astronaut.png"),
             r"one person, looking at the camera"),
        Item("people", "Can you see me?", "astronaut.png 1280x768", photo_frame("astronaut.png", wide),
             r"one person, looking at the camera"),
        Item("people", "Is anyone looking at the camera?", "camera.png (cameraman) 640x480",
             photo_frame("camera.png"), r"one person, not looking at the camera"),
        Item("people", "Is anybody there?", "coffee.png 640x480", photo_frame("coffee.png"), r"no one visible"),
        Item("people", "How many people are there?", "rocket.jpg 640x480", photo_frame("rocket.jpg"),
             r"no one visible"),
        # Hands: no package ships a photo of a hand; only the absence is checked on real photos here (finger
        # counting is tested as geometry in tests/workers/vision/test_vision_hand_pose.py).
        Item("hands", "How many fingers am I holding up?", "coffee.png 640x480", photo_frame("coffee.png"),
             r"no hands visible", r"finger"),
        Item("hands", "Am I giving a thumbs up?", "astronaut.png 640x480", photo_frame("astronaut.png"),
             r"no hands visible", r"thumbs"),
        # Summaries: what was found, and nothing about what was not.
        Item("summary", "What do you see?", "astronaut.png 640x480", photo_frame("astronaut.png"),
             r"one person", r"no text|no hands|no object|no one"),
        Item("summary", None, "sign EXIT 4 on chelsea.png 1280x768",
             jpeg(sign(["EXIT 4"], size=wide, background="chelsea.png")), r'"EXIT 4"', r"no text|no hands|no one"),
        Item("summary", "What's in front of you?", "coffee.png 640x480", photo_frame("coffee.png"),
             r"coffee|espresso", r"no text|no hands|no one"),
    ]


def evaluate(describer: SceneDescriber, chosen: list[Item]) -> list[dict]:
    results = []
    for item in chosen:
        describer.scene = None  # every item reads its frame afresh: honest latencies
        describer.cache_change.reset()
        started = time.perf_counter()
        answer = describer.describe(item.question, item.frame)
        seconds = time.perf_counter() - started
        ok = bool(re.search(item.must, answer, re.I)) and not (
            item.must_not and re.search(item.must_not, answer, re.I))
        results.append({"part": item.part, "question": item.question, "picture": item.picture, "answer": answer,
                        "ok": ok, "seconds": round(seconds, 3),
                        "parts_ran": {k: round(v, 3) for k, v in describer.scene.seconds.items()}})
        print(f"{'RIGHT' if ok else 'WRONG'}  {seconds:5.2f}s  [{item.part}] {item.question!r} on {item.picture}\n"
              f"        -> {answer}")
    return results


def latencies(describer: SceneDescriber, repeat: int) -> dict:
    """Each part alone on three photos at two frame sizes: median seconds per frame."""
    out: dict[str, dict[str, float]] = {}
    names = ("coffee.png", "astronaut.png", "motorcycle_left.png")
    runs = {"text": describer.text and describer.text.read,
            "objects": describer.objects and describer.objects.classify,
            "people+hands": describer.people and describer.people.look}
    for size in ((640, 480), (1280, 768)):
        frames = [to_bgr(jpeg(resized(photo(n), size))) for n in names]
        frames.append(to_bgr(jpeg(sign(["PLATFORM 9", "Next train 10:42"], size=size))))
        for part, run in runs.items():
            if not run:
                continue
            times = []
            for frame in frames:
                run(frame)  # warm for this frame size
                for _ in range(repeat):
                    started = time.perf_counter()
                    run(frame)
                    times.append(time.perf_counter() - started)
            out.setdefault(part, {})[f"{size[0]}x{size[1]}"] = round(statistics.median(times), 3)
        change = describer.change
        started = time.perf_counter()
        for _ in range(50):
            change.compare(frames[0])
        out.setdefault("change check", {})[f"{size[0]}x{size[1]}"] = round((time.perf_counter() - started) / 50, 4)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="text,objects,people,hands",
                        help="comma-separated parts to enable (text, objects, people, hands)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per frame for the latency table")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    config = VisionConfig(text="text" in parts, objects="objects" in parts, people="people" in parts,
                          hands="hands" in parts)
    describer = SceneDescriber(config)
    started = time.perf_counter()
    setup = describer.setup()
    print(f"set-up: {time.perf_counter() - started:.2f} s in all: "
          + ", ".join(f"{k} {v:.2f} s" for k, v in setup.items()))
    if describer.people is not None:
        print(f"people backend: {describer.people.active} (hands {'on' if describer.people.hands_enabled else 'off'})")
    print()
    asked = {"summary"} | parts
    chosen = [i for i in items() if i.part in asked]
    results = evaluate(describer, chosen)
    print("\naccuracy")
    by_part: dict[str, list[bool]] = {}
    for r in results:
        by_part.setdefault(r["part"], []).append(r["ok"])
    for part, oks in by_part.items():
        print(f"  {part:8s} {sum(oks)}/{len(oks)}")
    total = sum(r["ok"] for r in results)
    print(f"  {'all':8s} {total}/{len(results)} ({100 * total / max(1, len(results)):.0f} %)")
    table = latencies(describer, args.repeat)
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    print(f"\nlatency per frame, median of {args.repeat} runs x 4 frames ({cpu}, {os.cpu_count()} CPUs, 1 thread each)")
    for part, sizes in table.items():
        print(f"  {part:13s} " + "  ".join(f"{size}: {value * 1000:7.1f} ms" for size, value in sizes.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"setup_s": setup, "results": results, "latency_s": table}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
