"""InlineWebSocket over real sockets (a socket pair; plain and TLS), with wsproto as the client: messages are read
in the thread that asks for them, a quiet client times a read out, pings and closes are answered, and `finish`
waits for the client's answer to our close before it closes the socket."""

from __future__ import annotations

import re
import socket
import ssl
import threading
import time

import pytest
import simple_websocket
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Ping, Pong, Request, TextMessage

from vita.web.http.inline_websocket import InlineWebSocket, read_within
from vita.web.http.shared_tls import SharedTlsSocket
from vita.web.http.tls import ensure_self_signed, server_context

pytestmark = pytest.mark.fast


class Client:
    """The client's end: wsproto over a blocking socket."""

    def __init__(self, sock):
        self.sock = sock
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.sock.settimeout(5)

    def send(self, event) -> None:
        self.sock.sendall(self.ws.send(event))

    def events(self, until: type) -> list:
        """What the server sent, up to an event of type `until`."""
        seen: list = []
        while not any(isinstance(e, until) for e in seen):
            data = self.sock.recv(65536)
            if not data:
                break
            self.ws.receive_data(data)
            seen.extend(self.ws.events())
        return seen


def handshake_environ(sock, request: bytes) -> dict:
    """The WSGI environ of the client's upgrade request (werkzeug's, as simple-websocket reads it)."""
    key = re.search(rb"Sec-WebSocket-Key: (\S+)", request, re.IGNORECASE).group(1).decode()
    return {"werkzeug.socket": sock, "HTTP_HOST": "localhost", "HTTP_UPGRADE": "websocket",
            "HTTP_CONNECTION": "Upgrade", "HTTP_SEC_WEBSOCKET_KEY": key, "HTTP_SEC_WEBSOCKET_VERSION": "13"}


def opened(server_sock, client_sock) -> tuple[InlineWebSocket, Client]:
    client = Client(client_sock)
    request = client.ws.send(Request(host="localhost", target="/"))  # as werkzeug would have parsed it
    ws = InlineWebSocket(handshake_environ(server_sock, request), max_message_size=1000)
    client.ws.receive_data(client.sock.recv(65536))
    assert any(isinstance(e, AcceptConnection) for e in client.ws.events())
    return ws, client


@pytest.fixture
def plain():
    server_sock, client_sock = socket.socketpair()
    ws, client = opened(server_sock, client_sock)
    yield ws, client
    client_sock.close()
    server_sock.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return ensure_self_signed(tmp_path_factory.mktemp("tls"), "127.0.0.1")


@pytest.fixture
def over_tls(certificate):
    server_raw, client_raw = socket.socketpair()
    client_context = ssl.create_default_context()
    client_context.check_hostname, client_context.verify_mode = False, ssl.CERT_NONE
    wrapped: dict = {}
    handshake = threading.Thread(target=lambda: wrapped.setdefault(
        "server", server_context(*certificate).wrap_socket(server_raw, server_side=True)))
    handshake.start()
    client_tls = client_context.wrap_socket(client_raw)
    handshake.join(5)
    shared = SharedTlsSocket(wrapped["server"])
    ws, client = opened(shared, client_tls)
    yield ws, client
    client_tls.close()
    shared.close()


def test_messages_are_read_in_the_callers_thread_and_no_reader_thread_is_started():
    server_sock, client_sock = socket.socketpair()
    threads_before = set(threading.enumerate())
    ws, client = opened(server_sock, client_sock)
    try:
        client.send(TextMessage("one"))
        client.send(BytesMessage(b"two"))
        assert ws.receive(timeout=2) == "one"
        assert ws.receive(timeout=2) == b"two"
        assert set(threading.enumerate()) == threads_before  # simple-websocket would have started its reader
    finally:
        client_sock.close()
        server_sock.close()


def test_a_timeout_of_zero_takes_what_has_come_without_waiting(plain):
    ws, client = plain
    assert ws.receive(timeout=0) is None
    client.send(TextMessage("here"))
    deadline = time.monotonic() + 2
    got = None
    while got is None and time.monotonic() < deadline:  # the bytes cross the socket pair
        got = ws.receive(timeout=0)
    assert got == "here"


