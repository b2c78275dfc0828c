"""Limits that python-socketio and engine.io do not apply themselves, checked before a message is parsed or
handled. Installed once on the front's Socket.IO server (their hooks, not a fork of them):

- WebSocket messages: at most ``max_http_buffer_size`` bytes (larger ones get ``message_too_big`` and the
  connection closes), and no permessage-deflate (a small compressed message could inflate to gigabytes before
  any size check; simple-websocket offers no bound on inflation);
- binary attachments: at most ``max_attachments`` announced per event (each then limited by the message size);
- a packet that does not parse: the client gets ``bad_packet`` and its connection is closed at once (a Socket.IO
  client never sends one), instead of an HTTP 500 and a seat held until the ping timeout;
- a second CONNECT on a namespace, and events named ``connect``/``disconnect``: rejected (they re-ran the
  connect handler);
- an event with more than one argument: rejected with ``bad_event`` (our handlers take one), counted by the
  session's rate limit;
- a WebSocket's inbound bytes: paced to ``read_bytes_per_s`` after a burst (``MeteredSocket``), and any message
  a client sends answers an outstanding ping (its pong may be queued behind that paced data);
- a client that opens an engine.io connection but never joins a namespace is closed after ``join_timeout_s``
  (one thread keeps every such deadline), and engine.io pings nobody before it joins: an unjoined connection
  costs no thread of its own;
- a polling handshake (``GET /socket.io/?EIO=4&transport=polling`` without a sid) needs the access token and a
  place under the connection caps, like a TCP connection (``bind``). Its session outlives each HTTP request, so
  it holds that place itself: idle (the first to make room) until it joins a namespace, busy after, and given
  back when it moves onto a WebSocket (whose connection is counted instead) or ends. A WebSocket handshake needs
  no more: its connection is counted for its life, and the token is checked when it joins (it may come in the
  Socket.IO ``auth``, which a polling handshake cannot carry).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import io
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from engineio.payload import Payload
from werkzeug.wrappers import Request

from vita.web.http.access import AccessGuard
from vita.web.http.bounded_websocket import BoundedWebSocket
from vita.web.http.connections import ConnectionTable

log = logging.getLogger("vita.socket")

RESERVED_EVENTS = frozenset({"connect", "disconnect", "connect_error"})
_BINARY_HEADER = re.compile(r"^[56](\d+)-")
_SEAT = "vita.polling_seat"  # environ key: a polling handshake's admitted place, handed to on_eio_connect


class PollingSeat:
    """A polling session's place in the connection table, and what eviction shuts down: the engine.io session
    (once it has an id; evicted before that, it is refused when engine.io opens it)."""

    def __init__(self, close: Callable[[str], None]):
        self._close = close
        self._lock = threading.Lock()
        self._shut = False
        self.eio_sid: str | None = None

    def opened(self, eio_sid: str) -> bool:
        with self._lock:
            if not self._shut:
                self.eio_sid = eio_sid
            return not self._shut

    def shutdown(self) -> None:
        with self._lock:
            self._shut = True
            eio_sid = self.eio_sid
        if eio_sid is not None:
            self._close(eio_sid)


class SocketGuard:
    """on_bad_event(sid, code, message) reports a rejected event to the session (rate-limited there)."""

    def __init__(self, server: Any, on_bad_event: Callable[[str, str, str], None], max_attachments: int,
                 join_timeout_s: float = 10.0, read_bytes_per_s: float = 0.0, read_messages_per_s: float = 0.0):
        self.server = server
        self.read_bytes_per_s = read_bytes_per_s  # each WebSocket's inbound bytes (0: unpaced); see MeteredSocket
        self.read_messages_per_s = read_messages_per_s  # and its messages (0: unpaced); see BoundedWebSocket
        self.eio = server.eio
        self.on_bad_event = on_bad_event
        self.max_attachments = max_attachments
        self.join_timeout_s = join_timeout_s
        self.connections: ConnectionTable | None = None  # see bind()
        self.access: AccessGuard | None = None
        self._lock = threading.Lock()
        self._seats: dict[str, tuple[int, str]] = {}  # counted polling session -> (table key, address)
        self._unjoined: set[str] = set()  # engine.io sessions in no namespace yet: no pings, a deadline
        self._deadlines: collections.deque[tuple[float, str]] = collections.deque()  # in order: one timeout
        self._deadline_added = threading.Condition(self._lock)
        self._stopping = False

    def install(self) -> None:
        eio = self.eio
        eio._async = {**eio._async, "websocket": functools.partial(BoundedWebSocket, guard=self)}
        self._handle_message = self.server._handle_eio_message
        self._handle_event = self.server._handle_event
        self._handle_eio_connect = self.server._handle_eio_connect
        self._handle_eio_disconnect = self.server._handle_eio_disconnect
        eio.on("message", self.on_message)
        eio.on("connect", self.on_eio_connect)
        eio.on("disconnect", self.on_eio_disconnect)
        self.server._handle_event = self.on_event  # called by the message handler for EVENT and BINARY_EVENT
        self._handle_request = eio.handle_request
        eio.handle_request = self.handle_request
        threading.Thread(target=self._close_at_deadlines, name="engineio-join-deadlines", daemon=True).start()

    def bind(self, connections: ConnectionTable, access: AccessGuard) -> None:
        """From now on a polling handshake needs `access`'s token and a place in `connections` (the HTTP
        server's table, which exists only once the server does)."""
        self.connections = connections
        self.access = access

    def counts(self) -> dict[str, int]:
        """Counted polling sessions, and engine.io sessions not yet in a namespace (for /health)."""
        with self._lock:
            return {"polling": len(self._seats), "unjoined": len(self._unjoined)}

    # --- engine.io ---------------------------------------------------------------------------------------
    def handle_request(self, environ: dict, start_response: Callable) -> Any:
        """A polling handshake: checked and counted (`_polling_handshake`). A polling POST whose payload does
        not parse: 400 and the connection closed (engine.io logged a traceback, answered 200 and kept the
        session until its ping timeout)."""
        query = parse_qs(environ.get("QUERY_STRING", ""))
        sid = query.get("sid", [None])[0]
        if environ.get("REQUEST_METHOD") == "GET" and sid is None \
                and query.get("transport", ["polling"])[0] == "polling":
            return self._polling_handshake(environ, start_response)
        if environ.get("REQUEST_METHOD") == "POST":
            body = self._polled_body(environ)
            if body is None:
                log.debug("malformed engine.io payload (session %s)", sid)
                if sid:
                    self.close(sid)
                start_response("400 BAD REQUEST", [("Content-Type", "text/plain")])
                return [b"malformed packet"]
            environ["wsgi.input"] = io.BytesIO(body)
        return self._handle_request(environ, start_response)

    def _polled_body(self, environ: dict) -> bytes | None:
        """The POST body if it is a payload engine.io can parse, else None (too long ones pass: engine.io
        refuses them itself)."""
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return None
        if length > self.eio.max_http_buffer_size:
            return b""
        body = environ["wsgi.input"].read(length)
        try:
            Payload(encoded_payload=body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, KeyError, IndexError, TypeError):
            return None
        return body

    def _polling_handshake(self, environ: dict, start_response: Callable) -> Any:
        """A polling session outlives the HTTP request that opens it (no connection of its own is counted while
        engine.io keeps it), so the token and the caps are checked here: a flood of handshakes without a token
        costs a 401 each, and with one, only as many sessions as the caps allow (the oldest unjoined make room)."""
        if self.access is not None and not self.access.allows(Request(environ)):
            log.debug("refused a polling handshake from %s: no valid access token", environ.get("REMOTE_ADDR"))
            start_response("401 UNAUTHORIZED", [("Content-Type", "text/plain")])
            return [b"This assistant needs an access token."]
        if self.connections is None:
            return self._handle_request(environ, start_response)
        address = environ.get("REMOTE_ADDR", "")
        seat = PollingSeat(self.close)
        admission = self.connections.admit(address, time.monotonic(), seat)
        for evicted in admission.evicted:
            evicted.handle.shutdown()
        if not admission.admitted:
            log.warning("refused a polling session from %s (%s)", address, admission.reason)
            start_response("503 SERVICE UNAVAILABLE", [("Content-Type", "text/plain")])
            return [b"Too many connections."]
        environ[_SEAT] = (admission.key, address, seat)
        try:
            return self._handle_request(environ, start_response)
        finally:
            if seat.eio_sid is None:  # engine.io refused it (origin, version) or it was evicted while opening
                self.connections.release(admission.key)

    def on_eio_connect(self, eio_sid: str, environ: dict) -> Any:
        claim = environ.get(_SEAT)
        if claim is not None:
            key, address, seat = claim
            if not seat.opened(eio_sid):
                return False  # its place went to a newcomer meanwhile
            with self._lock:
                self._seats[eio_sid] = (key, address)
        result = self._handle_eio_connect(eio_sid, environ)
        eio_socket = self.eio.sockets.get(eio_sid)
        if eio_socket is not None:
            eio_socket.last_ping = None  # engine.io's schedule_ping, next, then starts no ping thread (see _joined)
        with self._lock:
            self._unjoined.add(eio_sid)
            self._deadlines.append((time.monotonic() + self.join_timeout_s, eio_sid))
            self._deadline_added.notify()
        return result

    def on_eio_disconnect(self, eio_sid: str, reason: Any) -> Any:
        try:
            return self._handle_eio_disconnect(eio_sid, reason)
        finally:
            self._release(eio_sid)

    def _joined(self, eio_sid: str) -> None:
        """A session joined a namespace: its place (if polling) is busy from now on, never evicted for a
        newcomer, and engine.io's pings start (the client's own ping clock runs from the handshake, so it
        must join within ping_interval + ping_timeout; the deadline is shorter)."""
        with self._lock:
            self._unjoined.discard(eio_sid)
            seat = self._seats.get(eio_sid)
        if seat is not None and self.connections is not None:
            self.connections.set_busy(seat[0], True)
        eio_socket = self.eio.sockets.get(eio_sid)
        if eio_socket is not None and not eio_socket.closed:
            eio_socket.last_ping = time.time()
            eio_socket.schedule_ping()

    def moving_to_websocket(self, eio_sid: str) -> tuple[int, str] | None:
        """A polling session's WebSocket upgrade arrived: that connection is counted (busy, for its life), so
        the session gives its own place back. Returns the place it had, for `websocket_ended`."""
        with self._lock:
            seat = self._seats.pop(eio_sid, None)
        if seat is not None and self.connections is not None:
            self.connections.release(seat[0])
        return seat

    def websocket_ended(self, eio_sid: str, seat: tuple[int, str]) -> None:
        """The upgrade's WebSocket ended. If the upgrade failed and the session polls on, it takes a place
        again (or, with none to be had, it is closed): no polling session goes uncounted."""
        eio_socket = self.eio.sockets.get(eio_sid)
        if eio_socket is None or eio_socket.closed or eio_socket.upgraded or self.connections is None:
            return
        again = PollingSeat(self.close)
        admission = self.connections.admit(seat[1], time.monotonic(), again)
        for evicted in admission.evicted:
            evicted.handle.shutdown()
        if not admission.admitted or not again.opened(eio_sid):  # none to be had, or already given to a newcomer
            self.close(eio_sid)
            return
        with self._lock:
            self._seats[eio_sid] = (admission.key, seat[1])
            joined = eio_sid not in self._unjoined
        self.connections.set_busy(admission.key, joined)
        if not self._open(eio_sid):  # closed meanwhile: its disconnect may have come before this place
            self._release(eio_sid)

    def _release(self, eio_sid: str) -> None:
        with self._lock:
            self._unjoined.discard(eio_sid)
            seat = self._seats.pop(eio_sid, None)
        if seat is not None and self.connections is not None:
            self.connections.release(seat[0])

    def _open(self, eio_sid: str) -> bool:
        eio_socket = self.eio.sockets.get(eio_sid)
        return eio_socket is not None and not eio_socket.closed

    def _close_at_deadlines(self) -> None:
        """One thread for every session's join deadline (a timer thread each let a flood of handshakes start
        threads without bound). Deadlines are all join_timeout_s long, so they come due in the order added."""
        while True:
            with self._lock:
                while True:
                    if self._stopping:
                        return
                    if not self._deadlines:
                        self._deadline_added.wait()
                        continue
                    due_at, eio_sid = self._deadlines[0]
                    left = due_at - time.monotonic()
                    if left <= 0:
                        break
                    self._deadline_added.wait(left)
                self._deadlines.popleft()
                unjoined = eio_sid in self._unjoined
            if unjoined:
                self._close_if_not_joined(eio_sid)

    def stop(self) -> None:
        """End the join-deadline thread (the server is stopping)."""
        with self._lock:
            self._stopping = True
            self._deadline_added.notify_all()

    def _close_if_not_joined(self, eio_sid: str) -> None:
        if eio_sid in self.eio.sockets and not self._sid(eio_sid):
            log.debug("closing %s: joined no namespace in %g s", eio_sid, self.join_timeout_s)
            self.close(eio_sid)

    # --- Socket.IO packets -------------------------------------------------------------------------------
    def on_message(self, eio_sid: str, data: Any) -> None:
        self._heard_from(eio_sid)
        if isinstance(data, str) and eio_sid not in self.server._binary_packet:
            if data[:1] == "0" and self._sid(eio_sid):
                self._reject(eio_sid, "bad_event", "already connected: a second connect is ignored")
                return
            binary = _BINARY_HEADER.match(data)
            if binary and int(binary.group(1)) > self.max_attachments:
                self._reject(eio_sid, "bad_packet", f"at most {self.max_attachments} binary attachments per event")
                self.close(eio_sid)
                return
        try:
            self._handle_message(eio_sid, data)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            log.debug("malformed Socket.IO packet from %s: %s", eio_sid, exc)
            self._reject(eio_sid, "bad_packet", "malformed Socket.IO packet; closing the connection")
            self.close(eio_sid)
            return
        if eio_sid in self._unjoined and self._sid(eio_sid):
            self._joined(eio_sid)

    def on_event(self, eio_sid: str, namespace: str | None, id: Any, data: Any) -> None:
        name = data[0] if isinstance(data, list) and data else None
        if not isinstance(name, str) or name in RESERVED_EVENTS:
            self._reject(eio_sid, "bad_event", f"{name!r} is not an event a client may send")
            return
        if len(data) > 2:
            self._reject(eio_sid, "bad_event", f"{name} takes one argument, got {len(data) - 1}")
            return
        try:
            self._handle_event(eio_sid, namespace, id, data)
        except Exception:  # a bug of ours in a handler: logged, and never mistaken for a malformed packet
            log.exception("the %r handler failed", name)

    # --- helpers -----------------------------------------------------------------------------------------
    def _heard_from(self, eio_sid: str) -> None:
        """Whatever a client sends shows it is there, so it answers an outstanding ping as its pong would.
        engine.io waited for the pong alone: a client sending faster than it is read (``read_bytes_per_s``, or
        handlers slowed by load) has its pong queued behind its own data, and a live session was closed for a
        ping timeout while its messages were still being read."""
        eio_socket = self.eio.sockets.get(eio_sid)
        # A WebSocket only: its one reader reads pongs and messages in order (two polling POSTs at once could set
        # the ping again just after a pong cleared it), and reads are paced there alone.
        if eio_socket is not None and eio_socket.upgraded and eio_socket.last_ping:
            eio_socket.last_ping = time.time()

    def _sid(self, eio_sid: str) -> str | None:
        return self.server.manager.sid_from_eio_sid(eio_sid, "/")

    def _reject(self, eio_sid: str, code: str, message: str) -> None:
        sid = self._sid(eio_sid)
        if sid is not None:
            with contextlib.suppress(Exception):
                self.on_bad_event(sid, code, message)

    def close(self, eio_sid: str) -> None:
        """Close a client's engine.io connection from any thread, never waiting on the client: engine.io's own
        disconnect() waits until the CLOSE packet is written, which is forever for a polling client that never
        polls again, or for a WebSocket whose writer has already ended (a VAD thread closing an idle session hung
        there)."""
        socket = self.eio.sockets.pop(eio_sid, None)
        if socket is not None:
            with contextlib.suppress(Exception):
                socket.close(wait=False, reason=self.eio.reason.SERVER_DISCONNECT)
