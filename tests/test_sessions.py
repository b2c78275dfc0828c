"""Session state: turn ids, cancelling, playback accounting, error rate limiting, the user limit."""

from __future__ import annotations

import time

from vita.sessions import Session, SessionRegistry, SessionState


def test_turns_supersede_each_other():
    s = Session("a")
    first = s.new_turn()
    second = s.new_turn()
    assert second == first + 1
    assert not s.is_current(first) and s.is_current(second)
    assert not s.end_turn(first) and s.end_turn(second)
    assert s.state is SessionState.LISTENING


def test_cancel_reports_the_turn_and_whether_the_assistant_was_busy():
    s = Session("a")
    assert s.cancel_turn() == (None, False)
    turn = s.new_turn()
    assert s.cancel_turn() == (turn, True)
    assert s.active_turn is None and s.state is SessionState.LISTENING


def test_playback_accumulates_from_now_and_cancel_clears_it():
    s = Session("a")
    s.new_turn()
    s.add_playback(0.5)
    left = s.add_playback(0.5)
    assert 0.9 < left <= 1.0
    assert 0.8 < s.playback_left() <= 1.0
    s.cancel_turn()
    assert s.playback_left() == 0.0


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