def test_a_close_by_another_thread_ends_reading_once_the_read_in_progress_times_out(plain):
    ws, _client = plain
    closer = threading.Timer(0.1, ws.close)
    closer.start()
    assert ws.receive(timeout=0.5) is None  # the client is quiet
    closer.join()
    with pytest.raises(simple_websocket.ConnectionClosed):
        ws.receive(timeout=0.5)


def test_a_quiet_client_times_a_read_out_and_a_later_message_still_comes(plain):
    ws, client = plain
    started = time.monotonic()
    assert ws.receive(timeout=0.2) is None
    assert 0.15 <= time.monotonic() - started < 2
    client.send(TextMessage("late"))
    assert ws.receive(timeout=2) == "late"


def test_over_tls_a_message_and_a_timeout(over_tls):
    ws, client = over_tls
    assert ws.receive(timeout=0.2) is None
    client.send(TextMessage("hello"))
    assert ws.receive(timeout=2) == "hello"


def test_a_ping_is_answered_while_reading(plain):
    ws, client = plain
    client.send(Ping(b"are you there"))
    client.send(TextMessage("after the ping"))
    assert ws.receive(timeout=2) == "after the ping"
    pongs = [e for e in client.events(Pong) if isinstance(e, Pong)]
    assert pongs and pongs[0].payload == b"are you there"


def test_the_clients_close_is_answered_and_ends_reading(plain):
    ws, client = plain
    client.send(CloseConnection(code=1000))
    with pytest.raises(simple_websocket.ConnectionClosed):
        ws.receive(timeout=2)
    assert ws.connected is False
    closes = [e for e in client.events(CloseConnection) if isinstance(e, CloseConnection)]
    assert closes and closes[0].code == 1000


def test_a_message_over_the_hard_limit_closes_with_1009(plain):
    ws, client = plain
    client.send(TextMessage("x" * 5000))
    with pytest.raises(simple_websocket.ConnectionClosed):
        ws.receive(timeout=2)
    closes = [e for e in client.events(CloseConnection) if isinstance(e, CloseConnection)]
    assert closes and closes[0].code == 1009


def test_finish_waits_for_the_answer_to_our_close_then_closes_the_socket(plain):
    ws, client = plain
    ws.close(reason=1000)  # another thread's close (engine.io's writer)
    answered = threading.Event()

    def answer():
        client.events(CloseConnection)
        time.sleep(0.1)  # the client answers a moment later
        client.send(CloseConnection(code=1000))
        answered.set()

    answering = threading.Thread(target=answer)
    answering.start()
    started = time.monotonic()
    ws.finish(close_reply_s=3.0)
    answering.join(5)
    assert answered.is_set()
    assert time.monotonic() - started < 2.5  # it did not sit out its whole allowance
    assert ws.sock.fileno() == -1  # closed here
    assert client.sock.recv(100) == b""  # the client sees the end of the stream


def test_finish_gives_up_on_a_client_that_never_answers(plain):
    ws, _client = plain
    started = time.monotonic()
    ws.finish(close_reply_s=0.3)  # nobody closed yet: finish sends the close itself
    assert 0.25 <= time.monotonic() - started < 2
    assert ws.sock.fileno() == -1


def test_read_within_refuses_a_bare_tls_socket(certificate):
    raw = socket.socket()
    try:
        bare = server_context(*certificate).wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        with pytest.raises(TypeError):
            read_within(bare, 10, 0.1)  # its decrypted bytes would not wake a poll
    finally:
        raw.close()


def test_read_within_a_plain_socket_waits_no_longer_than_asked():
    a, b = socket.socketpair()
    try:
        assert read_within(a, 10, 0.05) is None
        b.sendall(b"data")
        assert read_within(a, 10, 1.0) == b"data"
        b.close()
        assert read_within(a, 10, 1.0) == b""
    finally:
        a.close()
    with pytest.raises(OSError):
        read_within(a, 10, 1.0)  # closed: an OSError, as a read on a closed socket gives
