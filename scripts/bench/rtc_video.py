"""What a WebRTC camera of huge pictures costs the front: the real RtcHub (the loop that carries every peer's
audio) answers a loopback aiortc peer that sends a microphone (Opus, real time) and a video track of flat VP8
keyframes of --size pixels a side (VP8 allows 16383²; 8192² is ~112 KB, ~90 RTP packets), two a second.

It prints the hub loop's worst stall (a 5 ms ticker on that loop: how late it woke), the longest gap between two
microphone frames handed to the session, the pictures the session got, and the process's RSS before, at its
peak and after. No model, no server.
Usage: .venv/bin/python -m scripts.bench.rtc_video [--size 8192] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import fractions
import inspect
import threading
import time
from typing import Any

import av
import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from vita.rate_budget import RateBudget
from vita.web.webrtc.hub import RtcHub, RtcSettings
from vita.web.webrtc.opus_track import OpusTrack

TICK_S = 0.005


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident memory of this process, MB."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def flat_keyframe(side: int) -> bytes:
    """One VP8 keyframe of a flat grey side×side picture (aiortc's own encoder)."""
    from aiortc.codecs.vpx import Vp8Encoder

    frame = av.VideoFrame(width=side, height=side, format="yuv420p")
    for plane in frame.planes:
        plane.update(bytes([128]) * plane.buffer_size)
    frame.pts, frame.time_base = 0, fractions.Fraction(1, 90000)
    encoder = Vp8Encoder()
    payloads, _ = encoder.encode(frame, force_keyframe=True)
    from aiortc.codecs.vpx import VpxPayloadDescriptor

    return b"".join(VpxPayloadDescriptor.parse(p)[1] for p in payloads)


class KeyframeTrack(MediaStreamTrack):
    """Sends the same encoded keyframe `fps` times a second (as packets: aiortc's sender only packetizes them)."""

    kind = "video"

    def __init__(self, keyframe: bytes, fps: float):
        super().__init__()
        self.keyframe, self.fps, self.sent = keyframe, fps, 0

    async def recv(self) -> Any:
        if self.sent:
            await asyncio.sleep(1 / self.fps)
        packet = av.Packet(self.keyframe)
        packet.pts, packet.time_base = self.sent * int(90000 / self.fps), fractions.Fraction(1, 90000)
        self.sent += 1
        return packet


async def ticker(stalls: list[float]) -> None:
    while True:
        start = time.perf_counter()
        await asyncio.sleep(TICK_S)
        stalls.append(time.perf_counter() - start - TICK_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fps", type=float, default=2.0)
    args = parser.parse_args()

    started = time.perf_counter()
    keyframe = flat_keyframe(args.size)
    print(f"keyframe {args.size}x{args.size}: {len(keyframe)} bytes (encoded in {time.perf_counter() - started:.1f} s)")
    with open("/proc/self/clear_refs", "w") as refs:  # the peak from here on (the encoding above is the client's)
        refs.write("5")
    before = rss_mb()
    hub = RtcHub(RtcSettings())
    heard: list[float] = []
    pictures: list[int] = []

    def hear(pcm: np.ndarray, rate: int) -> bool:
        heard.append(time.perf_counter())
        return True

    client_loop = asyncio.new_event_loop()
    threading.Thread(target=client_loop.run_forever, daemon=True).start()

    def on_client(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, client_loop).result(30)

    async def offer() -> tuple[RTCPeerConnection, str]:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTrack(OpusTrack())  # a microphone: 20 ms packets of silence, in real time
        pc.addTrack(KeyframeTrack(keyframe, args.fps))
        await pc.setLocalDescription(await pc.createOffer())
        return pc, pc.localDescription.sdp

    pc, sdp = on_client(offer())
    extra: dict[str, Any] = {}
    if "images" in inspect.signature(hub.answer).parameters:
        extra["images"] = RateBudget(5.0, 48.0, time.monotonic())  # the session's image budget, as the app's
    answer = hub.answer("bench", sdp, hear, client="127.0.0.1", see=lambda made: pictures.append(len(made.image)),
                        **extra)
    on_client(pc.setRemoteDescription(RTCSessionDescription(answer, "answer")))
    stalls: list[float] = []
    ticking = hub.submit(ticker(stalls))
    peak_stall = 0.0
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        time.sleep(0.5)
    peak = rss_mb()
    peak_stall = max(stalls, default=0.0)
    gaps = np.diff(heard) if len(heard) > 1 else np.array([0.0])
    ticking.cancel()
    hub.close("bench")
    on_client(pc.close())
    hub.stop()
    after = rss_mb()
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # as the front does when a session ends
    trimmed = rss_mb()
    print(f"hub loop: worst stall {peak_stall * 1000:.0f} ms, p99 {np.percentile(stalls, 99) * 1000:.1f} ms "
          f"({len(stalls)} ticks of {TICK_S * 1000:.0f} ms)")
    print(f"microphone: {len(heard)} frames handed on, longest gap {gaps.max() * 1000:.0f} ms")
    print(f"pictures to the session: {len(pictures)} ({sum(pictures)} bytes of JPEG)")
    print(f"RSS MB: before {before[0]:.0f}, at the end of the call {peak[0]:.0f} (peak {peak[1]:.0f}), "
          f"after closing {after[0]:.0f}, after malloc_trim {trimmed[0]:.0f}")


if __name__ == "__main__":
    main()
