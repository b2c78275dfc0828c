"""Cut a streaming reply into speakable pieces: the first at the first clause boundary (so the first sound
comes early), later ones at sentence ends; strip what a voice must not read (markup, special tokens, emoji).
"""

from __future__ import annotations

import re

_SPECIAL_TOKEN = re.compile(r"<\|?[a-zA-Z_/][^<>\s]{0,40}\|?>")
_MARKUP = re.compile(r"(\*\*|\*|__|`+|#+\s|~~|\[|\]\([^)]*\)|\])")
_EMOJI = re.compile(
    "[\U0001F000-\U0001FAFF\U00002600-\U000027BF\U0001F900-\U0001F9FF\U00002B00-\U00002BFF\uFE0F\u200D]"
)
_SPACES = re.compile(r"\s+")

# A boundary is punctuation followed by whitespace; the whitespace proves the token stream moved past it
# (so "3.5" or "e.g." mid-stream are not cut at the dot).
_SENTENCE_END = re.compile(r"[.!?…](?=\s)")
_CLAUSE_END = re.compile(r"[.!?…,;:—](?=\s)")
_ABBREVIATIONS = {"mr.", "mrs.", "ms.", "dr.", "st.", "vs.", "e.g.", "i.e.", "etc.", "no.", "jr.", "sr."}

MIN_FIRST_PIECE_CHARS = 4  # "Hi," alone would be a tiny, choppy first sound; "Sure," is fine


def clean_for_speech(text: str) -> str:
    text = _SPECIAL_TOKEN.sub(" ", text)
    text = _MARKUP.sub("", text)
    text = _EMOJI.sub("", text)
    return _SPACES.sub(" ", text).strip()


class PieceSplitter:
    """Feed token deltas; get back complete pieces as soon as a boundary is certain."""

    def __init__(self, max_piece_chars: int = 220):
        self._buffer = ""
        self._emitted = 0
        self.max_piece_chars = max_piece_chars

    def feed(self, delta: str) -> list[str]:
        self._buffer += delta
        pieces = []
        while True:
            cut = self._find_cut()
            if cut is None:
                break
            piece = clean_for_speech(self._buffer[:cut])
            self._buffer = self._buffer[cut:]
            if piece:
                pieces.append(piece)
                self._emitted += 1
        return pieces

    def flush(self) -> list[str]:
        piece = clean_for_speech(self._buffer)
        self._buffer = ""
        if piece:
            self._emitted += 1
            return [piece]
        return []

    def _find_cut(self) -> int | None:
        pattern = _CLAUSE_END if self._emitted == 0 else _SENTENCE_END
        for match in pattern.finditer(self._buffer):
            end = match.end()
            head = self._buffer[:end]
            if self._is_abbreviation(head):
                continue
            if self._emitted == 0 and len(clean_for_speech(head)) < MIN_FIRST_PIECE_CHARS:
                continue
            return end
        if len(self._buffer) > self.max_piece_chars:  # a run-on reply: cut at the last space
            space = self._buffer.rfind(" ", 0, self.max_piece_chars)
            return space if space > 0 else self.max_piece_chars
        return None

    @staticmethod
    def _is_abbreviation(head: str) -> bool:
        words = head.split()
        return bool(words) and words[-1].lower() in _ABBREVIATIONS


_FINAL_PUNCTUATION = (".", "!", "?", "…")


class WordBudget:
    """Keeps a spoken reply within ``max_words``: whole sentences while they fit; a first sentence that is
    already too long is cut at a word boundary. ``take`` says when to stop generating."""

    def __init__(self, max_words: int):
        self.max_words = max_words
        self.words = 0

    def take(self, piece: str) -> tuple[str, bool]:
        """(what to speak of ``piece``, whether the reply is now complete)."""
        words = piece.split()
        if self.words + len(words) <= self.max_words:
            self.words += len(words)
            return piece, self.words >= self.max_words
        if self.words > 0:  # earlier sentences already make a reply: end there
            return "", True
        kept = " ".join(words[: self.max_words]).rstrip(",;:—-")
        self.words = self.max_words
        return (kept if kept.endswith(_FINAL_PUNCTUATION) else kept + "."), True


def end_cleanly(piece: str) -> str:
    """The last piece of a reply cut off by the token limit: drop the word the limit may have split."""
    piece = piece.rstrip()
    if not piece or piece.endswith(_FINAL_PUNCTUATION):
        return piece
    words = piece.split()
    kept = " ".join(words[:-1]).rstrip(",;:—-") if len(words) > 1 else ""
    return kept + "." if kept else ""
