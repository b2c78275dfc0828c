"""The Redis message queue that joins several front processes (``--message_queue``).

With it, a Socket.IO emit made by any front process, or by a process that is no server at all (an operator's
``scripts/announce.py``), reaches the client on whichever front holds its socket. Emits to a session of this
front skip the queue: they are delivered here anyway, and a Redis outage must not silence local sessions.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

CHANNEL = "vita"
PROBE_EVERY_S = 2.0


def redacted(url: str) -> str:
    """The URL without its password, for /health and logs."""
    parts = urlsplit(url)
    if parts.password:
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def socketio_options(url: str | None) -> dict[str, Any]:
    return {"message_queue": url, "channel": CHANNEL} if url else {}


class QueueProbe:
    """Whether Redis answers, checked at most every PROBE_EVERY_S (for /health, which is polled)."""

    def __init__(self, url: str):
        import redis

        self.url = url
        self.client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self.lock = threading.Lock()
        self.checked_at = 0.0
        self.state: dict[str, Any] = {}

    def status(self) -> dict[str, Any]:
        with self.lock:
            if time.monotonic() - self.checked_at > PROBE_EVERY_S:
                try:
                    self.client.ping()
                    error = None
                except Exception as exc:  # any failure to answer is "not connected", with the reason
                    error = f"{exc.__class__.__name__}: {exc}"
                self.state = {"url": redacted(self.url), "connected": error is None, "error": error}
                self.checked_at = time.monotonic()
            return dict(self.state)


def announce(url: str, message: str, to: str | None = None) -> None:
    """Send a `notice` to every session on every front (or one session id) through the queue."""
    from flask_socketio import SocketIO

    emitter = SocketIO(message_queue=url, channel=CHANNEL)  # write-only: no app, no server
    payload = {"message": message, "at": time.time()}
    if to:
        emitter.emit("notice", payload, to=to)
    else:
        emitter.emit("notice", payload)
