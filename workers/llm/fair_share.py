"""Fair share of the LLM worker between sessions: who has asked it for many turns lately, and who should wait.

The ASR threads (asr.workers) and one engine serve every session. A client that starts a turn every second
(speech cut into words, each pause a turn that the next word withdraws) would otherwise take half the CPU from
everyone else.
A session that started more than `max_turns` turns in the last `window_s` seconds waits, before its next turn
starts, for the turns other sessions have in flight at that moment (never for later ones: no session starves).
Without contention nobody waits. Turns are counted rather than timed: under contention every session's turns
take longer, and a person asking one question at a time would look as busy as the client flooding the worker.
"""

from __future__ import annotations

from collections import deque

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
