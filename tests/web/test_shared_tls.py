"""SharedTlsSocket over a real TLS connection (a socket pair, no server): concurrent use stays correct and no
call holds up another while it waits for the client.

The orderings are proven, never hoped for: `watch_waits` reports when a call has given the OpenSSL lock back and
waits for the socket (a reader inside recv, waiting for a quiet client), and `QueueLock` when a writer is queued
behind another."""

from __future__ import annotations

import select
import socket
import ssl
import threading

import pytest

from vita.web.http import shared_tls
from vita.web.http.shared_tls import SharedTlsSocket
from vita.web.http.tls import ensure_self_signed, server_context

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return ensure_self_signed(tmp_path_factory.mktemp("tls"), "127.0.0.1")


class TimeoutCountingSocket(ssl.SSLSocket):
    """A real server-side TLS socket that counts the settimeout calls made on it."""

    settimeout_calls = 0

    def settimeout(self, value):
        self.settimeout_calls += 1
        super().settimeout(value)


@pytest.fixture
def tls_pair(certificate):
    """(server side wrapped in SharedTlsSocket, client-side SSLSocket)."""
    server_raw, client_raw = socket.socketpair()
    client_context = ssl.create_default_context()
    client_context.check_hostname, client_context.verify_mode = False, ssl.CERT_NONE
    context = server_context(*certificate)
    context.sslsocket_class = TimeoutCountingSocket
    wrapped: dict[str, ssl.SSLSocket] = {}
    handshake = threading.Thread(
        target=lambda: wrapped.setdefault("server", context.wrap_socket(server_raw, server_side=True)))
    handshake.start()
    client = client_context.wrap_socket(client_raw)
    handshake.join(5)
    shared = SharedTlsSocket(wrapped["server"], write_timeout_s=0.5)
    client.settimeout(5)
    yield shared, client
    client.close()
    shared.close()


def watch_waits(shared: SharedTlsSocket) -> dict[int, threading.Event]:
    """Events set when a call starts waiting for the socket, the OpenSSL lock given back: select.POLLIN (a
    reader inside recv, waiting for the client to send) and select.POLLOUT (a writer waiting for it to read)."""
    waiting = {select.POLLIN: threading.Event(), select.POLLOUT: threading.Event()}
    wait = shared._wait

    def watched(fd: int, wanted: int, timeout_s: float) -> None:
        waiting[wanted].set()
        wait(fd, wanted, timeout_s)

    shared._wait = watched
    return waiting


class QueueLock:
    """A lock that says when someone had to queue for it (`contended`)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.contended = threading.Event()

    def __enter__(self):
        if not self._lock.acquire(blocking=False):
            self.contended.set()
            self._lock.acquire()

    def __exit__(self, *_):
        self._lock.release()


class StoppedClock:
    """vita.web.http.shared_tls's `time` for one test: it stands still until the test moves it, so a deadline passes
    exactly when the test says (never by a race with a sleep)."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def _recv_exactly(sock, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = sock.recv(min(65536, size - got))
        assert chunk, f"the stream ended after {got} of {size} bytes"
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _outcome(call, *args):
    try:
        return call(*args)
    except Exception as exc:  # the test asserts on it
        return exc


def test_a_reader_waiting_on_a_quiet_client_does_not_hold_up_a_writer(tls_pair):
    shared, client = tls_pair
    waits = watch_waits(shared)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(shared.recv(100)))
    reader.start()
    assert waits[select.POLLIN].wait(5)  # the reader is inside recv, waiting for the quiet client
    sent: list[object] = []
    writer = threading.Thread(target=lambda: sent.append(_outcome(shared.send, b"hello")))
    writer.start()
    writer.join(5)  # a reader that kept the socket while it waited would hold this send until the client spoke
    assert sent == [5]
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
    waits = watch_waits(shared)

    def read_upload() -> None:
        uploaded.append(_recv_exactly(shared, len(upload)))

    threads = [threading.Thread(target=read_upload)]
    threads += [threading.Thread(target=lambda ms=ms: [shared.send(m) for m in ms]) for ms in by_writer]
    threads[0].start()
    assert waits[select.POLLIN].wait(5)  # the reader waits inside recv before any writer starts
    for thread in threads[1:]:
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
    waits = watch_waits(shared)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(shared.recv(100)))
    reader.start()
    assert waits[select.POLLIN].wait(5)  # waiting inside recv, not yet started: the shutdown must wake it
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


