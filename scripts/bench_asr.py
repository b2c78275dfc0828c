"""Benchmark ASR: Whisper base and tiny.en, 30 s window against the short window, on Piper-spoken questions.

Usage: .venv/bin/python scripts/bench_asr.py   (prints per-model medians and what each heard)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.speech import silence, spoken  # noqa: E402
from vita.config import Config  # noqa: E402
from workers.asr import WhisperTranscriber  # noqa: E402

QUESTIONS = ["What is the capital of France?", "How many legs does a spider have?", "Who wrote Romeo and Juliet?",
             "What do bees make?", "Can you tell me a joke about cats?", "What is seven times eight?"]


def main() -> int:
    models = Config().models_path()
    clips = [np.concatenate([silence(0.2), spoken(q), silence(0.3)]).tobytes() for q in QUESTIONS]
    for name in ("whisper-base", "whisper-tiny.en"):
        for short in (False, True):
            asr = WhisperTranscriber(models / name, "int8", 2, "en", 1, short_window=short)
            times, heard = [], []
            for clip in clips:
                started = time.perf_counter()
                heard.append(asr.transcribe(clip))
                times.append(time.perf_counter() - started)
            window = "short window" if short else "30 s window"
            print(f"{name:<16} {window:<13} median {statistics.median(times[1:]):.3f} s  {heard}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
