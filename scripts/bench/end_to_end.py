"""End-to-end benchmark over the real socket: voice-to-voice latency with its per-stage breakdown, streaming vs
VITA's reply-after-generation, barge-in latency, wire cost of the two audio formats, and many sessions streaming
microphone audio at once (read from the server's own /metrics: handler time, VAD lag, dropped audio).

Starts its own server (real workers, bundled models) unless --url is given, speaks Piper-made questions at
real-time pace like a microphone, and prints a table; --json writes everything.
Usage: .venv/bin/python -m scripts.bench.end_to_end [--runs 2] [--sessions 10,25,50] [--streams 25,50,75,100]
       [--stream_s 20] [--json out.json] [--url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from scripts.bench.common import cpu_seconds, delta, histogram_quantile, percentile, scrape
from scripts.bench.measure import FRAME_MS, first_after, send_speech
from scripts.eval.questions import E2E_LONG_QUESTIONS, E2E_QUESTIONS, E2E_TYPED_LONG
from tests.harness.client import RecordingClient
from tests.harness.server import start_server, stop_server, wait_ready
from tests.harness.speech import RATE, noise, spoken, vita_message, voiced_span


def connect_in_mode(url: str, mode: str) -> RecordingClient:
    """A client whose turns the server answers in reply mode `mode` (stream, or full as VITA did)."""
    client = RecordingClient(url).connect()
    client.sio.emit("reply_mode", {"mode": mode})
    if not client.wait_event("reply_mode", 5):
        client.close()
        raise RuntimeError("the server did not accept reply_mode")
    return client


def voice_to_voice(url: str, runs: int, questions: list[str], modes: tuple[str, ...] = ("stream", "full")
                   ) -> list[dict]:
    """Each question in each reply mode, interleaved so both modes see the same conditions."""
    rows = []
    for run in range(runs):
        for question, mode in [(q, m) for q in questions for m in modes]:
            client = connect_in_mode(url, mode)
            try:
                speech = spoken(question)
                voiced_at = send_speech(client, speech)
                turn_at, turn = first_after(client, "turn", voiced_at - 1)
                audio_at, _ = first_after(client, "audio", voiced_at)
                client.wait_for(lambda evs: {"llm", "tts"} <= {d["stage"] for _, n, d in evs if n == "timings"}, 30)
                stages = {d["stage"]: d for d in client.named("timings")}
                llm, tts = stages.get("llm", {}), stages.get("tts", {})
                total = audio_at - voiced_at
                row = {"question": question, "run": run, "mode": mode, "set": "long" if question in E2E_LONG_QUESTIONS
                       else "short", "voice_to_voice_s": total,
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


def voice_to_voice_pairs(url: str, runs: int, questions: list[str]) -> list[float]:
    """Two sessions ask at the same moment (streaming replies): each one's voice-to-voice, as in voice_to_voice."""
    times = []
    for _run in range(runs):
        for i, question in enumerate(questions):
            pair = [connect_in_mode(url, "stream") for _ in range(2)]
            asked = [question, questions[(i + 1) % len(questions)]]
            voiced = [0.0, 0.0]

            def ask(k: int, pair=pair, asked=asked, voiced=voiced) -> None:
                voiced[k] = send_speech(pair[k], spoken(asked[k]))

            threads = [threading.Thread(target=ask, args=(k,)) for k in range(2)]
            try:
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                for k, client in enumerate(pair):
                    audio_at, _ = first_after(client, "audio", voiced[k])
                    times.append(audio_at - voiced[k])
            finally:
                for client in pair:
                    client.close()
            time.sleep(0.5)
    return times


def typed_first_audio(url: str, runs: int) -> list[dict]:
    """Typed questions the bundled model answers in several clauses: text sent → first reply audio, per mode."""
    rows = []
    for run in range(runs):
        for text, mode in [(t, m) for t in E2E_TYPED_LONG for m in ("stream", "full")]:
            client = connect_in_mode(url, mode)
            try:
                sent = time.monotonic()
                client.sio.emit("text_input", {"text": text})
                audio_at, _ = first_after(client, "audio", sent)
                client.wait_for(lambda evs: any(n == "timings" and d["stage"] == "llm" for _, n, d in evs), 60)
                llm = next(d for d in client.named("timings") if d["stage"] == "llm")
                rows.append({"text": text, "run": run, "mode": mode, "first_audio_s": audio_at - sent,
                             "first_piece_s": llm["first_piece_s"], "generate_s": llm["generate_s"],
                             "tokens": llm["tokens"]})
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


