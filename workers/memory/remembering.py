"""The LLM worker's memory: explicit requests answered at once, the few facts that matter for a question put beside
it, and facts stated in passing kept after the turn is answered (never on its critical path).

A turn may be speculative (started at a pause, before the user may have finished: vita/messages.py TurnRequest):
what it would keep or forget waits until the front says the turn was committed (``TurnCommitted``), and goes with
the turn if it is discarded instead. Nothing is kept off the record, nor for a session with no user key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vita.memory.answers import memory_note, plan, standing_facts, standing_memory
from vita.memory.sayings import facts_in_passing, memory_request
from vita.memory.store import MemoryStore
from vita.messages import TurnRequest

PENDING_KEPT = 8  # turns of a session whose memory changes wait for their commit
PRUNE_EVERY_S = 3600.0


class Remembering:
    def __init__(self, path: Path | None, retention_days: float, sessions: Any, log: logging.Logger):
        self.path, self.retention_days, self.sessions, self.log = path, retention_days, sessions, log
        self.store: MemoryStore | None = None
        self.pruned_at = time.monotonic()  # (setup prunes; then every PRUNE_EVERY_S, as changes are made)

    def setup(self) -> None:
        if self.path is None:
            return
        try:
            self.store = MemoryStore(self.path, self.retention_days)
            self.store.prune()
        except Exception as exc:  # no memory, said once; every turn is still answered
            self.log.error("memory is off: cannot open %s (%s)", self.path, exc)
            self.store = None

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    # --- in a turn -----------------------------------------------------------------------------------------------
    def asked(self, req: TurnRequest, words: str) -> str | None:
        """An explicit request about memory in the user's words: what to say, its change made now or at the turn's
        commit; None when the words are not one."""
        request = memory_request(words)
        if request is None or (request.kind != "remember" and (self.store is None or not req.user_key)):
            return None  # (where nothing is remembered, only a promise to remember is answered: that it cannot be)
        try:
            planned = plan(request, self.store, req.user_key, req.off_record, req.session_id, req.turn_id)
        except Exception:
            self.log.exception("memory request failed")
            return "Sorry, I couldn't reach my memory just now."
        if planned.change is not None:
            self._when_committed(req, planned.change)
        return planned.said

    def recall(self, req: TurnRequest, question: str) -> tuple[str, str]:
        """(standing, note): what the system prompt says of the user (their name and newest facts: the cached prefix
        keeps it from turn to turn) and, beside the question, the earlier words that matter for it and are not in
        the standing part ("" and "" for a session with no user)."""
        if self.store is None or not req.user_key:
            return "", ""
        try:
            kept = self.store.facts(req.user_key)
            said = {f.id for f in standing_facts(kept)}
            recalled = [f for f in self.store.recall(req.user_key, question) if f.id not in said] if question else []
            return standing_memory(kept), memory_note(recalled, question, known=bool(kept))
        except Exception:
            self.log.exception("memory recall failed")
            return "", ""

    def learn(self, req: TurnRequest, words: str) -> None:
        """Facts the user stated in passing, kept once the turn is theirs (after it is answered)."""
        if self.store is None or not req.user_key or req.off_record:
            return
        facts = facts_in_passing(words)
        if facts:
            store, key, sid, tid = self.store, req.user_key, req.session_id, req.turn_id
            self._when_committed(req, lambda: [store.keep(key, fact, sid, tid) for fact in facts])

    # --- the front's word on speculative turns -------------------------------------------------------------------
    def committed(self, session_id: str, turn_id: int) -> None:
        session = self.sessions.of(session_id)
        session.committed = max(session.committed, turn_id)
        for change in session.memory_pending.pop(turn_id, []):
            self._run(change)

    def forgotten(self, session_id: str, turn_id: int) -> None:
        """A discarded speculative turn: what it would have kept or forgotten never happens."""
        if (session := self.sessions.get(session_id)) is not None:
            session.memory_pending.pop(turn_id, None)

    def _when_committed(self, req: TurnRequest, change: Callable[[], Any]) -> None:
        session = self.sessions.of(req.session_id)
        if not req.speculative or session.committed >= req.turn_id:
            self._run(change)
            return
        session.memory_pending.setdefault(req.turn_id, []).append(change)
        while len(session.memory_pending) > PENDING_KEPT:
            session.memory_pending.pop(min(session.memory_pending))

    def _run(self, change: Callable[[], Any]) -> None:
        """A change to the memory file, off the event loop every session's turns run on (a write may wait on the
        front's, a panel's delete, for the file's lock)."""
        if time.monotonic() - self.pruned_at >= PRUNE_EVERY_S:
            self.pruned_at = time.monotonic()
            self._run(self.store.prune)  # (facts past memory.retention_days)
        try:
            asyncio.get_running_loop().run_in_executor(None, self._safely, change)
        except RuntimeError:  # no loop running (a test): now
            self._safely(change)

    def _safely(self, change: Callable[[], Any]) -> None:
        try:
            change()
        except Exception:  # the turn is answered either way
            self.log.exception("a memory change failed")
