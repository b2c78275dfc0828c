"""A WebRTC camera before and after the decoder (vita/web/webrtc/video_in.py, RtcPeer.watch): a VP8 keyframe's
size read before decoding, the decoding budget, the pictures kept (two a second, charged to the session's image
budget, made small off the loop), and a loopback call whose oversized keyframes never reach the decoder while its
microphone is charged to the session's audio budget before decoding. No model, no server."""

from __future__ import annotations

import asyncio
import fractions
import threading
import time
from typing import Any

import av
import cv2
import numpy as np
import pytest
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.codecs.vpx import Vp8Encoder, VpxPayloadDescriptor

from vita.messages import Picture
from vita.rate_budget import RateBudget
from vita.web.webrtc.hub import PeerBudgets, RtcHub, RtcPeer, RtcSettings
from vita.web.webrtc.opus_track import OpusTrack
from vita.web.webrtc.video_in import (
    DECODE_MP_PER_S,
    KEYFRAME_ASKED_EVERY_S,
    VideoGate,
    keep_vp8,
    picture,
    set_video_gate,
    vp8_keyframe_size,
)
from workers.vision.stage import decode_pixels, pixels_signature, same_picture, signature

pytestmark = pytest.mark.fast

MAX_PIXELS = 12_000_000


def encoded(width: int, height: int, frames: int = 2) -> list[bytes]:
    """`frames` VP8 frames of a flat picture (the first a keyframe), as the bytes the decoder takes."""
    encoder, out = Vp8Encoder(), []
    for i in range(frames):
        frame = av.VideoFrame(width=width, height=height, format="yuv420p")
        for plane in frame.planes:
            plane.update(bytes([100 + i]) * plane.buffer_size)
        frame.pts, frame.time_base = i * 3000, fractions.Fraction(1, 90000)
        payloads, _ = encoder.encode(frame, force_keyframe=i == 0)
        out.append(b"".join(VpxPayloadDescriptor.parse(p)[1] for p in payloads))
    return out


def claiming(keyframe: bytes, width: int, height: int) -> bytes:
    """The keyframe with another size in its header: all a decoder needs to allocate width × height."""
    return keyframe[:6] + width.to_bytes(2, "little") + height.to_bytes(2, "little") + keyframe[10:]


class Packet:
    def __init__(self, seq: int, timestamp: int, data: bytes):
        self.sequence_number, self.timestamp, self._data = seq, timestamp, data


class Feeder:
    """Frames into a gate, each as one packet: a frame is whole when the next one starts, so each call says what
    the gate did with the frame before (pli, its data or None)."""

    def __init__(self, gate: VideoGate):
        self.gate, self.seq = gate, 0

    def __call__(self, data: bytes) -> tuple[bool, bytes | None]:
        pli, frame = self.gate.add(Packet(self.seq, self.seq * 3000, data))
        self.seq += 1
        return pli, None if frame is None else frame.data

    def all(self, frames: list[bytes]) -> list[tuple[bool, bytes | None]]:
        """What became of each of `frames` (a last, empty interframe is left waiting)."""
        return [self(data) for data in [*frames, b"\x01end"]][1:]


def test_a_vp8_keyframe_tells_its_size_in_its_header():
    key, inter = encoded(320, 176)
    assert vp8_keyframe_size(key) == (320, 176)
    assert vp8_keyframe_size(inter) is None
    assert vp8_keyframe_size(claiming(key, 16383, 16383)) == (16383, 16383)
    assert vp8_keyframe_size(key[:7]) == (0, 0) and vp8_keyframe_size(b"\x00\x00\x00garbage!!") == (0, 0)


def test_a_keyframe_over_the_pixel_limit_and_what_follows_it_never_reach_the_decoder():
    key, inter = encoded(320, 176)
    gate = VideoGate(MAX_PIXELS, clock=lambda: 0.0)
    out = Feeder(gate).all([claiming(key, 8192, 8192), inter, inter, key, inter])
    assert [frame for _, frame in out] == [None, None, None, key, inter]
    assert gate.too_large == 1 and gate.passed == 2
    assert [pli for pli, _ in out[:3]] == [True, False, False]  # a keyframe asked for, at most once a second


