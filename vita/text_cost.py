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

    def __call__(self, text: str) -> float:
        """The budget's characters `text` costs: its tokens at CHARS_PER_TOKEN each, never less than its length."""
        if not text:
            return 0.0
        tokenizer = self._tokenizer if self._loaded else self._load()
        if tokenizer is not None:
            tokens = len(tokenizer.encode(text, add_special_tokens=False).ids)
        else:
            tokens = sum(1 for c in text if ord(c) > 127) + len(text) / CHARS_PER_TOKEN
        return max(float(len(text)), tokens * CHARS_PER_TOKEN)
