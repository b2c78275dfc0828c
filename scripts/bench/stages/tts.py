"""Benchmark the TTS stage: time from a piece arriving to its first 24 kHz chunk, and the real-time factor.

Runs the real TTS worker process with the bundled Piper voice through real Manager queues.
Usage: .venv/bin/python -m scripts.bench.stages.tts [--runs 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from scripts.bench.common import percentile, start_worker
from vita.config import Config
from vita.messages import Shutdown, TtsChunk, TtsPiece, TurnTimings
from workers.tts.worker import run_tts_worker

PIECES = [
    "Sure,",
    "The capital of France is Paris.",
    "It is about 3.5 km from the station, and the museum opens at 10:00.",
    "Hi! I'm Vita, your voice assistant. How can I help?",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    config = Config()
    manager, queues, worker, _ = start_worker(run_tts_worker, "tts", config, daemon=True)
    rows = []
    turn = 0
    for run in range(args.runs):
        for text in PIECES:
            turn += 1
            sent = time.monotonic()  # (a session per run: a phrase said again in one session is not synthesized)
            queues["tts"].put(TtsPiece(f"bench-{run}", turn, 0, text, last=True))
            first = None
            while True:
                message = queues["outputs"].get(timeout=60)
                if isinstance(message, TtsChunk) and message.pcm and first is None:
                    first = time.monotonic() - sent
                if isinstance(message, TurnTimings):
                    rows.append({"text": text, "first_chunk_s": first, **message.timings})
                    break
    queues["tts"].put(Shutdown())
    worker.join(timeout=10)
    manager.shutdown()
    firsts = [r["first_chunk_s"] for r in rows]
    rtfs = [r["rtf"] for r in rows]
    summary = {
        "chunk_ms": config.tts.chunk_ms,
        "first_chunk_s_p50": statistics.median(firsts),
        "first_chunk_s_p90": percentile(firsts, 0.9),
        "rtf_p50": statistics.median(rtfs),
        "runs": len(rows),
    }
    print(f"{'piece':<70} {'first chunk':>12} {'audio':>7} {'RTF':>6}")
    for r in rows[: len(PIECES)]:
        print(f"{r['text'][:68]:<70} {r['first_chunk_s'] * 1000:>9.0f} ms {r['audio_s']:>5.2f} s {r['rtf']:>6.3f}")
    p50, p90 = summary["first_chunk_s_p50"] * 1000, summary["first_chunk_s_p90"] * 1000
    print(f"first chunk p50 {p50:.0f} ms, p90 {p90:.0f} ms;"
          f" RTF p50 {summary['rtf_p50']:.3f} over {len(rows)} pieces; chunk {config.tts.chunk_ms} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
