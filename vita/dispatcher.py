"""The front's output thread: blocks on the workers' output queue and emits each message to its own
session only, dropping what belongs to a turn that is no longer current.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from vita.messages import (
    ReplyText,
    SessionError,
    Shutdown,
    Transcript,
    TtsChunk,
    TurnEnded,
    TurnTimings,
    read_messages,
)
from vita.metrics import FrontMetrics
from vita.sessions import Session, SessionRegistry
from vita.turn_control import TurnController
from vita.turn_log import TurnLogger
from vita.turn_taking import AudioSent, ReplyComplete, Route, TurnUnanswered

log = logging.getLogger("vita.dispatch")

Emit = Callable[..., None]  # emit(event, payload, to=sid)
# Worker timings that are also stage latencies in /metrics: (stage that sent them, key) -> metric stage.
STAGE_OF_TIMING = {("llm", "asr_s"): "asr", ("llm", "first_token_s"): "first_token",
                   ("llm", "first_piece_s"): "first_piece", ("tts", "first_chunk_s"): "tts_first_chunk"}


class OutputDispatcher:
    def __init__(self, outputs: Any, sessions: SessionRegistry, emit: Emit, metrics: FrontMetrics,
                 turn_log: TurnLogger, turns: TurnController):
        self.outputs = outputs
        self.sessions = sessions
        self.emit = emit
        self.metrics = metrics
        self.turn_log = turn_log
        self.turns = turns
        turns.release_held = self.release
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="output-dispatcher", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=2)

    def _run(self) -> None:
        for message in read_messages(self.outputs, self.stop_event, poll_s=0.5):
            if isinstance(message, Shutdown):
                return
            try:
                self.route(message)
            except Exception:  # a bad message must not stop delivery for every other session
                log.exception("could not deliver %s", type(message).__name__)

    def _record(self, message: Any) -> None:
        """Facts for /metrics and the turn log, taken whether or not the turn is still current."""
        sid = message.session_id
        if isinstance(message, TurnTimings):
            for key, seconds in message.timings.items():
                stage = STAGE_OF_TIMING.get((message.stage, key))
                if stage:
                    self.metrics.observe_stage(stage, seconds)
            prefix = "tts_" if message.stage == "tts" else ""
            self.turn_log.update(sid, message.turn_id, timings={prefix + k: v for k, v in message.timings.items()})
        elif isinstance(message, Transcript):
            self.turn_log.update(sid, message.turn_id, transcript=message.text)
        elif isinstance(message, TurnEnded) and message.stage == "llm":
            self.turn_log.llm_ended(sid, message.turn_id, message.reason, message.spoken)
            if message.reason not in ("done", "cancelled"):
                self.metrics.turns_unanswered.labels(message.reason).inc()

    def route(self, message: Any) -> None:
        session = self.sessions.get(message.session_id)
        if session is None:
            self._record(message)
            return
        with session.turn_lock:
            turn_id = getattr(message, "turn_id", None)
            decision = session.turns.route(turn_id) if session.turns is not None else Route.DROP
            if decision is Route.HOLD:  # a speculative turn's: facts and delivery wait for its commit
                session.held.append(message)
                return
            self._record(message)
            if isinstance(message, SessionError):
                self.emit("error", {"code": message.code, "message": message.message, "turn_id": turn_id},
                          to=session.sid)
            elif decision is Route.DELIVER:
                self._deliver(session, message)

    def release(self, session: Session) -> None:
        """A speculative turn was committed: deliver what it produced meanwhile, in order."""
        with session.turn_lock:
            held, session.held = session.held, []
            for message in held:
                self.route(message)

    def _deliver(self, session: Session, message: Any) -> None:
        sid, turn_id, now = session.sid, message.turn_id, time.monotonic()
        if isinstance(message, TtsChunk):
            if message.pcm:  # the state and first-audio timing go out before the audio they announce
                self.turns.handle(session, AudioSent(now, turn_id, len(message.pcm) / 2 / message.sample_rate))
                self.emit("audio", message.pcm, to=sid)  # VITA: raw int16 mono PCM at 24 kHz
            if message.last:
                self.turns.handle(session, ReplyComplete(now, turn_id))
        elif isinstance(message, Transcript):
            self.emit("transcript", {"turn_id": turn_id, "text": message.text}, to=sid)
        elif isinstance(message, ReplyText):
            if message.done:
                self.emit("response_text", {"text": message.text, "turn_id": turn_id}, to=sid)
            else:
                self.emit("reply_delta", {"turn_id": turn_id, "text": message.delta}, to=sid)
        elif isinstance(message, TurnTimings):
            self.emit("timings", {"turn_id": turn_id, "stage": message.stage, **message.timings}, to=sid)
        elif isinstance(message, TurnEnded) and message.stage == "llm" and message.reason != "done":
            # Nothing will be spoken (no speech recognised, cancelled, error): back to listening.
            self.turns.handle(session, TurnUnanswered(now, turn_id, message.reason))
