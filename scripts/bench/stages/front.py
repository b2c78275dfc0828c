"""Benchmark the front process's audio path: Silero VAD cost per 512-sample chunk, end-of-speech delay on
Piper-spoken sentences, and the `audio` event handler's own work (decode + hand to the VAD thread) for VITA's
JSON messages and our binary frames.

Uses the real Silero model and the code the socket handler runs; no server needed.
Usage: .venv/bin/python -m scripts.bench.stages.front [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from scripts.bench.common import summary_ms
from tests.harness.speech import RATE, silence, spoken, vita_message, voiced_span
from vita.config import Config
from vita.hearing.silero import CHUNK, SileroVad
from vita.hearing.utterance import Heard
from vita.hearing.vad import VadSegmenter
from vita.turns.listener import SpeechListener
from vita.turns.session_actor import AudioIn, SessionActor
from vita.web.audio_input import decode_audio_message

SENTENCES = ["What is the capital of France?", "Yes.", "Please tell me a joke about cats.",
             "Could you turn the lights off in the kitchen, please?", "No, thank you."]


def segmenter(config: Config) -> VadSegmenter:
    return VadSegmenter.from_config(config.vad, config.vad_model_path())


def vad_cost(config: Config, audio: np.ndarray) -> list[float]:
    vad = SileroVad(config.vad_model_path())
    times = []
    for i in range(0, len(audio) - CHUNK, CHUNK):
        chunk = audio[i:i + CHUNK].astype(np.float32) / 32768.0
        t = time.perf_counter()
        vad.probability(chunk)
        times.append(time.perf_counter() - t)
    return times


def end_of_speech_delays(config: Config) -> list[dict]:
    rows = []
    for text in SENTENCES:
        speech = spoken(text)
        stream = np.concatenate([silence(1.0), speech, silence(2.0)])
        truth_end = RATE + voiced_span(speech)[1] * RATE
        seg = segmenter(config)
        for i in range(0, len(stream), 128):  # VITA's 8 ms messages
            if any(event.kind is Heard.END for event in seg.feed(stream[i:i + 128])):
                rows.append({"text": text, "speech_s": len(speech) / RATE,
                             "end_delay_s": (i + 128 - truth_end) / RATE})
                break
        else:
            rows.append({"text": text, "speech_s": len(speech) / RATE, "end_delay_s": None})
    return rows


def handler_cost(config: Config, audio: np.ndarray, binary: bool, chunk_ms: int) -> list[float]:
    listener = SpeechListener(segmenter(config))
    def receive(item: object) -> None:
        if isinstance(item, AudioIn):
            listener.hear(item.pcm, item.rate, item.arrived, time.monotonic())

    actor = SessionActor("bench", receive, tick_s=1.0)
    actor.start()
    step = RATE * chunk_ms // 1000
    messages = [audio[i:i + step] for i in range(0, len(audio) - step, step)]
    payloads = [m.astype("<i2").tobytes() if binary else vita_message(m) for m in messages]
    limit = config.limits.max_audio_message_bytes
    times = []
    for payload in payloads:
        t = time.perf_counter()
        pcm, rate = decode_audio_message(payload, RATE, limit)
        actor.post_audio(pcm, rate)
        times.append(time.perf_counter() - t)
        time.sleep(chunk_ms / 1000 / 4)  # let the VAD thread keep up, as it does at real-time pace
    actor.stop()
    actor.join(2)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    config = Config()
    audio = np.concatenate([silence(0.5)] + [np.concatenate([spoken(t), silence(0.5)]) for t in SENTENCES])
    vad = vad_cost(config, audio)
    delays = end_of_speech_delays(config)
    vita = handler_cost(config, audio, binary=False, chunk_ms=8)
    binary = handler_cost(config, audio, binary=True, chunk_ms=32)
    measured = [r["end_delay_s"] for r in delays if r["end_delay_s"] is not None]
    print(f"VAD per 512-sample chunk (32 ms of audio): {summary_ms(vad)} over {len(vad)} chunks")
    print(f"end of speech detected after the last voiced sample (end_silence_ms {config.vad.end_silence_ms}):")
    for r in delays:
        delay = "missed" if r["end_delay_s"] is None else f"{r['end_delay_s'] * 1000:.0f} ms"
        print(f"  {r['text']:<56} {r['speech_s']:.2f} s speech  {delay}")
    print(f"  median {statistics.median(measured) * 1000:.0f} ms, max {max(measured) * 1000:.0f} ms")
    print(f"audio handler, VITA JSON 8 ms messages: {summary_ms(vita)}")
    print(f"audio handler, binary 32 ms frames:     {summary_ms(binary)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"vad_s": vad, "delays": delays, "handler_vita_s": vita,
                                               "handler_binary_s": binary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
