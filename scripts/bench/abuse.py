"""Abuse benchmark: one seated client tries to sink the front while another session asks questions.

Starts its own server (or `--url` with `--server_pid`). A victim session asks spoken questions (hibari, our page's
32 ms binary frames, the microphone open throughout) and times voice-to-voice at the client: first alone, then
while each abuser runs for `--seconds` (one at a time, each on a connection of its own), then after it has left.
The front's RSS and thread count are sampled before, at the end of, and 5 s after each abuse.

Abusers: JSON audio at the byte limit as fast as the socket takes it; binary audio likewise; speech cut into words
with 150 ms gaps (a pause, a judge job and a speculative turn every ~0.3 s); 64 ms of speech, then 2000-character
texts as fast as allowed; a typed question cut by recording-stopped/started, over and over (TTS cancels); WebRTC
offers with 120 media sections; a connected WebRTC peer flooded with ICE candidates naming loopback, private,
link-local and mDNS addresses; a calculator question whose answer once held the LLM worker's GIL, typed every
second; Realtime clients committing 120 s buffers, sending items of 40,000 tiny audio parts, and asking for
responses with 16,000 characters of instructions every second. Image abusers, each asking about its camera with a
typed question every 2 s (`camera_asker`, an ordinary camera asked about as often, is their control: each question
is a turn of the shared engine): progressive-JPEG scan bombs (thousands of empty scans), JPEG marker floods and PNGs of
inflating text chunks as `video_frame`s; 12-megapixel progressive photos as fast as the socket takes them; a
WebRTC camera of 8192² VP8 keyframes; a WebRTC camera of 1280² keyframes at 60 frames a second; a Realtime
client sending items of four 12-megapixel `input_image` parts.

The victim's camera shows a printed sign throughout (VITA's 2 fps `video_frame`s), and every third question is
"What does the sign say?": its voice-to-voice is reported apart, with whether the answer read the sign.

Targets: under each abuse the front's RSS grows <= 50 MB and its threads <= +10; the victim's
voice-to-voice p50 within 20 % of its value alone, and its camera question's within 1 s of alone; after the abuser
leaves, RSS within 10 MB of the baseline.

Usage: .venv/bin/python -m scripts.bench.abuse [--seconds 60] [--only NAME,...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import psutil
import requests

from scripts.bench.measure import ask
from scripts.eval.camera import Camera
from scripts.eval.voices import synthesize
from tests.harness import hostile_images
from tests.harness.client import RecordingClient
from tests.harness.speech import Microphone
from vita.web.audio_input import JSON_MAX_BYTES

QUESTIONS = ["What is the capital of France?", "How many legs does a spider have?", "What do bees make?",
             "What color is the sky?", "Is a whale a mammal?", "What is two plus three?"]
RATE = 16000


def json_audio(stop: threading.Event, client: RecordingClient) -> None:
    message = json.dumps({"sample_rate": RATE, "audio": [0] * JSON_MAX_BYTES})  # at the byte limit, "0, " a byte
    while not stop.is_set():
        client.sio.emit("audio", message)


def binary_audio(stop: threading.Event, client: RecordingClient) -> None:
    frame = bytes(64_000)
    while not stop.is_set():
        client.sio.emit("audio", frame)


def word_gaps(stop: threading.Event, client: RecordingClient) -> None:
    word = synthesize("hibari", "Go.")
    loud = np.flatnonzero(np.abs(word.astype(np.int32)) > 800)
    unit = np.concatenate([word[loud[0]:loud[-1]], np.zeros(int(0.15 * RATE), np.int16)])
    mic = Microphone(client, binary=True, name="abuser-mic")
    block = np.tile(unit, 10)
    queued = mic.say(block)
    while not stop.is_set():
        following = mic.say(block)  # always one behind the one being sent: no silence between them
        while not queued.done.wait(0.1) and not stop.is_set():
            pass
        queued = following
    mic.close()


def text_while_speaking(stop: threading.Event, client: RecordingClient) -> None:
    speech = synthesize("hibari", "Hello there.")
    client.sio.emit("audio", speech[:int(0.064 * RATE) * 4].astype("<i2").tobytes())
    text = "x" * 2000
    while not stop.is_set():
        client.sio.emit("text_input", {"text": text})


def cancel_churn(stop: threading.Event, client: RecordingClient) -> None:
    while not stop.is_set():
        client.sio.emit("text_input", {"text": "Tell me a long story about a dragon and a knight."})
        stop.wait(0.8)
        client.sio.emit("recording-stopped")
        client.sio.emit("recording-started")


def many_sections(stop: threading.Event, client: RecordingClient) -> None:
    sdp = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n" + "".join(
        f"m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:{i}\r\na=rtpmap:111 opus/48000/2\r\n" for i in range(120))
    while not stop.is_set():
        client.sio.emit("rtc_offer", {"type": "offer", "sdp": sdp})
        stop.wait(1.1)  # the offer gate: one a second


def candidates(stop: threading.Event, client: RecordingClient) -> None:
    from tests.harness.rtc import RtcAudio

    peer = RtcAudio(client).connect()
    addresses = ["127.0.0.1", "10.1.2.3", "169.254.1.1", "abcd.local", "192.168.0.1", "93.184.216.34"]
    n = 0
    try:
        while not stop.is_set():
            address = addresses[n % len(addresses)]
            client.sio.emit("rtc_candidate", {"candidate": f"candidate:{n} 1 udp 2130706431 {address} "
                                              f"{10000 + n % 50000} typ host", "sdpMid": "0", "sdpMLineIndex": 0})
            n += 1
    finally:
        peer.close()


TINY = "0." + "0" * 185 + "1"
HUGE_SUM = f"What is 1 divided by {TINY} to the power of 1000?"  # once a Decimal of ~186,000 digits


def calculator(stop: threading.Event, client: RecordingClient) -> None:
    """The sum whose answer once took the LLM worker's GIL for a second or more, typed every second."""
    while not stop.is_set():
        client.sio.emit("text_input", {"text": HUGE_SUM})
        stop.wait(1.0)


