"""OpenAI's Realtime protocol over WebRTC (``POST /v1/realtime/calls``): the caller's microphone on the peer
connection's track and the replies on our Opus track (the front's WebRTC machinery, as for our page), and the
Realtime events on the data channel the caller opened, ``oai-events``: the same events as the WebSocket door
(realtime.py), on another carrier."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from vita.rate_budget import RateBudget

log = logging.getLogger(__name__)

EVENTS_CHANNEL = "oai-events"
INBOX_BOUND = 256  # events read from the channel and not yet handled (a flood beyond is dropped, as over its rate)
# Events dropped in a row for the byte budget before the call is hung up: a caller that goes on sending that fast
# ignores it (and each message was decrypted and reassembled on the loop that carries every call's audio).
DROPS_BEFORE_HANG_UP = 64
MAX_BUFFERED_BYTES = 2 << 20  # events sent and not yet taken by the caller: past this it stopped reading


class DataChannelWire:
    """What a RealtimeSession reads and writes (``wait``/``send``/``close``, as its WebSocket), over the call's
    data channel. The channel lives on the WebRTC loop's thread: sends are handed to it, received events come
    back through a bounded queue. `hang_up` ends the call (its peer connection); `attach_within` is how long the
    caller has to connect and open the channel."""

    def __init__(self, loop: Any, hang_up: Callable[[], None], max_message_bytes: int, attach_within: float,
                 bytes_per_s: float = 0.0):
        self.loop, self.hang_up = loop, hang_up
        self.max_message_bytes, self.attach_within = max_message_bytes, attach_within
        # The caller's events in bytes, as a WebSocket's are read (limits.max_socket_bytes_per_s; 0: unpaced).
        self.budget = RateBudget(bytes_per_s, 2 * bytes_per_s, time.monotonic()) if bytes_per_s else None
        self.dropped = 0
        self.inbox: queue.Queue[str | bytes | None] = queue.Queue(INBOX_BOUND)
        self.channel: Any = None
        self.waiting: list[str] = []  # sent before the channel was open (session.created): sent when it is
        self.attached = threading.Event()

    # --- on the WebRTC loop's thread (but _end: any thread) -------------------------------------------------
    def attach(self, channel: Any) -> None:
        """A data channel the caller opened: ``oai-events`` carries the events; another is closed."""
        if channel.label != EVENTS_CHANNEL or self.channel is not None:
            channel.close()
            return
        self.channel = channel

        channel.on("message")(lambda message: self.received(message, channel))

        @channel.on("close")
        def on_close() -> None:
            self._end()

        for text in self.waiting:
            channel.send(text)
        self.waiting.clear()
        self.attached.set()

    def received(self, message: str | bytes, channel: Any) -> None:
        """A message from the caller: within the byte budget, to the session; else dropped and counted, and after
        DROPS_BEFORE_HANG_UP in a row the call is hung up. One over max_message_bytes is dropped unread but charged
        its size as well (it was decrypted and reassembled like any other, and free ones would be the flood)."""
        size = len(message)  # (a text's characters: at most its bytes, which are counted when it may fit)
        if isinstance(message, str) and size <= self.max_message_bytes:
            size = len(message.encode("utf-8", "surrogatepass"))
        now = time.monotonic()
        if size > self.max_message_bytes:
            if self.budget is not None:
                self.budget.spend(size, now)
            self._dropped(channel)
            return
        if self.budget is not None and not self.budget.admit(size, now):
            self._dropped(channel)
            return
        self.dropped = 0
        with contextlib.suppress(queue.Full):
            self.inbox.put_nowait(message)

    def _dropped(self, channel: Any) -> None:
        self.dropped += 1
        if self.dropped == DROPS_BEFORE_HANG_UP:
            log.warning("hanging up a call whose events keep coming too fast or too large (%g bytes a second, "
                        "%d bytes a message)", self.budget.rate if self.budget else 0, self.max_message_bytes)
            channel.close()  # (on the loop's thread: the session's reader wakes, then hangs up)
            self._end()

    def _end(self) -> None:
        with contextlib.suppress(queue.Full):
            self.inbox.put_nowait(None)
        if self.inbox.full():  # the reader must see the end even behind a full queue
            with contextlib.suppress(queue.Empty):
                self.inbox.get_nowait()
            with contextlib.suppress(queue.Full):
                self.inbox.put_nowait(None)

    def _send(self, text: str) -> None:
        channel = self.channel
        if channel is None:
            self.waiting.append(text)
        elif channel.readyState == "open":
            if channel.bufferedAmount > MAX_BUFFERED_BYTES:  # the caller stopped reading: the call ends, as a
                channel.close()  # WebSocket's send would time out (the session's reader wakes, then hangs up)
                self._end()
                return
            channel.send(text)

    # --- on the session's thread ------------------------------------------------------------------------------
    def wait(self) -> str | bytes | None:
        """The caller's next event; None once the call is over (or never connected)."""
        if not self.attached.wait(self.attach_within):
            return None
        return self.inbox.get()

    def send(self, text: str) -> None:
        """Raises RuntimeError once the WebRTC loop is gone (the front is stopping): the session then ends."""
        self.loop.call_soon_threadsafe(self._send, text)

    def cut(self) -> None:
        """Nothing to shut: a WebSocket's socket is cut when a send to it fails; a call's send fails only once the
        WebRTC loop is gone, which ends the session by itself."""

    def close(self) -> None:
        """The server ends the call (idle timeout, shutdown): the reader wakes, the peer connection goes."""
        self.attached.set()
        self._end()  # the reader wakes (the queue is thread-safe)
        self.hang_up()
