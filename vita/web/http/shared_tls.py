"""A TLS socket that a WebSocket's reading thread and its writer threads share safely.

OpenSSL allows one call at a time on a connection. A WebSocket's handler thread reads while engine.io's writer
thread (or a Realtime session's output) sends, and concurrent TLS reads and writes corrupted the front's heap
(glibc aborted the whole process: "double free or corruption") or sent one connection's TLS records to another (a
client's handshake got "unexpected message"), with sessions closing while others connected. Here every OpenSSL
call holds one lock and never waits inside it: the socket is non-blocking, and a call that cannot go on gives the
lock back and waits for the socket outside it. So a reader waiting for a quiet client never holds up a writer, a
writer waiting for a slow client never holds up the reader, and a close (which takes the lock too) never frees
the descriptor under a call in flight.
"""

from __future__ import annotations

import errno
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any


class SharedTlsSocket:
    """The socket-like object simple-websocket is given: recv, send, close and shutdown."""

    WAIT_S = 1.0  # the longest wait for the socket before a call looks again (it may have been closed)

    def __init__(self, sock: ssl.SSLSocket, write_timeout_s: float = 30.0):
        self._sock = sock
        sock.settimeout(0.0)  # once: from here on only this object calls the socket, and every call is non-blocking
        self._io = threading.Lock()  # one OpenSSL call at a time
        self._writing = threading.Lock()  # one send at a time: a send that must wait is retried with its bytes
        self._closed = False  # set under the OpenSSL lock: no call follows a close
        self.write_timeout_s = write_timeout_s

    def recv(self, size: int) -> bytes:
        """Blocks until data or the end of the stream (b""), like a blocking socket's recv."""
        return self.recv_within(size, None)  # (never None: no time limit)

    def recv_within(self, size: int, timeout: float | None) -> bytes | None:
        """Data, b"" at the end of the stream, or None when no whole TLS record came within `timeout` seconds
        (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            data, wait = self._attempt(self._sock.recv, size)
            if wait is None:
                return data
            left = self.WAIT_S if deadline is None else min(self.WAIT_S, deadline - time.monotonic())
            if left <= 0:
                return None
            self._wait(*wait, left)

    def send(self, data: bytes) -> int:
        """Sends everything or raises: a send that cannot finish within ``write_timeout_s`` of its turn is to a
        client that is gone. The clock starts once this writer holds the write lock: time spent queued behind
        another writer (a pong behind a slow audio write) is theirs, and that writer is bounded by its own."""
        with self._writing:
            deadline = time.monotonic() + self.write_timeout_s
            while True:
                _, wait = self._attempt(self._sock.send, data)  # all of it: OpenSSL writes whole records
                if wait is None:
                    return len(data)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"a send took over {self.write_timeout_s:g} s: the client reads too little")
                self._wait(*wait, min(left, self.WAIT_S))

    sendall = send

    def shutdown(self, how: int) -> None:
        """The TCP stream's shutdown, without the lock: it wakes a waiting call, which then sees the end."""
        socket.socket.shutdown(self._sock, how)

    def close(self) -> None:
        """Closed for every caller at once: a writer still waiting for the socket makes no OpenSSL call after this
        (the descriptor itself may stay open until the HTTP server lets go of its own references to it)."""
        with self._io:
            self._closed = True
            self._sock.close()

    def fileno(self) -> int:
        return -1 if self._closed else self._sock.fileno()

    def _attempt(self, call: Callable[[Any], Any], arg: Any) -> tuple[Any, tuple[int, int] | None]:
        """One non-blocking OpenSSL call under the lock: (its result, None), or (None, (descriptor, poll event))
        when it must wait for the socket."""
        with self._io:
            if self._closed:
                raise OSError(errno.EBADF, "the connection is closed")
            try:
                return call(arg), None
            except ssl.SSLWantReadError:
                return None, (self._sock.fileno(), select.POLLIN)
            except ssl.SSLWantWriteError:
                return None, (self._sock.fileno(), select.POLLOUT)

    @staticmethod
    def _wait(fd: int, wanted: int, timeout_s: float) -> None:
        # The descriptor may be closed (and its number reused) meanwhile: that only ends this wait early; the
        # next OpenSSL call, under the lock, then fails on the closed socket and touches nobody else's.
        if fd < 0:
            raise OSError(errno.EBADF, "the socket is closed")
        poller = select.poll()
        poller.register(fd, wanted)
        poller.poll(timeout_s * 1000)
