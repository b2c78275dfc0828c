"""Session state: error and event rate limiting, the user limit (turn state: tests/turns/test_turn_taking.py)."""

from __future__ import annotations

import time

import pytest

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
