"""The durable turn log: one SQLite row per turn (WAL mode), written by a thread of its own.

A turn's facts arrive from three places at different times (the front's VAD and playback accounting, the
LLM worker's transcript, reply and timings, the TTS worker's timings); `TurnLogger` gathers them per
(session, turn) and writes the row once the front is done with the turn *and* the LLM worker has ended it,
whichever comes last. `record()` never blocks: the audio path hands over a dict and goes on. A database that
cannot be opened or written is reported once and the log turns itself off; turns keep being served.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import queue
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("vita.ops.turn_log")

SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL,
    turn_id INTEGER NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL NOT NULL,
    source TEXT NOT NULL,
    transcript TEXT NOT NULL DEFAULT '',
    typed_text TEXT NOT NULL DEFAULT '',
    reply TEXT NOT NULL DEFAULT '',
    interrupted INTEGER NOT NULL DEFAULT 0,
    end_reason TEXT NOT NULL DEFAULT '',
    timings TEXT NOT NULL DEFAULT '{}',
    recording TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS turns_session ON turns (session, turn_id);
CREATE INDEX IF NOT EXISTS turns_started ON turns (started_at);
"""
COLUMNS = ("session", "turn_id", "started_at", "ended_at", "source", "transcript", "typed_text", "reply",
           "interrupted", "end_reason", "timings", "recording")
PENDING_LIMIT_S = 120.0  # a turn whose LLM end never arrives (worker died) is written after this long
PRUNE_EVERY_S = 3600.0


@dataclass
class _PendingTurn:
    row: dict[str, Any]
    front_done: bool = False
    llm_done: bool = False
    touched: float = field(default_factory=time.monotonic)


def open_db(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), timeout=5, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA)
    if "recording" not in {row[1] for row in db.execute("PRAGMA table_info(turns)")}:  # a log from before it
        db.execute("ALTER TABLE turns ADD COLUMN recording TEXT NOT NULL DEFAULT ''")
        db.commit()
    return db


