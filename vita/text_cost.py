"""What a text costs the engine to read, in the text budget's characters (four to a token, as the budget's rate
is priced: vita/capacity.py), counted before its turn starts.

Characters alone undercount: a character can be four tokens (private-use and rare CJK characters), so 650 of them
were 1,961 prompt tokens charged as 650. The front counts with the model's own tokenizer (its tokenizer.json,
~5 ms for 16,000 characters); without one (a remote engine), a character outside ASCII counts as a token.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from vita.capacity import CHARS_PER_TOKEN

log = logging.getLogger(__name__)
# What the functions shown beside a question may take, in tokens: read again each turn, never cached, so each
# response of a session with functions is charged this much (workers/llm/tool_turns.py keeps to it). Four shop
# functions are ~300.
FUNCTIONS_BESIDE_TOKENS = 300
# ...and what they are charged, as the template shows them (its "# Tools ... <tools>" section, ~80 tokens, and
# each schema's JSON wrapping): 300 tokens of schemas rendered as ~380.
FUNCTIONS_SHOWN_TOKENS = 400
TOKENIZED_MOST = 16_000  # characters of one text read by the tokenizer (the rest priced by its bytes)


def estimated_tokens(text: str) -> float:
    """Tokens where no tokenizer is at hand: four ASCII letters or spaces a token; any other character (digits,
    symbols, anything outside ASCII) can be a token of its own."""
    words = sum(1 for c in text if c.isascii() and (c.isalpha() or c == " "))
    return (len(text) - words) + words / CHARS_PER_TOKEN


def utf8_bytes(text: str) -> float:
    """Its UTF-8 bytes (a lone surrogate too): the most tokens a byte-level tokenizer can make of it."""
    return float(len(text.encode("utf-8", "surrogatepass")))


def local_tokenizer_file(config: Any) -> Path | None:
    """The served model's tokenizer.json, where the model is on this machine (None: a remote engine's)."""
    try:
        return Path(config.llm_model_path()) / "tokenizer.json"
    except Exception:
        return None


class TextCost:
    def __init__(self, tokenizer_file: Path | None):
        self.tokenizer_file = tokenizer_file
        self._tokenizer: Any = None
        self._loaded = False
        self._lock = threading.Lock()

    def load(self) -> TextCost:
        """Read the tokenizer now (~0.3 s), not on the first typed message's socket thread."""
        self._load()
        return self

    def _load(self) -> Any:
        with self._lock:
            if not self._loaded:
                self._loaded = True
                if self.tokenizer_file is not None and self.tokenizer_file.is_file():
                    try:
                        from tokenizers import Tokenizer

                        self._tokenizer = Tokenizer.from_file(str(self.tokenizer_file))
                    except Exception as exc:  # an estimate then: never a reason to refuse text
                        log.warning("typed text is priced by an estimate: %s could not be read (%s)",
                                    self.tokenizer_file, exc)
            return self._tokenizer

    def __call__(self, text: str, cap: float | None = None) -> float:
        """The budget's characters `text` costs: its tokens at CHARS_PER_TOKEN each, never less than its length;
        at most `cap` (then a text as long as the cap is not read at all). At most TOKENIZED_MOST characters are
        tokenized (22 ms at worst, holding the GIL): the rest counts four tokens a UTF-8 byte's worth, what a
        byte-level tokenizer can make of it at most."""
        return self._priced(text, cap, TOKENIZED_MOST)

    def of(self, texts: list[tuple[str, float | None]]) -> float:
        """The cost of (text, cap) pairs together, at most TOKENIZED_MOST characters of them tokenized in all: past
        that, a text counts four tokens a UTF-8 byte's worth (an event of 64 long function results was 0.65 s
        of tokenizing on the socket thread)."""
        total, left = 0.0, TOKENIZED_MOST
        for text, cap in texts:
            whole = (cap is None or len(text) < cap) and len(text) <= left  # read whole, or not at all
            total += self._priced(text, cap, len(text) if whole else 0)
            left -= len(text) if whole else 0
        return total

    def _priced(self, text: str, cap: float | None, tokenized: int) -> float:
        """Its first `tokenized` characters counted by the tokenizer, the rest by their bytes."""
        if not text:
            return 0.0
        if cap is not None and len(text) >= cap:
            return float(cap)
        head, rest = text[:tokenized], text[tokenized:]
        tokens = (self._tokens(head) if head else 0.0) + utf8_bytes(rest)
        cost = max(float(len(text)), tokens * CHARS_PER_TOKEN)
        return min(cost, cap) if cap is not None else cost

    def _tokens(self, text: str) -> float:
        tokenizer = self._tokenizer if self._loaded else self._load()
        if tokenizer is not None:
            try:
                return float(len(tokenizer.encode(text, add_special_tokens=False).ids))
            except Exception:  # (a lone surrogate: not UTF-8) what a byte-level tokenizer makes of it at most
                return utf8_bytes(text)
        return estimated_tokens(text)
