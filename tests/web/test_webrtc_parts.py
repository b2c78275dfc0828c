"""vita/web/webrtc/hub.py's parts that need no peer: the answer's SDP edits, the reply track's queue and pacing of
packets, the port range, and the config's ICE servers and ports. No model, no server."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import numpy as np
import pytest

from vita.config import ConfigError, WebRtcConfig
from vita.config_checks import check_ice_servers
from vita.web.webrtc.hub import (
    MAX_CANDIDATES,
    PortRangeLoop,
    RtcError,
    announce_host,
    candidate_allowed,
    limit_opus,
    screen_offer,
)
from vita.web.webrtc.opus_track import FRAME_SAMPLES, OPUS_RATE, SILENT_TAIL_FRAMES, OpusTrack

pytestmark = pytest.mark.fast

ANSWER = ("v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 96 0\r\na=rtpmap:96 opus/48000/2\r\na=rtpmap:0 PCMU/8000\r\n"
          "a=candidate:abc 1 udp 2130706431 10.0.0.5 40000 typ host\r\n"
          "a=candidate:def 1 udp 1694498815 203.0.113.9 40000 typ srflx raddr 10.0.0.5 rport 40000\r\n")


def test_the_answer_asks_the_browser_for_mono_speech_at_a_low_bitrate():
    sdp = limit_opus(ANSWER)
    assert "a=rtpmap:96 opus/48000/2\r\na=fmtp:96 maxaveragebitrate=24000;stereo=0\r\na=ptime:40\r\n" in sdp
    with_fmtp = limit_opus(ANSWER.replace("a=rtpmap:0", "a=fmtp:96 useinbandfec=1\r\na=rtpmap:0"))
    assert "a=fmtp:96 useinbandfec=1;maxaveragebitrate=24000;stereo=0\r\n" in with_fmtp
    assert "fmtp:0" not in sdp  # only Opus


def test_an_announced_address_replaces_host_candidates_only():
    sdp = announce_host(ANSWER, "198.51.100.7")
    assert "udp 2130706431 198.51.100.7 40000 typ host" in sdp
    assert "203.0.113.9 40000 typ srflx raddr 10.0.0.5" in sdp


def frames(track: OpusTrack, n: int) -> list:
    """The next n packets (or gaps: None) the track would send, without its real-time wait."""
    out = []
    for _ in range(n):
        frame = track._next_frame()
        out.append(None if frame is None else track._encode(frame))
        track._pts += FRAME_SAMPLES
    return out


def reply_track(**kwargs) -> OpusTrack:
    async def make() -> OpusTrack:
        return OpusTrack(**kwargs)
    return asyncio.run(make())


def test_queued_reply_audio_goes_out_in_20ms_opus_packets_then_the_line_goes_quiet():
    track = reply_track(send_silence=False)
    tone = (np.sin(np.arange(24000 // 5) * 2 * np.pi * 300 / 24000) * 8000).astype(np.int16)  # 200 ms at 24 kHz
    track.push(tone.tobytes(), 24000, last=True)
    assert track.queued_s == pytest.approx(0.2, abs=0.01)  # resampled to 48 kHz, the resampler's tail included
    sent = frames(track, 10 + SILENT_TAIL_FRAMES + 5)
    packets = [p for p in sent if p]
    assert len(packets) >= 10 + SILENT_TAIL_FRAMES - 4  # the encoder's look-ahead may hold the first few back
    assert all(len(bytes(p[0])) < 24000 / 8 / 50 * 3 for p in packets)  # ~60 bytes each at 24 kbit/s (VBR)
    assert sent[-5:] == [None] * 5  # after the silent tail: no packets at all
    assert track.audio_s == pytest.approx(0.2, abs=0.01)


def test_flush_drops_what_is_queued_and_a_microphone_track_keeps_sending_silence():
    track = reply_track()
    track.push(np.full(OPUS_RATE, 5000, np.int16).tobytes(), OPUS_RATE)
    assert track.flush() == pytest.approx(1.0)
    assert track.queued_s == 0
    assert all(p is not None for p in frames(track, SILENT_TAIL_FRAMES + 5))  # send_silence (the default)
    assert track.audio_s == 0


def test_ports_come_from_the_operator_range():
    async def bind_two() -> list[int]:
        loop = asyncio.get_running_loop()
        ports = []
        for _ in range(2):
            transport, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                               local_addr=("127.0.0.1", 0))
            ports.append(transport.get_extra_info("sockname")[1])
            transport.close()
        return ports

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        first = probe.getsockname()[1]
    first = min(max(first, 20000), 60000)
    loop = PortRangeLoop((first, first + 3))
    try:
        ports = loop.run_until_complete(bind_two())
    finally:
        loop.close()
    assert all(first <= p <= first + 3 for p in ports) and len(set(ports)) == 2


def test_a_full_port_range_is_a_clear_error():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        loop = PortRangeLoop((port, port))
        try:
            with pytest.raises(OSError, match="no free UDP port"):
                loop.run_until_complete(loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                                                      local_addr=("127.0.0.1", 0)))
        finally:
            loop.close()


@pytest.mark.parametrize("text, expected", [("", None), ("40000-40099", (40000, 40099)),
                                            (" 50000 - 50000 ", (50000, 50000))])
def test_udp_ports(text, expected):
    assert WebRtcConfig(udp_ports=text).port_range() == expected


@pytest.mark.parametrize("text", ["40000", "a-b", "40100-40000", "80-90", "60000-70000"])
def test_bad_udp_ports_name_the_option(text):
    with pytest.raises(ConfigError, match="webrtc.udp_ports"):
        WebRtcConfig(udp_ports=text).port_range()


def test_ice_servers_as_a_browser_takes_them():
    servers = [{"urls": "stun:stun.example.org:3478"},
               {"urls": ["turn:turn.example.org:3478", "turns:turn.example.org:5349"], "username": "u",
                "credential": "p"}]
    assert check_ice_servers(servers) == [{"urls": ["stun:stun.example.org:3478"]}, servers[1]]


@pytest.mark.parametrize("servers, where", [
    (["stun:x"], "webrtc.ice_servers[0]"), ([{"url": "stun:x"}], "webrtc.ice_servers[0]"),
    ([{"urls": "http://x"}], "webrtc.ice_servers[0].urls"), ([{"urls": []}], "webrtc.ice_servers[0].urls"),
    ([{"urls": "turn:x:3478"}], "webrtc.ice_servers[0]"),
    ([{"urls": "stun:x"}, {"urls": "turn:x", "username": 5, "credential": "p"}], "webrtc.ice_servers[1].username")])
def test_bad_ice_servers_name_the_entry(servers, where):
    with pytest.raises(ConfigError) as error:
        check_ice_servers(servers)
    assert error.value.option == where


@pytest.mark.parametrize(("address", "client", "allowed"), [
    ("93.184.216.34", "8.8.8.8", True),  # public to public
    ("192.168.1.20", "8.8.8.8", False),  # a stranger naming the server's internal network
    ("10.0.0.5", "192.168.1.30", True),  # a LAN client
    ("100.64.1.2", "8.8.8.8", False),  # carrier-grade NAT space is private too
    ("127.0.0.1", "8.8.8.8", False), ("127.0.0.1", "127.0.0.1", True),  # loopback only from this machine
    ("169.254.10.1", "192.168.1.30", False), ("fe80::1", "192.168.1.30", False),  # link-local: never
    ("3f2c1a.local", "192.168.1.30", False),  # mDNS: resolving it probes the server's own network
    ("example.com", "8.8.8.8", False), ("224.0.0.1", "192.168.1.30", False),
])
def test_candidates_the_server_may_send_checks_to(address, client, allowed):
    assert candidate_allowed(address, client) is allowed


def test_an_offer_keeps_only_allowed_candidates_at_most_a_few_and_one_audio_stream():
    head = "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"
    lines = [f"a=candidate:{i} 1 udp 2130706431 93.184.216.{i % 250} {40000 + i} typ host" for i in range(100)]
    lines += ["a=candidate:x 1 udp 2130706431 192.168.0.9 40000 typ host",
              "a=candidate:y 1 udp 2130706431 abc.local 40001 typ host"]
    sdp, kept = screen_offer(head + "\r\n".join(lines) + "\r\n", "8.8.8.8")
    assert kept == MAX_CANDIDATES and sdp.count("a=candidate:") == MAX_CANDIDATES
    assert "192.168.0.9" not in sdp and ".local" not in sdp and sdp.startswith(head)
    with pytest.raises(RtcError, match="media sections"):
        screen_offer("v=0\r\n" + "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n" * 120, "8.8.8.8")


FUZZ_OFFERS = int(__import__("os").environ.get("VITA_FUZZ_EXAMPLES", "40"))  # a longer run: VITA_FUZZ_EXAMPLES=2000


def _a_real_offer() -> str:
    """A browser-like offer: a microphone, a camera and a data channel, with candidates."""
    from aiortc import RTCConfiguration, RTCPeerConnection

    async def make() -> str:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTransceiver("audio")
        pc.addTransceiver("video")
        pc.createDataChannel("oai-events")
        await pc.setLocalDescription(await pc.createOffer())
        sdp = pc.localDescription.sdp
        await pc.close()
        return sdp

    return asyncio.run(make())


def _mutated_offers(offer: str):
    from hypothesis import strategies as st

    lines = offer.split("\r\n")
    words = st.sampled_from(["", "0", "-1", "99999999999", "x", "m=audio", "m=video 9 UDP/TLS/RTP/SAVPF 96",
                             "a=rtpmap:96 VP8/90000", "a=rtpmap:111 opus/48000/2", "a=candidate:1 1 udp 1 ::1 9 typ",
                             "a=fingerprint:sha-256 00", "a=setup:active", "a=mid:", "c=IN IP4 0.0.0.0", "\x00",
                             "a=ssrc:1 cname:x", "a=sctp-port:x", "a=fmtp:96 apt=", "ü"]) | st.text(max_size=30)

    def mutate(ops: list) -> str:
        out = list(lines)
        for kind, at, text in ops:
            at %= max(1, len(out))
            if kind == "drop" and out:
                del out[at]
            elif kind == "copy" and out:
                out.insert(at, out[at])
            elif kind == "insert":
                out.insert(at, text)
            elif kind == "field" and out:
                fields = out[at].split(" ")
                fields[len(text) % len(fields)] = text
                out[at] = " ".join(fields)
            elif kind == "cut":
                out = "\r\n".join(out)[:at * 7].split("\r\n")
        return "\r\n".join(out)

    op = st.tuples(st.sampled_from(["drop", "copy", "insert", "field", "cut"]), st.integers(0, 400), words)
    return st.lists(op, min_size=1, max_size=6).map(mutate) | st.text(max_size=300).map(lambda t: "v=0\r\n" + t)


def test_random_and_mutated_offers_are_answered_or_refused_with_a_reason_never_a_crash():
    """Whatever an offer holds, `answer` gives an SDP answer or an RtcError naming why (sent as rtc_failed), and
    the screening before aiortc parses it never raises anything else."""
    from hypothesis import HealthCheck, example, given, settings

    from vita.web.webrtc.hub import RtcHub, RtcSettings

    hub = RtcHub(RtcSettings())
    outcomes: dict[str, int] = {}
    real = _a_real_offer()

    # (the offer as a browser makes it is always among them: every example mutated, a run of 40 could hold no
    # offer that is still answerable, and the test failed with all refused)
    @settings(max_examples=FUZZ_OFFERS, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(offer=_mutated_offers(real))
    @example(offer=real)
    def run(offer: str) -> None:
        with contextlib.suppress(RtcError):
            screen_offer(offer, "127.0.0.1")
        try:
            answer = hub.answer("fuzz", offer, lambda *_: True, timeout=5, client="127.0.0.1", see=lambda _: None)
            assert answer.startswith("v=0")
            outcomes["answered"] = outcomes.get("answered", 0) + 1
        except RtcError as exc:
            assert str(exc)
            outcomes["refused"] = outcomes.get("refused", 0) + 1
        finally:
            hub.close("fuzz")

    try:
        run()
    finally:
        hub.stop()
    assert outcomes.get("refused") and outcomes.get("answered"), outcomes  # both sides were reached
