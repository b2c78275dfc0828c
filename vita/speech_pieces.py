"""Cut a streaming reply into speakable pieces: the first at the first clause boundary or after its first few
words, whichever comes first (so the first sound comes early: a one-sentence reply's final "." is only seen
when generation ends), later ones at sentence ends; strip what a voice must not read (markup, special tokens,
emoji).
"""

from __future__ import annotations

import re

_SPECIAL_TOKEN = re.compile(r"<\|?[a-zA-Z_/][^<>\s]{0,40}\|?>")
_MARKUP = re.compile(r"(\*\*|\*|__|`+|#+\s|~~|\[|\]\([^)]*\)|\])")
_EMOJI = re.compile(
    "[\U0001F000-\U0001FAFF\U00002600-\U000027BF\U0001F900-\U0001F9FF\U00002B00-\U00002BFF\uFE0F\u200D]"
)
_SPACES = re.compile(r"\s+")
_WORD_THEN_SPACE = re.compile(r"\S+(?=\s)")

# A boundary is punctuation followed by whitespace; the whitespace proves the token stream moved past it
# (so "3.5" or "e.g." mid-stream are not cut at the dot).
_SENTENCE_END = re.compile(r"[.!?…](?=\s)")
_CLAUSE_END = re.compile(r"[.!?…,;:—](?=\s)")
# The one list of abbreviations: a piece is never cut after one, and the voice reads each as its words.
ABBREVIATIONS = {
    "Dr.": "Doctor",
    "Mr.": "Mister",
    "Mrs.": "Missus",
    "Ms.": "Miz",
    "St.": "Saint",
    "Prof.": "Professor",
    "vs.": "versus",
    "e.g.": "for example",
    "i.e.": "that is",
    "etc.": "et cetera",
    "approx.": "approximately",
    "Jr.": "Junior",
    "Sr.": "Senior",
    "No.": "number",
}
_ABBREVIATIONS_LOWER = {abbr.lower() for abbr in ABBREVIATIONS}

MIN_FIRST_PIECE_CHARS = 4  # "Hi," alone would be a tiny, choppy first sound; "Sure," is fine


def clean_for_speech(text: str) -> str:
    text = _SPECIAL_TOKEN.sub(" ", text)
    text = _MARKUP.sub("", text)
    text = _EMOJI.sub("", text)
    return _SPACES.sub(" ", text).strip()


class PieceSplitter:
    """Feed token deltas; get back complete pieces as soon as a boundary is certain."""

    def __init__(self, max_piece_chars: int = 220, first_piece_words: int = 0):
        self._buffer = ""
        self._pieces_cut = 0
        self.max_piece_chars = max_piece_chars
        self.first_piece_words = first_piece_words  # 0: the first piece waits for a clause boundary

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
                self._pieces_cut += 1
        return pieces

    def flush(self) -> list[str]:
        piece = clean_for_speech(self._buffer)
        self._buffer = ""
        if piece:
            self._pieces_cut += 1
            return [piece]
        return []

    def _find_cut(self) -> int | None:
        pattern = _CLAUSE_END if self._pieces_cut == 0 else _SENTENCE_END
        for match in pattern.finditer(self._buffer):
            end = match.end()
            head = self._buffer[:end]
            if self._is_abbreviation(head):
                continue
            if self._pieces_cut == 0 and len(clean_for_speech(head)) < MIN_FIRST_PIECE_CHARS:
                continue
            return end
        if self._pieces_cut == 0 and self.first_piece_words > 0:
            words = list(_WORD_THEN_SPACE.finditer(self._buffer))
            if len(words) >= self.first_piece_words and not self._is_abbreviation(
                    self._buffer[:words[self.first_piece_words - 1].end()]):
                return words[self.first_piece_words - 1].end()
        if len(self._buffer) > self.max_piece_chars:  # a run-on reply: cut at the last space
            space = self._buffer.rfind(" ", 0, self.max_piece_chars)
            return space if space > 0 else self.max_piece_chars
        return None

    @staticmethod
    def _is_abbreviation(head: str) -> bool:
        words = head.split()
        return bool(words) and words[-1].lower() in _ABBREVIATIONS_LOWER


_FINAL_PUNCTUATION = (".", "!", "?", "…")


class WordBudget:
    """Keeps a spoken reply within ``max_words``: whole sentences while they fit; a sentence that would pass the
    limit is dropped if earlier ones already end cleanly, else cut at a word boundary. ``take`` says when to stop
    generating."""

    def __init__(self, max_words: int):
        self.max_words = max_words
        self.words = 0
        self._sentence_ended = False

    def take(self, piece: str) -> tuple[str, bool]:
        """(what to speak of ``piece``, whether the reply is now complete)."""
        words = piece.split()
        if self.words + len(words) <= self.max_words:
            self.words += len(words)
            self._sentence_ended = piece.rstrip().endswith(_FINAL_PUNCTUATION)
            return piece, self.words >= self.max_words
        if self._sentence_ended:  # what was said already ends a sentence: end there
            return "", True
        kept = " ".join(words[: self.max_words - self.words]).rstrip(",;:—-")
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


class ReplyShaper:
    """A streaming reply, token deltas in, speakable pieces out: cut by ``PieceSplitter`` and kept within
    a ``WordBudget``. ``complete`` turns true when the reply is long enough and generation should stop."""

    def __init__(self, max_words: int, first_piece_words: int = 0):
        self.splitter = PieceSplitter(first_piece_words=first_piece_words)
        self.budget = WordBudget(max_words)
        self.complete = False

    def _take(self, pieces: list[str]) -> list[str]:
        kept = []
        for piece in pieces:
            if self.complete:
                break
            piece, self.complete = self.budget.take(piece)
            if piece:
                kept.append(piece)
        return kept

    def feed(self, delta: str) -> list[str]:
        return self._take(self.splitter.feed(delta)) if not self.complete else []

    def finish(self, cut_by_token_limit: bool) -> list[str]:
        """The rest once generation ended; a reply cut by the token limit loses its possibly split last word."""
        if self.complete:
            return []
        rest = self.splitter.flush()
        if rest and cut_by_token_limit:
            rest[-1] = end_cleanly(rest[-1])
        return self._take(rest)
