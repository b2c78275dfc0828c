"""The connection caps' policy: idle connections make room, busy ones are never dropped for a newcomer."""

from __future__ import annotations

import pytest

from vita.connections import ConnectionTable

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def test_at_the_per_address_cap_the_oldest_idle_connection_makes_room():
    table = ConnectionTable(max_total=100, max_per_address=3)
    first, second, third = (table.admit("1.2.3.4", t, handle=f"sock{t}") for t in (1.0, 2.0, 3.0))
    table.set_busy(first.key, True)  # a WebSocket
    fourth = table.admit("1.2.3.4", 4.0)
    assert fourth.admitted and [c.handle for c in fourth.evicted] == ["sock2.0"]  # oldest idle, not the busy one
    assert table.admit("5.6.7.8", 5.0).admitted  # other addresses are not affected
    assert table.counts()["open"] == 4


def test_when_every_connection_in_the_way_is_busy_the_newcomer_is_refused():
    table = ConnectionTable(max_total=100, max_per_address=2)
    for t in (1.0, 2.0):
        table.set_busy(table.admit("1.2.3.4", t).key, True)
    refused = table.admit("1.2.3.4", 3.0)
    assert not refused.admitted and "2 connections from 1.2.3.4" in refused.reason
    assert table.counts()["refused"] == 1


def test_the_total_cap_applies_across_addresses_and_release_frees_a_place():
    table = ConnectionTable(max_total=2, max_per_address=2)
    a = table.admit("1.1.1.1", 1.0)
    table.set_busy(a.key, True)
    b = table.admit("2.2.2.2", 2.0)
    table.set_busy(b.key, True)
    assert not table.admit("3.3.3.3", 3.0).admitted
    table.release(b.key)
    assert table.admit("3.3.3.3", 4.0).admitted


def test_a_connection_between_requests_is_idle_again():
    table = ConnectionTable(max_total=100, max_per_address=1)
    keep_alive = table.admit("1.2.3.4", 1.0, handle="old")
    table.set_busy(keep_alive.key, True)
    table.set_busy(keep_alive.key, False)  # its request was answered; it waits for the next one
    newcomer = table.admit("1.2.3.4", 2.0)
    assert newcomer.admitted and [c.handle for c in newcomer.evicted] == ["old"]


def test_a_trusted_proxy_has_no_per_address_cap():
    table = ConnectionTable(max_total=10, max_per_address=1, uncapped=frozenset({"10.0.0.1"}))
    keys = [table.admit("10.0.0.1", float(t)) for t in range(5)]
    assert all(k.admitted and not k.evicted for k in keys)
