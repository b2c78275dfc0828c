"""What the front keeps of each turn besides the turn itself: /metrics, the turn log and, when asked for, the
turn's recording (vita/ops/turn_recording.py) or the utterances as WAV files. The turn adapter
(``vita/turns/turn_control.py``) says what happened; this says where it is written down, so the adapter reads as
the turn's life and not its bookkeeping."""

from __future__ import annotations

import logging
import time
import wave
from pathlib import Path
from typing import Any

from vita import messages
from vita.config import Config
from vita.hearing.vad import SAMPLE_RATE
from vita.ops.logs import turn_ids
from vita.ops.metrics import FrontMetrics
from vita.ops.turn_log import TurnLogger
from vita.ops.turn_recording import TurnRecorder
from vita.turns.sessions import Session
from vita.turns.turn_events import DISCARDED

log = logging.getLogger("vita.turns")

# Worker timings that are also stage latencies in /metrics: (stage that sent them, key) -> metric stage.
STAGE_OF_TIMING = {("llm", "asr_s"): "asr", ("llm", "first_token_s"): "first_token",
                   ("llm", "first_piece_s"): "first_piece", ("tts", "first_chunk_s"): "tts_first_chunk"}


class TurnRecords:
    def __init__(self, metrics: FrontMetrics, turn_log: TurnLogger, save_dir: Path | None = None,
                 recorder: TurnRecorder | None = None):
        self.metrics = metrics
        self.turn_log = turn_log
        self.save_dir = save_dir
        self.recorder = recorder  # None: no session may record its turns

    @classmethod
    def for_config(cls, config: Config, metrics: FrontMetrics, turn_log: TurnLogger) -> TurnRecords:
        save, recording = config.limits.save_utterances_dir, config.recording
        recorder = (TurnRecorder(config.recording_path(), recording.max_mb, recording.retention_days)
                    if recording.enabled or recording.per_session else None)
        return cls(metrics, turn_log, Path(save).expanduser() if save else None, recorder)

    def recording(self, sid: str, turn_id: int, source: str) -> str:
        """A recorded session's turn starts: the folder its recording goes to ("" when it cannot be made)."""
        if self.recorder is None:
            return ""
        return self.recorder.begin(sid, self.turn_log.pseudonym(sid), turn_id, source)

    def worker_fact(self, message: Any) -> None:
        """A worker's output that is a fact about its turn, taken whether or not the turn is still current."""
        sid = message.session_id
        if self.recorder is not None:
            self.recorder.fact(message)
        if isinstance(message, messages.TurnTimings):
            for key, seconds in message.timings.items():
                stage = STAGE_OF_TIMING.get((message.stage, key))
                if stage:
                    self.metrics.observe_stage(stage, seconds)
            prefix = "tts_" if message.stage == "tts" else ""
            self.turn_log.update(sid, message.turn_id, timings={prefix + k: v for k, v in message.timings.items()})
        elif isinstance(message, messages.Transcript):
            self.turn_log.update(sid, message.turn_id, transcript=message.text)
        elif isinstance(message, messages.TurnEnded) and message.stage == "llm":
            self.turn_log.llm_ended(sid, message.turn_id, message.reason, message.spoken)
            if message.reason not in ("done", "cancelled", "tool_call"):
                self.metrics.turns_unanswered.labels(message.reason).inc()
        elif isinstance(message, messages.ToolUsed):
            self.metrics.tool_calls.labels(message.counted_name, message.outcome).inc()

    def committed(self, session: Session, turn_id: int, source: str, typed_text: str, speech: Any) -> None:
        sid, frames = session.sid, session.turn_frames
        session.trace.committed(turn_id, speech)
        self.turn_log.begin(sid, turn_id, source, typed_text=typed_text)
        folder = self.recorder.folder(sid, turn_id) if self.recorder is not None else None
        if folder:
            self.turn_log.update(sid, turn_id, recording=folder)  # the turn log's row links its recording
        self.metrics.turns_started.labels(source).inc()
        log.info("turn started (%s, %d frames)", source, frames, extra=turn_ids(sid, turn_id))

    def end_of_speech(self, sid: str, turn_id: int, seconds: float, pcm: bytes) -> None:
        """How long the user waited for the turn after they stopped speaking (and what they said, if kept)."""
        self.metrics.observe_stage("end_of_speech", seconds)
        self.turn_log.update(sid, turn_id, timings={"end_of_speech_s": seconds})
        if self.save_dir is not None:
            self._save(sid, turn_id, pcm)
        if self.recorder is not None:
            self.recorder.heard(sid, turn_id, pcm, SAMPLE_RATE)
            self.recorder.front_timings(sid, turn_id, {"end_of_speech_s": seconds})

    def first_audio(self, session: Session, turn_id: int, times: dict[str, float]) -> None:
        sid = session.sid
        session.trace.first_audio(turn_id, times)
        for key, seconds in times.items():
            self.metrics.observe_stage(key.removesuffix("_s"), seconds)
        self.turn_log.update(sid, turn_id, timings=times)
        if self.recorder is not None:
            self.recorder.front_timings(sid, turn_id, times)

    def finished(self, session: Session, turn_id: int, reason: str) -> None:
        sid = session.sid
        session.trace.ended(turn_id, reason, interrupted=False)
        if self.recorder is not None:
            self.recorder.ended(sid, turn_id, reason, interrupted=False)
        if reason == "done":
            self.metrics.turns_completed.inc()
            log.info("turn completed", extra=turn_ids(sid, turn_id))
        self.turn_log.front_ended(sid, turn_id, reason)

    def cancelled(self, session: Session, turn_id: int, reason: str, forget: bool) -> None:
        sid = session.sid
        session.trace.ended(turn_id, reason, interrupted=not (forget and reason == DISCARDED))
        if forget and reason == DISCARDED:  # a speculative turn the user spoke on past: it never was a turn
            if self.recorder is not None:
                self.recorder.discard(sid, turn_id)
            log.debug("speculative turn discarded (%s)", reason, extra=turn_ids(sid, turn_id))
            return
        if self.recorder is not None:
            self.recorder.ended(sid, turn_id, reason, interrupted=True)
        self.metrics.turns_interrupted.labels(reason).inc()
        self.turn_log.front_ended(sid, turn_id, reason, interrupted=True)
        log.info("turn cancelled (%s)", reason, extra=turn_ids(sid, turn_id))

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()

    def session_ended(self, session: Session) -> str:
        """The session's open recordings are written and its conversation span ends; returns its id."""
        if self.recorder is not None:
            self.recorder.session_ended(session.sid)
        if session.trace is not None:
            session.trace.close()
        return session.sid

    def _save(self, sid: str, turn_id: int, pcm: bytes) -> None:
        try:
            self.save_dir.mkdir(parents=True, exist_ok=True)
            path = self.save_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{sid[:8]}-{turn_id}.wav"
            with wave.open(str(path), "wb") as out:
                out.setnchannels(1)
                out.setsampwidth(2)
                out.setframerate(SAMPLE_RATE)
                out.writeframes(pcm)
        except OSError as exc:
            log.warning("could not save utterance: %s", exc)
