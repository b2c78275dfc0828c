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
MIN_DUE_WORDS = 2  # a piece cut early because the voice is running out holds at least this many words
# A piece cut early does not end on one of these (it would sound cut off mid-phrase: "a beautiful display of").
_LEADING_WORDS = frozenset({
    "a", "an", "the", "of", "to", "in", "on", "at", "by", "for", "with", "from", "and", "or", "but", "that", "which",
    "who", "is", "are", "was", "were", "my", "your", "its", "their", "our", "his", "her", "as", "than", "if", "so",
    "very"})


def _leads_on(word: str) -> bool:
    """A word a piece must not end on: it leads into the next ("of", "the")."""
    return word.lower().strip(",;:") in _LEADING_WORDS


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

    def cut_due(self, first: bool = False) -> list[str]:
        """The voice is about to run out (or, ``first``, the first piece has waited long enough): cut what is
        pending now, at its last clause boundary, else after its last whole word that does not lead into the next
        ("of", "the"); a piece holds MIN_DUE_WORDS words."""
        if self._pieces_cut == 0 and not first:
            return []  # the first piece has its own rule
        for cut in (self._last_clause_end(), self._last_word_end()):
            if cut is not None and len(clean_for_speech(self._buffer[:cut]).split()) >= MIN_DUE_WORDS:
                piece = clean_for_speech(self._buffer[:cut])
                self._buffer = self._buffer[cut:]
                self._pieces_cut += 1
                return [piece]
        return []

    def _last_clause_end(self) -> int | None:
        ends = [m.end() for m in _CLAUSE_END.finditer(self._buffer)
                if not self._is_abbreviation(self._buffer[:m.end()])]
        return ends[-1] if ends else None

    def _last_word_end(self) -> int | None:
        words = list(_WORD_THEN_SPACE.finditer(self._buffer))
        while words and _leads_on(words[-1].group()):
            words.pop()
        if not words or self._is_abbreviation(self._buffer[:words[-1].end()]):
            return None
        return words[-1].end()

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
        kept_words = words[: self.max_words - self.words]
        while kept_words and _leads_on(kept_words[-1]):
            kept_words.pop()  # "... made of." would sound cut off: "... made."
        kept = " ".join(kept_words).rstrip(",;:—-")
        self.words = self.max_words
        if not kept:
            return "", True
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

    def cut_due(self, first: bool = False) -> list[str]:
        """What is pending, cut early because the voice would otherwise fall silent (see SpeechClock), or because
        the first piece has waited long enough for its words (``first``: a slow decode)."""
        return self._take(self.splitter.cut_due(first)) if not self.complete else []

    def finish(self, cut_by_token_limit: bool) -> list[str]:
        """The rest once generation ended; a reply cut by the token limit loses its possibly split last word."""
        if self.complete:
            return []
        rest = self.splitter.flush()
        if rest and cut_by_token_limit:
            rest[-1] = end_cleanly(rest[-1])
        return self._take(rest)


SECONDS_PER_WORD = 0.30  # the bundled Piper voice speaks ~3.3 words a second (14 words in 4.05 s, 3 in 1.03 s)
VOICE_MARGIN_S = 0.55  # a piece must reach the voice this long before the audio before it ends: its synthesis
                       # (~0.1-0.2 s on a busy CPU), the trip to the client and the client's own buffer
VOICE_LATENCY_S = 0.15  # a piece handed to an idle voice is heard this long after (TTS first chunk p50 0.08-0.1 s
                        # on a busy 2-core CPU, plus the trip to the client)


class SpeechClock:
    """When the audio of the pieces handed to the voice so far will have played out, estimated from their words.

    The first piece is short so the voice starts early; the reply generates faster than it is spoken, but a
    whole next sentence may not be ready before the first piece has played (5 of 12 replies of a few sentences
    went silent for 0.4-1.3 s). When the clock says the voice is about to run out, the reply's pending words are
    cut into a piece (``ReplyShaper.cut_due``) instead of waiting for the sentence's end.
    """

    def __init__(self, seconds_per_word: float = SECONDS_PER_WORD, margin_s: float = VOICE_MARGIN_S,
                 voice_latency_s: float = VOICE_LATENCY_S):
        self.seconds_per_word = seconds_per_word
        self.margin_s = margin_s
        self.voice_latency_s = voice_latency_s
        self.ends_at: float | None = None

    def handed(self, piece: str, now: float) -> None:
        start = max(self.ends_at or 0.0, now + self.voice_latency_s)  # after what is queued, or afresh
        self.ends_at = start + len(piece.split()) * self.seconds_per_word

    def due(self, now: float) -> bool:
        return self.ends_at is not None and now >= self.ends_at - self.margin_s
