"""The front's threaded HTTP(S) server: werkzeug's, with the TLS handshake moved out of the accept loop.

werkzeug wraps the listening socket, so ``accept()`` performs each client's TLS handshake before the next client
is accepted: one TCP connection that sends nothing (or stops mid-handshake) stalled every new connection and
``/health`` for everyone. Here the listening socket stays plain and each accepted connection does its handshake
in its own thread, with a time limit.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from typing import Any

from werkzeug.serving import ThreadedWSGIServer

log = logging.getLogger("vita.http")
HANDSHAKE_TIMEOUT_S = 10.0  # a client that has not finished its TLS handshake by then is dropped


class FrontServer(ThreadedWSGIServer):
    def __init__(self, host: str, port: int, app: Any, tls: ssl.SSLContext | None, fd: int):
        super().__init__(host, port, app, ssl_context=None, fd=fd)  # plain listening socket: accept never waits
        self.ssl_context = tls  # werkzeug reads it for wsgi.url_scheme and its SSL error handling

    def finish_request(self, request: socket.socket, client_address: Any) -> None:
        """Runs in the connection's own thread: the TLS handshake happens here, never in the accept loop."""
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            connection = self.ssl_context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as exc:  # timed out, not TLS, or closed mid-handshake
            log.debug("TLS handshake with %s failed: %s", client_address[0], exc)
            with contextlib.suppress(OSError):
                request.close()
            return
        connection.settimeout(None)
        try:
            super().finish_request(connection, client_address)
        finally:
            with contextlib.suppress(OSError):
                connection.close()
