"""The microphone's packets before the decoder (vita/web/webrtc/rtp_audio_in.py): their order, what an Opus
packet holds, and the audio budget charged before any decoding. No model, no server."""

from __future__ import annotations

import asyncio

import pytest

from vita.web.webrtc.rtp_audio_in import (
    AUDIO_BURST_S,
    AUDIO_RATE,
    MAX_OPUS_PACKET_S,
    InOrderBuffer,
    opus_packet_seconds,
    set_jitter_buffer,
)

pytestmark = pytest.mark.fast

def test_the_servers_audio_buffer_is_the_one_set_in_place_of_aiortcs():
    """aiortc has no setting for it: set_jitter_buffer replaces a private attribute, and this fails if an aiortc
    upgrade moves it."""
    from aiortc import RTCPeerConnection

    async def buffers() -> list:
        pc = RTCPeerConnection()
        pc.addTransceiver("audio")
        set_jitter_buffer(pc, InOrderBuffer)
        held = [type(t.receiver._RTCRtpReceiver__jitter_buffer) for t in pc.getTransceivers()]
        await pc.close()
        return held

    assert asyncio.run(buffers()) == [InOrderBuffer]


CELT_20_MS = 0xF8  # config 31 (CELT fullband, 20 ms), one frame


class Packet:
    def __init__(self, seq: int, data: bytes = bytes([CELT_20_MS, 0])):
        self.sequence_number, self.timestamp, self._data = seq % 65536, seq * 960, data


def released(buffer: InOrderBuffer, order: list[int]) -> list[int | None]:
    out = []
    for seq in order:
        _, frame = buffer.add(Packet(seq))
        out.append(None if frame is None else frame.timestamp // 960)
    return out


def test_packets_in_order_go_to_the_decoder_at_once():
    assert released(InOrderBuffer(), [65534, 65535, 65536, 65537]) == [65534, 65535, 65536, 65537]  # seq wraps



def test_out_of_order_and_lost_packets_cost_one_packet_never_a_lasting_delay():
    """Each packet goes out as it arrives unless an older one than it already went (late: dropped); after a loss
    or a swap the next packets are not held back."""
    buffer = InOrderBuffer()
    assert released(buffer, [1, 3, 2, 4]) == [1, 3, None, 4]  # 2 came after 3: dropped, 4 not delayed
    assert released(buffer, [6, 7, 5, 8]) == [6, 7, None, 8]  # 5 lost (or late): nothing waits for it
    assert released(buffer, [8, 9]) == [None, 9]  # a repeat is dropped


@pytest.mark.parametrize(("data", "seconds"), [
    (bytes([0xF8]), 0.020),  # CELT 20 ms, one frame (what browsers send)
    (bytes([0xF9]), 0.040),  # two frames, code 1
    (bytes([0xFA, 0]), 0.040),  # two frames, code 2
    (bytes([0xFB, 3]), 0.060),  # code 3: three frames
    (bytes([0xFB, 6]), MAX_OPUS_PACKET_S),  # code 3: six 20 ms frames, the most a packet may hold
    (bytes([0xFB, 60]), None),  # a forged count: more than a packet may hold, refused by the decoder
    (bytes([0xFB, 0]), None),  # no frame at all
    (bytes([0x18]), 0.060),  # SILK 60 ms
    (bytes([0x68]), 0.020),  # hybrid 20 ms
    (bytes([0x80]), 0.0025),  # CELT 2.5 ms
    (bytes([0xFB]), None),  # too short to say its count
    (b"", None),
])
def test_an_opus_packet_is_charged_the_audio_its_header_says(data, seconds):
    assert opus_packet_seconds(data) == (None if seconds is None else pytest.approx(seconds))


def test_a_flood_of_packets_past_the_audio_budget_never_reaches_the_decoder():
    """A peer sending 120 ms packets as fast as it can: after the burst, only real time x AUDIO_RATE gets through."""
    now = [100.0]
    buffer = InOrderBuffer(clock=lambda: now[0])
    longest = bytes([0xFB, 6])  # 6 x 20 ms
    passed = sum(buffer.add(Packet(seq, longest))[1] is not None for seq in range(1000))
    assert abs(passed - AUDIO_BURST_S / MAX_OPUS_PACKET_S) <= 1 and buffer.over_budget == 1000 - passed  # rounding
    now[0] += 1.0  # one second later: that second's share, no more
    passed = sum(buffer.add(Packet(seq, longest))[1] is not None for seq in range(1000, 2000))
    assert abs(passed - AUDIO_RATE / MAX_OPUS_PACKET_S) <= 1


def test_malformed_packets_never_reach_the_decoder_and_cost_no_budget():
    buffer = InOrderBuffer(clock=lambda: 0.0)
    for seq, data in enumerate([b"", bytes([0xFB, 0]), bytes([0xFB, 63]), bytes([0xFB])]):
        assert buffer.add(Packet(seq, data))[1] is None
    assert buffer.malformed == 4 and buffer.over_budget == 0
    assert buffer.add(Packet(10))[1] is not None  # a good packet after them goes through


def test_a_microphone_in_real_time_loses_nothing_to_the_budget():
    now = [0.0]
    buffer = InOrderBuffer(clock=lambda: now[0])
    for seq in range(3000):  # a minute of 20 ms packets, a little early now and then
        now[0] = seq * 0.02 - (0.5 if seq % 100 == 0 else 0.0)
        assert buffer.add(Packet(seq))[1] is not None
    assert buffer.over_budget == 0


def test_the_sessions_own_budget_is_charged_so_a_new_peer_brings_no_fresh_burst():
    """A client that renegotiates gets a new buffer, not a new budget: the session's is charged before decoding,
    and each packet refused is told (as the decoded audio's refusals were)."""
    from vita.rate_budget import RateBudget

    session = RateBudget(AUDIO_RATE, AUDIO_BURST_S, 0.0)
    refused: list[int] = []
    longest = bytes([0xFB, 6])  # 120 ms
    first = InOrderBuffer(clock=lambda: 0.0, budget=session, overrun=lambda: refused.append(1))
    passed = sum(first.add(Packet(seq, longest))[1] is not None for seq in range(100))
    second = InOrderBuffer(clock=lambda: 0.0, budget=session, overrun=lambda: refused.append(2))
    assert second.add(Packet(0, longest))[1] is None  # the next peer's first packet: the burst is spent
    assert abs(passed - AUDIO_BURST_S / MAX_OPUS_PACKET_S) <= 1 and session.left < MAX_OPUS_PACKET_S  # rounding
    assert len(refused) == 100 - passed + 1 and refused[-1] == 2
