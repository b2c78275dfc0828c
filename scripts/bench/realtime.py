"""Benchmark: the OpenAI Realtime endpoint against Socket.IO on one server, in one run.

- Voice-to-voice: the same spoken questions (hibari) over /v1/realtime (the `openai` package's client, 24 kHz PCM
  in 40 ms appends), over a Realtime WebRTC call (/v1/realtime/calls: an aiortc peer, Opus on the track, events on
  the data channel; `--no_call` leaves it out) and over Socket.IO (our page's 32 ms binary frames), in turn
  question by question, each transport in one long session of its own; at the client, from the last voiced
  sample sent to the first reply audio received (on the call: the first decoded 20 ms frame with speech in it).
- Barge-in: a question spoken over a long reply on each transport: speech onset sent → `response.done` (cancelled)
  on Realtime, → `stop_tts` on Socket.IO (both leave the server in the same action list as the turn machine's
  confirmation).
- Cycles: connect, speak a question, disconnect before or after the reply, `--cycles` times (WebSocket) and
  `--call_cycles` times (WebRTC calls); then the seats, the VAD threads, the peers and the front's threads and
  memory are compared with before.
- Fuzz: `--fuzz` malformed or out-of-order client events on one session; then the session must still answer, and
  the server's log must hold no failure of its own.

Usage: .venv/bin/python -m scripts.bench.realtime [--url URL --server_log FILE] [--questions 8] [--barge 3]
       [--cycles 200] [--call_cycles 200] [--no_call] [--fuzz 3000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

from scripts.bench.common import cpu_description, percentile
from scripts.bench.measure import voice_to_voice
from scripts.eval.questions import BARGE_OVER, BARGE_WITH, SHORT
from scripts.eval.voices import synthesize
from tests.harness.client import RecordingClient
from tests.harness.realtime_client import RealtimeClient, pcm24
from tests.harness.rtc import RealtimeCall
from tests.harness.speech import RealTime, silence, voiced_span

REPLY_S = 60


def health(url: str) -> dict:
    return requests.get(url + "/health", verify=False, timeout=5).json()


def send_socketio(client: RecordingClient, pcm16k: np.ndarray, chunk_ms: int = 32) -> float:
    """Our page's binary frames at real-time pace; returns when the last voiced sample was sent."""
    _, last = voiced_span(pcm16k)
    step, clock, last_sent = 16000 * chunk_ms // 1000, RealTime(16000), 0.0
    for start in range(0, len(pcm16k), step):
        client.sio.emit("audio", pcm16k[start:start + step].astype("<i2").tobytes())
        if start <= last * 16000 < start + step:
            last_sent = time.monotonic()
        clock.wait(start + step)
    return last_sent


def send_realtime(client: RealtimeClient, pcm16k: np.ndarray, chunk_ms: int = 40) -> float:
    audio = pcm24(pcm16k)
    _, last = voiced_span(pcm16k)
    step, clock, last_sent = 24000 * chunk_ms // 1000, RealTime(24000), 0.0
    for start in range(0, len(audio), step):
        client.append(audio[start:start + step])
        if start <= last * 24000 < start + step:
            last_sent = time.monotonic()
        clock.wait(start + step)
    return last_sent


def utterance(voice: str, text: str) -> np.ndarray:
    return np.concatenate([silence(0.4), synthesize(voice, text), silence(1.6)])


def latest_turn_over(client: RecordingClient) -> None:
    turn = max(d["turn_id"] for _, n, d in client.events if n == "turn")
    client.wait_for(lambda evs: any(n == "state" and d.get("turn_id") == turn and d.get("state") == "listening"
                                    for _, n, d in evs), REPLY_S)


def v2v_socketio(client: RecordingClient, speech: np.ndarray) -> float | None:
    end = send_socketio(client, speech)
    if not client.wait_for(lambda evs: any(n == "audio" and t > end for t, n, _ in evs), REPLY_S):
        return None
    latest_turn_over(client)
    return voice_to_voice(client.events, end)


