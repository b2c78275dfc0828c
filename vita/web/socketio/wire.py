"""The Socket.IO door's serializer: a client event → the event name and payload VITA's page and our page read.

Tuples go out as lists, a SPREAD field's items become the payload's own keys, OPTIONAL fields are left off when
None, and an event with no fields goes with no payload (as VITA's `stop_tts`)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from vita.client_events import ClientEvent, ReplyAudio


def socketio_event(event: ClientEvent) -> tuple[str, Any]:
    if isinstance(event, ReplyAudio):
        return event.EVENT, event.pcm  # a binary message: the PCM itself
    own = fields(event)
    if not own:
        return event.EVENT, None
    payload: dict[str, Any] = {}
    for f in own:
        value = getattr(event, f.name)
        if f.name == event.SPREAD:
            payload.update(value)
        elif value is not None or f.name not in event.OPTIONAL:
            payload[f.name] = list(value) if isinstance(value, tuple) else value
    return event.EVENT, payload
