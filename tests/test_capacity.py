"""--max_users auto: seats from the measured speed."""

from __future__ import annotations

import pytest

from vita.capacity import LEAST_TEXT_CHARS_S, MOST_AUTO_SEATS, MOST_TEXT_CHARS_S, seats_for, text_chars_per_s
from vita.messages import MeasuredSpeed
from vita.turns.sessions import SessionRegistry

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

# Speeds as measured on 2-core machines (ASR of a short question, a fresh prompt's first token, decoding).
ZEN1_EPYC = MeasuredSpeed(asr_s=0.57, first_token_s=0.5, decode_tok_s=3.9)  # the 0.5B model in float32
ZEN4 = MeasuredSpeed(asr_s=0.25, first_token_s=0.2, decode_tok_s=11.0)  # the 1.5B model in int8
GPU = MeasuredSpeed(asr_s=0.05, first_token_s=0.03, decode_tok_s=90.0)


def test_auto_seats_follow_the_measured_speed():
    assert seats_for(ZEN1_EPYC)[0] == 1  # one turn's first words already take ~2.6 s there
    assert seats_for(ZEN4)[0] == 2
    assert seats_for(GPU)[0] == MOST_AUTO_SEATS
    slower = MeasuredSpeed(ZEN4.asr_s * 2, ZEN4.first_token_s * 2, ZEN4.decode_tok_s / 2)
    assert 1 <= seats_for(slower)[0] < seats_for(ZEN4)[0]
    seats, why = seats_for(ZEN4)
    assert why.startswith(f"{seats} ") and "ASR 0.25 s" in why and "11.0 tokens/s" in why


def test_typed_text_is_priced_by_the_engines_prefill_speed():
    """A tenth of the engine's prefill for one session's typing: a slow CPU lets less through, a fast one the most."""
    slow = MeasuredSpeed(0.7, 0.5, 5.0, prefill_tok_s=70.0)  # a 2-core Zen 1 EPYC, the 0.5B model in float32
    assert text_chars_per_s(slow) == pytest.approx(28.0)
    assert text_chars_per_s(MeasuredSpeed(0.2, 0.1, 13.0, prefill_tok_s=900.0)) == MOST_TEXT_CHARS_S
    assert text_chars_per_s(MeasuredSpeed(0.2, 0.1, 13.0)) == MOST_TEXT_CHARS_S  # not measured: as before
    assert text_chars_per_s(MeasuredSpeed(3.0, 2.0, 1.0, prefill_tok_s=5.0)) == LEAST_TEXT_CHARS_S
    registry = SessionRegistry(None)
    registry.price_text(slow)
    assert registry.open("a").text_budget.rate == pytest.approx(28.0)
