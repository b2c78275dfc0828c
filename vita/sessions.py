"""Per-connection session state and the registry that enforces --max_users.

All of a session's state lives on its Session object; the registry is owned by the app, not the module.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from vita.camera import FrameBuffer


class SessionState(StrEnum):
    LISTENING = "listening"
    THINKING = "thinking"
    SPEAKING = "speaking"


@dataclass
class Session:
    sid: str
    created_at: float = field(default_factory=time.monotonic)
    last_activity: float = field(default_factory=time.monotonic)
    state: SessionState = SessionState.LISTENING
    voice: str | None = None
    _next_turn: int = 0
    active_turn: int | None = None
    reply: str = ""
    audio_rate: int = 16000  # rate of our page's binary audio frames (set by `audio_format`)
    playback_ends_at: float = 0.0  # when the client will have played the reply audio sent so far
    pending_text: str = ""  # typed while the user was speaking: joins the spoken turn
    reply_mode: str = "stream"  # "full": VITA's whole-reply-then-speech, for comparison
    turn_submitted_at: float = 0.0  # monotonic, when the active turn went to the workers
    turn_speech_end: float | None = None  # monotonic estimate of the turn's last voiced sample
    turn_audio_started: bool = False  # the active turn's first reply audio has been sent
    frames: FrameBuffer = field(default_factory=FrameBuffer, repr=False)
    listener: Any = field(default=None, repr=False)  # the session's SpeechListener (VAD thread)
    _reported: dict[str, float] = field(default_factory=dict, repr=False)
    _allowance: float = -1.0  # token bucket of inbound events; -1 = full on first use
    _allowance_at: float = field(default_factory=time.monotonic, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def idle_for(self) -> float:
        return time.monotonic() - self.last_activity

    def should_report(self, code: str, every_s: float = 1.0) -> bool:
        """Rate-limit repeated errors: a client streaming bad audio gets one error a second, not 125."""
        now = time.monotonic()
        with self.lock:
            if now - self._reported.get(code, -every_s) < every_s:
                return False
            self._reported[code] = now
            return True

    def take_event(self, per_s: float) -> bool:
        """Token bucket over inbound events (one second of burst): False when the client sends too fast."""
        now = time.monotonic()
        with self.lock:
            if self._allowance < 0:
                self._allowance = per_s
            self._allowance = min(per_s, self._allowance + (now - self._allowance_at) * per_s)
            self._allowance_at = now
            if self._allowance < 1:
                return False
            self._allowance -= 1
            return True

    def cancel_turn(self) -> tuple[int | None, bool]:
        """Drop the active turn; returns (its id or None, whether the assistant was thinking or speaking)."""
        with self.lock:
            turn, self.active_turn = self.active_turn, None
            busy = self.state is not SessionState.LISTENING
            self.state = SessionState.LISTENING
            self.playback_ends_at = 0.0
            return turn, busy

    def add_playback(self, seconds: float) -> float:
        """Account for reply audio sent to the client (played gap-free from when it arrives); returns how
        long the client will still be playing. Workers make audio faster than real time, so a turn is over
        for the user only when this has run out, not when the last chunk leaves.
        """
        with self.lock:
            now = time.monotonic()
            self.playback_ends_at = max(self.playback_ends_at, now) + seconds
            return self.playback_ends_at - now

    def playback_left(self) -> float:
        with self.lock:
            return max(0.0, self.playback_ends_at - time.monotonic())

    def take_pending_text(self) -> str:
        with self.lock:
            text, self.pending_text = self.pending_text, ""
            return text

    def new_turn(self, speech_end: float | None = None) -> int:
        """Start a turn; returns its id. Any earlier turn is thereby no longer current."""
        with self.lock:
            self._next_turn += 1
            self.active_turn = self._next_turn
            self.reply = ""
            self.state = SessionState.THINKING
            self.turn_submitted_at = time.monotonic()
            self.turn_speech_end = speech_end
            self.turn_audio_started = False
            return self._next_turn

    def first_audio(self, turn_id: int) -> dict[str, float] | None:
        """On the turn's first reply audio: seconds since it was submitted and since its speech ended."""
        with self.lock:
            if self.active_turn != turn_id or self.turn_audio_started:
                return None
            self.turn_audio_started = True
            now = time.monotonic()
            times = {"first_audio_s": now - self.turn_submitted_at}
            if self.turn_speech_end is not None:
                times["voice_to_voice_s"] = now - self.turn_speech_end
            return times

    def is_current(self, turn_id: int) -> bool:
        with self.lock:
            return self.active_turn == turn_id

    def end_turn(self, turn_id: int) -> bool:
        """Forget turn_id if it is the active one; True if it was."""
        with self.lock:
            if self.active_turn != turn_id:
                return False
            self.active_turn = None
            self.state = SessionState.LISTENING
            return True


class SessionRegistry:
    def __init__(self, max_users: int):
        self.max_users = max_users
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, sid: str) -> Session | None:
        """Register a session, or None when the server is full."""
        with self._lock:
            if len(self._sessions) >= self.max_users:
                return None
            session = self._sessions[sid] = Session(sid)
            return session

    def close(self, sid: str) -> Session | None:
        with self._lock:
            return self._sessions.pop(sid, None)

    def get(self, sid: str) -> Session | None:
        with self._lock:
            return self._sessions.get(sid)

    def all(self) -> list[Session]:
        with self._lock:
            return list(self._sessions.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
