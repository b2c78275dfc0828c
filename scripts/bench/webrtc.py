"""WebRTC vs Socket.IO benchmark: bytes, voice-to-voice, barge-in silence, load, connection churn.

Parts (--parts, comma-separated):
  talk    one conversation per transport (WebRTC Opus; our page's binary PCM; VITA's JSON; after one unmeasured, in a
          new order each run), the same spoken questions,
          each followed by an open microphone until its reply has played: bytes on the wire per second of
          conversation (both directions, everything between client and server: the loopback interface's counters,
          so TLS, TCP, UDP, IP and the Socket.IO events are all in), and voice-to-voice at the client (the frame
          holding the last voiced sample sent -> the first reply sound received: decoded Opus above LOUD_RMS, or the
          first `audio` message);
  barge   a long reply over WebRTC, an interruption spoken 0.5 s in: `stop_tts` received -> the last reply sound
          heard (silence at the client), and the interruption's onset -> that silence;
  load    2 WebRTC sessions asking at once, then 2 Socket.IO ones: every reply heard at real-time pace (largest gap
          between reply frames), the VAD's lag, and the front process's CPU per session (the difference is what
          WebRTC costs: Opus both ways, SRTP, ICE); plus Opus encode+decode alone per session;
  churn   200 connect / peer connection / disconnect cycles: peers, threads, UDP sockets and RSS of the front after.

Starts its own server (bundled models) unless --url is given (then --front_pid for CPU figures, or it is looked
up by the URL's port).
Usage: .venv/bin/python -m scripts.bench.webrtc [--parts talk,barge,load,churn] [--runs N] [--cycles 200]
       [--json out.json] [--url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from scripts.bench.common import cpu_description, cpu_seconds, delta, histogram_quantile, percentile, scrape
from scripts.eval.questions import E2E_LONG_QUESTIONS
from tests.harness.client import RecordingClient
from tests.harness.rtc import LOUD_RMS, RtcAudio
from tests.harness.server import start_server, stop_server, wait_ready
from tests.harness.speech import RATE, Microphone, silence, spoken, voiced_span

QUESTIONS = ["What is the capital of France?", "How many legs does a spider have?", "What color is the sky?",
             "What is two plus two?"]
INTERRUPTION = "Wait, tell me about Spain instead."
TRANSPORTS = ("webrtc", "binary", "vita")  # WebRTC Opus; our page's binary PCM (32 ms); VITA's JSON (8 ms)
TARGETS = {"bytes_ratio": 0.05, "v2v_extra_s": 0.060, "silence_s": 0.150, "codec_core": 0.05}


def lo_bytes() -> int:
    """Bytes through the loopback interface (each local packet is sent once: tx counts it once)."""
    return int(Path("/sys/class/net/lo/statistics/tx_bytes").read_text())


def until(client: RecordingClient, predicate, timeout: float) -> bool:
    return client.wait_for(predicate, timeout)


def turn_over(after: float):
    """The first turn after `after` has ended (its reply played), not withdrawn to be extended."""
    def check(evs) -> bool:
        ids = [d["turn_id"] for t, n, d in evs if n == "turn" and t >= after]
        return any(n == "state" and d.get("state") == "listening" and d.get("turn_id") in ids
                   and d.get("reason") != "extended" for t, n, d in evs if t >= after)
    return check


def first_loud_pcm(messages: list[tuple[float, bytes]], rate: int = 24000) -> list[float]:
    """When the first reply sound is heard from Socket.IO `audio` messages played gap-free from the first one's
    arrival (as the pages do): the same measure as WebRTC's first loud decoded frame (TTS audio opens quietly)."""
    if not messages:
        return []
    pcm = np.frombuffer(b"".join(m for _, m in messages), dtype="<i2").astype(np.float64)
    frame = rate // 50
    for i in range(0, len(pcm) - frame + 1, frame):
        if np.sqrt(np.mean(pcm[i:i + frame] ** 2)) >= LOUD_RMS:
            return [messages[0][0] + i / rate]
    return []