def concurrency(url: str, counts: list[int]) -> list[dict]:
    """N sessions speak the same question at once: end-of-speech delay under load, every session making a turn."""
    results = []
    speech = spoken("Please tell me a joke about cats.")
    for n in counts:
        clients = [RecordingClient(url).connect() for _ in range(n)]
        voiced: list[float] = [0.0] * n

        def run(i: int, clients=clients, voiced=voiced) -> None:
            voiced[i] = send_speech(clients[i], speech, lead_s=0.5 + 0.01 * i, tail_s=2.0)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        eos = []
        for i, c in enumerate(clients):
            c.wait_for(lambda evs: any(name == "turn" for _, name, _ in evs), 5)
            turn_times = [t for t, name, _ in c.events if name == "turn"]
            if turn_times:
                eos.append(turn_times[0] - voiced[i])
        overruns = sum(1 for c in clients for d in c.named("error") if d.get("code") == "audio_overrun")
        for c in clients:
            c.close()
        results.append({"sessions": n, "turns": len(eos), "eos_p50_s": statistics.median(eos) if eos else None,
                        "eos_p90_s": percentile(eos, 0.9) if eos else None, "overrun_errors": overruns})
        time.sleep(2)
    return results


async def _stream_mics(url: str, n: int, seconds: float) -> tuple[int, int, float]:
    """n AsyncClients on one loop, each sending 32 ms binary frames of room noise on a real-time schedule.
    Returns (clients connected, clients that lost their connection, worst lateness of a send in seconds)."""
    import socketio

    frames = noise(seconds + 1, level=200).astype("<i2").tobytes()
    step = RATE * FRAME_MS // 1000 * 2
    clients = [socketio.AsyncClient(reconnection=False, ssl_verify=False) for _ in range(n)]
    await asyncio.gather(*(c.connect(url, transports=["websocket"], wait_timeout=20) for c in clients))
    late = [0.0] * n
    lost = [False] * n

    async def mic(i: int, client) -> None:
        start = time.monotonic() + 0.01 * i  # spread the senders' phases over a frame
        for k in range(int(seconds * 1000 / FRAME_MS)):
            await asyncio.sleep(max(0.0, start + k * FRAME_MS / 1000 - time.monotonic()))
            late[i] = max(late[i], time.monotonic() - (start + k * FRAME_MS / 1000))
            try:
                await client.emit("audio", frames[k * step:(k + 1) * step])
            except socketio.exceptions.SocketIOError:
                lost[i] = True
                return

    await asyncio.gather(*(mic(i, c) for i, c in enumerate(clients)))
    connected = sum(c.connected for c in clients)
    await asyncio.gather(*(c.disconnect() for c in clients), return_exceptions=True)
    return connected, sum(lost), max(late)


def drained(url: str, timeout: float = 120.0) -> float:
    """Seconds until the server has closed every session (it reads each socket in order, so a backlog of audio
    delays the disconnect); the time it needs is how far it fell behind."""
    import requests

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if requests.get(url + "/health", verify=False, timeout=10).json()["sessions"] == 0:
            break
        time.sleep(0.25)
    return time.monotonic() - started




