"""What the assistant remembers of each user, kept in the server's own SQLite file (``state_dir/memory.sqlite3``,
beside the turn log): facts in the user's words, each with when and from which session and turn it came, searched
with SQLite's FTS5 (no new dependency). Both the LLM worker (which hears the facts) and the front (the page's panel,
the HTTP API) open it; SQLite's locking keeps them apart.

What is forgotten is gone from the file, not only from the answers: ``secure_delete`` overwrites deleted rows, the
full-text index is merged after each forget (its segments would otherwise keep the words), and there is no
write-ahead log to keep old pages.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vita.memory.sayings import Fact, plain
from vita.memory.user_keys import UserKeys

if TYPE_CHECKING:
    from vita.config import Config

log = logging.getLogger("vita.memory")

SCHEMA = """
CREATE TABLE IF NOT EXISTS facts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_key TEXT NOT NULL,
    slot TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL,
    created_at REAL NOT NULL,
    session TEXT NOT NULL DEFAULT '',
    turn_id INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS facts_user ON facts (user_key, slot);
CREATE VIRTUAL TABLE IF NOT EXISTS facts_index USING fts5(text, content='facts', content_rowid='id');
CREATE TRIGGER IF NOT EXISTS facts_added AFTER INSERT ON facts BEGIN
    INSERT INTO facts_index (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS facts_removed AFTER DELETE ON facts BEGIN
    INSERT INTO facts_index (facts_index, rowid, text) VALUES ('delete', old.id, old.text);
END;
"""
LOCK_WAIT_S = 2.0  # the other process's write holds the file this long at most (a panel's delete: milliseconds)
COLUMNS = "f.id, f.text, f.slot, f.created_at, f.session, f.turn_id"
MAX_FACTS_PER_USER = 200  # the oldest go first past this
RECALLED = 3  # facts a question brings into the prompt, besides the user's name
# Words of a question that ask about a slot whose fact may share none of them ("What is my job?": "I work as a
# teacher"), and the slots they ask about (LIKE patterns).
SLOT_WORDS = {"job": ("work",), "work": ("work",), "profession": ("work",), "occupation": ("work",),
              "living": ("work",), "live": ("home",), "city": ("home",), "town": ("home",), "home": ("home",),
              "address": ("home",), "country": ("home", "origin"), "from": ("origin",), "born": ("origin",),
              "grew": ("origin",), "favourite": ("favourite %",), "favorite": ("favourite %",)}
_STOP = frozenset(("a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "does", "for", "from",
                   "have", "how", "i", "i'm", "in", "is", "it", "me", "my", "of", "on", "or", "so", "that", "the",
                   "this", "to", "was", "what", "when", "where", "which", "who", "why", "will", "with", "you",
                   "your", "tell", "know", "about"))


@dataclass(frozen=True)
class Remembered:
    id: int
    text: str
    slot: str
    created_at: float
    session: str
    turn_id: int

    def as_dict(self) -> dict:
        return {"id": self.id, "text": self.text, "slot": self.slot, "created_at": self.created_at,
                "session": self.session, "turn_id": self.turn_id}


class MemoryStore:
    def __init__(self, path: Path, retention_days: float = 365.0):
        self.path = path
        self.retention_s = retention_days * 86400
        self._lock = threading.Lock()  # one connection, shared by this process's threads
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))  # readable by the server's user only
        self._db = sqlite3.connect(str(path), timeout=LOCK_WAIT_S, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=DELETE")  # no write-ahead log keeps a forgotten fact's page
        self._db.execute("PRAGMA secure_delete=ON")
        self._db.executescript(SCHEMA)
        self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- keeping ---------------------------------------------------------------------------------------------
    def keep(self, user_key: str, fact: Fact, session: str = "", turn_id: int = 0) -> int:
        """Keep a fact (a newer one in its slot replaces the older; the same words again are kept once); its id."""
        text = plain(fact.text)
        with self._lock, self._db:
            gone = self._delete("user_key = ? AND slot = ?", (user_key, fact.slot)) if fact.slot else 0
            gone += self._delete("user_key = ? AND lower(text) = lower(?)", (user_key, text))
            row = self._db.execute("INSERT INTO facts (user_key, slot, text, created_at, session, turn_id) "
                                   "VALUES (?, ?, ?, ?, ?, ?)", (user_key, fact.slot, text, time.time(), session,
                                                                 turn_id))
            over = self._db.execute("SELECT id FROM facts WHERE user_key = ? ORDER BY created_at DESC, id DESC "
                                    "LIMIT -1 OFFSET ?", (user_key, MAX_FACTS_PER_USER)).fetchall()
            for (old,) in over:
                gone += self._delete("id = ?", (old,))
            if gone:  # (only a delete leaves words in the index: merged, they go)
                self._merge_index()
            return int(row.lastrowid)

    # --- reading ---------------------------------------------------------------------------------------------
    def facts(self, user_key: str) -> list[Remembered]:
        """Everything kept of the user, oldest first."""
        with self._lock:
            rows = self._db.execute(f"SELECT {COLUMNS} FROM facts f WHERE f.user_key = ? ORDER BY f.created_at, f.id",
                                    (user_key,)).fetchall()
        return [Remembered(*row) for row in rows]

    def recall(self, user_key: str, question: str, limit: int = RECALLED) -> list[Remembered]:
        """What matters for this question: the user's name, the facts of the slot it asks about ("What is my job?":
        their work), and those that share its words (FTS5's ranking); none of another user's."""
        words = _key_words(question)
        slots = _slots(question)
        with self._lock:
            rows = self._db.execute(f"SELECT {COLUMNS} FROM facts f WHERE f.user_key = ? AND f.slot = 'name'",
                                    (user_key,)).fetchall()
            for slot in slots:
                rows += self._db.execute(f"SELECT {COLUMNS} FROM facts f WHERE f.user_key = ? AND f.slot LIKE ? "
                                         "ORDER BY f.created_at DESC LIMIT ?", (user_key, slot, limit)).fetchall()
            if words:
                query = " OR ".join(f'"{w}"' for w in words)
                rows += self._db.execute(
                    f"SELECT {COLUMNS} FROM facts_index JOIN facts f ON f.id = facts_index.rowid WHERE facts_index "
                    "MATCH ? AND f.user_key = ? ORDER BY rank LIMIT ?", (query, user_key, limit)).fetchall()
        found = list({row[0]: Remembered(*row) for row in rows}.values())
        return found[:1 + limit] if found and found[0].slot == "name" else found[:limit]

    def matching(self, user_key: str, about: str) -> list[Remembered]:
        """The user's facts that ``forget`` would delete: those with every word of ``about`` that says something,
        and those of the slot it names ("forget my job": their work, whatever its words)."""
        with self._lock:
            return [Remembered(*row) for row in self._matching(user_key, about)]

    def _matching(self, user_key: str, about: str) -> list[tuple]:
        rows = []
        query = _all_of(about)
        if query:
            rows += self._db.execute(
                f"SELECT {COLUMNS} FROM facts_index JOIN facts f ON f.id = facts_index.rowid WHERE facts_index "
                "MATCH ? AND f.user_key = ?", (query, user_key)).fetchall()
        for slot in _slots(about):
            rows += self._db.execute(f"SELECT {COLUMNS} FROM facts f WHERE f.user_key = ? AND f.slot LIKE ?",
                                     (user_key, slot)).fetchall()
        return sorted({row[0]: row for row in rows}.values())

    # --- forgetting ------------------------------------------------------------------------------------------
    def forget(self, user_key: str, about: str) -> list[str]:
        """Forget what ``matching`` finds; what was forgotten."""
        with self._lock, self._db:
            rows = self._matching(user_key, about)
            for row in rows:
                self._delete("id = ?", (row[0],))
            if rows:
                self._merge_index()
        return [row[1] for row in rows]

    def forget_one(self, user_key: str, fact_id: int) -> bool:
        with self._lock, self._db:
            gone = self._delete("id = ? AND user_key = ?", (fact_id, user_key))
            if gone:
                self._merge_index()
        return gone > 0

    def forget_all(self, user_key: str) -> int:
        with self._lock, self._db:
            gone = self._delete("user_key = ?", (user_key,))
            if gone:
                self._merge_index()
        return gone

    def prune(self, now: float | None = None) -> int:
        """Facts past the retention are deleted (at start and now and then)."""
        cutoff = (time.time() if now is None else now) - self.retention_s
        with self._lock, self._db:
            gone = self._delete("created_at < ?", (cutoff,))
            if gone:
                self._merge_index()
        return gone

    def _delete(self, where: str, args: tuple) -> int:
        return self._db.execute(f"DELETE FROM facts WHERE {where}", args).rowcount

    def _merge_index(self) -> None:
        """FTS5 records a delete as a marker in a new segment; merged, the index no longer holds the words."""
        self._db.execute("INSERT INTO facts_index (facts_index) VALUES ('optimize')")


def _folded(text: str) -> str:
    """Lower case without accents, as FTS5's unicode61 tokenizer indexes words ("Zürich" is "zurich")."""
    return unicodedata.normalize("NFKD", text.lower()).encode("ascii", "ignore").decode()


def _key_words(text: str) -> list[str]:
    """The words of ``text`` that say something, as the full-text index splits them ("dog's" is "dog" and "s")."""
    return list(dict.fromkeys(w for w in re.findall(r"[a-z0-9]+", _folded(text)) if w not in _STOP and len(w) > 1))


def _slots(text: str) -> list[str]:
    """The slots (LIKE patterns) the words of ``text`` ask about."""
    return sorted({slot for w in re.findall(r"[a-z]+", _folded(text)) for slot in SLOT_WORDS.get(w, ())})


def _all_of(about: str) -> str:
    """An FTS5 query for the facts that have every word of ``about`` that says something ("" when none does)."""
    return " AND ".join(f'"{w}"' for w in _key_words(about))


def open_memory(config: Config) -> tuple[MemoryStore | None, UserKeys | None]:
    """The front's memory and its user keys; (None, None) when memory is off, or its file cannot be opened (said
    once in the log: turns go on without it)."""
    path = config.memory_path()
    if path is None:
        return None, None
    try:
        store = MemoryStore(path, config.memory.retention_days)
        return store, UserKeys(config.state_path() / "memory.key")
    except (OSError, ValueError, sqlite3.Error) as exc:
        log.error("memory is off: cannot open %s (%s)", path, exc)
        return None, None
