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
- a client that opens an engine.io connection but never joins a namespace is closed after ``join_timeout_s``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import simple_websocket
from engineio.async_drivers._websocket_wsgi import SimpleWebSocketWSGI
from engineio.payload import Payload

from vita.shared_tls import SharedTlsSocket

log = logging.getLogger("vita.socket")

RESERVED_EVENTS = frozenset({"connect", "disconnect", "connect_error"})
_BINARY_HEADER = re.compile(r"^[56](\d+)-")


class BoundedWebSocket(SimpleWebSocketWSGI):
    """engine.io's threading WebSocket with a message size limit and without compression.

    A message over the limit gets an ``error`` event (``message_too_big``), then the connection is closed with
    WebSocket code 1009. Beyond ``HARD_LIMIT_FACTOR`` times the limit, simple-websocket stops reading at once
    and closes with 1009 alone, so no client can make the front buffer more than that.
    """

    HARD_LIMIT_FACTOR = 4
    CLOSE_REPLY_S = 1.0

    def __init__(self, handler: Callable, server: Any, **kwargs: Any):
        self.limit = server.max_http_buffer_size
        super().__init__(handler, server, max_message_size=self.limit * self.HARD_LIMIT_FACTOR, **kwargs)

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        environ.pop("HTTP_SEC_WEBSOCKET_EXTENSIONS", None)  # offer no extension: wsproto then accepts none
        if isinstance(environ.get("werkzeug.socket"), ssl.SSLSocket):  # a reader and a writer thread share it
            environ["werkzeug.socket"] = SharedTlsSocket(environ["werkzeug.socket"])
        try:
            return super().__call__(environ, start_response)
        finally:
            self._end_reader()

    def _end_reader(self) -> None:
        """simple-websocket's reader thread can still be inside a read on this socket when engine.io is done with
        it (waiting for the client's reply to our close). The HTTP server closes the socket next, and the OS
        gives that descriptor number to the next connection: a TLS read still in flight then takes bytes from,
        and sends alerts to, a stranger (a client's handshake failed with "unexpected message"). So the reader
        ends before anyone closes: the client has a moment to answer the close, then the stream is shut."""
        ws = getattr(self, "ws", None)
        reader = getattr(ws, "thread", None)
        if reader is None or reader is threading.current_thread():
            return
        reader.join(self.CLOSE_REPLY_S)
        if reader.is_alive():
            with contextlib.suppress(OSError):
                ws.sock.shutdown(socket.SHUT_RDWR)  # wakes the read; closing stays with the reader
            reader.join(self.CLOSE_REPLY_S)

    def wait(self) -> Any:
        # Wake up every second: when simple-websocket refuses a message over its limit it wakes the reader
        # before it marks the socket closed, and a reader waiting without a timeout then sleeps forever.
        while True:
            try:
                data = self.ws.receive(timeout=1.0)
            except simple_websocket.ConnectionClosed:
                return None
            if data is not None:
                break
            if not self.ws.connected:
                return None
        if len(data) > self.limit:
            error = {"code": "message_too_big", "message": f"A message may be at most {self.limit} bytes."}
            with contextlib.suppress(Exception):
                self.ws.send("42" + json.dumps(["error", error]))
                self.ws.close(reason=1009, message="Message is too big")
            log.debug("closed a WebSocket that sent %d bytes in one message", len(data))
            return None  # engine.io ends the connection
        return data


class SocketGuard:
    """on_bad_event(sid, code, message) reports a rejected event to the session (rate-limited there)."""

    def __init__(self, server: Any, on_bad_event: Callable[[str, str, str], None], max_attachments: int,
                 join_timeout_s: float = 10.0):
        self.server = server
        self.eio = server.eio
        self.on_bad_event = on_bad_event
        self.max_attachments = max_attachments
        self.join_timeout_s = join_timeout_s

    def install(self) -> None:
        eio = self.eio
        eio._async = {**eio._async, "websocket": BoundedWebSocket}
        self._handle_message = self.server._handle_eio_message
        self._handle_event = self.server._handle_event
        self._handle_eio_connect = self.server._handle_eio_connect
        eio.on("message", self.on_message)
        eio.on("connect", self.on_eio_connect)
        self.server._handle_event = self.on_event  # called by the message handler for EVENT and BINARY_EVENT
        self._handle_request = eio.handle_request
        eio.handle_request = self.handle_request

    # --- engine.io ---------------------------------------------------------------------------------------
    def handle_request(self, environ: dict, start_response: Callable) -> Any:
        """A polling POST whose payload does not parse: 400 and the connection closed (engine.io logged a
        traceback, answered 200 and kept the session until its ping timeout)."""
        if environ.get("REQUEST_METHOD") == "POST":
            sid = parse_qs(environ.get("QUERY_STRING", "")).get("sid", [None])[0]
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

    def on_eio_connect(self, eio_sid: str, environ: dict) -> Any:
        result = self._handle_eio_connect(eio_sid, environ)
        timer = threading.Timer(self.join_timeout_s, self._close_if_not_joined, args=(eio_sid,))
        timer.daemon = True
        timer.start()
        return result

    def _close_if_not_joined(self, eio_sid: str) -> None:
        if eio_sid in self.eio.sockets and not self._sid(eio_sid):
            log.debug("closing %s: joined no namespace in %g s", eio_sid, self.join_timeout_s)
            self.close(eio_sid)

    # --- Socket.IO packets -------------------------------------------------------------------------------
    def on_message(self, eio_sid: str, data: Any) -> None:
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
