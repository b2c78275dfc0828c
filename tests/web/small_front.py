"""The front's real HTTP server and Socket.IO stack with its SocketGuard, around a one-event app (``echo``), in
the test's own process: for tests of the socket layer that need no model."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import requests

from vita.config import LimitsConfig
from vita.web.http.access import COOKIE, AccessGuard
from vita.web.http.server import FrontServer
from vita.web.http.socket_guard import SocketGuard


@dataclass
class SmallFront:
    url: str
    token: str
    server: FrontServer
    guard: SocketGuard
    eio: object

    def handshake(self, **kwargs) -> requests.Response:
        return requests.get(f"{self.url}/socket.io/?EIO=4&transport=polling", timeout=5, **kwargs)

    def open_session(self) -> str:
        opened = self.handshake(cookies={COOKIE: self.token})
        assert opened.status_code == 200, opened.text
        return json.loads(opened.text[1:])["sid"]

    def joined_session(self) -> str:
        """A polling session in the namespace "/": its polling URL."""
        url = f"{self.url}/socket.io/?EIO=4&transport=polling&sid={self.open_session()}"
        assert requests.post(url, data="40", timeout=5).status_code == 200
        assert requests.get(url, timeout=5).text.startswith('40{"sid"')  # the CONNECT's answer
        return url


@contextlib.contextmanager
def small_front(token: str, join_s: float = 10.0, per_address: int = 4, ping_s: float = 10.0,
                read_bytes_per_s: float = 0.0) -> Iterator[SmallFront]:
    """ping_s is engine.io's ping interval and timeout both (the front's are 10 s each)."""
    # Imported here, not at collection: vLLM's engine start scans every module's names and trips over Flask's
    # unbound request/app proxies, so the suite runs these tests after the in-process engines (conftest).
    from flask import Flask, request
    from flask_socketio import SocketIO

    flask = Flask(__name__)
    sio = SocketIO(flask, async_mode="threading", always_connect=True, async_handlers=False, ping_interval=ping_s,
                   ping_timeout=ping_s)
    guard = SocketGuard(sio.server, lambda *_: None, max_attachments=2, join_timeout_s=join_s,
                        read_bytes_per_s=read_bytes_per_s)
    guard.install()
    sio.on_event("echo", lambda data: sio.emit("echo", data, to=request.sid))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    limits = LimitsConfig(max_connections=16, max_connections_per_ip=per_address, handshake_timeout_s=60.0)
    server = FrontServer("127.0.0.1", port, flask, None, fd=listener.fileno(), limits=limits)
    guard.bind(server.connections, AccessGuard(token))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)  # shut down in 50 ms
    thread.start()
    try:
        yield SmallFront(f"http://127.0.0.1:{port}", token, server, guard, sio.server.eio)
    finally:
        for eio_sid in list(sio.server.eio.sockets):
            guard.close(eio_sid)
        server.shutdown()
        server.server_close()
        thread.join(5)
        guard.stop()