def _realtime(client: RecordingClient):
    from tests.harness.realtime_client import RealtimeClient

    return RealtimeClient(client.url)


def realtime_long_commits(stop: threading.Event, client: RecordingClient) -> None:
    """A Realtime client pushing 120 s of audio a commit, as fast as it may."""
    import base64

    rt = _realtime(client)
    chunk = base64.b64encode(bytes(24000 * 2)).decode()  # 1 s of 24 kHz PCM
    try:
        rt.send({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {
            "turn_detection": None}}}})
        while not stop.is_set():
            for _ in range(120):
                if stop.is_set():
                    break
                rt.send({"type": "input_audio_buffer.append", "audio": chunk})
            rt.send({"type": "input_audio_buffer.commit"})
            rt.send({"type": "response.create"})
            stop.wait(0.5)
    finally:
        rt.close()


def realtime_many_parts(stop: threading.Event, client: RecordingClient) -> None:
    """A Realtime client sending items of 40,000 tiny audio parts (~2 MB each)."""
    import base64

    rt = _realtime(client)
    tiny = base64.b64encode(bytes(4)).decode()
    item = json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_audio", "audio": tiny}] * 40000}})
    try:
        while not stop.is_set():
            rt.send_raw(item)
            stop.wait(0.5)
    finally:
        rt.close()


def realtime_long_instructions(stop: threading.Event, client: RecordingClient) -> None:
    """A Realtime client asking for a response with 16,000 characters of instructions every second."""
    rt = _realtime(client)
    try:
        while not stop.is_set():
            rt.send({"type": "response.create", "response": {"instructions": "Be brief. " * 1600,
                                                            "output_modalities": ["text"]}})
            stop.wait(1.0)
    finally:
        rt.close()


SIGN = "EXIT 12"  # what the victim's camera shows
CAMERA_QUESTION = "What does the sign say?"


def sign_picture() -> bytes:
    image = np.full((768, 1280, 3), 235, np.uint8)
    cv2.putText(image, SIGN, (260, 440), cv2.FONT_HERSHEY_SIMPLEX, 5, (20, 20, 20), 14)
    return cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 70])[1].tobytes()


