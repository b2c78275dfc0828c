"""One question's record in the fault soak: when it was said, how the server answered it, and by when it must have
ended not to count as stuck. Its times are now()'s: time.monotonic()."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

HARD_CAP_S = 180.0  # no turn may take longer than this from the end of its question, audio or not


def now() -> float:
    return time.monotonic()


@dataclass
class Turn:
    session: str
    index: int
    question: str
    warmup: bool
    barge_planned: bool
    speech_start: float = 0.0
    speech_end: float = 0.0
    turn_id: int | None = None
    committed_at: float | None = None
    states: list = field(default_factory=list)  # (t, state, reason)
    first_audio_at: float | None = None
    last_audio_at: float | None = None
    audio_s: float = 0.0
    errors: list = field(default_factory=list)  # (t, code, message)
    cancelled: tuple | None = None  # (t, reason)
    ended_at: float | None = None
    end_reason: str | None = None
    stuck_at: float | None = None
    barged_at: float | None = None  # when this session started speaking over this turn's reply
    withdrawn_at: float | None = None  # the server withdrew its turn as "extended"; a new turn should follow
    carried: bool = False  # ...and one did: the request went on in it (check_stuck)
    transcript: str = ""
    reply: str = ""

    def deadline(self, stall_s: float, margin_s: float) -> float:
        progress = max(self.speech_end, self.last_audio_at or 0.0)
        return min(progress + stall_s + margin_s, self.speech_end + HARD_CAP_S)

    def outcome(self) -> str:
        if self.stuck_at is not None:
            return "stuck"
        if self.ended_at is None:
            return "carried" if self.carried else "open"
        if self.errors:
            return f"error:{self.errors[0][1]}"
        if self.end_reason == "barge-in":
            return "barge_in"
        if self.end_reason is None:
            return "answered" if self.first_audio_at is not None else "no_audio"
        return f"ended:{self.end_reason}"  # cancelled or unanswered for another reason (e.g. no speech recognised)
