"""Session state: error and event rate limiting, the user limit (turn state: tests/turns/test_turn_taking.py)."""

from __future__ import annotations

import time

import pytest

from tests.test_capacity import GPU, ZEN1_EPYC
from vita.capacity import SEATS_BEFORE_MEASURED
from vita.turns.sessions import MIN_TEXT_COST, REFUSED_PER_S, Session, SessionRegistry
from vita.web.http.access import client_key

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def test_repeated_errors_are_rate_limited_per_code():
    s = Session("a")
    assert s.should_report("bad_audio", every_s=0.2)
    assert not s.should_report("bad_audio", every_s=0.2)
    assert s.should_report("bad_frame", every_s=0.2)
    time.sleep(0.25)
    assert s.should_report("bad_audio", every_s=0.2)


def test_a_session_is_closed_once_for_refusals_beyond_its_burst_and_rate(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("vita.turns.sessions.time.monotonic", lambda: clock[0])
    s = Session("a")
    for _ in range(30):  # a person's page: a refusal now and then, for as long as it likes
        assert not s.refused(burst=100)
        clock[0] += 1 / REFUSED_PER_S
    assert [s.refused(burst=100) for _ in range(101)].count(True) == 1  # a flood: closed once, at the burst
    assert s.flooding and not s.refused(burst=100)


def test_a_client_that_reconnects_comes_back_to_its_spent_text_budget_whichever_connection_comes_first():
    registry = SessionRegistry(max_users=3)
    now = time.monotonic()
    indebted, light = registry.open("a", "10.0.0.7"), registry.open("b", "10.0.0.7")
    assert indebted.take_text(7000, now, whole=True)  # (a Realtime response's text over a burst) in debt
    light.take_text(MIN_TEXT_COST, now)
    registry.close("a")
    registry.close("b")  # the connection that paid least does not wipe the other's debt
    throwaway = registry.open("c", "10.0.0.7")
    again = registry.open("d", "10.0.0.7")  # nor does a connection opened first to take it
    assert not throwaway.take_text(MIN_TEXT_COST, time.monotonic())
    assert not again.take_text(MIN_TEXT_COST, time.monotonic())
    assert again.text_budget.available(time.monotonic()) >= -again.text_budget.burst  # (a neighbour's: a burst)
    registry.close("c")
    other = registry.open("e", "10.0.0.8")
    assert other.take_text(MIN_TEXT_COST, time.monotonic())  # another client: its own full burst


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


def test_the_line_seats_waiting_clients_in_order_and_nobody_jumps_it():
    registry = SessionRegistry(max_users=1, max_waiting=2)
    freed = []
    registry.on_seat_freed = lambda: freed.append(registry.seat_waiting())
    assert registry.open("a") is not None
    assert registry.open("b") is None and registry.wait("b") == 1 and registry.wait("c") == 2
    assert registry.wait("b") == 1  # asking again keeps the place
    assert registry.wait("d") is None  # the line is full
    registry.close("a")
    assert [s.sid for s in freed[-1]] == ["b"] and registry.get("b") is not None
    assert registry.places() == [("c", 1)] and registry.waiting_count() == 1
    registry.on_seat_freed = None  # the owner has not seated the line yet...
    registry.close("b")
    assert len(registry) == 0 and registry.open("e") is None  # ...and a newcomer cannot take the free seat
    assert [s.sid for s in registry.seat_waiting()] == ["c"]


def test_one_waiting_client_is_promised_one_idle_seat_not_every_idle_one():
    registry = SessionRegistry(max_users=2, max_waiting=2)
    registry.open("a"), registry.open("b")
    assert not registry.give_seat_to_line("a")  # nobody waits
    registry.wait("w")
    assert registry.give_seat_to_line("a") and registry.give_seat_to_line("a")  # asked again: still promised
    assert not registry.give_seat_to_line("b")  # one waiting client, one seat
    registry.keep_seat("a")  # a was not idle after all
    assert registry.give_seat_to_line("b")
    registry.wait("x")
    assert registry.give_seat_to_line("a")  # a second client waits: a second seat
    registry.close("b")  # b's seat freed (the owner seats the line)...
    assert [s.sid for s in registry.seat_waiting()] == ["w"]
    assert not registry.give_seat_to_line("w")  # ...and a's promise covers the one left waiting
    assert not registry.give_seat_to_line("nobody")  # only a seated session has a seat to give


def test_a_seat_freed_but_not_yet_taken_by_the_line_already_covers_a_waiting_client():
    registry = SessionRegistry(max_users=2, max_waiting=2)
    registry.open("a"), registry.open("b")
    registry.wait("w")
    assert registry.give_seat_to_line("a")
    registry.close("a")  # a's seat is free; the owner seats the line just after (no owner here)
    assert not registry.give_seat_to_line("b")  # w takes a's seat: b keeps its own
    assert [s.sid for s in registry.seat_waiting()] == ["w"]


def test_one_address_holds_at_most_two_places_in_line():
    registry = SessionRegistry(max_users=1, max_waiting=8)
    registry.open("a")
    assert registry.wait("b", "10.0.0.1") == 1 and registry.wait("c", "10.0.0.1") == 2
    assert registry.wait("d", "10.0.0.1") is None
    assert registry.wait("e", "10.0.0.2") == 3
    registry.leave_line("b")
    assert registry.wait("d", "10.0.0.1") == 3


def test_an_ipv6_client_is_one_address_by_its_64_as_the_front_counts_it():
    registry = SessionRegistry(max_users=1, max_waiting=8, address_key=client_key)
    registry.open("a")
    assert registry.wait("b", "2001:db8:1:2::10") == 1 and registry.wait("c", "2001:db8:1:2:ffff::1") == 2
    assert registry.wait("d", "2001:db8:1:2::abcd") is None  # a third address of the same /64
    assert registry.wait("e", "2001:db8:1:3::10") == 3  # the next /64 is someone else
    assert registry.wait("f", "::ffff:10.0.0.1") == 4 and registry.wait("g", "10.0.0.1") == 5  # one IPv4 client
    assert registry.wait("h", "10.0.0.1") is None


def test_a_failing_owner_does_not_undo_a_freed_seat():
    registry = SessionRegistry(max_users=1, max_waiting=2)
    registry.open("a")
    registry.wait("b")

    def fails() -> None:
        raise RuntimeError("the owner could not seat the line")

    registry.on_seat_freed = fails
    assert registry.close("a").sid == "a" and len(registry) == 0


def test_leaving_the_line_moves_those_behind_and_a_line_of_zero_refuses():
    registry = SessionRegistry(max_users=1, max_waiting=3)
    registry.open("a")
    for sid in "bcd":
        registry.wait(sid, f"10.0.0.{ord(sid)}")
    assert registry.leave_line("c") and not registry.leave_line("c") and not registry.leave_line("a")
    assert registry.places() == [("b", 1), ("d", 2)]
    assert SessionRegistry(max_users=1).wait("x") is None  # max_waiting 0: no line


def test_more_seats_once_measured_seat_the_line():
    registry = SessionRegistry(max_users=None, max_waiting=4)
    for sid in "ab":
        registry.open(sid)
    for sid in "cd":
        registry.wait(sid)
    registry.on_seat_freed = registry.seat_waiting
    registry.size(GPU)  # (more seats than SEATS_BEFORE_MEASURED)
    assert registry.max_users > SEATS_BEFORE_MEASURED and registry.places() == []
    assert registry.get("c") is not None and registry.get("d") is not None


def test_texts_that_cannot_fit_are_refused_before_they_are_read():
    """Reading (tokenizing) a text is what a client flooding refused texts makes the front pay: not while the
    budget cools after a refusal, nor for texts whose length alone is over what is left; and a text read and
    refused spends its length, so that it is not read again and again."""
    from types import SimpleNamespace

    read: list[str] = []

    def of(texts: list[tuple[str, float | None]]) -> float:
        read.extend(t for t, _ in texts)
        return sum(16.0 * len(t) for t, _ in texts)

    cost = SimpleNamespace(of=of)
    session = Session("s")
    now = time.monotonic()
    assert not session.charge_texts([("b" * 300, None)], cost, now)  # 4,800 from a full budget: read, refused
    assert session.text_budget.available(now) == pytest.approx(4000 - 300)
    assert session.charge_texts([("a" * 200, None)], cost, now)  # 3,200 of the 3,700 left
    assert not session.charge_texts([("d" * 100, None)], cost, now)  # 1,600 of 500: read, refused
    assert not session.charge_texts([("short", None)], cost, now + 1)  # cooling: not read
    assert not session.charge_texts([("c" * 2500, None)], cost, now + 16)  # its length alone is over what is left
    assert read == ["b" * 300, "a" * 200, "d" * 100]
    assert session.charge_texts([("fits", None)], cost, now + 16, least=MIN_TEXT_COST)
