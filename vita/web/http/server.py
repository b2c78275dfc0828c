"""The front's HTTP(S) server: werkzeug's threaded server, hardened for clients on the internet.

werkzeug's own server is a development server: it does each client's TLS handshake inside its accept loop (one
silent TCP connection stalled every user), has no read timeouts, no connection caps and names its versions.
Here, with the same thread-per-connection model that gunicorn's threaded worker uses (which Flask-SocketIO's
threading mode needs for its long-lived WebSockets):

- the listening socket stays plain; each connection does its TLS handshake in its own thread, with a time limit;
- a request's headers must arrive within ``handshake_timeout_s``; a request body that stalls for ``read_timeout_s``
  is closed; a WebSocket that stops answering engine.io's pings is closed by engine.io (10 s + 10 s);
- open connections are capped in all and per client address (``vita.web.http.connections``): idle ones make room, busy
  ones are never dropped for a newcomer;
- the ``Server`` header says ``vita``, without versions.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from typing import Any

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

from vita.web.http.connections import ConnectionTable

log = logging.getLogger("vita.http")
SERVER_NAME = "vita"


class FrontRequestHandler(WSGIRequestHandler):
    server: FrontServer

    @property
    def server_version(self) -> str:  # type: ignore[override]
        return SERVER_NAME

    def version_string(self) -> str:
        return SERVER_NAME

    def handle_one_request(self) -> None:
        # Waiting for a request line and headers: idle, and on the short clock.
        self.server.connections.set_busy(self._key, False)
        self.connection.settimeout(self.server.limits.handshake_timeout_s)
        super().handle_one_request()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok:  # a whole request's headers: busy until it is answered (a WebSocket, for its life)
            self.server.connections.set_busy(self._key, True)
            if self.headers.get("Upgrade", "").lower() == "websocket":
                # No read clock: the WebSocket's reader (its handler) waits as long as the client is quiet (over TLS the
                # socket is shared through vita.web.http.shared_tls, which sets its own). A silent WebSocket is
                # closed by engine.io's ping timeout instead (20 s).
                self.connection.settimeout(None)
            else:
                self.connection.settimeout(self.server.limits.read_timeout_s)
        return ok

    def run_wsgi(self) -> None:
        try:
            super().run_wsgi()
        finally:
            if self.headers.get("Upgrade", "").lower() == "websocket":
                # The socket carried WebSocket frames: never read what is left of them as a next HTTP request.
                self.close_connection = True

    @property
    def _key(self) -> int:
        return self.server.current_key()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if log.isEnabledFor(logging.DEBUG):
            super().log_request(code, size)

    def log_error(self, format: str, *args: Any) -> None:
        # Timeouts, resets and garbage requests from clients are their business, not an operator's error.
        log.debug("%s: " + format, self.address_string(), *args)


class ConnectionSocket:
    """What eviction shuts down: a connection's TCP socket and, once TLS wraps it, the TLS socket (wrapping
    detaches the TCP socket object, so shutting that one down afterwards would do nothing)."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._lock = threading.Lock()
        self._shut = False

    def replace(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self._shut:  # evicted while it was being wrapped
                self._shutdown()

    def shutdown(self) -> None:
        """Wakes the connection's thread from any read; never closes (only the owner thread closes, so the OS
        cannot hand the descriptor number to a new connection while this one's thread still uses it)."""
        with self._lock:
            self._shut = True
            self._shutdown()

    def _shutdown(self) -> None:
        with contextlib.suppress(OSError):  # the TCP socket's own shutdown: TLS state stays its owner's business
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)


class FrontServer(ThreadedWSGIServer):
    def __init__(self, host: str, port: int, app: Any, tls: ssl.SSLContext | None, fd: int, limits: Any,
                 uncapped: frozenset[str] = frozenset()):
        super().__init__(host, port, app, handler=FrontRequestHandler, ssl_context=None, fd=fd)
        self.ssl_context = tls  # werkzeug reads it for wsgi.url_scheme and its SSL error handling
        self.limits = limits
        self.connections = ConnectionTable(limits.max_connections, limits.max_connections_per_ip, uncapped)
        self._thread_state = threading.local()

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        """Runs in the accept loop: admit (closing the idle connections in the way) or refuse, never wait."""
        # Without it, a response's second write (or an event right after another) waits for the client's delayed
        # ACK: measured 40 ms added to every HTTP request, and to Socket.IO events sent back to back.
        with contextlib.suppress(OSError):
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        handle = ConnectionSocket(request)
        admission = self.connections.admit(client_address[0], time.monotonic(), handle)
        for evicted in admission.evicted:
            evicted.handle.shutdown()  # its thread sees the end of the stream and closes
        if not admission.admitted:
            log.warning("refused a connection from %s (%s)", client_address[0], admission.reason)
            with contextlib.suppress(OSError):
                request.close()
            return
        threading.Thread(target=self._serve_connection, args=(request, client_address, admission.key, handle),
                         name="http-connection", daemon=True).start()

    def current_key(self) -> int:
        """The connection table's key of the connection this thread serves."""
        return getattr(self._thread_state, "key", 0)

    def _serve_connection(self, request: socket.socket, client_address: Any, key: int,
                          handle: ConnectionSocket) -> None:
        self._thread_state.key = key
        try:
            self._finish(request, client_address, handle)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self.connections.release(key)

    def _finish(self, request: socket.socket, client_address: Any, handle: ConnectionSocket) -> None:
        """The TLS handshake happens here, in the connection's own thread, never in the accept loop."""
        if self.ssl_context is None:
            self.finish_request(request, client_address)
            return
        request.settimeout(self.limits.handshake_timeout_s)
        try:  # wrapping detaches `request`: from here on `connection` owns the descriptor
            connection = self.ssl_context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        except OSError as exc:
            log.debug("TLS with %s failed: %s", client_address[0], exc)
            return
        try:
            handle.replace(connection)  # a half-handshaken connection in the way can be evicted too
            try:
                connection.do_handshake()
            except OSError as exc:  # timed out, not TLS, closed or evicted mid-handshake
                log.debug("TLS handshake with %s failed: %s", client_address[0], exc)
                return
            self.finish_request(connection, client_address)
        finally:
            with contextlib.suppress(OSError):
                connection.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address[0], exc_info=True)
