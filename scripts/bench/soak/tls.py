"""Soak of the front's TLS layer alone: sessions that the server closes while new connections keep arriving.

It runs the real FrontServer and SocketGuard (what server.py serves with) around a one-event Socket.IO app in a
child process, so no model loads. Each session connects over WSS, says hello and is closed by the server 50 ms
later (the path an idle timeout takes); meanwhile other clients fetch /health over fresh HTTPS connections. A
TLS layer that lets two threads use one connection, or reads a closed connection's descriptor, shows up here as
failed handshakes on newcomers or a dead server.
Usage: .venv/bin/python -m scripts.bench.soak.tls [--seconds 120] [--sessions 4] [--pollers 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import socket
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path


def serve(port_queue: multiprocessing.Queue, state_dir: str) -> None:
    import flask
    import flask_socketio

    from vita.config import LimitsConfig
    from vita.web.http.server import FrontServer
    from vita.web.http.socket_guard import SocketGuard
    from vita.web.http.tls import ensure_self_signed, server_context

    app = flask.Flask("soak")
    sio = flask_socketio.SocketIO(app, async_mode="threading")
    guard = SocketGuard(sio.server, lambda *_: None, max_attachments=2)
    guard.install()
    app.add_url_rule("/health", "health", lambda: "ok")

    @sio.on("hello")
    def hello(_data: object) -> None:
        eio_sid = sio.server.manager.eio_sid_from_sid(flask.request.sid, "/")
        threading.Timer(0.05, guard.close, args=(eio_sid,)).start()

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    cert, key = ensure_self_signed(Path(state_dir), "127.0.0.1")
    server = FrontServer("127.0.0.1", port, app, server_context(cert, key), fd=listener.fileno(),
                         limits=LimitsConfig())
    port_queue.put(port)
    server.serve_forever()


async def soak(url: str, seconds: float, sessions: int, pollers: int) -> dict:
    import aiohttp
    import socketio

    logging.getLogger("engineio.client").disabled = True  # "packet queue is empty" on every server close
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    counts = {"sessions": 0, "health": 0}
    errors: list[str] = []
    stop_at = time.monotonic() + seconds

    async def session_loop() -> None:
        while time.monotonic() < stop_at:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http:
                client = socketio.AsyncClient(http_session=http)
                try:
                    await client.connect(url, transports=["websocket"], wait_timeout=5)
                    await client.emit("hello", {})
                    counts["sessions"] += 1
                    deadline = time.monotonic() + 5
                    while client.connected and time.monotonic() < deadline:
                        await asyncio.sleep(0.01)
                except Exception as exc:  # noqa: BLE001 - every failure is a finding
                    cause = exc.__context__.__context__ if exc.__context__ else None
                    errors.append(f"session: {exc!r} <- {cause!r}")
                finally:
                    await client.disconnect()

    async def health_loop() -> None:
        while time.monotonic() < stop_at:
            try:
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, force_close=True)) as h, \
                        h.get(url + "/health", timeout=aiohttp.ClientTimeout(total=5)) as response:
                    await response.read()
                    counts["health"] += 1
            except Exception as exc:  # noqa: BLE001
                errors.append(f"health: {exc!r}")

    await asyncio.gather(*[session_loop() for _ in range(sessions)], *[health_loop() for _ in range(pollers)])
    return {**counts, "errors": errors}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--sessions", type=int, default=4, help="clients connecting and being closed, at once")
    parser.add_argument("--pollers", type=int, default=3, help="clients fetching /health, at once")
    args = parser.parse_args()
    ports: multiprocessing.Queue = multiprocessing.Queue()
    with tempfile.TemporaryDirectory() as state_dir:
        server = multiprocessing.Process(target=serve, args=(ports, state_dir), daemon=True)
        server.start()
        url = f"https://127.0.0.1:{ports.get(timeout=60)}"
        result = asyncio.run(soak(url, args.seconds, args.sessions, args.pollers))
        alive = server.is_alive()
        server.kill()
    print(f"{args.seconds:.0f} s: {result['sessions']} sessions closed by the server, {result['health']} /health; "
          f"{len(result['errors'])} errors; server {'alive' if alive else f'DIED (exit {server.exitcode})'}")
    for error in result["errors"][:10]:
        print("  " + error)
    return 0 if alive and not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
