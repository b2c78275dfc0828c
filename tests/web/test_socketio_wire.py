"""The Socket.IO door's serializer: the exact names and payloads VITA's page and our page read. No model."""

from __future__ import annotations

import pytest

from vita.client_events import (
    Duck,
    ErrorNotice,
    OutOfTime,
    ReplyAudio,
    SceneSeen,
    StateChanged,
    StopSpeaking,
    Timings,
    ToolUsed,
    TurnStarted,
    VadChanged,
)
from vita.web.socketio.wire import socketio_event

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(("event", "wire"), [
    (VadChanged(speaking=True), ("vad", {"speaking": True})),  # "dropped" only when it was
    (VadChanged(speaking=False, dropped=True), ("vad", {"speaking": False, "dropped": True})),
    (StateChanged("thinking", 3), ("state", {"state": "thinking", "turn_id": 3})),
    (StateChanged("listening", 3, "barge-in"), ("state", {"state": "listening", "turn_id": 3, "reason": "barge-in"})),
    (StopSpeaking(), ("stop_tts", None)),  # VITA's page: no payload
    (OutOfTime(), ("out_time", None)),
    (Duck(4), ("duck", {"turn_id": 4})),
    (ErrorNotice("server_busy", "Try again."), ("error", {"code": "server_busy", "message": "Try again."})),
    (ErrorNotice("llm_failed", "x", 2), ("error", {"code": "llm_failed", "message": "x", "turn_id": 2})),
    (ReplyAudio(b"\x01\x02"), ("audio", b"\x01\x02")),  # binary, as VITA's page plays it
])
def test_each_event_has_the_name_and_payload_the_pages_read(event, wire):
    assert socketio_event(event) == wire


def test_spread_fields_become_the_payloads_own_keys_and_tuples_lists():
    assert socketio_event(TurnStarted(7, "speech", None, 2, {"audio_s": 1.5})) == (
        "turn", {"turn_id": 7, "source": "speech", "text": None, "frames": 2, "audio_s": 1.5})  # text kept: None
    assert socketio_event(Timings(7, "llm", {"first_token_s": 0.2})) == (
        "timings", {"turn_id": 7, "stage": "llm", "first_token_s": 0.2})
    name, payload = socketio_event(SceneSeen(7, "a cup", ("OPEN",), ("cup", "table"), 1, None, None))
    assert name == "scene" and payload["text"] == ["OPEN"] and payload["objects"] == ["cup", "table"]
    assert payload["fingers"] is None  # not optional: the page shows "no hand"
    _, tool = socketio_event(ToolUsed(7, "calculate", {"expression": "2+2"}, "4", True, "ok", 0.01))
    assert tool["name"] == "calculate" and tool["result"] == "4"