def streaming_load(url: str, counts: list[int], seconds: float, front_pid: int | None = None) -> list[dict]:
    """N open microphones (room noise, so no turns): the server's own handler time, VAD lag and drops, and the
    CPU the front process and this load generator used. Stops after the first N that does not hold real time."""
    results = []
    for n in counts:
        before = scrape(url)
        front_cpu, own_cpu, wall = cpu_seconds(front_pid), time.process_time(), time.monotonic()
        connected, lost, late = asyncio.run(_stream_mics(url, n, seconds))
        front_cpu, own_cpu = cpu_seconds(front_pid) - front_cpu, time.process_time() - own_cpu
        wall = time.monotonic() - wall
        drain_s = drained(url)
        after = scrape(url)
        sent_s = n * int(seconds * 1000 / FRAME_MS) * FRAME_MS / 1000
        row = {"sessions": n, "connected": connected, "lost": lost, "seconds": seconds, "sent_audio_s": sent_s,
               "audio_s": delta(before, after, "vita_audio_received_seconds_total"),
               "messages": delta(before, after, "vita_audio_handler_seconds_count"),
               "dropped_messages": delta(before, after, "vita_audio_dropped_messages_total"),
               "handler_p50_s": histogram_quantile(before, after, "vita_audio_handler_seconds", 0.5),
               "handler_p99_s": histogram_quantile(before, after, "vita_audio_handler_seconds", 0.99),
               "vad_lag_p50_s": histogram_quantile(before, after, "vita_vad_lag_seconds", 0.5),
               "vad_lag_p99_s": histogram_quantile(before, after, "vita_vad_lag_seconds", 0.99),
               "client_late_max_s": late, "drain_s": drain_s,
               "turns": delta(before, after, "vita_turns_started_total", source="speech"),
               "front_cores": front_cpu / wall if front_pid else None, "load_generator_cores": own_cpu / wall}
        # Real time holds when every session stayed connected, nothing was dropped, the VAD kept up, and the
        # server had no backlog left when the clients stopped.
        row["real_time"] = (row["dropped_messages"] == 0 and connected == n and not lost and drain_s < 2.0
                            and row["audio_s"] >= 0.99 * sent_s and (row["vad_lag_p99_s"] or 0) < 0.25)
        results.append(row)
        print_mics(row)
        if not row["real_time"]:
            break
        time.sleep(2)
    return results


