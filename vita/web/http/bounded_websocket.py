"""A WebSocket that the front can afford: engine.io's threading WebSocket with a message size limit, no
compression, and reads paced in bytes and messages (``MeteredSocket``), so a flood costs the front what the limits
allow, not what the client's link carries. Installed by ``SocketGuard`` (vita/web/http/socket_guard.py) and used by the
Realtime door (vita/web/realtime/route.py)."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import parse_qs, parse_qsl, urlencode

import simple_websocket
from engineio.async_drivers._websocket_wsgi import SimpleWebSocketWSGI

from vita.rate_budget import RateBudget
from vita.web.http.inline_websocket import InlineWebSocket, read_within
from vita.web.http.shared_tls import SharedTlsSocket

log = logging.getLogger("vita.socket")

SEND_TIMEOUT_S = 30.0  # a send to a client that reads nothing for this long fails (TLS or not)


class WebSocketLimits(Protocol):
    """What a WebSocket is read under, and the ledger of polling sessions moving onto one (``SocketGuard``)."""

    read_bytes_per_s: float
    read_messages_per_s: float

    def moving_to_websocket(self, eio_sid: str) -> tuple[int, str] | None: ...

    def websocket_ended(self, eio_sid: str, seat: tuple[int, str]) -> None: ...


class MeteredSocket:
    """A WebSocket's socket whose reads are paced to a byte rate: once a client has sent more than its burst, the
    thread reading it sleeps until the rate has paid for what came, and TCP backs the client off. A flood then costs
    the front the work of `bytes_per_s`, not whatever the client's link carries (a JSON audio flood took 0.8 of
    the two cores in TLS, WebSocket framing and packet parsing before any of it was refused)."""

    def __init__(self, sock: Any, bytes_per_s: float, burst: float):
        self._sock = sock
        self.budget = RateBudget(bytes_per_s, burst, time.monotonic())
        self.hold_until = 0.0  # set by the socket's consumer when it is over its message rate (see hold)
        self._released = threading.Event()  # a shutdown or close ends a hold at once

    def hold(self, seconds: float) -> None:
        """Read nothing more for `seconds`: the messages already read are over the connection's message rate."""
        self.hold_until = max(self.hold_until, time.monotonic() + seconds)

    def recv(self, size: int) -> bytes:
        return self.recv_within(size, None)  # (never None: no time limit)

    def recv_within(self, size: int, timeout: float | None) -> bytes | None:
        """As ``read_within`` (None: nothing within `timeout`, or still held then)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        held = self.hold_until - time.monotonic()
        if held > 0 and not self._released.is_set():
            if deadline is not None and held > timeout:
                if not self._released.wait(timeout):
                    return None
            else:
                self._released.wait(held)
        data = read_within(self._sock, size, None if deadline is None else max(0.0, deadline - time.monotonic()))
        if data:
            wait = self.budget.spend(len(data), time.monotonic())
            if wait:
                time.sleep(wait)
        return data

    def shutdown(self, how: int) -> None:
        self._released.set()
        self._sock.shutdown(how)

    def close(self) -> None:
        self._released.set()
        self._sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class PlainSocket:
    """A plain (non-TLS) WebSocket's socket whose sends go out whole, one at a time, or fail. A client that stops
    reading must not block a sender for ever (a writer, or the handler answering a ping): a send that makes no
    progress for `write_timeout_s` fails, and the connection ends. (The socket's send deadline alone would return
    a partial count, which simple-websocket does not check: the rest of a frame would be lost, and the next frame
    sent into its middle.)"""

    def __init__(self, sock: socket.socket, write_timeout_s: float):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(write_timeout_s), 0))
        self._sock = sock
        self._writing = threading.Lock()

    def send(self, data: bytes) -> int:
        with self._writing:
            self._sock.sendall(data)
        return len(data)

    sendall = send

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class BoundedWebSocket(SimpleWebSocketWSGI):
    """engine.io's threading WebSocket with a message size limit and without compression.

    A message over the limit gets an ``error`` event (``message_too_big``), then the connection is closed with
    WebSocket code 1009. Beyond ``HARD_LIMIT_FACTOR`` times the limit, simple-websocket stops reading at once
    and closes with 1009 alone, so no client can make the front buffer more than that.
    """

    HARD_LIMIT_FACTOR = 4
    CLOSE_REPLY_S = 1.0

    def __init__(self, handler: Callable, server: Any, guard: WebSocketLimits | None = None, **kwargs: Any):
        self.limit = server.max_http_buffer_size
        self.guard = guard
        self.metered: MeteredSocket | None = None
        rate = guard.read_messages_per_s if guard is not None else 0.0
        # Messages, whatever their size: small ones cost parsing each (an ICE candidate flood took 0.6 of the two
        # cores at the byte rate). Over the rate, the reader holds off reading (TCP backs the client off) instead
        # of parsing what would be dropped.
        self.messages = RateBudget(rate, rate, time.monotonic()) if rate else None
        super().__init__(handler, server, max_message_size=self.limit * self.HARD_LIMIT_FACTOR, **kwargs)

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        environ.pop("HTTP_SEC_WEBSOCKET_EXTENSIONS", None)  # offer no extension: wsproto then accepts none
        raw = environ.get("werkzeug.socket")
        if isinstance(raw, ssl.SSLSocket):  # its handler reads, writer threads send
            environ["werkzeug.socket"] = SharedTlsSocket(raw, write_timeout_s=SEND_TIMEOUT_S)
        elif isinstance(raw, socket.socket):
            environ["werkzeug.socket"] = PlainSocket(raw, SEND_TIMEOUT_S)
        if self.guard is not None and self.guard.read_bytes_per_s and environ.get("werkzeug.socket") is not None:
            rate = self.guard.read_bytes_per_s
            self.metered = MeteredSocket(environ["werkzeug.socket"], rate, max(2 * rate, self.limit))
            environ["werkzeug.socket"] = self.metered
        # a polling session moving onto this WebSocket
        upgrading = parse_qs(environ.get("QUERY_STRING", "")).get("sid", [None])[0]
        seat = self.guard.moving_to_websocket(upgrading) if self.guard and upgrading else None
        try:
            self.ws = InlineWebSocket(environ, **self.server_args)
            result = self.app(self)
            if self.ws.mode == "werkzeug":  # as engine.io's threading WebSocket ends it: the server drops it
                raise ConnectionError()
            return result
        finally:
            try:
                ws = getattr(self, "ws", None)
                if ws is not None:
                    ws.finish(self.CLOSE_REPLY_S)
            finally:
                if seat is not None:
                    self.guard.websocket_ended(upgrading, seat)

    def wait(self) -> Any:
        # Look up every second: another thread may have closed the connection (engine.io's writer, a Realtime
        # session's idle timeout) while the client stays quiet.
        while True:
            try:
                data = self.ws.receive(timeout=1.0)
            except simple_websocket.ConnectionClosed:
                return None
            if data is not None:
                break
            if not self.ws.connected:
                return None
        if self.messages is not None and self.metered is not None:
            debt = self.messages.spend(1.0, time.monotonic())
            if debt:
                self.metered.hold(debt)
        if len(data) > self.limit:
            with contextlib.suppress(Exception):
                self.ws.send(self.too_big_notice())
                self.ws.close(reason=1009, message="Message is too big")
            log.debug("closed a WebSocket that sent %d bytes in one message", len(data))
            return None  # the connection ends
        return data

    def cut(self) -> None:
        """Shut the connection's socket at once: a client that stopped reading (a close would wait on the same
        stalled writes). Its reader then wakes and ends the session."""
        with contextlib.suppress(Exception):
            self.ws.sock.shutdown(socket.SHUT_RDWR)

    def too_big_notice(self) -> str:
        """What a client that sent too big a message is told before the close (here: a Socket.IO error event)."""
        error = {"code": "message_too_big", "message": f"A message may be at most {self.limit} bytes."}
        return "42" + json.dumps(["error", error])


class SizeLimit:
    """What BoundedWebSocket reads its size limit from (engine.io's server, for Socket.IO), for a door's own route."""

    def __init__(self, max_bytes: int):
        self.max_http_buffer_size = max_bytes


def door_request(environ: dict) -> dict:
    """A door's own WebSocket request (Realtime, a phone stream) with any `sid` left out of its query: it names no
    engine.io session, and BoundedWebSocket would take it for a polling client upgrading."""
    query = urlencode([(k, v) for k, v in parse_qsl(environ.get("QUERY_STRING", "")) if k != "sid"])
    return {**environ, "QUERY_STRING": query}
