"""simple-websocket's server WebSocket, read by the thread that waits for a message instead of a reader thread.

simple-websocket reads each connection in a thread of its own and wakes the connection's handler thread for every
message. VITA's page sends audio every 8 ms, so each message cost two threads' wake-ups: with four such clients
the reader threads and the wake-ups took about a tenth of a core (two cores in all). Here the thread that asks for
a message reads the socket itself, so a message reaches its handler with no hand-off, a client sending faster
than its handler works is backed off by TCP (no queue grows between the two threads), and no read is in flight on
the socket once its handler is done with it (a read in flight when the server closed the descriptor once took
bytes from the next connection that got its number).

One thread reads (``receive``); any thread may send or close, as with simple-websocket.
"""

from __future__ import annotations

import contextlib
import errno
import select
import ssl
import time
from typing import Any

import simple_websocket
from simple_websocket.errors import ConnectionClosed
from wsproto.connection import ConnectionState
from wsproto.utilities import LocalProtocolError


def read_within(sock: Any, size: int, timeout: float | None) -> bytes | None:
    """Up to `size` bytes from `sock` (b"": the stream ended), or None when nothing came within `timeout`
    seconds (None: wait as long as it takes). Sockets of ours read with their own ``recv_within``."""
    own = getattr(sock, "recv_within", None)
    if own is not None:
        return own(size, timeout)
    if isinstance(sock, ssl.SSLSocket):  # its decrypted bytes would not wake a poll: share it as SharedTlsSocket
        raise TypeError("a TLS socket is read through SharedTlsSocket")
    if timeout is not None:
        if sock.fileno() < 0:
            raise OSError(errno.EBADF, "the socket is closed")
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        if not poller.poll(max(0, int(timeout * 1000))):
            return None
    return sock.recv(size)


class _NoReaderThread:
    """What simple-websocket's Base is given to start its reader with: nothing is started."""

    name = "(no reader thread)"

    def __init__(self, target: Any = None) -> None:
        pass

    def start(self) -> None:
        pass


class InlineWebSocket(simple_websocket.Server):
    """A server WebSocket whose messages are read when ``receive`` is called, in the caller's thread."""

    def __init__(self, environ: dict, **kwargs: Any):
        super().__init__(environ, thread_class=_NoReaderThread, **kwargs)
        self.thread = None  # nothing reads but the caller of receive

    def receive(self, timeout: float | None = None) -> Any:
        """The next message, None when none came within `timeout` seconds (None: no limit); ConnectionClosed
        once the connection is over and every message that came before has been taken."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.input_buffer:
            if not self.connected:
                raise ConnectionClosed(self.close_reason, self.close_message)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._read(left) or left == 0.0:  # (a timeout of 0: one look, without waiting)
                return self.input_buffer.pop(0) if self.input_buffer else None
        return self.input_buffer.pop(0)

    def _read(self, timeout: float | None) -> bool:
        """One read, handled as simple-websocket's reader handles it (pings answered, a close answered, messages
        over the size limit refused); False when nothing came within `timeout`."""
        try:
            data = read_within(self.sock, self.receive_bytes, timeout)
            if data is None:
                return False
            if not data:
                raise ConnectionResetError("the client ended the stream")
            self.ws.receive_data(data)
            if not self._handle_events():
                self.connected = False
        except (OSError, LocalProtocolError):
            self.connected = False
        return True

    def finish(self, close_reply_s: float) -> None:
        """Once the handler is done: the connection is closed (if nobody has closed it), the client is given
        `close_reply_s` to answer our close (closing a socket with unread data resets the connection, and the
        client may lose what was sent last: the close's reason), then the socket is closed here, where no read is
        in flight; over TLS the close takes SharedTlsSocket's lock, and no writer's OpenSSL call follows it."""
        try:
            if self.ws.state is ConnectionState.OPEN:
                self.close()
            deadline = time.monotonic() + close_reply_s
            while self.ws.state is ConnectionState.LOCAL_CLOSING:
                left = deadline - time.monotonic()
                data = read_within(self.sock, self.receive_bytes, left) if left > 0 else None
                if not data:
                    break
                self.ws.receive_data(data)
                for _ in self.ws.events():  # what the client sent before its answer is not read any more
                    pass
        except (OSError, LocalProtocolError, ConnectionClosed):
            pass
        finally:
            self.connected = False
            with contextlib.suppress(OSError):
                self.sock.close()