def test_decoding_is_budgeted_in_pixels_and_resumes_at_a_keyframe_once_half_the_budget_is_back():
    key, inter = encoded(320, 176)
    big_key = claiming(key, 3000, 3000)  # 9 MP a frame
    now = [0.0]
    gate = VideoGate(MAX_PIXELS, clock=lambda: now[0])
    feed = Feeder(gate)
    fits = int(gate.budget.burst // 9)
    out = feed.all([big_key] + [inter] * (fits + 2))
    assert [frame is not None for _, frame in out] == [True] * fits + [False] * 3 and gate.over_budget == 1
    assert not any(pli for pli, _ in out)  # no keyframe asked for while the budget is out
    now[0] += gate.budget.burst / 2 / DECODE_MP_PER_S + KEYFRAME_ASKED_EVERY_S
    assert feed(big_key) == (True, None)  # the interframe waiting: dropped, and now a keyframe is asked for
    assert feed(inter) == (False, big_key)  # which decodes


def test_the_gate_is_set_in_place_of_aiortcs_video_buffer_and_an_offer_keeps_vp8_only():
    """aiortc has no setting for either: a private attribute is replaced and the negotiated codecs narrowed; this
    fails if an aiortc upgrade moves them."""

    async def negotiate() -> tuple[list, str, list]:
        caller = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        caller.addTransceiver("audio")
        caller.addTransceiver("video")
        await caller.setLocalDescription(await caller.createOffer())
        callee = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        await callee.setRemoteDescription(caller.localDescription)
        video = [t for t in callee.getTransceivers() if t.kind == "video"]
        assert keep_vp8(video[0])
        set_video_gate(callee, MAX_PIXELS)
        gates = [type(t.receiver._RTCRtpReceiver__jitter_buffer) for t in video]
        await callee.setLocalDescription(await callee.createAnswer())
        codecs = [c.mimeType for c in video[0]._codecs]
        answer = callee.localDescription.sdp
        await caller.close()
        await callee.close()
        return gates, answer, codecs

    gates, answer, codecs = asyncio.run(negotiate())
    assert gates == [VideoGate]
    assert codecs == ["video/VP8", "video/rtx"]
    assert "H264" not in answer and "VP8/90000" in answer


def test_a_picture_is_made_at_its_reduced_size():
    frame = av.VideoFrame(width=4000, height=3000, format="yuv420p")
    made = picture(frame)
    assert cv2.imdecode(np.frombuffer(made.image, np.uint8), cv2.IMREAD_COLOR).shape == (960, 1280, 3)
    assert same_picture(signature(made), pixels_signature(decode_pixels(made.image)))  # as the stage would make it
    small = av.VideoFrame(width=640, height=384, format="yuv420p")
    assert cv2.imdecode(np.frombuffer(picture(small).image, np.uint8), cv2.IMREAD_COLOR).shape == (384, 640, 3)


class Frame:
    """A decoded frame that counts its conversions."""

    converted = 0

    def __init__(self, width: int, height: int):
        self.width, self.height = width, height

    def reformat(self, **kwargs: Any) -> Any:
        Frame.converted += 1
        return av.VideoFrame(width=kwargs["width"], height=kwargs["height"], format="bgr24")


class Incoming:
    """A video track that hands over its frames at once, then ends."""

    def __init__(self, frames: list[Frame]):
        self.frames = frames

    async def recv(self) -> Frame:
        from aiortc.mediastreams import MediaStreamError

        if not self.frames:
            raise MediaStreamError
        return self.frames.pop(0)


def watched(frames: list[Frame], images: RateBudget | None) -> tuple[list[Picture], RtcPeer]:
    seen: list[Picture] = []
    peer = RtcPeer("sid", None, None, lambda *_: True, see=seen.append, images=images)
    Frame.converted = 0

    async def run() -> None:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pictures:
            await peer.watch(Incoming(frames), pictures, MAX_PIXELS)

    asyncio.run(run())
    return seen, peer


def test_frames_between_the_two_a_second_kept_are_dropped_before_any_conversion():
    seen, _ = watched([Frame(640, 384) for _ in range(30)], None)  # a second's worth, arriving at once
    assert len(seen) == 1 and Frame.converted == 1


def test_a_picture_kept_is_charged_to_the_sessions_image_budget_and_an_oversized_one_is_dropped():
    # a megapixel: room for the 640x384 picture, and the 1280x960 one after it, over the burst, is admitted only from
    # a full budget; refilled so slowly (a megapixel in 1000 s) that a slow machine's pause cannot refill it
    budget = RateBudget(0.001, 1.0, time.monotonic())
    seen, peer = watched([Frame(5000, 5000), Frame(640, 384)], budget)
    assert len(seen) == 1 and Frame.converted == 1  # the 25 MP frame was never converted
    assert budget.left == pytest.approx(1.0 - 640 * 384 / 1e6, abs=0.01)
    seen, peer = watched([Frame(1280, 960)], budget)
    assert seen == [] and peer.pictures_refused == 1 and Frame.converted == 0


class KeyframeTrack(MediaStreamTrack):
    """A camera sending encoded VP8 frames as they are, one every 50 ms."""

    kind = "video"

    def __init__(self, frames: list[bytes]):
        super().__init__()
        self.frames, self.sent = frames, 0

    async def recv(self) -> Any:
        if self.sent:
            await asyncio.sleep(0.05)
        packet = av.Packet(self.frames[self.sent % len(self.frames)])
        packet.pts, packet.time_base = self.sent * 4500, fractions.Fraction(1, 90000)
        self.sent += 1
        return packet


def test_a_call_whose_camera_claims_huge_keyframes_decodes_none_and_its_audio_is_charged_before_decoding():
    key, _ = encoded(320, 176)
    huge = claiming(key, 16383, 16383)
    hub = RtcHub(RtcSettings())
    client = asyncio.new_event_loop()
    threading.Thread(target=client.run_forever, daemon=True).start()
    heard, pictures, overruns = [], [], []
    audio = RateBudget(0.5, 0.5, time.monotonic())  # the session's, smaller than real time: it overruns
    changed = threading.Condition()

    def note(kept: list, item: Any) -> bool:
        with changed:
            kept.append(item)
            changed.notify_all()
        return True

    async def offer() -> tuple[RTCPeerConnection, OpusTrack]:
        mic = OpusTrack()
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTrack(mic)
        pc.addTrack(KeyframeTrack([huge, key]))
        await pc.setLocalDescription(await pc.createOffer())
        return pc, mic

    try:
        pc, mic = asyncio.run_coroutine_threadsafe(offer(), client).result(20)
        answer = hub.answer("sid", pc.localDescription.sdp, lambda pcm, rate: note(heard, pcm.size / rate),
                            client="127.0.0.1", see=lambda jpeg: note(pictures, jpeg),
                            budgets=PeerBudgets(audio, lambda: note(overruns, 1), RateBudget(5, 48, 0)))
        asyncio.run_coroutine_threadsafe(pc.setRemoteDescription(RTCSessionDescription(answer, "answer")),
                                         client).result(20)
        started = time.monotonic()
        mic.push(np.full(48000 * 3, 3000, dtype="<i2").tobytes(), 48000)
        with changed:
            assert changed.wait_for(lambda: pictures and overruns, 20), (len(pictures), len(overruns))
        gate = next(t.receiver._RTCRtpReceiver__jitter_buffer for t in hub.peer("sid").pc.getTransceivers()
                    if t.kind == "video")
        assert gate.too_large >= 1 and gate.passed >= 1  # the small keyframes decode; no huge one was tried
        # The session's own budget was charged before decoding: what was handed on is within it.
        with changed:
            assert sum(heard) <= 0.5 + 0.5 * (time.monotonic() - started) + 0.05, (sum(heard), len(overruns))
    finally:
        hub.close("sid")
        asyncio.run_coroutine_threadsafe(pc.close(), client).result(10)
        client.call_soon_threadsafe(client.stop)
        hub.stop()
