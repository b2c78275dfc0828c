"""The voice's work, first pieces first.

With several people talking, one reply's later sentences (a long piece is ~0.3 s of synthesis on two busy cores)
could hold up another reply's first sound, which its user is waiting for in silence. The later sentences have
audio playing ahead of them, so a reply's first piece is taken before them; everything else keeps its order (a
turn's pieces are never reordered among themselves: only its first can move, and nothing of its turn is before it).
A waiting piece lets at most MAX_PASSED first pieces go before it (about 0.3 s on two busy cores, less than the
audio its reply has ahead), so that many people starting at once cannot stall a reply already playing; nothing
passes a Shutdown.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections import deque
from typing import Any

from vita.messages import Shutdown, TtsPiece

MAX_PASSED = 3


def urgent(message: Any) -> bool:
    """A reply's first piece (or the end of a reply that said nothing): its user hears nothing until it is spoken."""
    return isinstance(message, TtsPiece) and message.seq == 0


class PieceQueue:
    """A bounded queue like queue.Queue (put blocks while full, get raises queue.Empty on timeout) that hands out
    the oldest urgent message before the rest."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._items: deque[list] = deque()  # [message, first pieces that have passed it]
        self._changed = threading.Condition()

    def put(self, message: Any, timeout: float | None = None) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._items) < self.maxsize, timeout):
                raise queue.Full
            self._items.append([message, 0])
            self._changed.notify_all()

    def get(self, timeout: float | None = None) -> Any:
        with self._changed:
            if not self._changed.wait_for(lambda: self._items, timeout):
                raise queue.Empty
            message = self._take()
            self._changed.notify_all()
            return message

    def qsize(self) -> int:
        with self._changed:
            return len(self._items)

    def _take(self) -> Any:
        for i, (message, passed) in enumerate(self._items):
            if isinstance(message, Shutdown) or (not urgent(message) and passed >= MAX_PASSED):
                break  # nothing passes it
            if urgent(message):
                for waiting in itertools.islice(self._items, i):
                    waiting[1] += 1
                del self._items[i]
                return message
        return self._items.popleft()[0]
