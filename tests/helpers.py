"""A recording Socket.IO client for tests: connects over WSS and keeps every event with its arrival time."""

from __future__ import annotations

import threading
import time

import socketio


class RecordingClient:
    def __init__(self, url: str):
        self.url = url
        self.events: list[tuple[float, str, object]] = []
        self.changed = threading.Condition()
        self.sio = socketio.Client(ssl_verify=False, reconnection=False)
        self.sio.on("*", self._record)
        self.sio.on("disconnect", lambda *a: self._record("disconnect", None))

    def _record(self, event: str, data: object = None) -> None:
        with self.changed:
            self.events.append((time.monotonic(), event, data))
            self.changed.notify_all()

    def connect(self) -> RecordingClient:
        self.sio.connect(self.url, transports=["websocket"], wait_timeout=10)
        return self

    def close(self) -> None:
        if self.sio.connected:
            self.sio.disconnect()

    def named(self, event: str) -> list[object]:
        with self.changed:
            return [data for _, name, data in self.events if name == event]

    def wait_for(self, predicate, timeout: float) -> bool:
        """Wait until predicate(events) is true; the events are passed as a list snapshot."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate(list(self.events)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.changed.wait(remaining)
            return True

    def wait_event(self, event: str, timeout: float) -> bool:
        return self.wait_for(lambda evs: any(name == event for _, name, _ in evs), timeout)
