"""A Python WebRTC peer of the real server, signalled over a RecordingClient's Socket.IO connection as our page
does (`rtc_offer` → `rtc_answer`): it speaks through an Opus track (real-time pace, silence in between) and
records every 20 ms frame it hears with its arrival time and level. Runs on the RecordingClient's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from fractions import Fraction
from typing import Any

import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription, VideoStreamTrack
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import MediaStreamError
from av import VideoFrame

from tests.harness.client import RecordingClient
from vita.web.webrtc.opus_track import OpusTrack
from vita.web.webrtc.rtp_audio_in import set_jitter_buffer

PICTURE_FPS = 4
CLIENT_PREFETCH = 1  # packets this client's jitter buffer holds back: 20 ms (Chromium's held 14 ms here)
MIC_FRAME_MS = 40  # as a browser sends once our answer asks for a=ptime:40 (Chromium does)
LOUD_RMS = 300.0  # int16 RMS of a 20 ms frame that holds speech (Opus silence decodes to ~0)
IP_UDP_HEADER = 28  # bytes of IPv4 + UDP header per datagram, on the wire but not in a datagram's payload


class CountingLoop(asyncio.SelectorEventLoop):
    """Counts every UDP datagram this peer sends and receives (RTP, RTCP, STUN, DTLS: all of it), with the IP and
    UDP headers: the bytes on the wire."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = self.received = 0

    async def create_datagram_endpoint(self, protocol_factory: Any, *args: Any, **kwargs: Any) -> Any:
        loop = self

        def counted() -> Any:
            protocol = protocol_factory()
            receive = protocol.datagram_received

            def datagram_received(data: bytes, addr: Any) -> None:
                loop.received += len(data) + IP_UDP_HEADER
                receive(data, addr)

            protocol.datagram_received = datagram_received
            return protocol

        transport, protocol = await super().create_datagram_endpoint(counted, *args, **kwargs)
        send = transport.sendto

        def sendto(data: bytes, addr: Any = None) -> None:
            loop.sent += len(data) + IP_UDP_HEADER
            send(data, addr)

        transport.sendto = sendto
        return transport, protocol


