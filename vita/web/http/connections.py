"""Who holds the front's open TCP connections, and the caps on them: in all, and per client address.

Pure bookkeeping (no sockets), so the policy is unit-tested on its own. The policy: a connection is *idle* until it
has sent a whole request's headers, and again between keep-alive requests; a WebSocket is busy for its life. At a
cap, the oldest idle connection in the way is closed to make room; when every one in the way is busy, the new
connection is refused. Idle or half-open sockets can therefore never keep a real user out, and busy ones are
bounded.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class OpenConnection:
    key: int
    address: str
    opened_at: float
    handle: Any = None  # what the server closes to evict it (its socket)
    busy: bool = False


@dataclass
class Admission:
    admitted: bool
    key: int = 0
    evicted: list[OpenConnection] = field(default_factory=list)
    reason: str = ""


class ConnectionTable:
    def __init__(self, max_total: int, max_per_address: int, uncapped: frozenset[str] = frozenset()):
        self.max_total = max_total
        self.max_per_address = max_per_address
        self.uncapped = uncapped  # addresses without a per-address cap (trusted reverse proxies)
        self._open: dict[int, OpenConnection] = {}
        self._keys = itertools.count(1)
        self._lock = threading.Lock()
        self.refused = 0
        self.evicted = 0

    def admit(self, address: str, now: float, handle: Any = None) -> Admission:
        """Admit a newcomer, closing idle connections in its way only if it then gets in: both caps are checked
        before anyone is evicted (evicting for the per-address cap and then refusing at the total cap killed a
        connection for nobody)."""
        with self._lock:
            victims, reason = self._room_for(address)
            if victims is None:
                self.refused += 1
                return Admission(False, reason=reason)
            evicted = [self._drop(victim) for victim in victims]
            key = next(self._keys)
            self._open[key] = OpenConnection(key, address, now, handle)
            return Admission(True, key, evicted)

    def _room_for(self, address: str) -> tuple[list[OpenConnection] | None, str]:
        """The idle connections (oldest first) whose closing lets one more in under both caps, or None and why
        not when busy ones are in the way. Decides only: nothing is closed here."""
        victims: list[OpenConnection] = []
        if address not in self.uncapped:
            mine = [c for c in self._open.values() if c.address == address]
            excess = len(mine) + 1 - self.max_per_address
            if excess > 0:
                victims = self._oldest_idle(mine, excess)
                if len(victims) < excess:
                    return None, f"{len(mine)} connections from {address}"
        excess = len(self._open) - len(victims) + 1 - self.max_total
        if excess > 0:  # a per-address victim makes room in all too; more only when the table is over its cap
            chosen = {c.key for c in victims}
            more = self._oldest_idle([c for c in self._open.values() if c.key not in chosen], excess)
            if len(more) < excess:
                return None, f"{len(self._open)} connections in all"
            victims += more
        return victims, ""

    def set_busy(self, key: int, busy: bool) -> None:
        with self._lock:
            connection = self._open.get(key)
            if connection is not None:
                connection.busy = busy

    def release(self, key: int) -> None:
        with self._lock:
            self._open.pop(key, None)

    def counts(self) -> dict[str, int]:
        with self._lock:
            busy = sum(c.busy for c in self._open.values())
            return {"open": len(self._open), "busy": busy, "idle": len(self._open) - busy,
                    "refused": self.refused, "evicted": self.evicted}

    @staticmethod
    def _oldest_idle(connections: list[OpenConnection], count: int) -> list[OpenConnection]:
        return sorted((c for c in connections if not c.busy), key=lambda c: c.opened_at)[:count]

    def _drop(self, connection: OpenConnection) -> OpenConnection:
        del self._open[connection.key]
        self.evicted += 1
        return connection
