"""A way into the vLLM API server that a test can hold shut: a local TCP port that answers every request with
HTTP 503 (what a server still loading says) until `open()`, then forwards each connection to the API server byte
for byte. A server given this port as its `--llm_url` stays loading for as long as the test needs, however fast
the real API server is on a given run."""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit

LOADING = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n"
           b"Connection: close\r\n\r\nloading\n")


class HeldBackLlm:
    def __init__(self, api_url: str):
        target = urlsplit(api_url)
        self.target = (target.hostname or "127.0.0.1", target.port or 80)
        self.path = target.path
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.5)  # (the accept loop's chance to see stop())
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}{self.path}"
        self._open = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="held-back-llm", daemon=True)
        self._thread.start()

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        """Requests from now on are answered 503 (connections already forwarded go on)."""
        self._open.clear()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self.listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:  # (a timeout: the chance to see stop(); or a connection that failed as it came)
                continue
            if self._open.is_set():
                threading.Thread(target=self._forward, args=(client,), daemon=True).start()
            else:
                with contextlib.closing(client), contextlib.suppress(OSError):
                    client.settimeout(2)
                    client.recv(65536)  # the request, read before the answer so the client sees the answer
                    client.sendall(LOADING)

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        pump = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        pump.start()
        _pump(client, upstream)
        pump.join()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until either side ends, then end both (the other pump then ends too)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
        source.close()