class PictureTrack(VideoStreamTrack):
    """A camera that shows one picture (BGR) at PICTURE_FPS frames a second (a browser's sends ~30: the server
    decodes them all; a test peer on the same two cores need not)."""

    def __init__(self, picture: np.ndarray):
        super().__init__()
        self.picture = picture
        self.sent = 0

    async def recv(self) -> Any:
        if self.sent:
            await asyncio.sleep(1 / PICTURE_FPS)
        frame = VideoFrame.from_ndarray(self.picture, format="bgr24")
        frame.pts, frame.time_base = self.sent * (90000 // PICTURE_FPS), Fraction(1, 90000)
        self.sent += 1
        return frame


class RtcAudio:
    def __init__(self, client: RecordingClient | None, camera: np.ndarray | None = None):
        self.client = client
        self.camera = camera  # a picture shown on a video track as well (None: audio only)
        self.loop = CountingLoop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-rtc", daemon=True)
        self.thread.start()
        self.mic = self._run(self._track())
        self.heard: list[tuple[float, float]] = []  # (arrival, RMS) per received frame
        self.sent_at: list[float] = []  # per received frame: its RTP time, in seconds, on the sender's clock
        self.changed = threading.Condition()  # notified on every frame heard and connection state change
        self.pc: RTCPeerConnection | None = None

    @staticmethod
    async def _track() -> OpusTrack:
        return OpusTrack(frame_ms=MIC_FRAME_MS)  # made on the loop it is read on

    def _run(self, coroutine: Any, timeout: float = 15) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def connect(self, timeout: float = 20) -> RtcAudio:
        """Offer, take the answer, wait until the peer connection is up."""
        answers = len(self.client.named("rtc_answer"))
        offer = self._run(self._offer())
        self.client.sio.emit("rtc_offer", {"type": "offer", "sdp": offer})
        assert self.client.wait_for(lambda evs: sum(n in ("rtc_answer", "rtc_failed") for _, n, _ in evs) > answers,
                                    timeout), "no rtc_answer"
        assert not self.client.named("rtc_failed"), self.client.named("rtc_failed")
        answer = self.client.named("rtc_answer")[-1]
        self._run(self.pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], answer["type"])))
        assert self.wait(lambda: self.pc.connectionState in ("connected", "failed", "closed"), timeout)
        assert self.pc.connectionState == "connected", self.pc.connectionState
        return self

    def wait(self, predicate, timeout: float) -> bool:
        """Until predicate() holds (checked at each frame heard and state change) or the timeout."""
        with self.changed:
            return bool(self.changed.wait_for(predicate, timeout))

    def _notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def _prepare(self) -> None:
        """What the offer carries beside the microphone: the camera, when there is one."""
        if self.camera is not None:
            self.pc.addTrack(PictureTrack(self.camera))

    async def _offer(self) -> str:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # none: no public STUN server is reachable
        self.pc.addTrack(self.mic)
        self._prepare()
        set_jitter_buffer(self.pc, lambda: JitterBuffer(capacity=16, prefetch=CLIENT_PREFETCH))
        self.pc.on("connectionstatechange", self._notify)

        @self.pc.on("track")
        def on_track(track: Any) -> None:
            asyncio.ensure_future(self._listen(track))

        await self.pc.setLocalDescription(await self.pc.createOffer())  # gathers every candidate first
        return self.pc.localDescription.sdp

    async def _listen(self, track: Any) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            samples = frame.to_ndarray().astype(np.float64)
            with self.changed:
                self.heard.append((time.monotonic(), float(np.sqrt(np.mean(samples * samples)))))
                # (aiortc's receiver starts it at 0 and unwraps the 32-bit RTP clock)
                self.sent_at.append(float(frame.pts * frame.time_base) if frame.pts is not None else float("nan"))
                self.changed.notify_all()

    def say(self, pcm: np.ndarray, rate: int = 16000) -> float:
        """Queue int16 speech on the microphone track (sent at real-time pace); when it starts to go out."""
        start = time.monotonic() + self.mic.queued_s
        self.mic.push(pcm.astype("<i2").tobytes(), rate, last=True)
        return start

    def loud(self, after: float = 0.0, before: float = float("inf")) -> list[float]:
        """Arrival times of frames with speech in them."""
        with self.changed:
            return [t for t, rms in self.heard if after <= t < before and rms >= LOUD_RMS]

    def loud_sent(self, after: float = 0.0, before: float = float("inf")) -> list[float]:
        """Frames with speech in them by when they were sent, not heard: their RTP time put on this clock by the
        frame that arrived soonest after it. A client starved of the CPU decodes late what was sent in time; these
        times do not move with that."""
        with self.changed:
            frames = [(t, rms, s) for (t, rms), s in zip(self.heard, self.sent_at, strict=True) if s == s]
        if not frames:
            return []
        offset = min(t - s for t, _, s in frames)
        return sorted(s + offset for _, rms, s in frames if rms >= LOUD_RMS and after <= s + offset < before)

    def speech_runs(self, gap_s: float) -> list[tuple[float, float]]:
        """Stretches of speech by when they were sent (first and last loud frame), split where no speech was sent
        for gap_s: a reply's sentences stay one stretch, the next reply (seconds later) makes another."""
        runs: list[tuple[float, float]] = []
        for at in self.loud_sent():
            if runs and at - runs[-1][1] <= gap_s:
                runs[-1] = (runs[-1][0], at)
            else:
                runs.append((at, at))
        return runs

    def rtp_clock_problem(self) -> str | None:
        """Why the frames' RTP times cannot place them (None: they can): missing, going back, or spanning far
        more or less than their arrivals did."""
        with self.changed:
            heard, sent = list(self.heard), list(self.sent_at)
        if not sent or any(s != s for s in sent):
            return f"frames without an RTP time: {sent[-20:]}"
        if any(b < a for a, b in itertools.pairwise(sent)):
            return f"RTP time goes back: {sent[-40:]}"
        if abs((sent[-1] - sent[0]) - (heard[-1][0] - heard[0][0])) > 2.0:
            return f"RTP times span {sent[-1] - sent[0]:.1f} s, arrivals {heard[-1][0] - heard[0][0]:.1f} s"
        return None

    def wire_bytes(self) -> dict[str, int]:
        """Bytes on the wire so far, both ways (every datagram with its IP and UDP headers)."""
        return {"sent": self.loop.sent, "received": self.loop.received}

    def close(self) -> None:
        if self.pc is not None:
            self._run(self.pc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class RealtimeCall(RtcAudio):
    """A Realtime client over WebRTC, as OpenAI's browser SDKs connect: its offer posted to /v1/realtime/calls by
    the `openai` package's own ``realtime.calls.create``, speech on the track, replies heard on ours, and the
    Realtime events on the ``oai-events`` data channel it opens (recorded, as RealtimeClient records them)."""

    def __init__(self, url: str, token: str = "no-token", session: dict | None = None):
        super().__init__(client=None)
        self.url, self.token, self.session = url, token, session
        self.channel: Any = None
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.opened = threading.Event()

    def connect(self, timeout: float = 20) -> RealtimeCall:
        from openai import DefaultHttpxClient, OpenAI

        offer = self._run(self._offer())
        api = OpenAI(api_key=self.token, base_url=self.url + "/v1", http_client=DefaultHttpxClient(verify=False))
        asked = {"sdp": offer, **({"session": self.session} if self.session is not None else {})}
        answer = api.realtime.calls.create(**asked).text
        self._run(self.pc.setRemoteDescription(RTCSessionDescription(answer, "answer")))
        assert self.wait(lambda: self.pc.connectionState in ("connected", "failed", "closed"), timeout)
        assert self.pc.connectionState == "connected", self.pc.connectionState
        assert self.opened.wait(timeout), "the oai-events channel did not open"
        return self

    def _prepare(self) -> None:
        """The events channel, opened by the caller as OpenAI's clients do."""
        self.channel = self.pc.createDataChannel("oai-events")

        @self.channel.on("open")
        def on_open() -> None:
            self.opened.set()

        @self.channel.on("message")
        def on_message(message: str) -> None:
            with self.changed:
                self.events.append((time.monotonic(), json.loads(message)))
                self.changed.notify_all()

    def send(self, event: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self.channel.send, json.dumps(event))

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.changed:
            return [e for _, e in self.events if e.get("type") == kind]

    def wait_type(self, kind: str, count: int = 1, timeout: float = 10) -> list[dict[str, Any]]:
        """The first `count` events of this type, once there are that many (AssertionError at the deadline)."""
        ok = self.wait(lambda: sum(e.get("type") == kind for _, e in self.events) >= count, timeout)
        assert ok, f"no {count} × {kind} within {timeout} s; got {[e.get('type') for _, e in self.events][-30:]}"
        return self.of(kind)[:count]
