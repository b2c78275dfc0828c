"""WebRTC audio beside Socket.IO: one peer connection per session, all of them on one asyncio loop thread.

Signalling, text and states stay on the session's Socket.IO connection (same token, origin rules and seat); only
the audio moves: Opus from the browser is decoded and handed to the session's listener like PCM from the socket
(the VAD and the turn machine never know the transport), and reply audio is encoded to Opus here and paced in
real time by the outgoing track, whose queue a barge-in empties at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import re
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from aiortc.sdp import candidate_from_sdp

from vita.config import WebRtcConfig
from vita.config_checks import check_ice_servers
from vita.messages import Picture
from vita.rate_budget import RateBudget
from vita.web.webrtc.opus_track import OpusTrack
from vita.web.webrtc.rtp_audio_in import InOrderBuffer, set_jitter_buffer
from vita.web.webrtc.video_in import keep_vp8, picture, set_video_gate

log = logging.getLogger("vita.web.webrtc.hub")

MIC_MAX_BITRATE = 24000  # asked of the browser in the answer (maxaveragebitrate). No DTX: the server's VAD counts
# the silence that ends a turn in the samples it receives, so the microphone must keep sending them
MIC_PTIME_MS = 40  # asked of the browser in the answer (a=ptime): the microphone's packets carry 40 ms each
MAX_SDP_CHARS = 20000  # an offer for one audio track is ~2-5 KB
CLOSE_TIMEOUT_S = 5.0
ANSWER_TIMEOUT_S = 6.0  # the page gives up after 8 s; the client's socket thread waits meanwhile
MAX_CANDIDATES = 32  # remote ICE candidates per peer (offer and trickled): a browser offers a handful
MAX_MEDIA_SECTIONS = 4  # m= lines in an offer: one audio stream, and perhaps video or data the server refuses
VIDEO_FRAME_EVERY_S = 0.5  # a video track's pictures kept: two a second, as VITA's page sends its camera
PICTURE_THREADS = 2  # every peer's pictures are made on these, off the loop (each ~15 ms for 12 MP)
CONNECT_DEADLINE_S = 15.0  # a peer not connected (ICE + DTLS) this long after its answer is closed


def candidate_allowed(address: str, client: str | None) -> bool:
    """Whether the server may send ICE checks to `address`, offered by a client that connected from `client`:
    never to mDNS names (resolving them probes the server's own network), loopback or link-local addresses
    (unless the client itself is on this machine); private addresses only for a client that connected from a
    private address (a LAN keeps working; a stranger cannot make the server probe its internal network). A client
    whose address is unknown (None: behind a proxy not in --trusted_proxies, see web_security) counts as remote."""
    if address.endswith(".local"):
        return False
    ip, peer = _address(address), _address(client)
    if ip is None:
        return False  # a name to resolve: the server probes only addresses it is given
    if ip.is_loopback:
        return peer is not None and peer.is_loopback
    if ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return False
    if not ip.is_global:  # private, carrier-grade NAT, documentation ranges
        return peer is not None and (not peer.is_global or peer.is_loopback)
    return True


def _address(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An IP address (an IPv4-mapped IPv6 one as the IPv4 it is), or None."""
    try:
        ip = ipaddress.ip_address(text) if text else None
    except ValueError:
        return None
    return ip.ipv4_mapped or ip if isinstance(ip, ipaddress.IPv6Address) else ip


def screen_offer(sdp: str, client: str | None) -> tuple[str, int]:
    """The offer with the candidates the server may not probe removed; how many it keeps."""
    kept, lines = 0, []
    for line in sdp.splitlines():
        if line.startswith("a=candidate:"):
            fields = line.split()
            if len(fields) < 8 or not candidate_allowed(fields[4], client) or kept >= MAX_CANDIDATES:
                continue
            kept += 1
        lines.append(line)
    if sum(1 for line in lines if line.startswith("m=")) > MAX_MEDIA_SECTIONS:
        raise RtcError(f"the offer has more than {MAX_MEDIA_SECTIONS} media sections (one audio stream is used)")
    return "\r\n".join(lines) + "\r\n", kept


class RtcError(Exception):
    """A readable reason a peer connection could not be made (sent to the client as `rtc_failed`)."""


@dataclass(frozen=True)
class RtcSettings:
    """The config's `webrtc` section, checked: ICE servers ({urls, username, credential}), the UDP port range,
    the address announced in host candidates (a server behind 1:1 NAT)."""

    ice_servers: tuple[dict, ...] = ()
    ports: tuple[int, int] | None = None
    announce: str | None = None
    max_image_pixels: int = 12_000_000  # limits.max_image_pixels: a camera's frames too, before they are decoded

    @classmethod
    def from_config(cls, webrtc: WebRtcConfig, max_image_pixels: int = 12_000_000) -> RtcSettings:
        return cls(tuple(check_ice_servers(webrtc.ice_servers)), webrtc.port_range(), webrtc.announce_address,
                   max_image_pixels)


class PortRangeLoop(asyncio.SelectorEventLoop):
    """aioice binds every host candidate to port 0; behind a firewall the operator opens a range instead, so this
    loop (the one all peers run on) takes ports from it."""

    def __init__(self, ports: tuple[int, int] | None):
        super().__init__()
        self.ports = ports
        self._next = 0

    async def create_datagram_endpoint(self, protocol_factory: Any, local_addr: Any = None, **kwargs: Any) -> Any:
        if self.ports is None or local_addr is None or local_addr[1] != 0:
            return await super().create_datagram_endpoint(protocol_factory, local_addr=local_addr, **kwargs)
        first, last = self.ports
        count = last - first + 1
        for i in range(count):
            port = first + (self._next + i) % count
            try:
                endpoint = await super().create_datagram_endpoint(protocol_factory, local_addr=(local_addr[0], port),
                                                                  **kwargs)
            except OSError:
                continue
            self._next = (port - first + 1) % count
            return endpoint
        raise OSError(errno.EADDRINUSE, f"no free UDP port in webrtc.udp_ports {first}-{last}")


def limit_opus(sdp: str, max_bitrate: int = MIC_MAX_BITRATE) -> str:
    """Ask the browser for mono speech at no more than `max_bitrate`, in our answer."""
    payloads = list(dict.fromkeys(re.findall(r"a=rtpmap:(\d+) opus/48000", sdp, flags=re.IGNORECASE)))
    for pt in payloads:
        extra = f"maxaveragebitrate={max_bitrate};stereo=0"
        if re.search(rf"^a=fmtp:{pt} ", sdp, flags=re.MULTILINE):
            sdp = re.sub(rf"^(a=fmtp:{pt} [^\r\n]*)", rf"\1;{extra}", sdp, flags=re.MULTILINE)
        else:
            sdp = re.sub(rf"^(a=rtpmap:{pt} [^\r\n]*)(\r?\n)", rf"\1\2a=fmtp:{pt} {extra}\2", sdp,
                         flags=re.MULTILINE)
    if payloads and "a=ptime:" not in sdp:  # 40 ms packets: half the per-packet headers (50 bytes) of 20 ms ones
        sdp = re.sub(rf"^(a=fmtp:{payloads[0]} [^\r\n]*)(\r?\n)", rf"\1\2a=ptime:{MIC_PTIME_MS}\2", sdp,
                     count=1, flags=re.MULTILINE)
    return sdp


def announce_host(sdp: str, address: str) -> str:
    """Host candidates of `address`'s family carry it instead of the interface's own (a server behind 1:1 NAT)."""
    version = ipaddress.ip_address(address).version

    def replace(match: re.Match) -> str:
        own = ipaddress.ip_address(match[2].split("%")[0])
        return f"{match[1]}{address}{match[3]}" if own.version == version else match[0]

    return re.sub(r"^(a=candidate:\S+ \d+ (?:udp|UDP) \d+ )(\S+)( \d+ typ host)", replace, sdp, flags=re.MULTILINE)


Hear = Callable[[np.ndarray, int], bool]  # (int16 mono PCM, rate) -> False when the session dropped it
See = Callable[[Picture], None]  # a camera picture (JPEG, with its signature) for the session


@dataclass(frozen=True)
class PeerBudgets:
    """The session's budgets a peer charges before it decodes anything: `audio` (seconds; each microphone packet,
    by what its Opus header says it holds, `overrun` called for each refused, so its decoded audio is not charged
    again) and `images` (megapixels; each camera picture kept). None: the peer keeps budgets of its own (audio)
    or none (pictures)."""

    audio: RateBudget | None = None
    overrun: Callable[[], None] | None = None
    images: RateBudget | None = None


class RtcPeer:
    """One session's peer connection: the microphone in (to `hear`), the reply out (``track``)."""

    def __init__(self, sid: str, pc: Any, track: Any, hear: Hear, client: str | None = None,
                 see: See | None = None, images: RateBudget | None = None):
        self.sid = sid
        self.pc = pc
        self.track = track
        self.hear = hear
        self.see = see  # the camera's pictures (a video track), as VITA's page's 2 fps JPEG frames
        self.images = images  # the session's image budget (megapixels), which its page's frames are charged too
        self.pictures_refused = 0  # pictures dropped for that budget
        self.client = client  # the address the client connected from: which candidates it may name
        self.candidates = 0  # remote candidates taken (offer and trickled)
        self.receiving: asyncio.Task | None = None
        self.watching: asyncio.Task | None = None
        self.was_connected = False
        self.closed = False

    @property
    def connected(self) -> bool:
        return not self.closed and self.pc.connectionState == "connected"

    def refuses_candidates(self) -> str | None:
        """Why no more remote candidates are taken (ICE is done, or the peer has its fill); None if they are."""
        if self.was_connected or self.connected or self.pc.iceConnectionState in ("connected", "completed"):
            return "the connection is established: no more candidates are taken"
        if self.candidates >= MAX_CANDIDATES:
            return f"at most {MAX_CANDIDATES} candidates are taken per connection"
        return None

    async def listen(self, incoming: Any) -> None:
        """Decoded Opus frames (48 kHz, stereo s16) → mono int16 → the session's listener."""
        while True:
            try:
                frame = await incoming.recv()
            except MediaStreamError:
                return
            pcm = frame.to_ndarray()
            channels = len(frame.layout.channels)
            if channels > 1:  # packed s16: interleaved
                pcm = pcm.reshape(-1, channels).mean(axis=1).astype(np.int16)
            else:
                pcm = pcm.reshape(-1).astype(np.int16)
            self.hear(pcm, frame.sample_rate)


    async def watch(self, incoming: Any, pictures: Executor, max_pixels: int) -> None:
        """A video track → two pictures a second, as JPEG, to the session's camera. The frames between are dropped
        as they come, before any conversion; a picture kept is charged its pixels to the session's image budget
        (as a page's frame is) and made at its reduced size on a `pictures` thread, never on this loop, which
        carries every peer's audio. What reaches here was decoded within the limits of video_in.VideoGate (aiortc
        decodes on a thread of its own); a frame over `max_pixels` is still dropped, whatever let it through."""
        last = -VIDEO_FRAME_EVERY_S
        loop = asyncio.get_running_loop()
        while True:
            try:
                frame = await incoming.recv()
            except MediaStreamError:
                return
            now = loop.time()
            if now - last < VIDEO_FRAME_EVERY_S or self.see is None or frame.width * frame.height > max_pixels:
                continue
            last = now
            if self.images is not None and not self.images.admit(frame.width * frame.height / 1e6,
                                                                 time.monotonic()):
                self.pictures_refused += 1
                if self.pictures_refused == 1:
                    log.warning("camera pictures over the session's image budget are dropped", extra={"sid": self.sid})
                continue
            made = await loop.run_in_executor(pictures, picture, frame)
            if made is not None and not self.closed:
                self.see(made)


class RtcHub:
    """Every peer connection of this front, on one asyncio loop thread (the front stays Flask-SocketIO threading
    mode: callers use the blocking methods, which run coroutines on the loop)."""

    def __init__(self, settings: RtcSettings):
        self.settings = settings
        self.peers: dict[str, RtcPeer] = {}
        self.answering: dict[str, asyncio.Lock] = {}  # a session's offers one at a time (two could orphan a peer)
        self.loop = PortRangeLoop(settings.ports)
        self.pictures = ThreadPoolExecutor(PICTURE_THREADS, thread_name_prefix="webrtc-pictures")
        self.thread = threading.Thread(target=self._run, name="webrtc-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def submit(self, coro: Coroutine) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    # --- blocking API (any thread) ------------------------------------------------------------------------
    def answer(self, sid: str, offer_sdp: str, hear: Hear, timeout: float = ANSWER_TIMEOUT_S,
               client: str | None = None, see: See | None = None, channel: Callable[[Any], None] | None = None,
               budgets: PeerBudgets | None = None) -> str:
        """Make (or remake) the session's peer connection from the browser's offer (`client`: the address the
        session connected from); the answer's SDP. `channel` takes the data channels the caller opens (called on
        the loop's thread): a Realtime call's events travel on one. `budgets`: the session's, charged before
        decoding (a new peer must not bring a fresh budget with it)."""
        if not isinstance(offer_sdp, str) or not offer_sdp.startswith("v=0") or len(offer_sdp) > MAX_SDP_CHARS:
            raise RtcError("rtc_offer needs {\"type\": \"offer\", \"sdp\": \"v=0...\"} (at most "
                           f"{MAX_SDP_CHARS} characters)")
        answering = self.submit(self._answer(sid, offer_sdp, hear, client, see, channel, budgets or PeerBudgets()))
        try:
            return answering.result(timeout)
        except TimeoutError:
            answering.cancel()  # its peer, if made, is closed by the cancelled coroutine or the next close(sid)
            self.close(sid)
            raise RtcError(f"no answer within {timeout:.0f} s (ICE servers unreachable?)") from None

    def add_candidate(self, sid: str, candidate: dict) -> None:
        peer = self.peers.get(sid)
        if peer is None:
            return
        if (refused := peer.refuses_candidates()) is not None:  # refused here, without the loop's time
            raise ValueError(refused)
        self.submit(self._add_candidate(peer, candidate)).result(5.0)

    def close(self, sid: str, session_ended: bool = False) -> bool:
        """Close the session's peer connection (disconnect: `session_ended`, or the page fell back to Socket.IO)."""
        if session_ended:
            self.loop.call_soon_threadsafe(self.answering.pop, sid, None)
        peer = self.peers.get(sid)
        if peer is None:
            return False
        with contextlib.suppress(Exception):
            self.submit(self._close(peer)).result(CLOSE_TIMEOUT_S)
        return True

    def peer(self, sid: str) -> RtcPeer | None:
        return self.peers.get(sid)

    def stop(self) -> None:
        async def close_all() -> None:
            await asyncio.gather(*(self._close(peer) for peer in list(self.peers.values())))

        with contextlib.suppress(Exception):
            self.submit(close_all()).result(CLOSE_TIMEOUT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(CLOSE_TIMEOUT_S)
        self.pictures.shutdown(wait=False, cancel_futures=True)

    # --- the loop -----------------------------------------------------------------------------------------
    async def _answer(self, sid: str, offer_sdp: str, hear: Hear, client: str | None, see: See | None,
                      channel: Callable[[Any], None] | None, budgets: PeerBudgets) -> str:
        async with self.answering.setdefault(sid, asyncio.Lock()):
            return await self._answer_one(sid, offer_sdp, hear, client, see, channel, budgets)

    async def _answer_one(self, sid: str, offer_sdp: str, hear: Hear, client: str | None, see: See | None,
                          channel: Callable[[Any], None] | None, budgets: PeerBudgets) -> str:
        offer_sdp, kept = screen_offer(offer_sdp, client)
        old = self.peers.get(sid)
        if old is not None:
            await self._close(old)
        # Explicit ICE servers, even none: left out, aiortc reaches for a public STUN server.
        servers = [RTCIceServer(**server) for server in self.settings.ice_servers]
        pc = RTCPeerConnection(RTCConfiguration(iceServers=servers))
        track = OpusTrack(send_silence=False)
        peer = RtcPeer(sid, pc, track, hear, client, see, budgets.images)
        peer.candidates = kept
        self.peers[sid] = peer

        @pc.on("track")
        def on_track(incoming: Any) -> None:
            if incoming.kind == "audio" and peer.receiving is None:
                peer.receiving = asyncio.ensure_future(peer.listen(incoming))
                peer.receiving.add_done_callback(lambda task: self._listening_ended(peer, task))
            elif incoming.kind == "video" and peer.watching is None and peer.see is not None:
                peer.watching = asyncio.ensure_future(peer.watch(incoming, self.pictures,
                                                                 self.settings.max_image_pixels))

        @pc.on("datachannel")
        def on_datachannel(opened: Any) -> None:
            if channel is None:
                opened.close()  # our page's signalling and events stay on its Socket.IO connection
            else:
                channel(opened)

        @pc.on("connectionstatechange")
        async def on_state() -> None:
            log.info("peer connection %s", pc.connectionState, extra={"sid": sid})
            peer.was_connected = peer.was_connected or pc.connectionState == "connected"
            if pc.connectionState in ("failed", "closed") and self.peers.get(sid) is peer:
                await self._close(peer)

        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
            audio = [t for t in pc.getTransceivers() if t.kind == "audio"]
            if not audio:
                raise RtcError("the offer has no audio")
            audio[0].sender.replaceTrack(track)
            audio[0].direction = "sendrecv"
            video = [t for t in pc.getTransceivers() if t.kind == "video"][:1] if see is not None else []
            video = [camera for camera in video if keep_vp8(camera)]  # VP8: its size is read before decoding
            for camera in video:  # one camera is watched, sampled as VITA's page's
                camera.direction = "recvonly"
            for other in pc.getTransceivers():
                if other is not audio[0] and other not in video:
                    other.direction = "inactive"  # one microphone and one camera; nothing else is received
            set_jitter_buffer(pc, lambda: InOrderBuffer(budget=budgets.audio, overrun=budgets.overrun))
            set_video_gate(pc, self.settings.max_image_pixels)
            await pc.setLocalDescription(await pc.createAnswer())  # gathers every candidate first (no trickle)
        except RtcError:
            await self._close(peer)
            raise
        except Exception as exc:  # a malformed or unusable offer
            await self._close(peer)
            raise RtcError(f"could not answer the offer: {exc}") from exc
        self.loop.call_later(CONNECT_DEADLINE_S, self._connect_deadline, peer)
        sdp = limit_opus(pc.localDescription.sdp)
        return announce_host(sdp, self.settings.announce) if self.settings.announce else sdp

    def _connect_deadline(self, peer: RtcPeer) -> None:
        """A peer that has not connected by now never will (or is held open on purpose): its ports go."""
        if not peer.closed and not peer.was_connected:
            log.info("peer connection not connected after %.0f s: closed", CONNECT_DEADLINE_S,
                     extra={"sid": peer.sid})
            asyncio.ensure_future(self._close(peer))

    def _listening_ended(self, peer: RtcPeer, task: asyncio.Task) -> None:
        """The microphone's frames stopped coming: closed (fine), or a decode or hand-over failed (a dead
        microphone must not pass for a silent one: the peer is closed and the page falls back to Socket.IO)."""
        if task.cancelled() or task.exception() is None:
            return
        log.error("WebRTC microphone failed: %r", task.exception(), extra={"sid": peer.sid})
        asyncio.ensure_future(self._close(peer))

    async def _add_candidate(self, peer: RtcPeer, candidate: dict) -> None:
        text, mid, index = candidate.get("candidate"), candidate.get("sdpMid"), candidate.get("sdpMLineIndex")
        if not isinstance(text, str) or not isinstance(mid, str | None) or not isinstance(index, int | None):
            raise ValueError("rtc_candidate needs {\"candidate\": \"candidate:...\", \"sdpMid\", \"sdpMLineIndex\"}")
        if not text.strip():
            await peer.pc.addIceCandidate(None)  # "": the end of the browser's candidates
            return
        if (refused := peer.refuses_candidates()) is not None:  # asked again: it may have connected meanwhile
            raise ValueError(refused)
        parsed = candidate_from_sdp(text.removeprefix("candidate:"))
        if not candidate_allowed(parsed.ip, peer.client):
            raise ValueError(f"the server does not send to {parsed.ip!r} (mDNS, loopback, link-local, or a private "
                             "address offered from outside)")
        peer.candidates += 1
        parsed.sdpMid, parsed.sdpMLineIndex = mid, index
        await peer.pc.addIceCandidate(parsed)

    async def _close(self, peer: RtcPeer) -> None:
        if peer.closed:
            return
        peer.closed = True
        if self.peers.get(peer.sid) is peer:
            del self.peers[peer.sid]
        peer.track.stop()
        for task in (peer.receiving, peer.watching):
            if task is not None:
                task.cancel()
        with contextlib.suppress(Exception):
            await peer.pc.close()
