"""End-to-end benchmark over the real socket: voice-to-voice latency with its per-stage breakdown, barge-in
latency, wire cost of the two audio formats, and many sessions streaming microphone audio at once.

Starts its own server (real workers, bundled models) unless --url is given, speaks Piper-made questions at
real-time pace like a microphone, and prints a table; --json writes everything.
Usage: .venv/bin/python scripts/bench.py [--runs 2] [--sessions 10,25,50] [--json out.json] [--url URL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _bench import percentile  # noqa: E402

from tests.conftest import start_server, stop_server, wait_ready  # noqa: E402
from tests.helpers import RecordingClient  # noqa: E402
from tests.speech import RATE, silence, spoken, vita_message, voiced_span  # noqa: E402

QUESTIONS = ["What is the capital of France?", "Hello, how are you today?", "Please tell me a joke about cats.",
             "Can you tell me what the weather is like in spring?"]
FRAME_MS = 32  # our page's binary frames


def send_speech(client: RecordingClient, speech: np.ndarray, lead_s: float = 0.5, tail_s: float = 1.5) -> float:
    """Stream lead silence + speech + tail silence at real time; returns when the last voiced sample was sent."""
    audio = np.concatenate([silence(lead_s), speech, silence(tail_s)])
    last_voiced = int((lead_s + voiced_span(speech)[1]) * RATE)
    step = RATE * FRAME_MS // 1000
    started = time.monotonic()
    sent_last_voiced = 0.0
    for i in range(0, len(audio), step):
        client.sio.emit("audio", audio[i:i + step].astype("<i2").tobytes())
        if i <= last_voiced < i + step:
            sent_last_voiced = time.monotonic()
        delay = started + (i + step) / RATE - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    return sent_last_voiced


def first_after(client: RecordingClient, name: str, after: float, timeout: float = 60) -> tuple[float, object]:
    def found(events):
        return any(n == name and t >= after for t, n, _ in events)

    if not client.wait_for(found, timeout):
        raise TimeoutError(f"no {name} within {timeout} s")
    return next((t, d) for t, n, d in client.events if n == name and t >= after)


def voice_to_voice(url: str, runs: int) -> list[dict]:
    rows = []
    for run in range(runs):
        for question in QUESTIONS:
            client = RecordingClient(url).connect()
            try:
                speech = spoken(question)
                voiced_at = send_speech(client, speech)
                turn_at, turn = first_after(client, "turn", voiced_at - 1)
                audio_at, _ = first_after(client, "audio", voiced_at)
                client.wait_for(lambda evs: sum(n == "timings" for _, n, _ in evs) >= 2, 30)
                stages = {d["stage"]: d for d in client.named("timings")}
                llm, tts = stages.get("llm", {}), stages.get("tts", {})
                total = audio_at - voiced_at
                row = {"question": question, "run": run, "voice_to_voice_s": total,
                       "end_of_speech_s": turn_at - voiced_at, "asr_s": llm.get("asr_s", 0.0),
                       "first_token_s": llm.get("first_token_s", 0.0), "first_piece_s": llm.get("first_piece_s", 0.0),
                       "tts_first_chunk_s": tts.get("first_chunk_s", 0.0)}
                compute = row["asr_s"] + row["first_piece_s"] + row["tts_first_chunk_s"]
                row["model_compute_s"] = compute
                row["overhead_s"] = total - row["end_of_speech_s"] - compute
                rows.append(row)
            finally:
                client.close()
            time.sleep(0.5)
    return rows


def barge_in(url: str, runs: int) -> list[float]:
    """Speech onset sent → stop_tts received, while the assistant is speaking."""
    speech = spoken("Wait, stop please.")
    first_voiced = voiced_span(speech)[0]
    latencies = []
    for _ in range(runs * 2):
        client = RecordingClient(url).connect()
        try:
            client.sio.emit("text_input", {"text": "Good morning! Can you tell me what the weather is like?"})
            if not client.wait_for(lambda evs: any(n == "state" and d["state"] == "speaking"
                                                   for _, n, d in evs), 60):
                continue
            started = time.monotonic()
            send_speech(client, speech, lead_s=0.0, tail_s=0.6)
            stop_at, _ = first_after(client, "stop_tts", started, 5)
            latencies.append(stop_at - (started + first_voiced))
        finally:
            client.close()
        time.sleep(0.5)
    return latencies


def ws_frame(payload_bytes: int) -> int:
    """A client→server WebSocket frame: 2-byte header (+2 or +8 for longer payloads) and a 4-byte mask."""
    return payload_bytes + 2 + (2 if payload_bytes >= 126 else 0) + (6 if payload_bytes >= 65536 else 0) + 4


def wire_cost() -> dict:
    """Bytes on the wire per second of microphone audio, as python-socketio encodes the `audio` event: one
    text frame for VITA's JSON string; a text header frame plus a binary frame for our raw PCM."""
    from socketio import packet

    second = spoken("Please tell me a joke about cats.")[:RATE]

    def per_second(chunk: int, binary: bool) -> int:
        total = 0
        for i in range(0, RATE, chunk):
            piece = second[i:i + chunk]
            payload = piece.astype("<i2").tobytes() if binary else vita_message(piece)
            encoded = packet.Packet(packet.EVENT, data=["audio", payload]).encode()
            for part in encoded if isinstance(encoded, list) else [encoded]:
                # Engine.IO prefixes text messages with their type ("4"); binary messages go as they are.
                total += ws_frame(len(part)) if isinstance(part, bytes) else ws_frame(1 + len(part.encode()))
        return total

    vita, ours = per_second(128, binary=False), per_second(RATE * FRAME_MS // 1000, binary=True)
    return {"vita_bytes_per_s": vita, "ours_bytes_per_s": ours, "ratio": ours / vita}


def concurrency(url_factory, counts: list[int]) -> list[dict]:
    """N sessions stream the same question at once; end-of-speech delay and dropped-audio errors under load."""
    results = []
    speech = spoken("Please tell me a joke about cats.")
    for n in counts:
        url = url_factory(n)
        clients = [RecordingClient(url).connect() for _ in range(n)]
        voiced: list[float] = [0.0] * n

        def run(i: int, clients=clients, voiced=voiced) -> None:
            voiced[i] = send_speech(clients[i], speech, lead_s=0.5 + 0.01 * i, tail_s=2.0)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        behind = []
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        eos = []
        for i, c in enumerate(clients):
            c.wait_for(lambda evs: any(name == "turn" for _, name, _ in evs), 5)
            turn_times = [t for t, name, _ in c.events if name == "turn"]
            if turn_times:
                eos.append(turn_times[0] - voiced[i])
        overruns = sum(1 for c in clients for d in c.named("error") if d.get("code") == "audio_overrun")
        expected = 0.5 + len(speech) / RATE + 2.0
        behind.append(elapsed - expected - 0.01 * n)
        for c in clients:
            c.close()
        results.append({"sessions": n, "turns": len(eos), "eos_p50_s": statistics.median(eos) if eos else None,
                        "eos_p90_s": percentile(eos, 0.9) if eos else None, "overrun_errors": overruns,
                        "sender_behind_s": behind[0]})
        time.sleep(2)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--sessions", default="10,25,50", help="comma-separated session counts for concurrency")
    parser.add_argument("--url", help="use this running server instead of starting one")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    counts = [int(x) for x in args.sessions.split(",") if x]
    server = None
    if args.url:
        url = args.url
    else:
        tmp = Path(tempfile.mkdtemp(prefix="vita-bench-"))
        server = start_server(tmp, "--max_users", str(max(counts + [4]) + 2), "--timeout", "600")
        print(f"starting a server ({tmp / 'server.log'}) ...", flush=True)
        wait_ready(server)
        url = server.url
    try:
        wire = wire_cost()
        v2v = voice_to_voice(url, args.runs)
        barge = barge_in(url, args.runs)
        load = concurrency(lambda n: url, counts)
    finally:
        if server is not None:
            stop_server(server)
    print(f"\nvoice-to-voice (last voiced sample sent → first reply audio received), {len(v2v)} turns:")
    keys = ["voice_to_voice_s", "end_of_speech_s", "asr_s", "first_token_s", "first_piece_s", "tts_first_chunk_s",
            "overhead_s"]
    print("  " + " ".join(f"{k[:-2]:>17}" for k in keys))
    for q in ("p50", "p90"):
        vals = [statistics.median([r[k] for r in v2v]) if q == "p50" else percentile([r[k] for r in v2v], 0.9)
                for k in keys]
        print(f"{q} " + " ".join(f"{v:>16.3f}s" for v in vals))
    if barge:
        print(f"barge-in (speech onset sent → stop_tts received): p50 {statistics.median(barge) * 1000:.0f} ms, "
              f"p90 {percentile(barge, 0.9) * 1000:.0f} ms over {len(barge)}")
    print(f"wire cost per second of mic audio: VITA JSON {wire['vita_bytes_per_s']} B, ours "
          f"{wire['ours_bytes_per_s']} B ({wire['ratio']:.2f}×)")
    for r in load:
        print(f"{r['sessions']:>3} sessions streaming: {r['turns']}/{r['sessions']} turns, end-of-speech p50 "
              f"{(r['eos_p50_s'] or 0) * 1000:.0f} ms p90 {(r['eos_p90_s'] or 0) * 1000:.0f} ms, "
              f"overrun errors {r['overrun_errors']}, senders behind real time {r['sender_behind_s']:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"voice_to_voice": v2v, "barge_in_s": barge, "wire": wire,
                                               "concurrency": load}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