def _pictures_asked_about(stop: threading.Event, client: RecordingClient, pictures: list[bytes],
                          media: str = "image/jpeg", every_s: float = 0.5) -> None:
    """`video_frame`s of `pictures` in turn, and a typed question about them every 2 s (a turn waits for its
    picture's analysis: the attacker's pictures compete with the victim's for the vision stage)."""
    from scripts.eval.camera import data_url

    urls = [data_url(p).replace("image/jpeg", media) for p in pictures]
    asked, n = 0.0, 0
    while not stop.is_set():
        client.sio.emit("video_frame", urls[n % len(urls)])
        n += 1
        if time.monotonic() - asked >= 2.0:
            asked = time.monotonic()
            client.sio.emit("text_input", {"text": "What does the sign say?"})
        stop.wait(every_s)


def camera_asker(stop: threading.Event, client: RecordingClient) -> None:
    """The control for the image abusers: an ordinary camera (VITA's 1280x768 frames, 2 a second) and the same typed
    question every 2 s. Each answer is a turn of the shared engine: what an image abuser costs the victim beyond
    this is what its pictures cost."""
    _pictures_asked_about(stop, client, [sign_picture()])


def scan_bombs(stop: threading.Event, client: RecordingClient) -> None:
    """12-megapixel progressive JPEGs with 5,000 empty scans (130 KB; seconds of libjpeg each, unchecked)."""
    _pictures_asked_about(stop, client, [hostile_images.scan_bomb(4000, 3000, 5000)])


def marker_floods(stop: threading.Event, client: RecordingClient) -> None:
    _pictures_asked_about(stop, client, [hostile_images.marker_flood(segments=20_000)])


def png_text_bombs(stop: threading.Event, client: RecordingClient) -> None:
    """PNGs of 120 zTXt chunks (1 MB, under the frame limit), each inflating to libpng's 8 MB limit (~17 ms apiece,
    unchecked: 2 s a picture)."""
    _pictures_asked_about(stop, client, [hostile_images.packed_text_png(chunks=120)], media="image/png")


def big_photos(stop: threading.Event, client: RecordingClient) -> None:
    """Real-looking 12-megapixel progressive photos, a new one each time (never "the same picture"), as fast as the
    socket takes them."""
    photos = [hostile_images.jpeg(4000, 3000, progressive=True, quality=60 + 5 * i) for i in range(3)]
    _pictures_asked_about(stop, client, photos, every_s=0.0)


def _video_camera(stop: threading.Event, client: RecordingClient, side: int, fps: float) -> None:
    from scripts.bench.rtc_video import KeyframeTrack, flat_keyframe
    from tests.harness.rtc import RtcAudio

    keyframe = flat_keyframe(side)

    class KeyframeCamera(RtcAudio):
        def _prepare(self) -> None:
            self.pc.addTrack(KeyframeTrack(keyframe, fps))

    peer = KeyframeCamera(client).connect()
    try:
        while not stop.is_set():
            client.sio.emit("text_input", {"text": "What does the sign say?"})
            stop.wait(2.0)
    finally:
        peer.close()


def huge_keyframes(stop: threading.Event, client: RecordingClient) -> None:
    """A WebRTC camera of flat 8192x8192 VP8 keyframes (112 KB; 0.9 s to decode, 201 MB as BGR), two a second."""
    _video_camera(stop, client, 8192, 2.0)


def fast_video(stop: threading.Event, client: RecordingClient) -> None:
    """A WebRTC camera of 1280x1280 keyframes at 60 frames a second."""
    _video_camera(stop, client, 1280, 60.0)


def realtime_images(stop: threading.Event, client: RecordingClient) -> None:
    """A Realtime client sending items of four 12-megapixel progressive `input_image` parts, and asking about them,
    every second."""
    from scripts.eval.camera import data_url

    rt = _realtime(client)
    photos = [data_url(hostile_images.jpeg(4000, 3000, progressive=True, quality=60 + 5 * i)) for i in range(4)]
    try:
        while not stop.is_set():
            rt.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "What does the sign say?"},
                *[{"type": "input_image", "image_url": url} for url in photos]]}})
            rt.send({"type": "response.create", "response": {"output_modalities": ["text"]}})
            stop.wait(1.0)
    finally:
        rt.close()


