"""A session's recent short phrases, kept as spoken: said again in that session, they cost no synthesis. And the
phrases the assistant says of itself in any session (vita/words.STOCK_PHRASES), spoken once before the worker is
ready.

A session hears some things over and over, word for word: a tool's refusal typed again and again, a greeting. Piper
takes a core for ~0.1-0.3 s per phrase on two cores, time taken from the engine decoding another session's reply; a
phrase said a second time is played from here. Kept per session, never shared: how fast a phrase came would tell one
user what the assistant said to another.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

MAX_PHRASE_CHARS = 160  # longer pieces are rarely said twice word for word
MAX_BYTES = 16 * 2**20  # ~6 minutes of 22 kHz speech in all


class PhraseCache:
    """Least recently used phrases per (session, voice, text), bounded by bytes in all; one thread uses it (the
    synthesis loop)."""

    def __init__(self, max_bytes: int = MAX_BYTES, max_chars: int = MAX_PHRASE_CHARS):
        self.max_bytes, self.max_chars = max_bytes, max_chars
        self.phrases: OrderedDict[tuple[str, str, str], tuple[np.ndarray, ...]] = OrderedDict()
        self.bytes = 0

    def get(self, session: str, voice: str, text: str) -> tuple[np.ndarray, ...] | None:
        key = (session, voice, text)
        audio = self.phrases.get(key)
        if audio is not None:
            self.phrases.move_to_end(key)
        return audio

    def put(self, session: str, voice: str, text: str, audio: tuple[np.ndarray, ...]) -> None:
        size = sum(a.nbytes for a in audio)
        if len(text) > self.max_chars or size > self.max_bytes or (session, voice, text) in self.phrases:
            return
        self.phrases[(session, voice, text)] = audio
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, dropped = self.phrases.popitem(last=False)
            self.bytes -= sum(a.nbytes for a in dropped)

    def forget(self, session: str) -> None:
        """A session that ended: its phrases go."""
        for key in [k for k in self.phrases if k[0] == session]:
            self.bytes -= sum(a.nbytes for a in self.phrases.pop(key))


class StockPhrases:
    """The assistant's own phrases in each voice, spoken as the worker sets up and then only read: "Sorry, I didn't
    catch that" plays as soon as it is asked for, with no synthesis on the turn's path. Shared by every session:
    they are the same for everyone and were spoken before anyone spoke, so how fast one comes tells nobody
    anything."""

    def __init__(self) -> None:
        self.phrases: dict[tuple[str, str], tuple[np.ndarray, ...]] = {}

    def keep(self, voice: str, text: str, audio: tuple[np.ndarray, ...]) -> None:
        self.phrases[(voice, text)] = audio

    def get(self, voice: str, text: str) -> tuple[np.ndarray, ...] | None:
        return self.phrases.get((voice, text))
