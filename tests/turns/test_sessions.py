"""Session state: error and event rate limiting, the user limit (turn state: tests/turns/test_turn_taking.py)."""

from __future__ import annotations

import time

import pytest

from tests.test_capacity import GPU, ZEN1_EPYC
from vita.capacity import SEATS_BEFORE_MEASURED
from vita.turns.sessions import Session, SessionRegistry

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