@contextlib.contextmanager
def talking(url: str, transport: str) -> Iterator[tuple[RecordingClient, RtcAudio | None, Microphone | None]]:
    """A session with an open microphone over `transport`: its client, and its WebRTC peer or socket microphone."""
    client = RecordingClient(url).connect()
    rtc = mic = None
    try:
        if transport == "webrtc":
            rtc = RtcAudio(client).connect()
        else:
            mic = Microphone(client, binary=transport == "binary")
        yield client, rtc, mic
    finally:
        if mic is not None:
            mic.close()
        if rtc is not None:
            rtc.close()
        client.close()


def conversation(url: str, transport: str, speeches: list[np.ndarray]) -> dict:
    """One session asks every question in turn over `transport`; bytes per second and voice-to-voice."""
    with talking(url, transport) as (client, rtc, mic):
        time.sleep(1.0)  # connection set up: only the conversation is counted
        start_bytes, started = lo_bytes(), time.monotonic()
        v2v, server_v2v = [], []  # at the client; and as the server timed it (from the audio it received)
        for speech in speeches:
            asked = time.monotonic()
            if rtc is not None:
                voiced_end = rtc.say(np.concatenate([silence(0.3), speech])) + 0.3 + voiced_span(speech)[1]
            else:
                said = mic.say(np.concatenate([silence(0.3), speech]))
            if not until(client, turn_over(asked), 60):
                raise TimeoutError(f"{transport}: no answered turn within 60 s")
            if rtc is None:
                voiced_end = said.end_sent
                heard = first_loud_pcm([(t, d) for t, n, d in client.events if n == "audio" and t > voiced_end])
            else:
                heard = rtc.loud(after=voiced_end)
            v2v.append(heard[0] - voiced_end if heard else None)
            stages = [d for t, n, d in client.events if n == "timings" and t >= asked and d.get("stage") == "front"]
            server_v2v.append(stages[-1].get("voice_to_voice_s") if stages else None)
            time.sleep(0.5)
        seconds, wire = time.monotonic() - started, lo_bytes() - start_bytes
        udp = rtc.wire_bytes() if rtc else None
        return {"transport": transport, "seconds": round(seconds, 2), "bytes": wire,
                "bytes_per_s": round(wire / seconds), "udp": udp, "v2v_s": v2v,
                "server_v2v_s": server_v2v}


def barge(url: str, runs: int) -> list[dict]:
    rows = []
    interruption = spoken(INTERRUPTION)
    for i in range(runs):
        client = RecordingClient(url).connect()
        rtc = RtcAudio(client).connect()
        try:
            mark = time.monotonic()
            client.sio.emit("text_input", {"text": E2E_LONG_QUESTIONS[i % len(E2E_LONG_QUESTIONS)]})
            if not until(client, lambda evs, m=mark: any(n == "state" and d.get("state") == "speaking" and t > m
                                                         for t, n, d in evs), 60):
                rows.append({"error": "no reply"})
                continue
            time.sleep(0.5)
            onset = rtc.say(interruption) + voiced_span(interruption)[0]
            if not until(client, lambda evs, m=mark: any(n == "stop_tts" and t > m for t, n, _ in evs), 10):
                rows.append({"error": "no stop_tts"})
                continue
            stopped = next(t for t, n, _ in client.events if n == "stop_tts" and t > mark)
            time.sleep(1.5)
            again = [t for t, n, d in client.events if n == "state" and d.get("state") == "speaking" and t > stopped]
            end = again[0] if again else stopped + 1.5
            loud = rtc.loud(after=mark, before=end)
            last = max([t for t in loud if t <= end], default=None)
            rows.append({"heard_before_stop": bool(rtc.loud(after=mark, before=stopped)),
                         "silence_after_stop_s": max(0.0, last - stopped) if last else None,
                         "silence_after_onset_s": last - onset if last else None,
                         "stop_after_onset_s": stopped - onset})
        finally:
            rtc.close()
            client.close()
        print(f"  barge-in {i + 1}: {rows[-1]}", flush=True)
    return rows


def front_pid(url: str) -> int | None:
    import psutil

    port = urlparse(url).port
    for conn in psutil.net_connections("tcp"):
        if conn.status == "LISTEN" and conn.laddr.port == port and conn.pid:
            return conn.pid
    return None


