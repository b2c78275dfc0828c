"""A reverse proxy on this machine (or the LAN) that is not in --trusted_proxies: its X-Forwarded-* headers are
ignored as before, but its clients no longer pass for loopback (or private) clients in the WebRTC candidate filter,
and the operator is told once which address to trust."""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from vita.web.http.web_security import ForwardedHeaders, client_address
from vita.web.webrtc.hub import candidate_allowed

pytestmark = pytest.mark.fast  # no model


class Capture:
    """A WSGI app that keeps the environ it was given."""

    def __init__(self):
        self.environ: dict = {}

    def __call__(self, environ, start_response):
        self.environ = environ
        start_response("200 OK", [])
        return [b""]


def call(app: ForwardedHeaders, peer: str, **headers: str) -> None:
    environ = {"REMOTE_ADDR": peer, "REQUEST_METHOD": "GET", "PATH_INFO": "/", "wsgi.url_scheme": "http",
               **{f"HTTP_{k.upper()}": v for k, v in headers.items()}}
    app(environ, lambda *_: None)


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "vita.web.security"]


def test_an_untrusted_loopback_proxy_makes_its_clients_remote_and_is_named_once(caplog):
    inner = Capture()
    app = ForwardedHeaders(inner, trusted={"10.9.9.9"})
    with caplog.at_level(logging.WARNING, logger="vita.web.security"):
        call(app, "127.0.0.1", x_forwarded_for="198.51.100.7", x_forwarded_proto="https")
        assert "HTTP_X_FORWARDED_FOR" not in inner.environ and inner.environ["REMOTE_ADDR"] == "127.0.0.1"
        assert client_address(inner.environ) is None
        for candidate in ("127.0.0.1", "192.168.1.20", "10.0.0.3"):  # the server's own and its LAN's
            assert not candidate_allowed(candidate, client_address(inner.environ)), candidate
        assert candidate_allowed("8.8.4.4", client_address(inner.environ))  # a public one still is
        call(app, "127.0.0.1", forwarded="for=198.51.100.8")
        assert client_address(inner.environ) is None
        said = warnings(caplog)
        assert len(said) == 1, said  # once per proxy address, not once per request
        assert "127.0.0.1 sent X-Forwarded-For, X-Forwarded-Proto but is not in --trusted_proxies" in said[0]
        assert "add --trusted_proxies 127.0.0.1" in said[0]
        # A LAN proxy is the same mistake (its clients would pass for LAN clients).
        call(app, "192.168.1.2", x_forwarded_for="198.51.100.7")
        assert client_address(inner.environ) is None and len(warnings(caplog)) == 2


def test_without_forwarded_headers_a_local_client_stays_local():
    inner = Capture()
    app = ForwardedHeaders(inner, trusted=())
    call(app, "127.0.0.1")
    assert client_address(inner.environ) == "127.0.0.1"
    assert candidate_allowed("127.0.0.1", client_address(inner.environ))
    call(app, "192.168.1.9")
    assert candidate_allowed("192.168.1.20", client_address(inner.environ))
    # A client on the internet that sends the headers itself was remote already: nothing changes, nothing said.
    call(app, "93.184.216.34", x_forwarded_for="127.0.0.1")
    assert client_address(inner.environ) == "93.184.216.34"


def test_a_trusted_proxys_client_is_the_forwarded_address():
    inner = Capture()
    app = ForwardedHeaders(inner, trusted={"127.0.0.1"})
    call(app, "127.0.0.1", x_forwarded_for="192.168.1.30")
    assert client_address(inner.environ) == "192.168.1.30"
    assert candidate_allowed("192.168.1.20", client_address(inner.environ))
    assert not candidate_allowed("127.0.0.1", client_address(inner.environ))


@pytest.fixture
def front():
    """A small Flask-SocketIO app on the front's HTTP server, behind ForwardedHeaders as FrontApp wires it: its
    `whoami` event answers what FrontApp hands the WebRTC candidate filter."""
    # Flask imported here, not at collection (see tests/conftest.py: vLLM's engine start and Flask's proxies).
    from flask import Flask, request
    from flask_socketio import SocketIO

    from vita.config import LimitsConfig
    from vita.web.http.server import FrontServer

    flask = Flask(__name__)
    sio = SocketIO(flask, async_mode="threading", always_connect=True, async_handlers=False)
    sio.on_event("whoami", lambda *_: {"client": client_address(request.environ)})
    flask.wsgi_app = ForwardedHeaders(flask.wsgi_app, trusted=())
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = FrontServer("127.0.0.1", port, flask, None, fd=listener.fileno(), limits=LimitsConfig())
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize("transports", [["websocket"], ["polling"]])
def test_socket_io_events_see_a_proxied_client_as_unknown(front, transports):
    import socketio

    for headers, expected in (({"X-Forwarded-For": "198.51.100.7"}, None), ({}, "127.0.0.1")):
        client = socketio.Client()
        client.connect(front, headers=headers, transports=transports, wait_timeout=5)
        try:
            assert client.call("whoami", timeout=5) == {"client": expected}
        finally:
            client.disconnect()
