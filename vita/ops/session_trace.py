"""One session's spans in the front: ``conversation`` for its life, a ``turn`` per turn under it, and the front's
own stages under each turn — ``vad`` (the user speaking, as the VAD heard it), ``end_of_turn`` (their silence
until the turn was committed) and ``delivery`` (the reply's audio going out, until it ended or was cut). The
workers' stages join the turn through the traceparent its request carries.

Touched only from the session's own thread (``vita/turns/turn_control.py``), like the rest of its turn state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

from vita.messages import ReplyText, SessionError, Transcript
from vita.ops.tracing import Tracing

TURNS_KEPT = 8  # open turn spans a session keeps (a turn whose end never comes is ended as the next ones start)


@dataclass
class _TurnSpans:
    turn: Span
    speech_ended: float | None  # when the user stopped speaking (monotonic), for the end-of-turn stage
    delivery: Span | None = None


class SessionTrace:
    def __init__(self, tracing: Tracing, door: str, session: str):
        """``session``: the pseudonym the turn log and the page show (the connection's own id never leaves)."""
        self.tracing = tracing
        self.conversation = tracing.start("conversation", None, attributes={
            "vita.door": door, "vita.session": session, "gen_ai.conversation.id": session})
        self.turns: dict[int, _TurnSpans] = {}

    def started(self, turn_id: int, speech: Any, source: str, speculative: bool) -> str:
        """A turn goes to the workers (a speculative one at a pause, before the user may have finished): its span
        begins when the user began speaking; returns the traceparent its request carries."""
        tracing = self.tracing
        if not tracing.on:
            return ""
        self._end_turn(turn_id, "superseded", interrupted=False)  # (a speculative turn of the same id restarted)
        began = speech.started_at if speech is not None else time.monotonic()
        span = tracing.start("turn", self.conversation, began, {
            "vita.turn.id": turn_id, "vita.turn.source": source, "vita.turn.speculative": speculative})
        if speech is not None:
            tracing.record("vad", span, speech.started_at, speech.ended_at,
                           {"vita.speech_s": round(speech.ended_at - speech.started_at, 4)})
        self.turns[turn_id] = _TurnSpans(span, speech.ended_at if speech is not None else None)
        while len(self.turns) > TURNS_KEPT:
            self._end_turn(min(self.turns), "lost", interrupted=False)
        return tracing.carrier(span)

    def committed(self, turn_id: int, speech: Any) -> None:
        """The turn is the user's (the end of speech, or the end-of-turn model, said so)."""
        spans = self.turns.get(turn_id)
        if spans is None:
            return
        now = time.monotonic()
        spans.turn.set_attribute("vita.turn.speculative", False)
        if speech is not None:
            spans.speech_ended = speech.ended_at
            self.tracing.record("end_of_turn", spans.turn, speech.ended_at, now,
                                {"vita.end_of_speech_s": round(now - speech.ended_at, 4)})

    def first_audio(self, turn_id: int, times: dict[str, float]) -> None:
        """The reply's first audio went out: the delivery begins, and the user waited this long for it."""
        spans = self.turns.get(turn_id)
        if spans is None or spans.delivery is not None:
            return
        latency = times.get("voice_to_voice_s")
        if latency is not None:
            spans.turn.set_attribute("turn.user_bot_latency_seconds", round(latency, 4))
        spans.delivery = self.tracing.start("delivery", spans.turn)

    def worker_fact(self, message: Any) -> None:
        """What the turn's span says of the workers' news: how many words were heard, whether it ended in an error;
        and, where the operator asked for content in spans, what was said each way."""
        spans = self.turns.get(getattr(message, "turn_id", None))
        if spans is None:
            return
        said = None
        if isinstance(message, Transcript):
            spans.turn.set_attribute("vita.asr.words", len(message.text.split()))
            said = ("vita.transcript", self.tracing.said(message.text))
        elif isinstance(message, ReplyText) and message.done:
            said = ("vita.reply", self.tracing.said(message.text))
        elif isinstance(message, SessionError):
            spans.turn.set_status(Status(StatusCode.ERROR, message.code))
            spans.turn.set_attribute("error.type", message.code)
        if said is not None and said[1] is not None:
            spans.turn.set_attribute(*said)

    def ended(self, turn_id: int, reason: str, interrupted: bool) -> None:
        self._end_turn(turn_id, reason, interrupted)

    def close(self, reason: str = "session ended") -> None:
        for turn_id in list(self.turns):
            self._end_turn(turn_id, reason, interrupted=True)
        self.tracing.end(self.conversation)

    def _end_turn(self, turn_id: int, reason: str, interrupted: bool) -> None:
        spans = self.turns.pop(turn_id, None)
        if spans is None:
            return
        if spans.delivery is not None:
            self.tracing.end(spans.delivery, attributes={"vita.interrupted": interrupted})
        self.tracing.end(spans.turn, attributes={"vita.turn.end_reason": reason, "turn.was_interrupted": interrupted})
