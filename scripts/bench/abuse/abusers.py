"""The abusers: each a client that sends what a careless or hostile one would, on and on, beside the victim."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import cv2
import numpy as np

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