def v2v_realtime(client: RealtimeClient, speech: np.ndarray) -> float | None:
    done_before = len(client.of("response.done"))
    end = send_realtime(client, speech)
    if not client.wait_for(lambda evs: sum(e["type"] == "response.done" for e in evs) > done_before, REPLY_S):
        return None
    firsts = [t for t in client.times("response.output_audio.delta") if t > end]
    return firsts[0] - end if firsts else None


def v2v_call(call: RealtimeCall, speech: np.ndarray) -> float | None:
    done_before = len(call.of("response.done"))
    _, last = voiced_span(speech)
    end = call.say(speech) + last
    if not call.wait(lambda: sum(e["type"] == "response.done" for _, e in call.events) > done_before, REPLY_S):
        return None
    call.wait(lambda: bool(call.loud(after=end)), 5)
    heard = call.loud(after=end)
    call.wait(lambda: any(e["type"] == "output_audio_buffer.stopped" for t, e in call.events if t > end), REPLY_S)
    return heard[0] - end if heard else None


def barge_socketio(client: RecordingClient, over: np.ndarray, speech: np.ndarray) -> float | None:
    end = send_socketio(client, over)
    if not client.wait_for(lambda evs: any(n == "audio" and t > end for t, n, _ in evs), REPLY_S):
        return None
    time.sleep(1.0)
    first, _ = voiced_span(speech)
    onset = time.monotonic() + first
    send_socketio(client, speech)
    if not client.wait_for(lambda evs: any(n == "stop_tts" and t > onset for t, n, _ in evs), 10):
        return None
    stop = next(t for t, n, _ in client.events if n == "stop_tts" and t > onset)
    latest_turn_over(client)
    return stop - onset


def barge_realtime(client: RealtimeClient, over: np.ndarray, speech: np.ndarray) -> float | None:
    done_before = len(client.of("response.done"))
    end = send_realtime(client, over)
    if not client.wait_for(lambda _evs: any(t > end for t in client.times("response.output_audio.delta")), REPLY_S):
        return None
    time.sleep(1.0)
    first, _ = voiced_span(speech)
    onset = time.monotonic() + first
    send_realtime(client, speech)
    if not client.wait_for(lambda evs: sum(e["type"] == "response.done" for e in evs) > done_before + 1, REPLY_S):
        return None
    cancelled = [(t, e) for t, e in zip(client.times("response.done"), client.of("response.done"), strict=True)
                 if t > onset and e["response"]["status"] == "cancelled"]
    return cancelled[0][0] - onset if cancelled else None


def cycles(url: str, n: int, speech: np.ndarray) -> dict:
    before = health(url)
    started = time.monotonic()
    failures = 0
    for i in range(n):
        try:
            client = RealtimeClient(url)
            client.wait_type("session.created")
            client.append(pcm24(speech))  # at once: the seat, the VAD and maybe a turn, then gone
            if i % 2:
                client.wait_for(lambda evs: any(e["type"] == "response.created" for e in evs), 10)
            client.close()
        except Exception as exc:  # counted: a cycle that failed is a finding
            failures += 1
            print(f"  cycle {i}: {exc!r}", file=sys.stderr)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        after = health(url)
        if after["sessions"] == 0 and after["vad_threads"] == 0 and after["threads"] <= before["threads"]:
            break
        time.sleep(0.5)
    return {"cycles": n, "failed": failures, "seconds": round(time.monotonic() - started, 1),
            "sessions_after": after["sessions"], "vad_threads_after": after["vad_threads"],
            "threads_before": before["threads"], "threads_after": after["threads"],
            "rss_mb_before": before["rss_mb"], "rss_mb_after": after["rss_mb"]}


