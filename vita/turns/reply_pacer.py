"""Reply audio for a Socket.IO client, sent just ahead of its playback.

VITA's page plays every chunk it is sent and knows only `stop_tts`; a reply sent as fast as it is synthesized
sits in the page's queue, where nothing the server learns later (the user started speaking) can reach it. Sent
at most ``lead_s`` ahead of the client's playback, the rest of the reply stays here, where it can be ducked the
moment the user starts speaking (and restored if it was a cough or a "mm-hmm") or dropped by a barge-in: the
client hears the change within ``lead_s``. The WebRTC track paces itself in real time (``vita/web/webrtc/hub.py``).

Pure: the session's thread calls it with the time and sends what ``take`` returns; ``wake_in`` says when to call
again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import numpy as np

DUCK_GAIN = 0.2  # the level our page ducks a reply to (web/app.js), applied here for clients that cannot duck


class Fate(Enum):
    """What becomes of a queued chunk, as its turn stands now (the turn machine's route)."""

    SEND = "send"
    HOLD = "hold"  # not yet: the turn's reply is held while the user speaks (it stays queued)
    DROP = "drop"  # its turn ended: never sent, and it takes no time on the client's clock


@dataclass(frozen=True)
class PacedChunk:
    """A piece of a turn's reply audio (int16 mono at ``rate``); ``last`` ends the turn's reply."""

    turn_id: int
    pcm: bytes
    rate: int
    last: bool = False
    at: float = 0.0  # when the client starts playing it (monotonic), once it is sent

    @property
    def seconds(self) -> float:
        return len(self.pcm) / 2 / self.rate


class ReplyPacer:
    """One session's queue of reply audio, and its estimate of when the client will have played what it was sent
    (it plays in real time from each chunk's arrival, as VITA's page and ours do)."""

    def __init__(self, lead_s: float, chunk_s: float):
        self.lead_s = lead_s
        self.chunk_s = chunk_s
        self.queue: deque[PacedChunk] = deque()
        self.played_until = 0.0  # when the client will have played everything sent so far (monotonic)
        self.gain = 1.0
        self.socket_turn: int | None = None  # the turn whose reply went out here: it ends here

    def push(self, turn_id: int, pcm: bytes, rate: int, last: bool = False) -> None:
        """Queue a chunk, cut into pieces of at most ``chunk_s`` so the lead stays small."""
        self.socket_turn = turn_id
        step = max(2, int(self.chunk_s * rate) * 2)
        pieces = [pcm[i:i + step] for i in range(0, len(pcm), step)] or [b""]
        for n, piece in enumerate(pieces):
            self.queue.append(PacedChunk(turn_id, piece, rate, last and n == len(pieces) - 1))

    def began(self, turn_id: int) -> bool:
        """This turn's reply started here (a reply is not split between transports)."""
        return self.socket_turn == turn_id

    def take(self, now: float, fate: Callable[[int], Fate]) -> list[PacedChunk]:
        """What may go out now: audio while the client holds less than ``lead_s`` (one piece always goes when
        it holds nothing), at the current gain, and a reply's end as soon as the audio before it went. Chunks of
        turns that ended are dropped on the way; a held turn's stop the queue until it is released."""
        out = []
        while self.queue:
            chunk = self.queue[0]
            what = fate(chunk.turn_id)
            if what is Fate.HOLD:
                break
            if what is Fate.DROP:
                self.queue.popleft()
                continue
            ahead = max(0.0, self.played_until - now)
            if chunk.pcm and ahead > 0 and ahead + chunk.seconds > self.lead_s + 1e-6:
                break
            self.queue.popleft()
            if chunk.pcm:
                starts = max(self.played_until, now)
                self.played_until = starts + chunk.seconds
                pcm = _scaled(chunk.pcm, self.gain) if self.gain != 1.0 else chunk.pcm
                chunk = PacedChunk(chunk.turn_id, pcm, chunk.rate, chunk.last, starts)
            out.append(chunk)
        return out

    def wake_in(self, now: float, fate: Callable[[int], Fate]) -> float | None:
        """Seconds until ``take`` has something to send; None when nothing is queued or the next is held (the
        release of a held turn calls ``take`` again)."""
        if not self.queue or fate(self.queue[0].turn_id) is not Fate.SEND:
            return None
        ahead = max(0.0, self.played_until - now)
        return max(0.0, ahead + self.queue[0].seconds - self.lead_s)

    def duck(self, on: bool) -> None:
        """What is sent from now on is quieter (the user may be interrupting), or back at full volume."""
        self.gain = DUCK_GAIN if on else 1.0

    def clear(self) -> None:
        """`stop_tts`: nothing queued is sent, and the client has dropped what it held."""
        self.queue.clear()
        self.played_until = 0.0
        self.gain = 1.0


def _scaled(pcm: bytes, gain: float) -> bytes:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) * gain
    return samples.astype("<i2").tobytes()
