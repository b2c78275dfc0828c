"""Where a session's reply audio goes: one sink per transport behind one small interface, so the turn adapter
never asks which transport a session has.

- ``PacedSink``: the audio goes out as messages (VITA's Socket.IO ``audio`` event, raw int16 PCM), paced just ahead
  of the client's playback (``ReplyPacer``) so that what the client has not been sent can still be ducked under the
  user's speech or never sent at all: VITA's page cannot duck by itself.
- ``TrackSink``: a connected WebRTC peer's Opus track, which paces itself; flushing it silences the reply within
  one 20 ms packet.
- ``ReplyOutput``: a Socket.IO session's choice between the two: the track while a WebRTC peer is connected, except
  that a reply that began on the socket ends there (the page would hear both).

Each sink reports back through ``SinkEvents``: audio was sent (the turn machine's first-audio timing and phase),
and a reply's last audio was sent (its playback end is then known).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from vita.messages import TtsChunk
from vita.turns.reply_pacer import Fate, ReplyPacer


@dataclass(frozen=True)
class SinkEvents:
    """What a sink tells the adapter: sent(now, turn_id, seconds), complete(now, turn_id), and played(pcm, rate,
    at): audio the client starts playing at `at` (monotonic; its echo may come back in the microphone)."""

    sent: Callable[[float, int, float], None]
    complete: Callable[[float, int], None]
    played: Callable[[bytes, int, float], None] | None = None


class ReplySink(Protocol):
    def play(self, chunk: TtsChunk, now: float) -> None:
        """A reply chunk from the TTS worker, in order."""

    def stop(self) -> None:
        """The reply was interrupted: what the client has not been sent is never sent."""

    def duck(self, on: bool) -> None:
        """The user may be interrupting: quieter until they are confirmed (or not). A no-op where the client
        ducks by itself."""

    def due(self, now: float, timer: bool = False) -> None:
        """The sink's own timer (`timer`) or a released reply: send what is due."""


class PacedSink:
    """Reply audio as messages, paced by the session's timer. `fate` says, per turn, whether its audio is sent now,
    held (a speculative turn's, until it is committed) or dropped; `wake(delay)` asks for `due` after `delay`."""

    def __init__(self, pacer: ReplyPacer, send: Callable[[bytes], None], fate: Callable[[int], Fate],
                 wake: Callable[[float], None], events: SinkEvents):
        self.pacer, self.send, self.fate, self.wake, self.events = pacer, send, fate, wake, events
        self.timer_set = False

    def began(self, turn_id: int) -> bool:
        return self.pacer.began(turn_id)

    def play(self, chunk: TtsChunk, now: float) -> None:
        self.pacer.push(chunk.turn_id, chunk.pcm, chunk.sample_rate, chunk.last)
        self.due(now, timer=False)

    def stop(self) -> None:
        self.pacer.clear()

    def duck(self, on: bool) -> None:
        self.pacer.duck(on)

    def due(self, now: float, timer: bool = False) -> None:
        if timer:
            self.timer_set = False
        for paced in self.pacer.take(now, self.fate):
            if paced.pcm:  # the state and first-audio timing go out before the audio they announce
                self.events.sent(now, paced.turn_id, paced.seconds)
                self.send(paced.pcm)
                if self.events.played is not None:
                    self.events.played(paced.pcm, paced.rate, paced.at)
            if paced.last:
                self.events.complete(now, paced.turn_id)
        wake = self.pacer.wake_in(now, self.fate)
        if wake is not None and not self.timer_set:
            self.timer_set = True
            self.wake(wake)


class TrackSink:
    """A connected WebRTC peer's audio track (Opus, paced by the track itself)."""

    def __init__(self, peer: Any, events: SinkEvents):
        self.peer, self.events = peer, events

    def play(self, chunk: TtsChunk, now: float) -> None:
        if chunk.pcm:  # the state and first-audio timing go out before the audio they announce
            self.events.sent(now, chunk.turn_id, len(chunk.pcm) / 2 / chunk.sample_rate)
        self.peer.track.push(chunk.pcm, chunk.sample_rate, last=chunk.last)
        if chunk.pcm and self.events.played is not None:  # (the track plays it after what it holds already)
            self.events.played(chunk.pcm, chunk.sample_rate, now)
        if chunk.last:
            self.events.complete(now, chunk.turn_id)

    def stop(self) -> None:
        self.peer.track.flush()  # what the track had queued is never sent: silence within one 20 ms packet

    def duck(self, on: bool) -> None:
        return None  # our page ducks its own playback of the track

    def due(self, now: float, timer: bool = False) -> None:
        return None


class ReplyOutput:
    """A Socket.IO session's reply audio: over the socket, paced, or over its WebRTC peer's track while one is
    connected (`peer()` returns it, or None)."""

    def __init__(self, socket: PacedSink, peer: Callable[[], Any | None], events: SinkEvents):
        self.socket, self.peer, self.events = socket, peer, events

    def _track(self) -> TrackSink | None:
        peer = self.peer()
        return TrackSink(peer, self.events) if peer is not None else None

    def play(self, chunk: TtsChunk, now: float) -> None:
        track = self._track()
        if track is None or self.socket.began(chunk.turn_id):  # a reply that began on the socket ends there
            self.socket.play(chunk, now)
        else:
            track.play(chunk, now)

    def stop(self) -> None:
        self.socket.stop()
        if (track := self._track()) is not None:
            track.stop()

    def duck(self, on: bool) -> None:
        self.socket.duck(on)  # for clients that cannot duck (VITA's page); the track's page ducks itself

    def due(self, now: float, timer: bool = False) -> None:
        self.socket.due(now, timer)


@dataclass(frozen=True)
class PaceDue:
    """Mail from the session's own timer (``timer``), or after a held reply is released: its paced reply audio
    may send more (``ReplyPacer.wake_in``)."""

    timer: bool = True


def reply_output(tts: Any, send: Callable[[bytes], None], fate: Callable[[int], Fate],
                 wake_in: Callable[[float], None], events: SinkEvents, peer: Callable[[], Any]) -> ReplyOutput:
    """A session's reply output: paced for a Socket.IO client by the config's lead (``tts.lead_ms``, 0: unpaced),
    or its WebRTC peer's track when it has one."""
    pacer = (ReplyPacer(tts.lead_ms / 1000, tts.pace_chunk_ms / 1000) if tts.lead_ms
             else ReplyPacer(float("inf"), 3600.0))
    return ReplyOutput(PacedSink(pacer, send, fate, wake_in, events), peer, events)
