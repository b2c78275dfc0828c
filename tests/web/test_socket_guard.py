"""The socket guard: its pure parts, and engine.io liveness on the front's real socket stack around a one-event
app (the rest is exercised against a live server in test_hardening)."""

from __future__ import annotations

import socket
import time

import pytest
import websocket

from tests.harness.client import wait_until
from tests.web.small_front import small_front
from vita.web.http.bounded_websocket import BoundedWebSocket, MeteredSocket, PlainSocket

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


class Flood:
    """A socket whose peer always has `chunk` bytes ready (a client sending as fast as its link allows)."""

    def __init__(self, chunk: int):
        self.chunk = chunk
        self.closed = False

    def recv(self, size: int) -> bytes:
        return bytes(min(size, self.chunk))

    def close(self) -> None:
        self.closed = True

    def shutdown(self, how: int) -> None:
        self.closed = True


def test_a_flood_is_read_no_faster_than_the_rate_after_its_burst():
    sock = MeteredSocket(Flood(10_000), bytes_per_s=1_000_000, burst=100_000)
    started = time.monotonic()
    got = sum(len(sock.recv(65536)) for _ in range(40))  # 400 kB: the burst, then 300 kB at 1 MB/s
    assert got == 400_000
    assert time.monotonic() - started >= 0.29


def test_a_client_within_its_rate_is_never_held_and_the_socket_passes_through():
    sock = MeteredSocket(Flood(1_000), bytes_per_s=1_000_000, burst=100_000)
    started = time.monotonic()
    for _ in range(50):  # 50 kB, within the burst
        sock.recv(4096)
    assert time.monotonic() - started < 0.05
    sock.close()
    assert sock._sock.closed  # everything but recv is the socket's own


def test_a_held_socket_reads_nothing_until_its_hold_is_over():
    sock = MeteredSocket(Flood(100), bytes_per_s=1_000_000, burst=100_000)
    sock.hold(0.2)
    started = time.monotonic()
    sock.recv(100)
    assert time.monotonic() - started >= 0.19
    sock.hold(30.0)
    sock.close()  # a held reader of a connection that is closed does not sleep out its hold
    started = time.monotonic()
    sock.recv(100)
    assert time.monotonic() - started < 0.1 and sock._sock.closed


def test_a_read_with_a_timeout_returns_nothing_while_held_and_reads_once_the_hold_is_over():
    server, client = socket.socketpair()
    sock = MeteredSocket(server, bytes_per_s=1_000_000, burst=100_000)
    client.sendall(b"ready")
    sock.hold(30.0)
    started = time.monotonic()
    assert sock.recv_within(100, 0.1) is None  # still held: the reader looks again (its connection may be closed)
    assert 0.09 <= time.monotonic() - started < 1
    sock.hold_until = 0.0
    assert sock.recv_within(100, 0.1) == b"ready"
    assert sock.recv_within(100, 0.05) is None  # nothing sent
    sock.hold(30.0)
    sock.shutdown(socket.SHUT_RDWR)  # ends the hold at once: the read goes on to see the end of the stream
    started = time.monotonic()
    assert sock.recv_within(100, 5.0) == b""
    assert time.monotonic() - started < 1.0  # far from the 30 s hold and the 5 s timeout
    sock.close()
    client.close()


def test_a_plain_sockets_send_goes_out_whole_or_fails():
    server, client = socket.socketpair()
    sock = PlainSocket(server, write_timeout_s=1.0)
    try:
        assert sock.send(b"frame") == 5
        assert client.recv(100) == b"frame"
        started = time.monotonic()
        with pytest.raises(OSError):  # the client reads nothing: no partial count returned as if all went out
            sock.send(b"x" * 50_000_000)
        assert time.monotonic() - started < 10
    finally:
        server.close()
        client.close()


class Messages:
    """simple-websocket's side of a connection whose client always has another small message ready."""

    connected = True

    def receive(self, timeout: float | None = None) -> str:
        return '42["rtc_candidate",{}]'


def test_messages_over_the_connections_rate_hold_its_reader_back():
    class Guard:
        read_messages_per_s = 50.0

    class Server:
        max_http_buffer_size = 1 << 20

    socket = BoundedWebSocket(lambda ws: None, Server(), Guard())
    socket.ws = Messages()
    socket.metered = MeteredSocket(Flood(100), bytes_per_s=1_000_000, burst=100_000)
    for _ in range(50):  # the burst: one second's worth
        assert socket.wait()
    assert socket.metered.hold_until < time.monotonic()  # not held yet
    for _ in range(25):  # half a second's worth more: the reader pauses that long before its next read
        socket.wait()
    assert socket.metered.hold_until - time.monotonic() == pytest.approx(0.5, abs=0.1)


PING_S = 2.0  # engine.io's ping interval and timeout on the small front below (the front's are 10 s)


@pytest.fixture
def front():
    """Named `front` so that the suite runs it after the in-process engines (conftest: Flask in this process)."""
    with small_front("guard-token-123", ping_s=PING_S) as running:
        yield running


def test_a_client_that_keeps_sending_is_alive_though_its_pong_is_late(front):
    """A client sending faster than it is read has its pong queued behind its own data: what it sends answers
    the ping (engine.io alone closed such a session for a ping timeout, its events still being read). A client
    that stops sending and never answers is still closed."""
    ws = websocket.create_connection(front.url.replace("http", "ws") + "/socket.io/?EIO=4&transport=websocket",
                                     timeout=5)
    try:
        assert ws.recv().startswith("0{")  # engine.io's OPEN
        ws.send("40")
        assert ws.recv().startswith("40{")  # joined "/": engine.io's pings start, and none is answered here
        (eio_sid,) = front.eio.sockets
        sending_until = time.monotonic() + 3 * PING_S
        while time.monotonic() < sending_until:
            ws.send('42["echo","still here"]')
            time.sleep(0.1)
            assert eio_sid in front.eio.sockets and not front.eio.sockets[eio_sid].closed
        assert front.eio.sockets[eio_sid].last_ping  # a ping went unanswered all along
        assert wait_until(lambda: eio_sid not in front.eio.sockets or front.eio.sockets[eio_sid].closed,
                          timeout=4 * PING_S + 5)
    finally:
        ws.close()
