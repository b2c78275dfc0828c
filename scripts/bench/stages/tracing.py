"""Benchmark what traces cost a turn, in each process, on the turn's own path: the front's session spans (turn,
vad, end_of_turn, delivery, the workers' news), the LLM worker's (asr, vision, llm, a tool) and the TTS worker's
(tts), with tracing off and on. On, spans go out as the server sends them: the SDK's batch processor and OTLP/HTTP
exporter, to a local collector (tests/harness/otlp_collector.py), whose export thread runs beside the turns.

No server: the code the stages run, timed for many turns. Usage:
.venv/bin/python -m scripts.bench.stages.tracing [--turns 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from scripts.bench.common import cpu_description, summary_ms
from tests.harness.otlp_collector import OtlpCollector
from vita.messages import ReplyText, Transcript
from vita.ops.session_trace import SessionTrace
from vita.ops.tracing import Tracing
from workers.llm.turn_steps import generation_attributes, heard_attributes

TIMINGS = {"asr_s": 0.41, "asr_logprob": -0.2, "prompt_tokens": 212.0, "cached_tokens": 180.0, "tokens": 18.0,
           "first_token_s": 0.21, "first_piece_s": 0.33, "tokens_per_s": 9.5, "context_turns": 3.0}


def one_turn(front: Tracing, llm: Tracing, tts: Tracing, session: SessionTrace, turn_id: int) -> dict[str, float]:
    """One turn's tracing calls, as each process makes them; the seconds each process spent in them."""
    now = time.monotonic()
    speech = SimpleNamespace(started_at=now - 2.0, ended_at=now - 0.3)
    run = SimpleNamespace(user_text="what is the capital of France", timings=TIMINGS, misheard=False)
    took = {}
    t = time.perf_counter()
    carrier = session.started(turn_id, speech, "speech", speculative=True)
    session.committed(turn_id, speech)
    took["front"] = time.perf_counter() - t
    t = time.perf_counter()
    with llm.stage("asr", carrier, {"vita.asr.model": "whisper-base"}) as span:
        llm.note(span, heard_attributes(run, llm.said(run.user_text)))
    llm.record("vision", carrier, now - 0.5, attributes={"vita.vision.frames": 2, "vita.vision.seen": True})
    with llm.stage("llm", carrier, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "qwen"}) as model:
        llm.record("execute_tool calculate", model, time.monotonic() - 0.01,
                   attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calculate"})
        llm.note(model, generation_attributes(TIMINGS, llm.said("Paris.")))
    took["llm"] = time.perf_counter() - t
    t = time.perf_counter()
    tts.record("tts", carrier, now - 0.2, attributes={"vita.tts.voice": "joe-us", "vita.tts.pieces": 2,
                                                      "vita.interrupted": False})
    took["tts"] = time.perf_counter() - t
    t = time.perf_counter()
    session.worker_fact(Transcript("sid", turn_id, "what is the capital of France"))
    session.first_audio(turn_id, {"voice_to_voice_s": 0.8})
    session.worker_fact(ReplyText("sid", turn_id, "", done=True, text="Paris."))
    session.ended(turn_id, "done", interrupted=False)
    took["front"] += time.perf_counter() - t
    return took


def measure(on: bool, turns: int, collector: OtlpCollector) -> tuple[dict[str, list[float]], float]:
    def tracer(process: str) -> Tracing:
        return Tracing.for_process(process, collector.url) if on else Tracing.off()

    front, llm, tts = tracer("front"), tracer("llm"), tracer("tts")
    session = SessionTrace(front, "socketio", "bench")
    took: dict[str, list[float]] = {"front": [], "llm": [], "tts": []}
    cpu = time.process_time()
    for turn_id in range(1, turns + 1):
        for process, seconds in one_turn(front, llm, tts, session, turn_id).items():
            took[process].append(seconds)
    session.close()
    for each in (front, llm, tts):
        each.shutdown()  # what is still batched goes out: its cost counts
    return took, time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
                 "OTEL_TRACES_EXPORTER"):
        os.environ.pop(name, None)
    collector = OtlpCollector()
    results = {}
    try:
        for label, on in (("off", False), ("on", True)):
            took, cpu_s = measure(on, args.turns, collector)
            results[label] = {"per_turn_ms": {p: summary_ms(v) for p, v in took.items()},
                              "cpu_ms_per_turn": 1000 * cpu_s / args.turns}
        spans = collector.snapshot()
    finally:
        collector.close()
    machine = cpu_description()
    print(f"CPU: {machine['model']} (family {machine['family']}, model {machine['model_number']}), {machine['isa']}")
    print(f"{args.turns} turns; {len(spans)} spans reached the collector ({len(spans) / args.turns:.1f} a turn)")
    for label, result in results.items():
        print(f"tracing {label}: CPU {result['cpu_ms_per_turn']:.3f} ms a turn in all (with the export thread)")
        for process, summary in result["per_turn_ms"].items():
            print(f"  {process:6} on the turn's path: {summary}")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu_model": machine, "turns": args.turns, "spans": len(spans),
                                               **results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
