"""A recording OpenAI Realtime client for tests and benchmarks: the ``openai`` package's own client
(``AsyncOpenAI(...).realtime.connect``) on a loop thread of its own, TLS to the server's self-signed certificate,
every server event kept (as a plain dict, with its arrival time) for the caller to wait on."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import threading
import time
from typing import Any

import numpy as np

REALTIME_RATE = 24000


def pcm24(pcm16k: np.ndarray) -> np.ndarray:
    """16 kHz test speech as the protocol's 24 kHz PCM."""
    import soxr

    return soxr.resample(pcm16k, 16000, REALTIME_RATE).astype(np.int16)


class RealtimeClient:
    def __init__(self, url: str, token: str = "no-token", model: str = "vita", headers: dict | None = None):
        from openai import AsyncOpenAI

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="realtime-client", daemon=True)
        self.thread.start()
        ws_url = url.replace("https://", "wss://").replace("http://", "ws://") + "/v1"
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        self.api = AsyncOpenAI(api_key=token, base_url=url + "/v1", websocket_base_url=ws_url)
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.changed = threading.Condition()
        self.closed = threading.Event()
        self.connection: Any = None
        self.manager = self.api.realtime.connect(model=model, extra_headers=headers or {},
                                                 websocket_connection_options={"ssl": context} if
                                                 url.startswith("https") else {})
        self.connection = self._run(self.manager.__aenter__(), 20)
        self.reader = asyncio.run_coroutine_threadsafe(self._read(), self.loop)

    def _run(self, coroutine: Any, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _read(self) -> None:
        try:
            async for event in self.connection:
                record = event.to_dict() if hasattr(event, "to_dict") else dict(event)
                at = time.monotonic()
                with self.changed:
                    self.events.append((at, record))
                    self.changed.notify_all()
                self._heard(at, record)
        except Exception as exc:  # the server closed the connection: recorded for the caller
            with self.changed:
                self.events.append((time.monotonic(), {"type": "client.closed", "reason": repr(exc)}))
        finally:
            self.closed.set()
            with self.changed:
                self.changed.notify_all()

    def _heard(self, at: float, record: dict[str, Any]) -> None:
        """Each server event as it arrives (recorded already), for a client that acts on them as they come."""

    # --- sending ------------------------------------------------------------------------------------------------
    def send(self, event: dict[str, Any]) -> None:
        self._run(self.connection.send(event))

    def send_raw(self, data: str | bytes) -> None:
        """Anything at all (the fuzzing tests): past the client's own event checks."""
        self._run(self.connection._connection.send(data))

    def append(self, pcm: np.ndarray) -> None:
        self.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm.tobytes()).decode()})

    def stream(self, pcm: np.ndarray, chunk_ms: int = 40, rate: int = REALTIME_RATE) -> float:
        """Append audio at real-time pace, as a microphone does; returns when its last sample was sent."""
        step = rate * chunk_ms // 1000
        started = time.monotonic()
        for n, start in enumerate(range(0, len(pcm), step)):
            self.append(pcm[start:start + step])
            delay = started + (n + 1) * chunk_ms / 1000 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        return time.monotonic()

    # --- reading ------------------------------------------------------------------------------------------------
    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.changed:
            return [e for _, e in self.events if e.get("type") == kind]

    def times(self, kind: str) -> list[float]:
        with self.changed:
            return [t for t, e in self.events if e.get("type") == kind]

    def wait_for(self, predicate, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate([e for _, e in self.events]):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
            return True

    def wait_type(self, kind: str, count: int = 1, timeout: float = 10) -> list[dict[str, Any]]:
        """The first `count` events of this type, once there are that many (AssertionError at the deadline)."""
        ok = self.wait_for(lambda evs: sum(e.get("type") == kind for e in evs) >= count, timeout)
        assert ok, f"no {count} × {kind} within {timeout} s; got {[e.get('type') for e in self.all()][-30:]}"
        return self.of(kind)[:count]

    def all(self) -> list[dict[str, Any]]:
        with self.changed:
            return [e for _, e in self.events]

    def errors(self) -> list[dict[str, Any]]:
        return [e["error"] for e in self.of("error")]

    def audio(self, response_id: str | None = None) -> bytes:
        return b"".join(base64.b64decode(e["delta"]) for e in self.of("response.output_audio.delta")
                        if response_id is None or e["response_id"] == response_id)

    def close(self) -> None:
        if not self.closed.is_set():
            with contextlib.suppress(Exception):  # already closed by the server
                self._run(self.manager.__aexit__(None, None, None))
        self.closed.wait(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
