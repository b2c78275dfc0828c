"""Each session as the LLM worker knows it: one object, not a dict per fact; and the fair share of the worker
between sessions.

A session's conversation (its history), its turn in flight, the speculative turns it discarded while they ran, its
newest interjection check, the turn waiting for its client's tool results, and whether its turn is yielding to
others' (fair share). All of it is touched on the worker's event loop alone.

Fair share (``ServiceLedger``): who has asked the worker for many turns lately, and who should wait.

The ASR threads (asr.workers) and one engine serve every session. A client that starts a turn every second
(speech cut into words, each pause a turn that the next word withdraws) would otherwise take half the CPU from
everyone else.
A session that started more than `max_turns` turns in the last `window_s` seconds waits, before its next turn
starts, for the turns other sessions have in flight at that moment (never for later ones: no session starves).
Without contention nobody waits. Turns are counted rather than timed: under contention every session's turns
take longer, and a person asking one question at a time would look as busy as the client flooding the worker.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from workers.llm.prompting import ConversationHistory
from workers.tools.client_tools import AwaitedCalls


@dataclass
class WorkerSession:
    history: ConversationHistory | None = None  # None until its first turn (or after a reset)
    turn: tuple[int, asyncio.Task] | None = None  # its turn in flight: (turn id, its task)
    forgotten: set[int] = field(default_factory=set)  # discarded speculative turns still running: no history
    latest_check: tuple[int, int] | None = None  # (turn, pause) of its newest interjection check
    awaited: AwaitedCalls | None = None  # the turn waiting for its client's tool results
    yielding: bool = False  # its turn waits for the others' (and is never waited on in turn)
    ended: bool = False  # the session ended: forgotten once its turn in flight is over
    committed: int = -1  # its newest turn the front committed (a speculative one's memory changes wait for it)
    memory_pending: dict[int, list] = field(default_factory=dict)  # turn id -> memory changes waiting for its commit

    def forget_conversation(self) -> None:
        """A reset (or the session's end): no history, no check, no tool results awaited."""
        self.history, self.latest_check, self.awaited = None, None, None


class WorkerSessions:
    """The sessions with something in this worker, by id."""

    def __init__(self, history_turns: int):
        self.history_turns = history_turns
        self._by_id: dict[str, WorkerSession] = {}

    def get(self, session_id: str) -> WorkerSession | None:
        return self._by_id.get(session_id)

    def of(self, session_id: str) -> WorkerSession:
        """The session, made on its first message."""
        session = self._by_id.get(session_id)
        if session is None:
            session = self._by_id[session_id] = WorkerSession()
        return session

    def conversation(self, session_id: str) -> ConversationHistory:
        """Its history, begun on its first turn."""
        session = self.of(session_id)
        if session.history is None:
            session.history = ConversationHistory(self.history_turns)
        return session.history

    def history(self, session_id: str) -> ConversationHistory | None:
        session = self._by_id.get(session_id)
        return session.history if session is not None else None

    def turn_of(self, session_id: str) -> tuple[int, asyncio.Task] | None:
        """Its turn in flight: (turn id, task), or None."""
        session = self._by_id.get(session_id)
        return session.turn if session is not None else None

    def latest_check(self, session_id: str) -> tuple[int, int] | None:
        session = self._by_id.get(session_id)
        return session.latest_check if session is not None else None

    def prune(self, session_id: str) -> None:
        """An ended session is forgotten once no turn of its is in flight."""
        session = self._by_id.get(session_id)
        if session is not None and session.ended and session.turn is None:
            del self._by_id[session_id]

    def turns(self) -> Iterator[tuple[str, int, asyncio.Task]]:
        """Every session's turn in flight: (session, turn, task)."""
        for session_id, session in list(self._by_id.items()):
            if session.turn is not None:
                yield session_id, session.turn[0], session.turn[1]

    def any_turn(self) -> bool:
        return any(session.turn is not None for session in self._by_id.values())

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._by_id


WINDOW_S = 10.0
MAX_TURNS = 8  # a person: a question, its speculative turns at pauses, a correction; ~3-6 in 10 s at most


class ServiceLedger:
    """When each session's recent turns started."""

    def __init__(self, window_s: float = WINDOW_S, max_turns: int = MAX_TURNS):
        self.window_s, self.max_turns = window_s, max_turns
        self._starts: dict[str, deque[float]] = {}

    def started(self, session_id: str, now: float) -> None:
        starts = self._starts.setdefault(session_id, deque())
        starts.append(now)
        self._expire(starts, now)

    def forget(self, session_id: str) -> None:
        self._starts.pop(session_id, None)

    def recent(self, session_id: str, now: float) -> int:
        starts = self._starts.get(session_id)
        if not starts:
            return 0
        self._expire(starts, now)
        return len(starts)

    def over_share(self, session_id: str, now: float) -> bool:
        return self.recent(session_id, now) > self.max_turns

    def _expire(self, starts: deque[float], now: float) -> None:
        while starts and starts[0] < now - self.window_s:
            starts.popleft()
