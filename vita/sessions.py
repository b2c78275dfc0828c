"""Per-connection session state and the registry that enforces --max_users.

All of a session's state lives on its Session object; the registry is owned by the app, not the module.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum


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
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def new_turn(self) -> int:
        """Start a turn; returns its id. Any earlier turn is thereby no longer current."""
        with self.lock:
            self._next_turn += 1
            self.active_turn = self._next_turn
            self.reply = ""
            self.state = SessionState.THINKING
            return self._next_turn

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
