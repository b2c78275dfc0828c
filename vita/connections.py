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
        with self._lock:
            evicted: list[OpenConnection] = []
            if address not in self.uncapped:
                mine = [c for c in self._open.values() if c.address == address]
                if len(mine) >= self.max_per_address:
                    victim = self._oldest_idle(mine)
                    if victim is None:
                        self.refused += 1
                        return Admission(False, reason=f"{len(mine)} connections from {address}")
                    evicted.append(self._drop(victim))
            if len(self._open) >= self.max_total:
                victim = self._oldest_idle(self._open.values())
                if victim is None:
                    self.refused += 1
                    return Admission(False, evicted, reason=f"{len(self._open)} connections in all")
                evicted.append(self._drop(victim))
            key = next(self._keys)
            self._open[key] = OpenConnection(key, address, now, handle)
            return Admission(True, key, evicted)

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
    def _oldest_idle(connections: Any) -> OpenConnection | None:
        idle = [c for c in connections if not c.busy]
        return min(idle, key=lambda c: c.opened_at) if idle else None

    def _drop(self, connection: OpenConnection) -> OpenConnection:
        del self._open[connection.key]
        self.evicted += 1
        return connection
