"""What of a worker's output its session's client is told, as a client event: the words heard, a tool's use, what
the camera showed, a tool the client must run, a stage's timings. Reply audio and text are not here: they wait
for the reply to be heard (the turn adapter's pacing and its unheard text)."""

from __future__ import annotations

import base64
from typing import Any

from vita import client_events, messages
from vita.client_events import ClientEvent

# Timings the turn log keeps but no client is sent: the prefix cache is shared by every session, and each of these
# tells whether it held a prompt's opening (another user's words): the count, and whether the reading of unsure
# words found them already cached.
SERVER_ONLY_TIMINGS = frozenset({"cached_tokens", "prefilled_tokens", "words_unread", "words_logprob"})


def client_event_for(message: Any) -> ClientEvent | None:
    """The client event a delivered worker message becomes (None: it is not told as such)."""
    turn_id = getattr(message, "turn_id", None)
    if isinstance(message, messages.Transcript):
        return client_events.Transcript(turn_id, message.text)
    if isinstance(message, messages.ToolUsed):
        return client_events.ToolUsed(turn_id, message.name, message.arguments, message.result, message.ok,
                                      message.outcome, round(message.duration_s, 4))
    if isinstance(message, messages.SceneSeen):
        image = "data:image/jpeg;base64," + base64.b64encode(message.image).decode() if message.image else None
        return client_events.SceneSeen(turn_id, message.description, tuple(message.text), tuple(message.objects),
                                       message.people, message.fingers, image)
    if isinstance(message, messages.ToolCallRequested):
        return client_events.FunctionCall(turn_id, message.call_id, message.name, message.arguments)
    if isinstance(message, messages.TurnTimings):
        # The prefix cache is shared by every session: how much of a prompt it held would tell this user whether
        # another began a conversation the same way. It stays in the turn log and metrics.
        shown = {k: v for k, v in message.timings.items() if k not in SERVER_ONLY_TIMINGS}
        return client_events.Timings(turn_id, message.stage, shown) if shown else None
    return None
