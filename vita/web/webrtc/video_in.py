"""A camera's VP8 frames on their way to the decoder, and its pictures on their way to the session: bounded in size
and in decoding, before either costs anything.

aiortc decodes every frame its jitter buffer reassembles, in a decoder thread of the receiver's own, at whatever
size the frame's header names: VP8 allows 16383², and one flat 8192² keyframe (112 KB, ~90 RTP packets) took 0.9 s
to decode into a 100 MB picture, then 0.5 s and 200 MB more to become an array on the loop that carries every
peer's audio. So the server takes VP8 only (its size is in a keyframe's first ten bytes, RFC 6386 §9.1) and checks
each reassembled frame here, on the loop, before the decoder sees it: a keyframe over the image pixel limit never
reaches it, nor anything that depends on it, and the decoding is charged its pixels (``VideoGate``). The pictures
kept (two a second) are made at their reduced size off the loop (``picture``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from aiortc.jitterbuffer import JitterBuffer, JitterFrame

from vita.messages import Picture
from vita.pictures import picture_signature
from vita.rate_budget import RateBudget

log = logging.getLogger("vita.web.webrtc")
VIDEO_JITTER_PACKETS = 128  # as aiortc's own video jitter buffer (a frame of more packets is never whole)
# Decoding, in megapixels a second: a 720p camera at 15 fps or a 480p one at 30 (a person's camera; the pictures
# kept are two a second). A flood of the largest keyframes allowed (12 MP) decodes at ~1 a second.
DECODE_MP_PER_S = 14.0
KEYFRAME_ASKED_EVERY_S = 1.0  # a picture-loss indication (a new keyframe, please) at most this often
REFUSALS_LOGGED_EVERY = 100
VP8_START_CODE = b"\x9d\x01\x2a"
PICTURE_MAX_SIDE = 1280  # a picture kept is at most this many pixels a side (VITA's page sends 1280x768)
PICTURE_QUALITY = 70  # JPEG quality of a picture kept


def vp8_keyframe_size(data: bytes) -> tuple[int, int] | None:
    """A VP8 frame's (width, height) if it is a keyframe (what decoding it allocates); None for an interframe;
    (0, 0) for a keyframe whose header is cut short or broken (the decoder would refuse it)."""
    if not data or data[0] & 1:  # the frame tag's first bit is 1 for an interframe
        return None
    if len(data) < 10 or data[3:6] != VP8_START_CODE:
        return 0, 0
    return int.from_bytes(data[6:8], "little") & 0x3FFF, int.from_bytes(data[8:10], "little") & 0x3FFF


class VideoGate(JitterBuffer):
    """aiortc's video jitter buffer, whose reassembled frames go to the decoder only when they may: a keyframe of
    at most `max_pixels`, and the frames after it while the decoding budget (DECODE_MP_PER_S, each frame charged
    its keyframe's pixels) lasts. A frame dropped breaks the chain the next ones decode against, so from there on
    nothing goes to the decoder until a keyframe that may; one is asked for (a PLI, at most once a second) once
    the budget is half back. Runs on the WebRTC loop (aiortc's receiver calls ``add`` there)."""

    def __init__(self, max_pixels: int, clock: Callable[[], float] = time.monotonic):
        super().__init__(capacity=VIDEO_JITTER_PACKETS, is_video=True)
        self.max_pixels = max_pixels
        self.clock = clock
        self.budget = RateBudget(DECODE_MP_PER_S, max(DECODE_MP_PER_S, max_pixels / 1e6), clock())
        self.pixels = 0  # the stream's size, from its last keyframe let through; 0: waiting for a keyframe
        self.asked_at = -math.inf
        self.too_large = 0  # keyframes over max_pixels, dropped
        self.over_budget = 0  # frames dropped for the decoding budget
        self.passed = 0  # frames let through to the decoder

    def add(self, packet: Any) -> tuple[bool, JitterFrame | None]:
        pli, frame = super().add(packet)
        if frame is None:
            return pli, None
        now = self.clock()
        size = vp8_keyframe_size(frame.data)
        if size is not None:
            width, height = size
            self.pixels = width * height if 0 < width * height <= self.max_pixels else 0
            if width * height > self.max_pixels:
                self.too_large += 1
                if self.too_large % REFUSALS_LOGGED_EVERY == 1:
                    log.warning("a camera sends %dx%d keyframes (at most %d pixels): %d dropped before decoding",
                                width, height, self.max_pixels, self.too_large)
        if not self.pixels:  # nothing to decode it against (or a keyframe refused)
            return self._ask_keyframe(now) or pli, None
        if not (self.budget.open(now) and self.budget.take(self.pixels / 1e6, now)):
            self.over_budget += 1
            self.pixels = 0
            if self.over_budget % REFUSALS_LOGGED_EVERY == 1:
                log.warning("a camera sends more than %g megapixels a second to decode: %d frames dropped",
                            DECODE_MP_PER_S, self.over_budget)
            return False, None
        self.passed += 1
        return pli, frame

    def _ask_keyframe(self, now: float) -> bool:
        """Whether to ask the sender for a keyframe now: the budget is open again, and none was asked lately."""
        if now - self.asked_at < KEYFRAME_ASKED_EVERY_S or not self.budget.open(now):
            return False
        self.asked_at = now
        return True


def set_video_gate(pc: Any, max_pixels: int) -> None:
    """Give the peer's video receivers a VideoGate in place of aiortc's private jitter buffer (as
    rtp_audio_in.set_jitter_buffer does for audio; tests/web/test_video_in.py fails if an upgrade moves it)."""
    for transceiver in pc.getTransceivers():
        receiver = transceiver.receiver
        if transceiver.kind == "video" and hasattr(receiver, "_RTCRtpReceiver__jitter_buffer"):
            receiver._RTCRtpReceiver__jitter_buffer = VideoGate(max_pixels)


def keep_vp8(transceiver: Any) -> bool:
    """Narrow a video transceiver's negotiated codecs to VP8 (and its retransmissions), whose size the gate can read
    before decoding; False when the offer has no VP8 (the camera is then not received)."""
    codecs = getattr(transceiver, "_codecs", None)
    if not codecs:
        return False
    vp8 = {c.payloadType for c in codecs if c.mimeType.lower() == "video/vp8"}
    transceiver._codecs = [c for c in codecs if c.payloadType in vp8
                           or (c.mimeType.lower() == "video/rtx" and c.parameters.get("apt") in vp8)]
    return bool(vp8)


def picture(frame: Any, max_side: int = PICTURE_MAX_SIDE) -> Picture | None:
    """A decoded video frame → a JPEG of at most `max_side` pixels a side, scaled as it is converted (the frame's
    full size is never made into an array), with its signature made from the same pixels (as a page's frame gets
    one when it is checked). CPU-bound: run it off the loop."""
    import cv2

    scale = min(1.0, max_side / max(frame.width, frame.height))
    width, height = max(2, round(frame.width * scale)), max(2, round(frame.height * scale))
    image = frame.reformat(width=width, height=height, format="bgr24", interpolation="AREA").to_ndarray()
    ok, jpeg = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, PICTURE_QUALITY])
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    return Picture(jpeg.tobytes(), picture_signature(grey)) if ok else None
