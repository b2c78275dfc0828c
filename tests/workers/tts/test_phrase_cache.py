"""The TTS worker's phrase cache: what it keeps, for whom, and what it lets go first."""

from __future__ import annotations

import numpy as np
import pytest

from workers.tts.phrase_cache import PhraseCache, StockPhrases

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def audio(samples: int) -> tuple[np.ndarray, ...]:
    return (np.zeros(samples, np.int16), np.ones(samples, np.int16))


def test_a_phrase_said_before_comes_back_for_its_session_and_voice_only():
    cache = PhraseCache()
    cache.put("a", "joe", "Sorry, I didn't catch that.", audio(100))
    assert [a.size for a in cache.get("a", "joe", "Sorry, I didn't catch that.")] == [100, 100]
    assert cache.get("a", "amy", "Sorry, I didn't catch that.") is None
    assert cache.get("a", "joe", "Sorry, I did not catch that.") is None
    assert cache.get("b", "joe", "Sorry, I didn't catch that.") is None  # never another session's


def test_long_pieces_are_not_kept():
    cache = PhraseCache(max_chars=20)
    cache.put("a", "joe", "A sentence far longer than twenty characters.", audio(10))
    assert cache.get("a", "joe", "A sentence far longer than twenty characters.") is None and cache.bytes == 0


def test_the_least_recently_said_go_first_when_full():
    cache = PhraseCache(max_bytes=2 * 2 * 2 * 100)  # room for two phrases of two 100-sample parts
    cache.put("a", "joe", "one", audio(100))
    cache.put("a", "joe", "two", audio(100))
    assert cache.get("a", "joe", "one") is not None  # said again: now the most recent
    cache.put("a", "joe", "three", audio(100))
    assert cache.get("a", "joe", "two") is None and cache.get("a", "joe", "one") is not None
    assert cache.get("a", "joe", "three") is not None and cache.bytes == 800


def test_a_session_that_ended_leaves_nothing():
    cache = PhraseCache()
    cache.put("a", "joe", "one", audio(100))
    cache.put("b", "joe", "one", audio(100))
    cache.forget("a")
    assert cache.get("a", "joe", "one") is None and cache.get("b", "joe", "one") is not None
    assert cache.bytes == 400


def test_stock_phrases_are_kept_per_voice_and_text():
    stock = StockPhrases()
    stock.keep("joe", "Let me check.", audio(10))
    assert [a.size for a in stock.get("joe", "Let me check.")] == [10, 10]
    assert stock.get("amy", "Let me check.") is None and stock.get("joe", "Let me see.") is None
