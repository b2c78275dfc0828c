"""The microphone's RTP packets on their way to the Opus decoder: kept in order, and within the audio budget.

aiortc decodes every packet its jitter buffer passes on, in its own thread. A peer may send far more audio than
real time (forged packets carrying 120 ms each, hundreds a second), and every packet decoded is CPU taken from
everyone. So the session's audio budget is charged here, by the audio a packet's Opus header says it holds, and a
packet over it never reaches the decoder (its decoded audio is not charged again). The session's own budget, not
one of the peer's: a client that renegotiates every second would otherwise bring a fresh burst each time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from aiortc.jitterbuffer import JitterFrame
from aiortc.utils import uint16_add

from vita.rate_budget import RateBudget

log = logging.getLogger("vita.web.webrtc")
MAX_OPUS_PACKET_S = 0.12  # RFC 6716: no packet holds more than 120 ms
DROPS_LOGGED_EVERY = 500  # a flood is logged at its first dropped packet and every this many after
AUDIO_RATE = 1.5  # seconds of audio a second, after a burst of AUDIO_BURST_S: as the session's own audio budget
AUDIO_BURST_S = 3.0
SILK_MS = (10.0, 20.0, 40.0, 60.0)
HYBRID_MS = (10.0, 20.0)
CELT_MS = (2.5, 5.0, 10.0, 20.0)


def opus_packet_seconds(data: bytes) -> float | None:
    """The audio an Opus packet holds, read from its table-of-contents byte (RFC 6716 §3.1): what decoding it
    costs. None for a packet the decoder would refuse (empty, no frame count, a count of 0, over 120 ms): it never
    reaches the decoder, whose every failure is a log line."""
    if not data:
        return None
    config, code = data[0] >> 3, data[0] & 3
    if config < 12:
        frame_ms = SILK_MS[config % 4]
    elif config < 16:
        frame_ms = HYBRID_MS[config % 2]
    else:
        frame_ms = CELT_MS[config % 4]
    if code == 0:
        frames = 1
    elif code in (1, 2):
        frames = 2
    elif len(data) < 2:
        return None
    else:
        frames = data[1] & 0x3F
    seconds = frames * frame_ms / 1000.0
    return seconds if 0 < seconds <= MAX_OPUS_PACKET_S + 1e-9 else None


class InOrderBuffer:
    """The server's audio jitter buffer: a packet goes to the decoder the moment it arrives, unless it is older than
    one already passed on (late or repeated), malformed, or over the audio budget (each dropped). The VAD plays
    nothing out: it needs order, not smoothing (aiortc's buffer held every packet until 4 later ones had come:
    80-160 ms on each word heard), and holding packets back after a loss would keep every later one late for good.
    Speaks aiortc's jitter-buffer interface: add(packet) -> (pli, frame or None)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, budget: RateBudget | None = None,
                 overrun: Callable[[], None] | None = None) -> None:
        self.expected: int | None = None  # the sequence number after the newest passed on
        self.clock = clock
        # The session's audio budget (seconds; `overrun` told of each packet refused), or one of its own.
        self.budget = budget if budget is not None else RateBudget(AUDIO_RATE, AUDIO_BURST_S, clock())
        self.overrun = overrun
        self.over_budget = 0  # packets dropped for it
        self.malformed = 0  # packets the decoder would refuse, dropped

    def add(self, packet: Any) -> tuple[bool, JitterFrame | None]:
        seq = packet.sequence_number
        if self.expected is not None and 0 < uint16_add(self.expected, -seq) < 0x8000:
            return False, None
        seconds = opus_packet_seconds(packet._data)
        if seconds is None:
            self.malformed += 1
            return False, None
        if not self.budget.take(seconds, self.clock()):
            self.over_budget += 1
            if self.overrun is not None:
                self.overrun()
            if self.over_budget % DROPS_LOGGED_EVERY == 1:
                log.warning("a microphone sends audio faster than %.1fx real time: %d packets dropped before "
                            "decoding", AUDIO_RATE, self.over_budget)
            return False, None
        self.expected = uint16_add(seq, 1)
        return False, JitterFrame(data=packet._data, timestamp=packet.timestamp)


def set_jitter_buffer(pc: Any, make: Callable[[], Any]) -> None:
    """Give the peer's audio receivers the jitter buffer `make()` builds. aiortc fixes one holding 4 packets back
    and offers no setting: its private one is replaced (aiortc is pinned; tests/web/test_rtp_audio_in.py fails if an
    upgrade moves it)."""
    for transceiver in pc.getTransceivers():
        receiver = transceiver.receiver
        if transceiver.kind == "audio" and hasattr(receiver, "_RTCRtpReceiver__jitter_buffer"):
            receiver._RTCRtpReceiver__jitter_buffer = make()
