"""The connection caps' policy: idle connections make room, busy ones are never dropped for a newcomer."""

from __future__ import annotations

import pytest

from vita.web.http.connections import ConnectionTable

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


def test_nobody_is_evicted_for_a_newcomer_who_is_then_refused():
    """Both caps are decided before anyone is closed. The table can be over its total cap only when that cap
    was lowered while connections were open; the old order then closed a per-address victim and refused the
    newcomer at the total cap anyway (a connection killed for nobody)."""
    table = ConnectionTable(max_total=4, max_per_address=2)
    table.admit("1.2.3.4", 1.0, handle="idle")
    mine_busy = table.admit("1.2.3.4", 2.0, handle="busy")
    table.set_busy(mine_busy.key, True)
    for t in (3.0, 4.0):
        table.set_busy(table.admit("5.6.7.8", t).key, True)
    table.max_total = 3  # four open, every one but the first busy
    refused = table.admit("1.2.3.4", 5.0)
    assert not refused.admitted and not refused.evicted and "4 connections in all" in refused.reason
    assert table.counts() == {"open": 4, "busy": 3, "idle": 1, "refused": 1, "evicted": 0}
    assert table.admit("9.9.9.9", 6.0).evicted == []  # from elsewhere too: one idle connection cannot make room
    table.set_busy(mine_busy.key, False)
    admitted = table.admit("1.2.3.4", 7.0)  # two idle ones in the way now: both close, and the newcomer gets in
    assert admitted.admitted and [c.handle for c in admitted.evicted] == ["idle", "busy"]
    assert table.counts()["open"] == 3
