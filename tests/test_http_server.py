"""The front's HTTPS server on a real running server: connections that never finish (or never start) their TLS
handshake do not hold up anyone else (issue: werkzeug did every handshake inside its accept loop)."""

from __future__ import annotations

import contextlib
import socket
import time
from urllib.parse import urlparse

from tests.conftest import wait_no_sessions
from tests.helpers import RecordingClient

# The first bytes of a TLS ClientHello record, then nothing: a client that stalls mid-handshake.
PARTIAL_CLIENT_HELLO = bytes.fromhex("160301020001")


def test_idle_and_half_handshaken_sockets_do_not_block_health_or_new_sessions(server):
    address = urlparse(server.url)
    stalled = []
    try:
        for i in range(20):
            sock = socket.create_connection((address.hostname, address.port), timeout=5)
            if i % 2:
                sock.sendall(PARTIAL_CLIENT_HELLO)
            stalled.append(sock)
        started = time.monotonic()
        assert server.get("/health").status_code == 200
        assert time.monotonic() - started < 1.0
        wait_no_sessions(server)
        client = RecordingClient(server.url).connect()
        try:
            assert client.wait_event("server_status", 5)
        finally:
            client.close()
    finally:
        for sock in stalled:
            with contextlib.suppress(OSError):
                sock.close()
