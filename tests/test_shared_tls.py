"""SharedTlsSocket over a real TLS connection (a socket pair, no server): concurrent use stays correct and no
call holds up another while it waits for the client."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest

from vita.shared_tls import SharedTlsSocket
from vita.tls import ensure_self_signed, server_context

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return ensure_self_signed(tmp_path_factory.mktemp("tls"), "127.0.0.1")


@pytest.fixture
def tls_pair(certificate):
    """(server side wrapped in SharedTlsSocket, client-side SSLSocket)."""
    server_raw, client_raw = socket.socketpair()
    client_context = ssl.create_default_context()
    client_context.check_hostname, client_context.verify_mode = False, ssl.CERT_NONE
    wrapped: dict[str, ssl.SSLSocket] = {}
    handshake = threading.Thread(
        target=lambda: wrapped.setdefault("server", server_context(*certificate).wrap_socket(server_raw,
                                                                                           server_side=True)))
    handshake.start()
    client = client_context.wrap_socket(client_raw)
    handshake.join(5)
    shared = SharedTlsSocket(wrapped["server"], write_timeout_s=0.5)
    client.settimeout(5)
    yield shared, client
    client.close()
    shared.close()


def _recv_exactly(sock, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = sock.recv(min(65536, size - got))
        assert chunk, f"the stream ended after {got} of {size} bytes"
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def test_a_reader_waiting_on_a_quiet_client_does_not_hold_up_a_writer(tls_pair):
    shared, client = tls_pair
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(shared.recv(100)))
    reader.start()
    shared.send(b"hello")  # while the reader waits
    assert _recv_exactly(client, 5) == b"hello"
    assert reader.is_alive() and not received
    client.sendall(b"ping")
    reader.join(5)
    assert received == [b"ping"]


def test_traffic_both_ways_at_once_arrives_whole(tls_pair):
    """Two writer threads (engine.io's writer, simple-websocket's replies) and a reader, while a one-thread
    client first sends everything and only then reads: a writer waiting for the client must not stop the
    reader (they would wait on each other until the write timeout)."""
    shared, client = tls_pair
    shared.write_timeout_s = 10.0
    upload = bytes(range(256)) * 8192  # 2 MB
    messages = {f"{w}-{i:04d}".encode() * 512 for w in range(2) for i in range(150)}  # 3 MB in 300 messages
    by_writer = [sorted(m for m in messages if m.startswith(b"%d-" % w)) for w in range(2)]
    uploaded: list[bytes] = []

    def read_upload() -> None:
        uploaded.append(_recv_exactly(shared, len(upload)))

    threads = [threading.Thread(target=read_upload)]
    threads += [threading.Thread(target=lambda ms=ms: [shared.send(m) for m in ms]) for ms in by_writer]
    for thread in threads:
        thread.start()
    client.sendall(upload)
    size = len(next(iter(messages)))
    downloaded = _recv_exactly(client, size * len(messages))
    for thread in threads:
        thread.join(10)
    assert uploaded == [upload]
    assert {downloaded[i:i + size] for i in range(0, len(downloaded), size)} == messages


def test_shutdown_wakes_a_waiting_reader_with_the_end_of_the_stream(tls_pair):
    shared, _ = tls_pair
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(shared.recv(100)))
    reader.start()
    shared.shutdown(socket.SHUT_RDWR)
    reader.join(shared.WAIT_S + 2)
    assert received == [b""]


def test_a_client_that_takes_nothing_makes_send_time_out(tls_pair):
    shared, _ = tls_pair  # the client never reads
    with pytest.raises(TimeoutError):
        for _ in range(1000):
            shared.send(b"x" * 65536)


def test_a_closed_socket_raises_instead_of_reading(tls_pair):
    shared, _ = tls_pair
    shared.close()
    with pytest.raises(OSError):
        shared.recv(100)
    with pytest.raises(OSError):
        shared.send(b"late")