def load(url: str, pid: int | None, speeches: list[np.ndarray]) -> list[dict]:
    """2 sessions at once, each asking every question, over WebRTC then over binary PCM."""
    rows = []
    for transport in ("webrtc", "binary"):
        before, cpu, wall = scrape(url), cpu_seconds(pid), time.monotonic()
        results: list[dict] = [{}, {}]
        threads = [threading.Thread(target=one_of_pair, args=(results, k, url, transport, speeches))
                   for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall, cpu = time.monotonic() - wall, cpu_seconds(pid) - cpu
        after = scrape(url)
        rows.append({"transport": transport, "sessions": results, "seconds": round(wall, 1),
                     "front_cores_per_session": round(cpu / wall / 2, 4) if pid else None,
                     "vad_lag_p99_s": histogram_quantile(before, after, "vita_vad_lag_seconds", 0.99),
                     "audio_dropped": delta(before, after, "vita_audio_dropped_messages_total")})
        print(f"  load {transport}: {rows[-1]}", flush=True)
    return rows


def one_of_pair(results: list[dict], k: int, url: str, transport: str, speeches: list[np.ndarray]) -> None:
    try:
        results[k] = pair_session(url, transport, speeches)
    except Exception as exc:  # reported in the row
        results[k] = {"error": f"{type(exc).__name__}: {exc}"}


def pair_session(url: str, transport: str, speeches: list[np.ndarray]) -> dict:
    answered, gaps = 0, []
    with talking(url, transport) as (client, rtc, mic):
        for speech in speeches:
            asked = time.monotonic()
            if rtc is not None:
                rtc.say(np.concatenate([silence(0.3), speech]))
            else:
                mic.say(np.concatenate([silence(0.3), speech]))
            if until(client, turn_over(asked), 60):
                answered += 1
            if rtc is not None:  # real time: reply frames (speech or not) keep coming every 20 ms while it plays
                times = [t for t, _ in list(rtc.heard) if t >= asked]
                gaps += [b - a for a, b in zip(times, times[1:], strict=False) if b - a < 0.5]  # not between replies
        return {"answered": answered, "of": len(speeches),
                "max_frame_gap_s": round(max(gaps), 3) if gaps else None,
                "frame_gap_p99_s": round(percentile(gaps, 0.99), 3) if gaps else None}


def codec_cost(seconds: float = 10.0) -> float:
    """Opus encode (reply, 24 kbit/s mono) + decode (microphone) of `seconds` of speech: cores per session."""
    import asyncio

    import av

    from vita.web.webrtc.opus_track import FRAME_SAMPLES, OPUS_RATE, OpusTrack

    async def make() -> OpusTrack:
        return OpusTrack()

    track = asyncio.run(make())
    decoder = av.CodecContext.create("libopus", "r")
    decoder.sample_rate, decoder.layout = OPUS_RATE, "stereo"
    speech = np.tile(spoken(QUESTIONS[0]), 10)
    track.push(speech.tobytes(), RATE)
    frames = int(seconds * OPUS_RATE / FRAME_SAMPLES)
    cpu = time.process_time()
    for _ in range(frames):
        for packet in track._encode(track._next_frame()):
            decoder.decode(packet)
        track._pts += FRAME_SAMPLES
    return (time.process_time() - cpu) / seconds


def churn(url: str, cycles: int, pid: int | None) -> dict:
    import psutil

    def health() -> dict:
        import requests
        return requests.get(url + "/health", verify=False, timeout=5).json()

    def udp_sockets() -> int | None:
        return len(psutil.Process(pid).net_connections("udp")) if pid else None

    before, udp_before = health(), udp_sockets()
    started, failed = time.monotonic(), 0
    for _ in range(cycles):
        client = RecordingClient(url).connect()
        try:
            rtc = RtcAudio(client).connect()
            rtc.close()
        except AssertionError:
            failed += 1
        client.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        after = health()
        if not after["sessions"] and not after["webrtc"]["peers"] and after["threads"] <= before["threads"]:
            break
        time.sleep(0.5)
    after = health()  # (its thread count leaves out engine.io's ping timers, which end within 10 s)
    return {"cycles": cycles, "failed": failed, "seconds": round(time.monotonic() - started, 1),
            "peers_after": after["webrtc"]["peers"], "sessions_after": after["sessions"],
            "threads": [before["threads"], after["threads"]], "rss_mb": [before["rss_mb"], after["rss_mb"]],
            "udp_sockets": [udp_before, udp_sockets()]}


def report(results: dict) -> None:
    talk = results.get("talk", [])
    if talk:
        print("\nconversation (same questions per transport):")
        by = {t: [r for r in talk if r["transport"] == t] for t in TRANSPORTS}
        rate = {t: statistics.median(r["bytes_per_s"] for r in rows) for t, rows in by.items() if rows}
        v2v = {t: [v for r in rows for v in r["v2v_s"] if v is not None] for t, rows in by.items()}
        for t, rows in by.items():
            if rows:
                line = f"  {t:>7}: {rate[t] / 1000:8.1f} kB/s on the wire"
                if v2v[t]:
                    line += f"; voice-to-voice at the client p50 {statistics.median(v2v[t]):.3f} s, " \
                            f"p90 {percentile(v2v[t], 0.9):.3f} s ({len(v2v[t])})"
                served = [v for r in rows for v in r["server_v2v_s"] if v is not None]
                if served:
                    line += f"; as the server timed it p50 {statistics.median(served):.3f} s"
                print(line)
        if "vita" in rate and "webrtc" in rate:
            ratio = rate["webrtc"] / rate["vita"]
            print(f"  WebRTC / VITA's JSON bytes: {ratio:.3f} (target <= {TARGETS['bytes_ratio']})")
        if v2v.get("webrtc") and v2v.get("binary"):
            extra = statistics.median(v2v["webrtc"]) - statistics.median(v2v["binary"])
            print(f"  WebRTC voice-to-voice - Socket.IO's (p50): {extra * 1000:+.0f} ms "
                  f"(target <= +{TARGETS['v2v_extra_s'] * 1000:.0f} ms)")
    rows = [r for r in results.get("barge", []) if r.get("silence_after_stop_s") is not None]
    if rows:
        quiet = [r["silence_after_stop_s"] for r in rows]
        onset = [r["silence_after_onset_s"] for r in rows]
        print(f"\nbarge-in over WebRTC ({len(rows)}): stop_tts -> silence at the client p50 "
              f"{statistics.median(quiet) * 1000:.0f} ms (p90 {percentile(quiet, 0.9) * 1000:.0f}); onset -> "
              f"silence p50 {statistics.median(onset) * 1000:.0f} ms (target: <= {TARGETS['silence_s'] * 1000:.0f})")
    for row in results.get("load", []):
        print(f"\nload, 2 sessions over {row['transport']}: {row}")
    if "codec_cores" in results:
        print(f"Opus encode + decode per session: {results['codec_cores'] * 100:.2f} % of a core "
              f"(target <= {TARGETS['codec_core'] * 100:.0f} %)")
    if "churn" in results:
        print(f"\nchurn: {results['churn']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="talk,barge,load,churn")
    parser.add_argument("--runs", type=int, default=2, help="conversations per transport; barge-ins = 3 x runs")
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--url")
    parser.add_argument("--front_pid", type=int)
    parser.add_argument("--json")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    server = None
    if args.url:
        url = args.url
        pid = args.front_pid or front_pid(url)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="vita-bench-webrtc-"))
        server = start_server(tmp, "--max_users", "4", "--timeout", "600")
        print(f"starting a server ({tmp / 'server.log'}) ...", flush=True)
        wait_ready(server)
        url, pid = server.url, server.process.pid
    results: dict = {"cpu": cpu_description(), "url": url}
    speeches = [spoken(q) for q in QUESTIONS]
    try:
        if "talk" in parts:
            results["talk"] = []
            # Unmeasured, first: a fresh server's first session pays what later ones do not (its first turns after
            # /ready, and each question's first prompt blocks, which the prefix cache then holds for every session
            # asking the same): whichever transport went first was 0.2 s slower for it (Zen 1, 2026-11-27).
            conversation(url, "binary", speeches)
            for run in range(args.runs):
                first = run % len(TRANSPORTS)
                for transport in TRANSPORTS[first:] + TRANSPORTS[:first]:  # each in each place in turn
                    row = conversation(url, transport, speeches)
                    results["talk"].append(row)
                    print(f"  talk {run + 1} {transport}: {row}", flush=True)
        if "barge" in parts:
            results["barge"] = barge(url, 3 * args.runs)
        if "load" in parts:
            results["load"] = load(url, pid, speeches[:3])
            results["codec_cores"] = codec_cost()
        if "churn" in parts:
            results["churn"] = churn(url, args.cycles, pid)
    finally:
        if server is not None:
            stop_server(server)
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
