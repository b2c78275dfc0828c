"""What the front keeps of each turn besides the turn itself: /metrics, the turn log and, when the operator asks
for them, the utterances as WAV files. The turn adapter (``vita/turns/turn_control.py``) says what happened; this
says where it is written down, so the adapter reads as the turn's life and not its bookkeeping."""

from __future__ import annotations

import logging
import time
import wave
from pathlib import Path
from typing import Any

from vita import messages
from vita.hearing.vad import SAMPLE_RATE
from vita.ops.logs import turn_ids
from vita.ops.metrics import FrontMetrics
from vita.ops.turn_log import TurnLogger
from vita.turns.turn_events import DISCARDED

log = logging.getLogger("vita.turns")

# Worker timings that are also stage latencies in /metrics: (stage that sent them, key) -> metric stage.
STAGE_OF_TIMING = {("llm", "asr_s"): "asr", ("llm", "first_token_s"): "first_token",
                   ("llm", "first_piece_s"): "first_piece", ("tts", "first_chunk_s"): "tts_first_chunk"}


class TurnRecords:
    def __init__(self, metrics: FrontMetrics, turn_log: TurnLogger, save_dir: Path | None = None):
        self.metrics = metrics
        self.turn_log = turn_log
        self.save_dir = save_dir

    def worker_fact(self, message: Any) -> None:
        """A worker's output that is a fact about its turn, taken whether or not the turn is still current."""
        sid = message.session_id
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
            # A name the model made up is no tool: one label for all of them, not a new series for each.
            name = message.name if message.outcome not in ("unknown_tool", "bad_call") else "(unknown)"
            self.metrics.tool_calls.labels(name, message.outcome).inc()

    def committed(self, sid: str, turn_id: int, source: str, typed_text: str, frames: int) -> None:
        self.turn_log.begin(sid, turn_id, source, typed_text=typed_text)
        self.metrics.turns_started.labels(source).inc()
        log.info("turn started (%s, %d frames)", source, frames, extra=turn_ids(sid, turn_id))

    def end_of_speech(self, sid: str, turn_id: int, seconds: float, pcm: bytes) -> None:
        """How long the user waited for the turn after they stopped speaking (and what they said, if kept)."""
        self.metrics.observe_stage("end_of_speech", seconds)
        self.turn_log.update(sid, turn_id, timings={"end_of_speech_s": seconds})
        if self.save_dir is not None:
            self._save(sid, turn_id, pcm)

    def first_audio(self, sid: str, turn_id: int, times: dict[str, float]) -> None:
        for key, seconds in times.items():
            self.metrics.observe_stage(key.removesuffix("_s"), seconds)
        self.turn_log.update(sid, turn_id, timings=times)

    def finished(self, sid: str, turn_id: int, reason: str) -> None:
        if reason == "done":
            self.metrics.turns_completed.inc()
            log.info("turn completed", extra=turn_ids(sid, turn_id))
        self.turn_log.front_ended(sid, turn_id, reason)

    def cancelled(self, sid: str, turn_id: int, reason: str, forget: bool) -> None:
        if forget and reason == DISCARDED:  # a speculative turn the user spoke on past: it never was a turn
            log.debug("speculative turn discarded (%s)", reason, extra=turn_ids(sid, turn_id))
            return
        self.metrics.turns_interrupted.labels(reason).inc()
        self.turn_log.front_ended(sid, turn_id, reason, interrupted=True)
        log.info("turn cancelled (%s)", reason, extra=turn_ids(sid, turn_id))

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
