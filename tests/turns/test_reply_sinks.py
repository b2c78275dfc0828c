"""Reply sinks: the paced Socket.IO sink, a WebRTC track sink, and a session's choice between them (fakes stand in
for the client and the track: these are the sinks' own rules)."""

from __future__ import annotations

import numpy as np
import pytest

from vita.messages import TtsChunk
from vita.turns.reply_pacer import Fate, ReplyPacer
from vita.turns.reply_sinks import PacedSink, ReplyOutput, SinkEvents, TrackSink

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

RATE = 24000


def chunk(turn_id: int, seconds: float, last: bool = False) -> TtsChunk:
    return TtsChunk("s", turn_id, 0, np.full(int(seconds * RATE), 1000, "<i2").tobytes(), RATE, last=last)


class Recorder:
    def __init__(self):
        self.log: list[tuple] = []
        self.events = SinkEvents(sent=lambda now, t, s: self.log.append(("sent", t, round(s, 3))),
                                 complete=lambda now, t: self.log.append(("complete", t)))


class FakeTrack:
    def __init__(self):
        self.pushed: list[tuple[int, bool]] = []
        self.flushed = 0

    def push(self, pcm: bytes, rate: int, last: bool = False) -> None:
        self.pushed.append((len(pcm), last))

    def flush(self) -> None:
        self.flushed += 1


class FakePeer:
    def __init__(self):
        self.track = FakeTrack()


def paced(recorder: Recorder, fate=lambda _t: Fate.SEND) -> tuple[PacedSink, list[bytes], list[float]]:
    sent, wakes = [], []
    sink = PacedSink(ReplyPacer(lead_s=0.25, chunk_s=0.1), sent.append, fate, wakes.append, recorder.events)
    return sink, sent, wakes


def test_the_paced_sink_sends_the_lead_then_asks_to_be_woken_once():
    rec = Recorder()
    sink, sent, wakes = paced(rec)
    sink.play(chunk(1, 0.5), now=0.0)
    sink.play(chunk(1, 0.0, last=True), now=0.0)
    assert len(sent) == 2 and rec.log == [("sent", 1, 0.1), ("sent", 1, 0.1)]
    assert wakes == [pytest.approx(0.05)]  # the second play found the timer already set
    sink.due(0.05, timer=True)
    assert len(sent) == 3 and len(wakes) == 2
    sink.due(0.5, timer=True)
    assert rec.log[-1] == ("complete", 1) and sum(1 for e in rec.log if e[0] == "sent") == 5


def test_a_stopped_paced_reply_sends_nothing_more_and_a_held_turn_waits():
    rec = Recorder()
    held = {2}
    sink, sent, _ = paced(rec, fate=lambda t: Fate.HOLD if t in held else Fate.SEND)
    sink.play(chunk(2, 0.3), now=0.0)
    assert sent == []  # a speculative turn's audio waits for its commit
    held.clear()
    sink.due(0.0)
    assert len(sent) == 2
    sink.stop()
    sink.due(1.0, timer=True)
    assert len(sent) == 2


def test_the_track_sink_pushes_at_once_and_flushes_on_stop():
    rec, peer = Recorder(), FakePeer()
    sink = TrackSink(peer, rec.events)
    sink.play(chunk(4, 0.2), now=0.0)
    sink.play(chunk(4, 0.0, last=True), now=0.0)
    sink.duck(True)  # the page ducks the track itself
    sink.stop()
    assert peer.track.pushed == [(9600, False), (0, True)] and peer.track.flushed == 1
    assert rec.log == [("sent", 4, 0.2), ("complete", 4)]


def test_a_session_hears_the_track_once_connected_but_a_reply_begun_on_the_socket_ends_there():
    rec = Recorder()
    socket, sent, _ = paced(rec)
    peer: list[FakePeer | None] = [None]
    output = ReplyOutput(socket, lambda: peer[0], rec.events)
    output.play(chunk(1, 0.1), now=0.0)
    peer[0] = FakePeer()  # a WebRTC peer connects mid-reply
    output.play(chunk(1, 0.1), now=0.0)
    assert len(sent) == 2 and peer[0].track.pushed == []
    output.play(chunk(2, 0.1), now=1.0)  # the next reply goes over the track
    assert peer[0].track.pushed == [(4800, False)] and len(sent) == 2
    output.stop()
    assert peer[0].track.flushed == 1
