"""A recording Socket.IO client for tests: connects over WSS and keeps every event with its arrival time.

It is python-socketio's AsyncClient on an event loop of its own. The threaded `socketio.Client` reads and writes
one SSL socket from two threads, which now and then kills a wss:// connection within milliseconds
(miguelgrinberg/python-socketio#1568, python-engineio#461); asyncio does both from one thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import socketio


class SyncFacade:
    """The few calls tests make (`emit`, `connected`, `disconnect`), run on the client's loop."""

    def __init__(self, client: socketio.AsyncClient, loop: asyncio.AbstractEventLoop):
        self._client = client
        self._loop = loop

    def _run(self, coroutine, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def emit(self, event: str, data: Any = None) -> None:
        self._run(self._client.emit(event, data))

    @property
    def connected(self) -> bool:
        return self._client.connected

    def disconnect(self) -> None:
        self._run(self._client.disconnect())


class RecordingClient:
    def __init__(self, url: str):
        self.url = url
        self.events: list[tuple[float, str, object]] = []
        self.changed = threading.Condition()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-client", daemon=True)
        self.thread.start()
        self.client = socketio.AsyncClient(reconnection=False, ssl_verify=False)
        self.client.on("*", self._record)
        self.client.on("disconnect", self._disconnected)
        self.sio = SyncFacade(self.client, self.loop)

    async def _record(self, event: str, data: object = None) -> None:
        with self.changed:
            self.events.append((time.monotonic(), event, data))
            self.changed.notify_all()

    async def _disconnected(self, *_) -> None:
        await self._record("disconnect", None)

    def connect(self, auth: dict | None = None, headers: dict | None = None) -> RecordingClient:
        self.sio._run(self.client.connect(self.url, transports=["websocket"], wait_timeout=10, auth=auth,
                                          headers=headers or {}), timeout=15)
        return self

    def close(self) -> None:
        if self.client.connected:
            self.sio.disconnect()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def named(self, event: str) -> list[object]:
        with self.changed:
            return [data for _, name, data in self.events if name == event]

    def wait_for(self, predicate, timeout: float) -> bool:
        """Wait until predicate(events) is true; the events are passed as a list snapshot."""
        with self.changed:
            return bool(self.changed.wait_for(lambda: predicate(list(self.events)), timeout))

    def wait_event(self, event: str, timeout: float) -> bool:
        return self.wait_for(lambda evs: any(name == event for _, name, _ in evs), timeout)

    def story(self, width: int = 160) -> str:
        """The events so far, one short line each (seconds since the first, name, payload without audio or
        pictures): a failing test's message that shows what did happen, where the events' repr is cut off."""
        with self.changed:
            events = list(self.events)
        start = events[0][0] if events else 0.0
        lines: list[str] = []
        repeats = 0
        for i, (at, name, data) in enumerate(events):
            if name == "audio" and i + 1 < len(events) and events[i + 1][1] == "audio":
                repeats += 1  # a run of audio messages: one line
                continue
            if repeats:
                name, repeats = f"audio (x{repeats + 1})", 0
            if isinstance(data, dict):
                data = {k: (f"<{len(v)} chars>" if isinstance(v, str) and len(v) > 80 else v)
                        for k, v in data.items()}
            elif isinstance(data, (bytes, bytearray)):
                data = f"<{len(data)} bytes>"
            lines.append(f"{at - start:7.2f} {name} {data}"[:width])
        return "\n".join(lines)


class RawSocketIO:
    """Socket.IO spoken by hand over a real WSS socket (websocket-client), for packets a well-behaved client
    library refuses to send: reserved event names, extra arguments, repeated CONNECTs, lying binary headers."""

    def __init__(self, url: str, headers: list[str] | None = None, join: bool = True):
        import ssl

        import websocket

        ws_url = url.replace("https://", "wss://").replace("http://", "ws://")
        self.ws = websocket.create_connection(f"{ws_url}/socket.io/?EIO=4&transport=websocket", timeout=10,
                                              sslopt={"cert_reqs": ssl.CERT_NONE}, header=headers or [],
                                              enable_multithread=True)
        self.handshake = self.ws.recv()  # engine.io OPEN: 0{"sid": ...}
        self.events: list[tuple[str, object]] = []
        if join:
            self.ws.send("40")
            self.until(lambda packet: packet.startswith("40"))

    def response_header(self, name: str) -> str | None:
        return (self.ws.getheaders() or {}).get(name.lower())

    def send(self, packet: str | bytes) -> None:
        if isinstance(packet, bytes):
            self.ws.send_binary(packet)
        else:
            self.ws.send(packet)

    def emit(self, *args: object) -> None:
        import json

        self.send("42" + json.dumps(list(args)))

    def until(self, predicate, timeout: float = 10) -> str:
        """Read packets (answering pings, recording events) until one matches; raises when the server closes."""
        import json

        import websocket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.ws.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                packet = self.ws.recv()
            except websocket.WebSocketTimeoutException:
                continue
            if packet == "2":
                self.ws.send("3")
                continue
            if isinstance(packet, str) and packet.startswith("42"):
                name, *data = json.loads(packet[2:])
                self.events.append((name, data[0] if data else None))
            if predicate(packet):
                return packet
        raise TimeoutError("no matching packet")

    def error_codes(self) -> list[str]:
        return [data["code"] for name, data in self.events if name == "error" and isinstance(data, dict)]

    def wait_error(self, code: str, timeout: float = 10) -> None:
        self.until(lambda _packet: code in self.error_codes(), timeout)

    def closed_within(self, timeout: float) -> bool:
        """True once the server has closed the connection (engine.io CLOSE or the socket ending)."""
        import websocket

        try:
            self.until(lambda packet: packet in ("1", "") or packet.startswith("41"), timeout)
            while True:  # a Socket.IO DISCONNECT may come first: the socket itself must end too
                self.until(lambda packet: packet in ("1", ""), timeout)
        except (websocket.WebSocketConnectionClosedException, ConnectionError, OSError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.01) -> bool:
    """For state that announces no event (a server's counters): check until true or the time is up."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True