def print_mics(r: dict) -> None:
    ms = {k: (r[k] or 0) * 1000 for k in ("handler_p50_s", "handler_p99_s", "vad_lag_p50_s", "vad_lag_p99_s")}
    print(f"{r['sessions']:>3} open mics for {r['seconds']:.0f} s: {r['connected']} connected, {r['lost']} lost, "
          f"{r['audio_s']:.0f}/{r['sent_audio_s']:.0f} s audio received, handler p50 {ms['handler_p50_s']:.2f} ms "
          f"p99 {ms['handler_p99_s']:.2f} ms, VAD lag p50 {ms['vad_lag_p50_s']:.1f} ms "
          f"p99 {ms['vad_lag_p99_s']:.1f} ms, dropped {r['dropped_messages']:.0f}, sessions closed "
          f"{r['drain_s']:.1f} s after the clients stopped, client late max {r['client_late_max_s'] * 1000:.0f} ms: "
          f"real time {'held' if r['real_time'] else 'NOT held'}; CPU: front "
          f"{r['front_cores'] or 0:.2f} cores, load generator {r['load_generator_cores']:.2f} cores", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--sessions", default="10,25,50",
                        help="session counts that all speak a question at once (each makes a turn)")
    parser.add_argument("--streams", default="25,50,60,75,100",
                        help="session counts that stream open-microphone noise (no turns) for --stream_s")
    parser.add_argument("--stream_s", type=float, default=20.0)
    parser.add_argument("--url", help="use this running server instead of starting one")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--stream_only", action="store_true",
                        help="voice-to-voice in streaming mode only (no full-reply comparison): quicker tuning runs")
    parser.add_argument("--parts", default="mics,v2v,pairs,typed,barge,turns",
                        help="which measurements to run (wire cost is always computed)")
    args = parser.parse_args()
    counts = [int(x) for x in args.sessions.split(",") if x]
    streams = [int(x) for x in args.streams.split(",") if x]
    server = None
    if args.url:
        url = args.url
    else:
        tmp = Path(tempfile.mkdtemp(prefix="vita-bench-"))
        server = start_server(tmp, "--max_users", str(max(counts + streams + [4]) + 2), "--timeout", "600")
        print(f"starting a server ({tmp / 'server.log'}) ...", flush=True)
        wait_ready(server)
        url = server.url
    parts = set(args.parts.split(","))
    wire, v2v, typed, barge, load, mics, pairs = {}, [], [], [], [], [], []
    try:
        wire = wire_cost()
        if "mics" in parts:  # first, on an idle server: turns leave ASR/LLM work behind that would load it
            mics = streaming_load(url, streams, args.stream_s, server.process.pid if server else None)
        if "v2v" in parts:
            modes = ("stream",) if args.stream_only else ("stream", "full")
            v2v = voice_to_voice(url, args.runs, E2E_QUESTIONS + E2E_LONG_QUESTIONS, modes)
        if "pairs" in parts:
            pairs = voice_to_voice_pairs(url, args.runs, E2E_QUESTIONS)
        if "typed" in parts:
            typed = typed_first_audio(url, args.runs)
        if "barge" in parts:
            barge = barge_in(url, args.runs)
        if "turns" in parts:
            load = concurrency(url, counts)
    finally:
        if server is not None:
            stop_server(server)
    keys = ["voice_to_voice_s", "end_of_speech_s", "asr_s", "first_token_s", "first_piece_s", "tts_first_chunk_s",
            "overhead_s"]
    ratios = {}
    for kind in ("short", "long") if v2v else ():
        for mode in ("stream", "full"):
            rows = [r for r in v2v if r["mode"] == mode and r["set"] == kind]
            if not rows:
                continue
            print(f"\nvoice-to-voice, {kind} replies, reply mode {mode} (last voiced sample sent → first reply "
                  f"audio received), {len(rows)} turns:")
            print("  " + " ".join(f"{k[:-2]:>17}" for k in keys))
            for q in ("p50", "p90"):
                vals = [statistics.median([r[k] for r in rows]) if q == "p50" else
                        percentile([r[k] for r in rows], 0.9) for k in keys]
                print(f"{q} " + " ".join(f"{v:>16.3f}s" for v in vals))
        if args.stream_only:
            continue
        medians = {m: statistics.median([r["voice_to_voice_s"] for r in v2v if r["mode"] == m and r["set"] == kind])
                   for m in ("stream", "full")}
        ratios[kind] = medians["stream"] / medians["full"]
        print(f"{kind} replies: streaming / full-reply first audio (p50): {medians['stream']:.3f} / "
              f"{medians['full']:.3f} s = {ratios[kind]:.2f}")
    streamed = [r["voice_to_voice_s"] for r in v2v if r["mode"] == "stream"]
    if streamed:
        print(f"voice-to-voice, all streaming turns: p50 {statistics.median(streamed):.3f} s, "
              f"p90 {percentile(streamed, 0.9):.3f} s over {len(streamed)}")
    if typed:
        for mode in ("stream", "full"):
            rows = [r for r in typed if r["mode"] == mode]
            print(f"typed multi-clause questions, reply mode {mode}: text sent → first audio p50 "
                  f"{statistics.median([r['first_audio_s'] for r in rows]):.3f} s; first piece p50 "
                  f"{statistics.median([r['first_piece_s'] for r in rows]):.3f} s of generation p50 "
                  f"{statistics.median([r['generate_s'] for r in rows]):.3f} s ({len(rows)} turns)")
        medians = {m: statistics.median([r["first_audio_s"] for r in typed if r["mode"] == m])
                   for m in ("stream", "full")}
        ratios["typed_long"] = medians["stream"] / medians["full"]
        print(f"typed multi-clause: streaming / full-reply first audio (p50) = {ratios['typed_long']:.2f}")
    if pairs:
        print(f"voice-to-voice, two sessions asking at once (streaming): p50 {statistics.median(pairs):.3f} s, "
              f"p90 {percentile(pairs, 0.9):.3f} s over {len(pairs)} turns")
    if barge:
        print(f"barge-in (speech onset sent → stop_tts received): p50 {statistics.median(barge) * 1000:.0f} ms, "
              f"p90 {percentile(barge, 0.9) * 1000:.0f} ms over {len(barge)}")
    print(f"wire cost per second of mic audio: VITA JSON {wire['vita_bytes_per_s']} B, ours "
          f"{wire['ours_bytes_per_s']} B ({wire['ratio']:.2f}×)")
    for r in load:
        print(f"{r['sessions']:>3} sessions streaming: {r['turns']}/{r['sessions']} turns, end-of-speech p50 "
              f"{(r['eos_p50_s'] or 0) * 1000:.0f} ms p90 {(r['eos_p90_s'] or 0) * 1000:.0f} ms, "
              f"overrun errors {r['overrun_errors']}")
    for r in mics:
        print_mics(r)
    if args.json:
        Path(args.json).write_text(json.dumps({"voice_to_voice": v2v, "stream_full_ratio": ratios, "typed": typed,
                                               "barge_in_s": barge,
                                               "pairs_voice_to_voice_s": pairs, "wire": wire, "concurrency": load,
                                               "open_mics": mics}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
