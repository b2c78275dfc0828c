"""The front's HTTPS server on a real running server: connections that never finish (or never start) their TLS
handshake do not hold up anyone else (issue: werkzeug did every handshake inside its accept loop)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from urllib.parse import urlparse

import pytest

from tests.harness.client import RecordingClient, wait_until
from tests.harness.server import wait_no_sessions
from vita.config import LimitsConfig
from vita.web.http.server import FrontServer
from vita.web.http.tls import ensure_self_signed, server_context

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
        assert time.monotonic() - started < 3.0  # not held by them (a stuck handshake holds for handshake_timeout_s)
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


@pytest.fixture
def tiny_tls_server(tmp_path):
    """The front's real HTTPS server around a one-route WSGI app, with a per-address cap of 3 and a long
    handshake clock: only eviction, not a timeout, can close an idle connection during a test."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    cert, key = ensure_self_signed(tmp_path, "127.0.0.1")
    limits = LimitsConfig(max_connections=8, max_connections_per_ip=3, handshake_timeout_s=60.0)

    def app(environ, start_response):  # answers with the connection's TCP_NODELAY, as the server set it
        nodelay = environ["werkzeug.socket"].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"nodelay=%d" % bool(nodelay)]

    server = FrontServer("127.0.0.1", port, app, server_context(cert, key), fd=listener.fileno(), limits=limits)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)  # shut down in 50 ms
    thread.start()
    try:
        yield server, port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _closed_by_peer(sock: socket.socket, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.fast  # the front's HTTPS server in this process around a one-route app: no model
@pytest.mark.parametrize("stall", ["before_tls", "mid_handshake"])
def test_an_idle_connection_in_the_way_is_really_closed(tiny_tls_server, stall):
    """At the per-address cap a newcomer gets in, and the oldest idle connection is closed, not just forgotten
    (TLS wrapping detaches the TCP socket the cap used to shut down, which left the connection open)."""
    server, port = tiny_tls_server
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]
    try:
        if stall == "mid_handshake":
            for sock in idle:
                sock.sendall(PARTIAL_CLIENT_HELLO)
        assert wait_until(lambda: server.connections.counts()["open"] == 3)
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert tls.recv(4096).startswith(b"HTTP/1.1 200")
        assert _closed_by_peer(idle[0], 5.0)
        assert not _closed_by_peer(idle[2], 0.2)  # only as many as needed make room
    finally:
        for sock in idle:
            sock.close()


@pytest.mark.fast
def test_responses_are_not_held_back_for_the_clients_ack(tiny_tls_server):
    """TCP_NODELAY on every connection: without it the second small write of a response (or an event right after
    another) waits for the client's delayed ACK, 40 ms on Linux."""
    _, port = tiny_tls_server
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        response = b""
        while chunk := tls.recv(4096):
            response += chunk
    assert response.startswith(b"HTTP/1.1 200") and b"\r\nnodelay=1\r\n" in response, response
