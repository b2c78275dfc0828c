"""Benchmark the LLM worker: ASR time, first token, first piece and tokens/s for spoken questions.

Runs the real LLM worker process (faster-whisper + vLLM with the bundled models) through real Manager queues,
as the server does. The first turn after start-up is reported too but left out of the medians.
Usage: .venv/bin/python -m scripts.bench.stages.llm [--runs 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from scripts.bench.common import start_worker
from tests.harness.speech import RATE, silence, spoken
from vita.config import Config
from vita.messages import (
    Shutdown,
    Transcript,
    TurnEnded,
    TurnRequest,
    TurnTimings,
)
from workers.llm.worker import run_llm_worker

QUESTIONS = ["What is the capital of France?", "Hello, how are you today?", "Please tell me a joke about cats.",
             "Good morning! Can you tell me what the weather is like in spring and in summer?"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    config = Config()
    manager, queues, worker, ready_s = start_worker(run_llm_worker, "requests", config, daemon=False)
    rows = []
    for run in range(args.runs):
        for i, question in enumerate(QUESTIONS):
            audio = spoken(question)
            pcm = (silence(0.2).tobytes() + audio.tobytes() + silence(0.3).tobytes())
            session = f"bench-{run}-{i}"  # a fresh session: no history, like a first question
            queues["requests"].put(TurnRequest(session, 1, audio=pcm, sample_rate=RATE))
            row = {"question": question, "audio_s": len(audio) / RATE}
            while True:
                message = queues["outputs"].get(timeout=120)
                if isinstance(message, Transcript):
                    row["transcript"] = message.text
                elif isinstance(message, TurnTimings):
                    row.update(message.timings)
                elif isinstance(message, TurnEnded):
                    break
            rows.append(row)
            while not queues["tts"].empty():
                queues["tts"].get()
    queues["requests"].put(Shutdown())
    worker.join(timeout=30)
    manager.shutdown()
    print(f"engine ready after {ready_s:.1f} s")
    print(f"{'question':<48} {'ASR':>6} {'1st tok':>8} {'1st piece':>9} {'tok/s':>6}  transcript")
    for r in rows:
        print(f"{r['question'][:46]:<48} {r['asr_s']:>5.2f}s {r['first_token_s']:>7.2f}s {r['first_piece_s']:>8.2f}s"
              f" {r['tokens_per_s']:>6.1f}  {r.get('transcript', '')!r}")
    steady = rows[1:]
    medians = {k: statistics.median(r[k] for r in steady)
               for k in ("asr_s", "first_token_s", "first_piece_s", "tokens_per_s")}
    print("median (first turn left out): " + ", ".join(f"{k} {v:.2f}" for k, v in medians.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"ready_s": ready_s, "rows": rows, "medians": medians}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