def test_no_openssl_call_follows_a_close_while_the_server_still_holds_the_descriptor(tls_pair):
    """werkzeug keeps a file object on the connection, so closing the socket leaves its descriptor (and its TLS
    state) open until werkzeug lets go, outside our lock: a writer must not touch it after our close."""
    shared, client = tls_pair
    held = shared._sock.makefile("rb")  # as werkzeug's rfile
    try:
        shared.close()
        assert shared._sock.fileno() >= 0  # still open underneath
        assert shared.fileno() == -1
        with pytest.raises(OSError):
            shared.send(b"late")
        with pytest.raises(OSError):
            shared.recv_within(100, 0.1)
        client.settimeout(0.2)
        with pytest.raises((TimeoutError, socket.timeout)):
            client.recv(100)  # nothing was sent after the close
    finally:
        held.close()


def test_the_socket_mode_is_set_once_not_on_every_call(tls_pair):
    """Non-blocking from the start; the calls themselves do not set it again (two fcntl calls per OpenSSL
    call, each of them able to undo another thread's setting)."""
    shared, client = tls_pair
    assert shared._sock.gettimeout() == 0.0
    calls_before = shared._sock.settimeout_calls
    reader = threading.Thread(target=lambda: _recv_exactly(shared, 4))
    reader.start()
    for _ in range(20):
        shared.send(b"x" * 1000)
    client.sendall(b"ping")
    reader.join(5)
    assert _recv_exactly(client, 20_000) == b"x" * 20_000
    assert shared._sock.settimeout_calls == calls_before


def test_time_queued_behind_another_writer_does_not_count_against_a_send(tls_pair, monkeypatch):
    """A pong queued behind a slow audio write: its deadline starts when it gets the socket. (Counted from the
    call, the time queued used up its write timeout, and its first wait for a busy client closed a healthy
    socket.)"""
    shared, client = tls_pair
    clock = StoppedClock()
    monkeypatch.setattr(shared_tls, "time", clock)
    shared._writing = queue = QueueLock()
    payload = b"pong" * (1 << 20)  # 4 MB: more than the socket buffers hold, so it must wait for the client
    outcome: list[object] = []
    settled = threading.Event()  # the sender waits for the client with the socket held, or it has given up
    wait = shared._wait

    def settled_wait(fd: int, wanted: int, timeout_s: float) -> None:
        settled.set()
        wait(fd, wanted, timeout_s)

    def send() -> None:
        outcome.append(_outcome(shared.send, payload))
        settled.set()

    shared._wait = settled_wait
    with queue:  # another writer has the socket...
        sender = threading.Thread(target=send)
        sender.start()
        assert queue.contended.wait(5)  # ...and the sender is queued behind it
        clock.now += 10 * shared.write_timeout_s  # for much longer than a send may take
    assert settled.wait(5)
    assert not outcome, f"the send gave up as soon as it got the socket: {outcome}"
    assert _recv_exactly(client, len(payload)) == payload  # the client reads: the send goes through
    sender.join(5)
    assert outcome == [len(payload)]


def test_a_send_that_gets_nowhere_is_still_bounded(tls_pair, monkeypatch):
    """The clock starts at the lock, and it runs: a writer holding the socket while the client takes nothing
    gives up once write_timeout_s has passed."""
    shared, _ = tls_pair  # the client never reads
    clock = StoppedClock()
    monkeypatch.setattr(shared_tls, "time", clock)
    waits = watch_waits(shared)
    outcome: list[object] = []
    sender = threading.Thread(target=lambda: outcome.append(_outcome(shared.send, b"x" * (4 << 20))))
    sender.start()
    assert waits[select.POLLOUT].wait(5)  # it holds the socket and waits for the client
    clock.now += shared.write_timeout_s + 0.01
    sender.join(shared.WAIT_S + 5)  # it looks again at least every WAIT_S
    assert len(outcome) == 1 and isinstance(outcome[0], TimeoutError)