def call_cycles(url: str, n: int, speech: np.ndarray) -> dict:
    """A WebRTC call made and hung up n times (every other one after its reply began)."""
    before = health(url)
    started, failures = time.monotonic(), 0
    for i in range(n):
        call = RealtimeCall(url)
        try:
            call.connect()
            call.say(speech)
            if i % 2:
                call.wait(lambda c=call: any(e["type"] == "response.created" for _, e in c.events), 10)
        except Exception as exc:  # counted: a cycle that failed is a finding
            failures += 1
            print(f"  call {i}: {exc!r}", file=sys.stderr)
        finally:
            call.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        after = health(url)
        if after["sessions"] == 0 and after["webrtc"]["peers"] == 0 and after["threads"] <= before["threads"]:
            break
        time.sleep(0.5)
    return {"calls": n, "failed": failures, "seconds": round(time.monotonic() - started, 1),
            "sessions_after": after["sessions"], "peers_after": after["webrtc"]["peers"],
            "threads_before": before["threads"], "threads_after": after["threads"],
            "rss_mb_before": before["rss_mb"], "rss_mb_after": after["rss_mb"]}


def fuzz(url: str, n: int, log_path: Path | None, seed: int = 40) -> dict:
    rng = random.Random(seed)
    kinds = ["session.update", "input_audio_buffer.append", "input_audio_buffer.commit", "input_audio_buffer.clear",
             "conversation.item.create", "conversation.item.retrieve", "conversation.item.truncate",
             "conversation.item.delete", "response.create", "response.cancel", "output_audio_buffer.clear",
             "no.such.event"]
    values = [None, 0, -1, 2**70, "", "x" * 500, "AAAA", [], {}, [1, {}], True, 1e308, {"type": "message"},
              {"type": "function_call_output", "call_id": "call_1", "output": "1"},
              {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
              {"audio": {"input": {"turn_detection": None}}}, {"output_modalities": ["text"]}]
    fields = ["session", "audio", "item", "item_id", "audio_end_ms", "content_index", "response", "previous_item_id",
              "event_id"]
    client = RealtimeClient(url)
    client.wait_type("session.created")
    for i in range(n):
        if i % 10 == 9:
            client.send_raw(rng.choice(["{", "null", "[]", '{"type": null}', "\x00", json.dumps({"type": "x" * 2000})]))
            continue
        event = {"type": rng.choice(kinds)}
        for key in rng.sample(fields, rng.randint(0, 4)):
            event[key] = rng.choice(values)
        client.send_raw(json.dumps(event))
        if i % 100 == 99:
            time.sleep(0.3)  # within the session's event rate, mostly
    # The server reads a flood at its message rate: wait until it has read all of it (an event whose error says so).
    client.send_raw(json.dumps({"type": "conversation.item.retrieve", "item_id": "none", "event_id": "fuzz-end"}))
    client.wait_for(lambda evs: any(e.get("error", {}).get("event_id") == "fuzz-end" for e in evs), 120)
    time.sleep(1.5)  # the session's event budget refills: what follows must not be dropped as over the rate
    vad = {"input": {"turn_detection": {"type": "semantic_vad"}}}
    client.send({"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"],
                                                       "audio": vad}})
    client.send({"type": "response.cancel"})
    question = [{"type": "input_text", "text": "What is the capital of France?"}]
    client.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                              "content": question}})
    time.sleep(1.0)
    while len(client.of("response.created")) > len(client.of("response.done")):
        time.sleep(0.5)  # a response the fuzz started ends first
    done_before = len(client.of("response.done"))
    client.send({"type": "response.create"})
    answered = client.wait_for(lambda evs: sum(e["type"] == "response.done" for e in evs) > done_before, REPLY_S)
    texts = client.of("response.output_text.done")
    errors = client.errors()
    client.close()
    log = log_path.read_text(errors="replace") if log_path else ""
    return {"events": n, "errors": len(errors), "server_errors": sum(e["code"] == "server_error" for e in errors),
            "unhandled_in_log": log.count("Realtime event failed") + log.count("Traceback"),
            "answered_after": answered, "answer": texts[-1]["text"] if texts else None,
            "error_codes": sorted({e["code"] for e in errors})}