def read_turns(path: Path, session: str | None = None) -> list[dict[str, Any]]:
    """Rows as dicts (timings decoded), oldest first; for the export script and tests."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        where, args = ("WHERE session = ?", (session,)) if session else ("", ())
        rows = db.execute(f"SELECT * FROM turns {where} ORDER BY started_at, turn_id", args).fetchall()
    finally:
        db.close()
    out = []
    for row in rows:
        item = dict(row)
        item["timings"] = json.loads(item["timings"] or "{}")
        item["interrupted"] = bool(item["interrupted"])
        out.append(item)
    return out


def prune(db: sqlite3.Connection, retention_days: float, now: float | None = None) -> int:
    cutoff = (now or time.time()) - retention_days * 86400
    deleted = db.execute("DELETE FROM turns WHERE ended_at < ?", (cutoff,)).rowcount
    db.commit()
    return deleted


class TurnLogger:
    """Collects each turn's facts and writes finished turns on a writer thread."""

    def __init__(self, path: Path | None, retention_days: float, max_backlog: int = 1000):
        self.path = path
        self.retention_days = retention_days
        self._salt = secrets.token_bytes(16)
        self._pending: dict[tuple[str, int], _PendingTurn] = {}
        self._lock = threading.Lock()
        self._rows: queue.Queue = queue.Queue(maxsize=max_backlog)
        self._stop = threading.Event()
        self.error: str | None = None
        self.written = 0
        self.dropped = 0  # rows lost because the writer fell max_backlog behind (shown in /health)
        self._thread = threading.Thread(target=self._run, name="turn-log", daemon=True)

    @property
    def enabled(self) -> bool:
        return self.path is not None and self.error is None

    def pseudonym(self, sid: str) -> str:
        """A per-process keyed hash: rows of one session group together, the Socket.IO id never lands on disk."""
        return hashlib.blake2s(sid.encode(), key=self._salt, digest_size=8).hexdigest()

    def start(self) -> None:
        if self.path is not None:
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            leftovers = [p.row for p in self._pending.values()]
            self._pending.clear()
        for row in leftovers:
            row["end_reason"] = row["end_reason"] or "server stopped"
            self._enqueue(row)
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # --- facts, from any thread; never block ------------------------------------------------------------
    def begin(self, sid: str, turn_id: int, source: str, typed_text: str = "") -> None:
        if not self.enabled:
            return
        row = {"session": self.pseudonym(sid), "turn_id": turn_id, "started_at": time.time(), "source": source,
               "transcript": "", "typed_text": typed_text, "reply": "", "interrupted": False, "end_reason": "",
               "timings": {}, "recording": ""}
        with self._lock:
            self._pending[(sid, turn_id)] = _PendingTurn(row)

    def update(self, sid: str, turn_id: int, **facts: Any) -> None:
        """Set fields; `timings` dicts are merged."""
        self._change(sid, turn_id, facts)

    def front_ended(self, sid: str, turn_id: int, reason: str, interrupted: bool = False) -> None:
        self._change(sid, turn_id, {"front_reason": reason, "interrupted": interrupted}, front=True)

    def llm_ended(self, sid: str, turn_id: int, reason: str, reply: str) -> None:
        self._change(sid, turn_id, {"llm_reason": reason, "reply": reply}, llm=True)

    def _change(self, sid: str, turn_id: int, facts: dict[str, Any], front: bool = False,
                llm: bool = False) -> None:
        if not self.enabled:
            return
        finished = None
        with self._lock:
            pending = self._pending.get((sid, turn_id))
            if pending is None:
                return
            for key, value in facts.items():
                if key == "timings":
                    pending.row["timings"].update(value)
                elif key == "interrupted":
                    pending.row["interrupted"] = pending.row["interrupted"] or value
                else:
                    pending.row[key] = value
            pending.front_done |= front
            pending.llm_done |= llm
            pending.touched = time.monotonic()
            if pending.front_done and pending.llm_done:
                finished = self._pending.pop((sid, turn_id)).row
            stale = [k for k, p in self._pending.items() if p.front_done
                     and time.monotonic() - p.touched > PENDING_LIMIT_S]
            stale_rows = [self._pending.pop(k).row for k in stale]
        for row in ([finished] if finished else []) + stale_rows:
            self._enqueue(row)

    def _enqueue(self, row: dict[str, Any]) -> None:
        front, llm = row.pop("front_reason", ""), row.pop("llm_reason", "")
        if not row.get("end_reason"):
            row["end_reason"] = front if row["interrupted"] or llm in ("", "done") else llm
        row["ended_at"] = time.time()
        try:
            self._rows.put_nowait(row)
        except queue.Full:
            self.dropped += 1

    # --- writer thread -----------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            db = open_db(self.path)
            pruned = prune(db, self.retention_days)
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)
            return
        if pruned:
            log.info("turn log: pruned %d turns older than %g days", pruned, self.retention_days)
        last_prune = time.monotonic()
        try:
            while not (self._stop.is_set() and self._rows.empty()):
                try:
                    row = self._rows.get(timeout=0.5)
                except queue.Empty:
                    row = None
                if row is not None:
                    self._write(db, row)
                if time.monotonic() - last_prune > PRUNE_EVERY_S:
                    prune(db, self.retention_days)
                    last_prune = time.monotonic()
        except (sqlite3.Error, OSError) as exc:
            self._fail(exc)
        finally:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def _write(self, db: sqlite3.Connection, row: dict[str, Any]) -> None:
        values = [row[c] for c in COLUMNS]
        values[COLUMNS.index("interrupted")] = int(row["interrupted"])
        values[COLUMNS.index("timings")] = json.dumps({k: round(v, 4) for k, v in row["timings"].items()})
        db.execute(f"INSERT INTO turns ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})", values)
        db.commit()
        self.written += 1

    def _fail(self, exc: Exception) -> None:
        self.error = f"{self.path}: {exc}"
        log.error("turn log disabled: cannot write %s (%s); turns are still served, not logged", self.path, exc)
        with self._lock:
            self._pending.clear()
