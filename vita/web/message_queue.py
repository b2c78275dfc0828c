"""The Redis message queue that joins several front processes (``--message_queue``).

With it, a Socket.IO emit made by any front process, or by a process that is no server at all (an operator's
``scripts/announce.py``), reaches the client on whichever front holds its socket. Emits to a session of this
front skip the queue: they are delivered here anyway, and a Redis outage must not silence local sessions.

The channel carries JSON only (``JsonRedisManager``): python-socketio's own Redis manager unpickled what it read
there before 5.14, so anyone able to PUBLISH on the channel ran code in every front. Here nothing is unpickled
whatever the library's version, bytes travel as tagged base64, and a message that is not one of the shapes the
pub/sub manager itself publishes is dropped with a (rate-limited) warning.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import socketio

log = logging.getLogger("vita.web.message_queue")

CHANNEL = "vita"
PROBE_EVERY_S = 2.0
WARN_EVERY_S = 60.0  # dropped messages: one warning (with a count) at most this often
BYTES_TAG = "__vita_bytes__"  # {BYTES_TAG: base64}: a bytes value on the channel


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_rooms(value: Any) -> bool:
    """A room (a sid is one) or several, or none."""
    return value is None or isinstance(value, str) or (isinstance(value, list) and all(map(_is_str, value)))


def _is_callback(value: Any) -> bool:
    """None, or where the answer goes back to: [room, namespace, ack id]."""
    return value is None or (isinstance(value, list) and len(value) == 3 and _is_str(value[0])
                             and _is_str(value[1]) and type(value[2]) is int)


# What PubSubManager publishes, by method: the fields its handlers read and what each must be. Fields not listed
# are ignored by the handlers and allowed (a later library version may add some).
SHAPES: dict[str, dict[str, Callable[[Any], bool]]] = {
    "emit": {"event": _is_str, "data": lambda v: isinstance(v, list), "namespace": _is_str, "room": _is_rooms,
             "skip_sid": _is_rooms, "callback": _is_callback, "host_id": _is_str},
    "disconnect": {"sid": _is_str, "namespace": _is_str, "host_id": _is_str},
    "enter_room": {"sid": _is_str, "room": _is_str, "namespace": _is_str, "host_id": _is_str},
    "leave_room": {"sid": _is_str, "room": _is_str, "namespace": _is_str, "host_id": _is_str},
    "close_room": {"room": _is_str, "namespace": _is_str, "host_id": _is_str},
    "callback": {"sid": _is_str, "namespace": _is_str, "id": lambda v: type(v) is int,
                 "args": lambda v: isinstance(v, list), "host_id": _is_str},
}


def _tag_bytes(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {BYTES_TAG: base64.b64encode(value).decode("ascii")}
    raise TypeError(f"{type(value).__name__} cannot travel on the message queue (JSON and bytes only)")


def _untag_bytes(obj: dict) -> Any:
    if len(obj) == 1 and BYTES_TAG in obj:
        if not isinstance(obj[BYTES_TAG], str):
            raise ValueError("a bytes tag without base64 text")
        try:
            return base64.b64decode(obj[BYTES_TAG], validate=True)
        except binascii.Error as exc:
            raise ValueError(f"a bytes tag with bad base64: {exc}") from exc
    return obj


def encode(message: dict) -> str:
    """A pub/sub message as the JSON text published on the channel (bytes, anywhere in it, as tagged base64)."""
    return json.dumps(message, default=_tag_bytes, separators=(",", ":"))


def decode(raw: Any) -> tuple[dict | None, str]:
    """The message a channel payload carries, or None and why it was refused. Never unpickles."""
    if not isinstance(raw, bytes | str):
        return None, f"a {type(raw).__name__}"
    try:
        message = json.loads(raw, object_hook=_untag_bytes)
    except (ValueError, RecursionError) as exc:  # not JSON (a pickle, say), bad UTF-8, or absurdly nested
        return None, f"not JSON ({exc.__class__.__name__})"
    if not isinstance(message, dict):
        return None, f"JSON {type(message).__name__}, not an object"
    method = message.get("method")
    fields = SHAPES.get(method) if isinstance(method, str) else None
    if fields is None:
        return None, f"unknown method {str(method)[:40]!r}"
    for name, valid in fields.items():
        if not valid(message.get(name)):
            return None, f"{message['method']} with a bad {name!r}"
    if message["method"] == "emit":
        binary, data = message.get("binary", False), message["data"]
        if not isinstance(binary, bool) or (binary and not (data and all(map(_is_str, data[1:])))):
            return None, "emit with bad binary attachments"  # attachments are base64 text after the packet
    return message, ""


class DropLog:
    """One warning per WARN_EVERY_S for refused channel messages, with how many were dropped meanwhile."""

    def __init__(self, channel: str, clock: Callable[[], float] = time.monotonic):
        self.channel, self.clock = channel, clock
        self.dropped = 0  # since the last warning
        self.total = 0
        self.warned_at: float | None = None

    def drop(self, why: str) -> None:
        self.dropped += 1
        self.total += 1
        now = self.clock()
        if self.warned_at is None or now - self.warned_at >= WARN_EVERY_S:
            log.warning("dropped %d message(s) on the Redis channel %r that are not Socket.IO JSON (last: %s); only "
                        "the front processes and scripts/announce.py should publish there: is the Redis server "
                        "reachable by others?", self.dropped, self.channel, why)
            self.warned_at, self.dropped = now, 0


class JsonRedisManager(socketio.RedisManager):
    """python-socketio's Redis manager with JSON on the wire both ways, whatever the library's version."""

    name = "redis (JSON only)"

    def __init__(self, url: str, channel: str = CHANNEL, write_only: bool = False):
        super().__init__(url, channel=channel, write_only=write_only)
        self.drops = DropLog(channel)

    def _publish(self, data: dict) -> Any:
        payload = encode(data)  # a value JSON cannot carry fails here, in the emitting call, as it would upstream
        for attempt in (1, 2):
            try:
                if not self.connected:
                    self._redis_connect()
                return self.redis.publish(self.channel, payload)
            except Exception as exc:  # the connection went: connect again once, then give up on this message
                self.connected = False
                log.error("cannot publish to Redis (%s: %s)%s", exc.__class__.__name__, exc,
                          "; retrying" if attempt == 1 else "; message lost")
        return None

    def _listen(self) -> Iterator[dict]:
        """Only decoded, well-formed messages reach the manager's thread (a dict is taken as is, never loaded)."""
        for raw in super()._listen():
            message, why = decode(raw)
            if message is None:
                self.drops.drop(why)
            else:
                yield message


def redacted(url: str) -> str:
    """The URL without its password, for /health and logs."""
    parts = urlsplit(url)
    if parts.password:
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def socketio_options(url: str | None, write_only: bool = False) -> dict[str, Any]:
    """Flask-SocketIO's options for the queue: our JSON-only manager (``message_queue`` too, which Flask-SocketIO
    needs to set up a write-only emitter that has no app)."""
    if not url:
        return {}
    return {"message_queue": url, "client_manager": JsonRedisManager(url, CHANNEL, write_only=write_only)}


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

    emitter = SocketIO(**socketio_options(url, write_only=True))  # no app, no server
    payload = {"message": message, "at": time.time()}
    if to:
        emitter.emit("notice", payload, to=to)
    else:
        emitter.emit("notice", payload)
