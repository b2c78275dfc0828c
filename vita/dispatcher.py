"""The front's output thread: blocks on the workers' output queue and emits each message to its own
session only, dropping what belongs to a turn that is no longer current.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from vita.logs import turn_ids
from vita.messages import (
    ReplyText,
    SessionError,
    Transcript,
    TtsChunk,
    TurnEnded,
    TurnTimings,
    WorkerStatus,
)
from vita.metrics import FrontMetrics
from vita.sessions import Session, SessionRegistry, SessionState
from vita.turn_log import TurnLogger

log = logging.getLogger("vita.dispatch")

Emit = Callable[..., None]  # emit(event, payload, to=sid)
# Worker timings that are also stage latencies in /metrics: (stage that sent them, key) -> metric stage.
STAGE_OF_TIMING = {("llm", "asr_s"): "asr", ("llm", "first_token_s"): "first_token",
                   ("llm", "first_piece_s"): "first_piece", ("tts", "first_chunk_s"): "tts_first_chunk"}


class OutputDispatcher:
    def __init__(self, outputs: Any, sessions: SessionRegistry, emit: Emit,
                 on_status: Callable[[WorkerStatus], None], metrics: FrontMetrics, turn_log: TurnLogger):
        self.outputs = outputs
        self.sessions = sessions
        self.emit = emit
        self.on_status = on_status
        self.metrics = metrics
        self.turn_log = turn_log
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="output-dispatcher", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=2)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                message = self.outputs.get(timeout=0.5)
            except queue.Empty:
                continue
            except (EOFError, OSError):  # manager gone: the server is shutting down
                return
            try:
                self.route(message)
            except Exception:  # a bad message must not stop delivery for every other session
                log.exception("could not deliver %s", type(message).__name__)

    def _finish_turn(self, session: Session, turn_id: int) -> None:
        if session.end_turn(turn_id):
            self.metrics.turns_completed.inc()
            self.turn_log.front_ended(session.sid, turn_id, "done")
            log.info("turn completed", extra=turn_ids(session.sid, turn_id))
            self.emit("state", {"state": "listening", "turn_id": turn_id}, to=session.sid)

    def _first_audio(self, session: Session, turn_id: int) -> None:
        times = session.first_audio(turn_id)
        if times is None:
            return
        for key, seconds in times.items():
            self.metrics.observe_stage(key[:-2], seconds)
        self.turn_log.update(session.sid, turn_id, timings=times)
        self.emit("timings", {"turn_id": turn_id, "stage": "front", **{k: round(v, 4) for k, v in times.items()}},
                  to=session.sid)

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
        if isinstance(message, WorkerStatus):
            self.on_status(message)
            return
        self._record(message)
        session = self.sessions.get(message.session_id)
        if session is None:
            return
        sid = session.sid
        turn_id = getattr(message, "turn_id", None)
        if isinstance(message, SessionError):
            self.emit("error", {"code": message.code, "message": message.message, "turn_id": turn_id}, to=sid)
            return
        if turn_id is not None and not session.is_current(turn_id):
            return  # a cancelled or superseded turn
        if isinstance(message, TtsChunk):
            if message.pcm:
                if session.state is not SessionState.SPEAKING:
                    session.state = SessionState.SPEAKING
                    self.emit("state", {"state": "speaking", "turn_id": turn_id}, to=sid)
                self._first_audio(session, turn_id)
                session.add_playback(len(message.pcm) / 2 / message.sample_rate)
                self.emit("audio", message.pcm, to=sid)  # VITA: raw int16 mono PCM at 24 kHz
            if message.last:
                # The turn stays interruptible until the client has played what it was sent.
                timer = threading.Timer(session.playback_left(), self._finish_turn, args=(session, turn_id))
                timer.daemon = True
                timer.start()
        elif isinstance(message, Transcript):
            self.emit("transcript", {"turn_id": turn_id, "text": message.text}, to=sid)
        elif isinstance(message, ReplyText):
            if message.done:
                self.emit("response_text", {"text": session.reply.strip(), "turn_id": turn_id}, to=sid)
            else:
                session.reply += message.delta
                self.emit("reply_delta", {"turn_id": turn_id, "text": message.delta}, to=sid)
        elif isinstance(message, TurnTimings):
            self.emit("timings", {"turn_id": turn_id, "stage": message.stage, **message.timings}, to=sid)
        elif (isinstance(message, TurnEnded) and message.stage == "llm" and message.reason != "done"
              and session.end_turn(turn_id)):
            # Nothing will be spoken (no speech recognised, cancelled, error): back to listening.
            self.turn_log.front_ended(sid, turn_id, message.reason)
            self.emit("state", {"state": "listening", "turn_id": turn_id, "reason": message.reason}, to=sid)