def stats(values: list[float]) -> str:
    if not values:
        return "n/a"
    return (f"p50 {statistics.median(values):.3f} s, p90 {percentile(values, 0.9):.3f} s, "
            f"mean {statistics.fmean(values):.3f} s (n={len(values)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (default: start one with the default config)")
    parser.add_argument("--server_log", type=Path, help="with --url: its log, for the fuzz's failure count")
    parser.add_argument("--voice", default="hibari")
    parser.add_argument("--questions", type=int, default=8, help="per transport")
    parser.add_argument("--barge", type=int, default=3, help="interruptions per transport")
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--call_cycles", type=int, default=200)
    parser.add_argument("--no_call", action="store_true", help="leave the WebRTC call out of voice-to-voice")
    parser.add_argument("--fuzz", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=40, help="the fuzz's random seed")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    server, url, log_path = None, args.url, args.server_log
    if url is None:
        from tests.harness.server import start_server, wait_ready

        server = start_server(Path(tempfile.mkdtemp()), "--timeout", "3600", "--max_users", "4")
        wait_ready(server)
        url, log_path = server.url, server.log_path
    report: dict = {"cpu": cpu_description()}
    print("cpu:", json.dumps(report["cpu"]), flush=True)
    try:
        sio, rt = RecordingClient(url).connect(), RealtimeClient(url)
        rt.wait_type("session.created")
        call = None if args.no_call else RealtimeCall(url).connect()
        clients = {"socketio": (sio, v2v_socketio), "realtime": (rt, v2v_realtime), "call": (call, v2v_call)}
        rows: dict[str, list[float]] = {name: [] for name, (c, _) in clients.items() if c is not None}
        for n, text in enumerate((SHORT * 4)[:args.questions]):
            speech = utterance(args.voice, text)
            order = list(rows)
            for name in order[n % len(order):] + order[:n % len(order)]:  # each goes first in turn
                client, ask = clients[name]
                v2v = ask(client, speech)
                if v2v is not None:
                    rows[name].append(v2v)
                print(f"{name:9s} {text!r}: {v2v if v2v is None else round(v2v, 3)}", flush=True)
        barges: dict[str, list[float]] = {"socketio": [], "realtime": []}
        over, speech = utterance(args.voice, BARGE_OVER), utterance(args.voice, BARGE_WITH)
        for n in range(args.barge):
            for name, run in (("socketio", barge_socketio), ("realtime", barge_realtime))[::1 if n % 2 else -1]:
                took = run(sio if name == "socketio" else rt, over, speech)
                if took is not None:
                    barges[name].append(took)
                print(f"barge-in {name:9s}: {took if took is None else round(took, 3)}", flush=True)
        sio.close()
        rt.close()
        if call is not None:
            call.close()
        report["v2v"] = {k: v for k, v in rows.items()}
        report["barge"] = {k: v for k, v in barges.items()}
        print("\nvoice-to-voice at the client, by transport, same server and run:")
        for name, values in rows.items():
            print(f"  {name:9s} {stats(values)}")
        for name in ("realtime", "call"):
            if rows.get(name) and rows["socketio"]:
                diff = statistics.median(rows[name]) - statistics.median(rows["socketio"])
                print(f"  {name} - socketio p50: {diff * 1000:+.0f} ms")
        if rows.get("call") and rows["realtime"]:
            diff = statistics.median(rows["call"]) - statistics.median(rows["realtime"])
            print(f"  call - realtime (WebSocket) p50: {diff * 1000:+.0f} ms (target <= +60 ms)")
        print("speech onset -> reply stopped (Realtime: response.done cancelled; Socket.IO: stop_tts):")
        for name, values in barges.items():
            print(f"  {name:9s} {stats(values)}")
        if args.cycles:
            report["cycles"] = cycles(url, args.cycles, synthesize(args.voice, "Hello there, how are you?"))
            print("cycles:", json.dumps(report["cycles"]))
        if args.call_cycles:
            report["call_cycles"] = call_cycles(url, args.call_cycles, synthesize(args.voice, "Hello there."))
            print("call cycles:", json.dumps(report["call_cycles"]))
        if args.fuzz:
            report["fuzz"] = fuzz(url, args.fuzz, log_path, args.seed)
            print("fuzz:", json.dumps(report["fuzz"]))
    finally:
        if server is not None:
            from tests.harness.server import stop_server

            stop_server(server)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
