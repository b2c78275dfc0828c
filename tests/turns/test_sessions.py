"""Session state: error and event rate limiting, the user limit (turn state: tests/turns/test_turn_taking.py)."""

from __future__ import annotations

import time

import pytest

from vita.messages import MeasuredSpeed
from vita.turns.sessions import MOST_AUTO_SEATS, SEATS_BEFORE_MEASURED, Session, SessionRegistry, seats_for

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def test_repeated_errors_are_rate_limited_per_code():
    s = Session("a")
    assert s.should_report("bad_audio", every_s=0.2)
    assert not s.should_report("bad_audio", every_s=0.2)
    assert s.should_report("bad_frame", every_s=0.2)
    time.sleep(0.25)
    assert s.should_report("bad_audio", every_s=0.2)


def test_registry_enforces_max_users():
    registry = SessionRegistry(max_users=2)
    assert registry.open("a") and registry.open("b")
    assert registry.open("c") is None
    assert registry.close("a").sid == "a"
    assert registry.open("c") is not None and len(registry) == 2


# Speeds as measured on 2-core machines (ASR of a short question, a fresh prompt's first token, decoding).
ZEN1_EPYC = MeasuredSpeed(asr_s=0.57, first_token_s=0.5, decode_tok_s=3.9)  # the 0.5B model in float32
ZEN4 = MeasuredSpeed(asr_s=0.25, first_token_s=0.2, decode_tok_s=11.0)  # the 1.5B model in int8
GPU = MeasuredSpeed(asr_s=0.05, first_token_s=0.03, decode_tok_s=90.0)


def test_auto_seats_follow_the_measured_speed():
    assert seats_for(ZEN1_EPYC)[0] == 1  # one turn's first words already take ~2.6 s there
    assert seats_for(ZEN4)[0] == 3
    assert seats_for(GPU)[0] == MOST_AUTO_SEATS
    slower = MeasuredSpeed(ZEN4.asr_s * 2, ZEN4.first_token_s * 2, ZEN4.decode_tok_s / 2)
    assert 1 <= seats_for(slower)[0] < seats_for(ZEN4)[0]
    seats, why = seats_for(ZEN4)
    assert why.startswith(f"{seats} ") and "ASR 0.25 s" in why and "11.0 tokens/s" in why


def test_an_auto_registry_is_sized_once_measured_and_keeps_who_is_seated():
    registry = SessionRegistry(max_users=None)
    assert registry.auto and registry.max_users == SEATS_BEFORE_MEASURED and not registry.sized_by
    assert registry.open("a") and registry.open("b")
    assert registry.size(ZEN1_EPYC).startswith("1 ")
    assert registry.max_users == 1 and len(registry) == 2  # nobody seated is sent away
    assert registry.open("c") is None
    registry.close("a"), registry.close("b")
    assert registry.open("c") is not None and registry.open("d") is None


def test_a_registry_the_operator_sized_stays_so():
    registry = SessionRegistry(max_users=3)
    assert registry.size(GPU) is None and registry.max_users == 3
