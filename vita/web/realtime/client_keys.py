"""Short-lived client keys for the Realtime door, as OpenAI's ``POST /v1/realtime/client_secrets`` mints them: an
app's backend (holding the server's token) asks for one for a browser, which uses it as its bearer for one
Realtime connection. A key expires, is bound to the session settings it was minted with, and works once.

Keys are kept by their SHA-256 only (never the key itself, never logged); a redeemed key's digest is kept until it
would have expired, so that a second use is told "already used" rather than "unknown"."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PREFIX = "ek_"
DEFAULT_TTL_S = 600  # OpenAI's default, ten minutes
MIN_TTL_S, MAX_TTL_S = 10, 7200
MAX_KEYS = 1000  # unredeemed keys at once: minting needs the server's token, so this bounds a buggy backend


class KeyRefused(Exception):
    """A client key that cannot open a session; the message says why (expired, already used, unknown)."""

MEMORY_USER = "vita.memory_user"  # where the request's environ holds the redeemed key's user


@dataclass(frozen=True)
class ClientKey:
    expires_at: float  # unix seconds
    session: Any  # the session settings it was minted with, as checked (realtime_protocol.Settings)
    user: str | None = None  # the app's own id for its user, when it named one: who memory remembers (vita/memory/)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


class ClientKeys:
    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self._lock = threading.Lock()
        self._live: dict[str, ClientKey] = {}  # digest -> key, unredeemed
        self._used: dict[str, float] = {}  # digest -> when it would have expired

    @staticmethod
    def looks_like(value: str | None) -> bool:
        return isinstance(value, str) and value.startswith(PREFIX)

    def mint(self, session: Any, ttl_s: float = DEFAULT_TTL_S, user: str | None = None) -> tuple[str, ClientKey]:
        """A new key for `session` (and the app's `user`, if it named one), valid for ttl_s; KeyRefused when too
        many are waiting to be used."""
        now = self.clock()
        with self._lock:
            self._prune(now)
            if len(self._live) >= MAX_KEYS:
                raise KeyRefused(f"{MAX_KEYS} client keys are waiting to be used; let some expire first")
            value = PREFIX + secrets.token_urlsafe(24)
            key = ClientKey(now + ttl_s, session, user)
            self._live[_digest(value)] = key
        return value, key

    def redeem(self, value: str) -> ClientKey:
        """The key's settings, once: the key is spent. KeyRefused if it expired, was used, or was never minted."""
        return self._take(value, spend=True)

    def peek(self, value: str) -> ClientKey:
        """The key's settings, the key left unspent (a call spends it once it is answered)."""
        return self._take(value, spend=False)

    def holds(self, value: str) -> bool:
        """Whether `value` is a key here, unused and unexpired (one goes through its address's token lockout)."""
        if not self.looks_like(value):
            return False
        try:
            self.peek(value)
        except KeyRefused:
            return False
        return True

    def _take(self, value: str, spend: bool) -> ClientKey:
        digest, now = _digest(value), self.clock()
        with self._lock:
            self._prune(now)
            key = self._live.pop(digest, None) if spend else self._live.get(digest)
            if key is not None:
                if spend:
                    self._used[digest] = key.expires_at
                return key
            if digest in self._used:
                raise KeyRefused("this client key has already been used: a key opens one session")
        raise KeyRefused("this client key is unknown or has expired")

    def _prune(self, now: float) -> None:
        for digest in [d for d, key in self._live.items() if key.expires_at <= now]:
            del self._live[digest]
        for digest in [d for d, until in self._used.items() if until <= now]:
            del self._used[digest]

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"live": len(self._live), "used": len(self._used)}
