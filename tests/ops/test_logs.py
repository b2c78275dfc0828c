"""Log lines carry the session and turn they are about, in text and in JSON."""

from __future__ import annotations

import json
import logging

import pytest

from vita.ops.logs import JsonFormatter, RedactSecrets, TextFormatter, turn_ids

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def record(message: str, **extra) -> logging.LogRecord:
    rec = logging.LogRecord("vita.turns", logging.INFO, __file__, 1, message, (), None)
    rec.__dict__.update(extra)
    return rec


def test_text_lines_are_tagged_with_session_and_turn():
    line = TextFormatter("front").format(record("turn started", **turn_ids("abcdef123456", 3)))
    assert line.endswith("front INFO [abcdef12/3] turn started")
    assert "[" not in TextFormatter("front").format(record("serving"))


def test_json_lines_are_objects_with_session_and_turn():
    entry = json.loads(JsonFormatter("llm").format(record("turn failed", **turn_ids("abcdef123456", 7))))
    assert entry["session"] == "abcdef12" and entry["turn_id"] == 7
    assert entry["process"] == "llm" and entry["level"] == "info" and entry["message"] == "turn failed"
    plain = json.loads(JsonFormatter("front").format(record("serving")))
    assert "session" not in plain and "turn_id" not in plain


def test_tokens_are_redacted_wherever_a_library_logs_them():
    line = logging.LogRecord("engineio.server", logging.INFO, __file__, 1,
                             'GET /?token=abc123&x=1 Authorization: Bearer zzz9 packet 0{"token":"s3cret-1"}', (), None)
    RedactSecrets().filter(line)
    message = line.getMessage()
    assert "abc123" not in message and "zzz9" not in message and "s3cret-1" not in message
    assert message.count("[redacted]") == 3 and "&x=1" in message