ABUSERS: dict[str, Callable[[threading.Event, RecordingClient], None]] = {
    "json_audio": json_audio, "binary_audio": binary_audio, "word_gaps": word_gaps,
    "text_while_speaking": text_while_speaking, "cancel_churn": cancel_churn, "many_sections": many_sections,
    "candidates": candidates, "calculator": calculator, "realtime_long_commits": realtime_long_commits,
    "realtime_many_parts": realtime_many_parts, "realtime_long_instructions": realtime_long_instructions,
    "camera_asker": camera_asker, "scan_bombs": scan_bombs, "marker_floods": marker_floods,
    "png_text_bombs": png_text_bombs, "big_photos": big_photos, "huge_keyframes": huge_keyframes,
    "fast_video": fast_video, "realtime_images": realtime_images}


def health(url: str) -> dict:
    return requests.get(url + "/health", verify=False, timeout=5).json()


def front_usage(pid: int) -> dict[str, float]:
    process = psutil.Process(pid)
    cpu = process.cpu_times()
    return {"rss_mb": round(process.memory_info().rss / 2**20, 1), "threads": process.num_threads(),
            "cpu_s": cpu.user + cpu.system, "at": time.monotonic()}


def cpu_share(before: dict, after: dict) -> float:
    """The front's CPU between two samples, in cores."""
    return (after["cpu_s"] - before["cpu_s"]) / max(1e-6, after["at"] - before["at"])


def thread_cpu_s(native_id: int | None) -> float:
    """CPU time of one thread of this process (the abuser's client: it shares the machine with the server)."""
    for thread in psutil.Process().threads():
        if thread.id == native_id:
            return thread.user_time + thread.system_time
    return 0.0


@dataclass
class VictimTurns:
    v2v: list[float] = field(default_factory=list)  # the plain questions'
    camera_v2v: list[float] = field(default_factory=list)  # "What does the sign say?"
    camera_read: int = 0  # camera answers that read the sign
    camera_asked: int = 0


def victim_turns(client: RecordingClient, mic: Microphone, until: float) -> VictimTurns:
    """Spoken questions until `until`, every third about the sign its camera shows; their voice-to-voice at the
    client."""
    turns, i = VictimTurns(), 0
    while time.monotonic() < until:
        about_camera = i % 3 == 2
        row = ask(client, mic, "hibari", CAMERA_QUESTION if about_camera else QUESTIONS[i % len(QUESTIONS)])
        i += 1
        if not row or row.get("client_v2v_s") is None:
            continue
        if about_camera:
            turns.camera_asked += 1
            turns.camera_v2v.append(row["client_v2v_s"])
            turns.camera_read += "exit" in row.get("reply", "").lower() and "12" in row.get("reply", "")
        else:
            turns.v2v.append(row["client_v2v_s"])
    return turns


