"""Built-in tools run in a process of their own, so that no computation can freeze the LLM worker.

A thread cannot be stopped while it holds the GIL: a sum that takes seconds in a tool thread stops the worker's
event loop, and with it every session's reply, however short the tool's timeout. Bounds on the arithmetic
(workers/tools/arithmetic.py) make that unlikely; this makes it impossible: the call runs in a child process,
its caller waits without the GIL, and a call still running at its deadline has its process killed (a fresh one
starts for the next call).

The child reads one JSON request a line on stdin and writes one JSON answer a line on stdout. It runs only the
functions it was started with (``module:function`` names fixed by the parent at start, never per request) under an
address-space limit, and ends when its stdin closes (the worker is gone).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

MEMORY_LIMIT_BYTES = 1 << 30  # far beyond any bounded sum; a runaway allocation fails instead of swapping
START_TIMEOUT_S = 20.0


class IsolatedCallError(RuntimeError):
    """The function raised in the child: its message, for the model to read."""


class IsolatedCalls:
    """One child process that runs `functions` (``module:function``) one call at a time."""

    def __init__(self, functions: list[str]):
        self.functions = list(functions)
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._closed = False
        self.restarts = 0  # children killed at a deadline (for logs and tests)

    def start(self) -> None:
        """Start the child now (at the worker's start) rather than on the first call."""
        with self._lock:
            self._ensure_started()

    def call(self, name: str, kwargs: dict[str, Any], timeout_s: float) -> Any:
        """Run `name` (a function the child was started with, by its bare name) with `kwargs`; its result, or
        IsolatedCallError with its message, or TimeoutError (the child was killed) after `timeout_s`."""
        if not self._lock.acquire(timeout=timeout_s):
            raise TimeoutError(f"{name} waited {timeout_s:g} s for the tool process")
        try:
            process = self._ensure_started()  # (a restart is not the call's own time)
            deadline = time.monotonic() + timeout_s
            try:
                process.stdin.write(json.dumps({"function": name, "kwargs": kwargs}) + "\n")
                process.stdin.flush()
            except (BrokenPipeError, OSError):
                self._kill()
                raise IsolatedCallError("the tool process was not running; try again") from None
            line = self._read_line(process, deadline)
            if line is None:
                self._kill()
                self.restarts += 1
                raise TimeoutError(f"{name} did not answer within {timeout_s:g} s")
            try:
                answer = json.loads(line)
            except ValueError:
                answer = None
            if not isinstance(answer, dict) or not ("result" in answer or "error" in answer):
                self._kill()  # out of step with its requests: a fresh one answers the next call
                raise IsolatedCallError("the tool process answered out of turn")
            if "error" in answer:
                raise IsolatedCallError(answer["error"])
            return answer["result"]
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._kill()

    # --- the parent's side ---------------------------------------------------------------------------------
    def _ensure_started(self) -> subprocess.Popen:
        if self._closed:
            raise IsolatedCallError("the tool process is closed")
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._kill()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_root(), os.environ.get("PYTHONPATH")]))}
        process = subprocess.Popen([sys.executable, "-m", __name__, *self.functions], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, bufsize=1, env=env)
        ready = self._read_line(process, time.monotonic() + START_TIMEOUT_S)
        if ready is None or json.loads(ready).get("ready") is not True:
            with contextlib.suppress(Exception):
                process.kill()
                process.wait(5)
            raise IsolatedCallError(f"the tool process did not start: {ready!r}")
        self._process = process
        return process

    @staticmethod
    def _read_line(process: subprocess.Popen, deadline: float) -> str | None:
        """One line from the child by `deadline`, waiting without the GIL; None if none came (or it died)."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([process.stdout], [], [], left)
            if readable:
                line = process.stdout.readline()
                return line or None

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(Exception):
            process.kill()
            process.wait(5)
        for stream in (process.stdin, process.stdout):
            with contextlib.suppress(Exception):
                stream.close()


def _root() -> str:
    """The folder that holds the `workers` package, for the child's imports."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# --- the child's side --------------------------------------------------------------------------------------
def _serve(specs: list[str]) -> None:
    with contextlib.suppress(Exception):  # not every platform has it; the deadline still holds
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    # The protocol has stdout to itself: anything a function prints goes to stderr instead of becoming an answer.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    functions = {}
    for spec in specs:
        module, _, attribute = spec.partition(":")
        functions[attribute] = getattr(importlib.import_module(module), attribute)
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            function = functions[request["function"]]
            answer = {"result": function(**request.get("kwargs", {}))}
        except MemoryError:
            answer = {"error": "the computation needs too much memory"}
        except Exception as exc:  # the function's own failure goes back as its message
            answer = {"error": str(exc) or type(exc).__name__}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    _serve(sys.argv[1:])
