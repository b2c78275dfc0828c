"""What the front writes down of a turn: a made-up tool name costs no new metrics series (pure logic, no model)."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from vita import messages
from vita.ops.metrics import FrontMetrics
from vita.ops.turn_log import TurnLogger
from vita.turns.turn_records import TurnRecords

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def test_tool_names_the_model_made_up_share_one_label(tmp_path):
    metrics = FrontMetrics(lambda: 0, dict, lambda: 0)
    logger = TurnLogger(None, 1.0)  # off: only the metrics are looked at
    try:
        records = TurnRecords(metrics, logger)
        for i in range(50):
            records.worker_fact(messages.ToolUsed("s", 1, f"invented_{i}", "{}", "Error: no such tool", False,
                                                  "unknown_tool", 0.0))
        records.worker_fact(messages.ToolUsed("s", 1, "calculate", "{}", "4", True, "ok", 0.0))
        text = generate_latest(metrics.registry).decode()
    finally:
        logger.stop()
    assert "invented_" not in text
    assert 'vita_tool_calls_total{outcome="unknown_tool",tool="(unknown)"} 50.0' in text
    assert 'vita_tool_calls_total{outcome="ok",tool="calculate"} 1.0' in text