def run_abuse(url: str, pid: int, name: str, seconds: float, victim: RecordingClient, mic: Microphone) -> dict:
    before = front_usage(pid)
    stop, abuser = threading.Event(), RecordingClient(url).connect()
    errors: list[str] = []

    def run() -> None:
        try:
            ABUSERS[name](stop, abuser)
        except Exception as exc:  # the server closing the abuser's connection ends its abuse
            errors.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=run, name=f"abuse-{name}", daemon=True)
    thread.start()
    turns = victim_turns(victim, mic, time.monotonic() + seconds)
    v2v = turns.v2v
    during = front_usage(pid)
    abuser_cpu = thread_cpu_s(thread.native_id) / max(1e-6, during["at"] - before["at"])
    stop.set()
    thread.join(10)
    codes = sorted({d.get("code") for _, n, d in abuser.events if n == "error" and isinstance(d, dict)})
    failed = [d.get("message") for _, n, d in abuser.events if n == "rtc_failed" and isinstance(d, dict)]
    try:
        abuser.close()
    except TimeoutError:  # a throttled abuser's goodbye waits behind all it queued: it just goes silent, and the
        abuser.loop.call_soon_threadsafe(abuser.loop.stop)  # server drops it at its ping timeout
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and health(url)["sessions"] > 1:
            time.sleep(0.5)
    time.sleep(5.0)  # the front's allocator and engine.io's timers settle after the abuser left
    after = front_usage(pid)
    return {"abuse": name, "before": before, "during": during, "after": after, "victim_v2v": v2v,
            "victim_v2v_p50": statistics.median(v2v) if v2v else None, "abuser_errors": codes,
            "victim_camera_v2v": turns.camera_v2v, "victim_camera_read": [turns.camera_read, turns.camera_asked],
            "victim_camera_v2v_p50": statistics.median(turns.camera_v2v) if turns.camera_v2v else None,
            "front_cores": round(cpu_share(before, during), 2), "abuser_client_cores": round(abuser_cpu, 2),
            "abuser_rtc_failed": failed[:1], "abuser_ended": errors[:1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (with --server_pid: its front's pid)")
    parser.add_argument("--server_pid", type=int)
    parser.add_argument("--seconds", type=float, default=60.0, help="each abuse (and the baseline) this long")
    parser.add_argument("--only", help="comma-separated abusers: " + ", ".join(ABUSERS))
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args()
    server, url, pid = None, args.url, args.server_pid
    if url is None:
        from tests.harness.server import start_server, wait_ready

        server = start_server(Path(tempfile.mkdtemp()), "--timeout", "3600", "--max_users", "3")
        wait_ready(server)
        url, pid = server.url, server.process.pid
    names = args.only.split(",") if args.only else list(ABUSERS)
    victim = RecordingClient(url).connect()
    mic = Microphone(victim, binary=True)
    camera = Camera(victim, sign_picture())
    rows = []
    try:
        camera.__enter__()  # the victim's camera shows the sign throughout
        ask(victim, mic, "hibari", "Hello there.")  # warm-up turn
        base = front_usage(pid)
        alone_turns = victim_turns(victim, mic, time.monotonic() + args.seconds)
        alone = alone_turns.v2v
        alone_p50 = statistics.median(alone)
        camera_p50 = statistics.median(alone_turns.camera_v2v) if alone_turns.camera_v2v else float("nan")
        cores = cpu_share(base, front_usage(pid))
        print(f"alone: victim v2v p50 {alone_p50:.3f} s ({len(alone)} turns), camera question {camera_p50:.3f} s"
              f" (read {alone_turns.camera_read}/{alone_turns.camera_asked}); front RSS {base['rss_mb']} MB,"
              f" {base['threads']} threads, {cores:.2f} cores", flush=True)
        for name in names:
            row = run_abuse(url, pid, name, args.seconds, victim, mic)
            rows.append(row)
            p50 = row["victim_v2v_p50"]
            grew = row["during"]["rss_mb"] - row["before"]["rss_mb"]
            threads = row["during"]["threads"] - row["before"]["threads"]
            left = row["after"]["rss_mb"] - base["rss_mb"]
            seen = row["victim_camera_v2v_p50"]
            ok = (grew <= 50 and threads <= 10 and p50 is not None and p50 <= 1.2 * alone_p50 and left <= 10
                  and (seen is None or not seen > camera_p50 + 1.0))
            print(f"{name:20} victim v2v p50 {p50 if p50 is None else round(p50, 3)} s ({len(row['victim_v2v'])}"
                  f" turns, {100 * (p50 / alone_p50 - 1) if p50 else 0:+.0f} %), camera question"
                  f" {seen if seen is None else round(seen, 3)} s (read {row['victim_camera_read'][0]}/"
                  f"{row['victim_camera_read'][1]}); front RSS +{grew:.1f} MB, threads"
                  f" {threads:+d}; after it left RSS {left:+.1f} MB vs baseline, threads {row['after']['threads']};"
                  f" front {row['front_cores']:.2f} cores, abuser's client {row['abuser_client_cores']:.2f} cores;"
                  f" the abuser got {row['abuser_errors'] or row['abuser_rtc_failed'] or '-'}"
                  f"  {'PASS' if ok else 'FAIL'}", flush=True)
    finally:
        camera.__exit__(None, None, None)
        mic.close()
        victim.close()
        if server is not None:
            from tests.harness.server import stop_server

            stop_server(server)
    if args.json:
        Path(args.json).write_text(json.dumps({"alone": alone, "alone_camera": alone_turns.camera_v2v,
                                               "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
