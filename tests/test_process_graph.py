"""Restart policy for dead workers (pure logic; the real kill -9 is in test_server_lifecycle)."""

from __future__ import annotations

import pytest

from vita.process_graph import RestartBackoff

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def test_a_worker_that_keeps_dying_is_restarted_less_and_less_often():
    backoff = RestartBackoff(base_s=1, max_s=60, healthy_after_s=60)
    delays = [backoff.next_delay(lived_s=2) for _ in range(9)]
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_a_worker_that_lived_long_starts_again_from_the_base_delay():
    backoff = RestartBackoff(base_s=1, max_s=60, healthy_after_s=60)
    for _ in range(5):
        backoff.next_delay(lived_s=1)
    assert backoff.next_delay(lived_s=3600) == 1
    assert backoff.next_delay(lived_s=1) == 2
