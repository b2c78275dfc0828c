"""Turn-taking for every session: what speech onset, end of speech, typed text and idleness do.

Called from socket handlers and from each session's VAD thread; it talks to the client through `emit` and to
the workers through `put`, so it has no Flask in it.
"""

from __future__ import annotations

import logging
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vita.config import Config
from vita.listener import HeardUtterance, ListenerEvents, SpeechListener
from vita.logs import turn_ids
from vita.messages import CancelTurn, TurnRequest
from vita.metrics import FrontMetrics
from vita.sessions import Session, SessionState
from vita.turn_log import TurnLogger
from vita.vad import SAMPLE_RATE, SileroModel, VadSegmenter

log = logging.getLogger("vita.turns")

Emit = Callable[..., None]  # emit(event, payload=None, to=sid)
Put = Callable[[str, Any], None]  # put(queue_name, message)
FRAMES_PER_TURN = 4


class TurnController:
    def __init__(self, config: Config, emit: Emit, put: Put, disconnect: Callable[[str], None],
                 workers_ready: Callable[[], bool], metrics: FrontMetrics, turn_log: TurnLogger):
        self.config = config
        self.metrics = metrics
        self.turn_log = turn_log
        self.workers_ready = workers_ready
        self.emit = emit
        self.put = put
        self.disconnect = disconnect
        self.vad_model = SileroModel(config.vad_model_path())  # shared by every session's VAD thread
        save = config.limits.save_utterances_dir
        self.save_dir = Path(save).expanduser() if save else None

    # --- session lifetime --------------------------------------------------------------------------------
    def attach_listener(self, session: Session) -> None:
        segmenter = VadSegmenter.from_config(self.config.vad, self.vad_model)
        events = ListenerEvents(
            on_speech_start=lambda: self.on_speech_start(session),
            on_speech_dropped=lambda: self.emit("vad", {"speaking": False, "dropped": True}, to=session.sid),
            on_utterance=lambda heard: self.on_utterance(session, heard),
            on_tick=lambda: self.on_tick(session),
            on_lag=self.metrics.vad_lag.observe,
        )
        tick = min(1.0, self.config.server.timeout / 4)
        session.listener = SpeechListener(session.sid, segmenter, events, tick_s=tick)
        session.listener.start()

    def detach(self, session: Session) -> None:
        if session.listener is not None:
            session.listener.stop()
        turn, _ = session.cancel_turn()
        if turn is not None:
            self.metrics.turns_interrupted.labels("disconnect").inc()
            self.turn_log.front_ended(session.sid, turn, "disconnect", interrupted=True)

    def report(self, session: Session, code: str, message: str) -> None:
        if session.should_report(code):
            self.emit("error", {"code": code, "message": message}, to=session.sid)

    # --- turns -------------------------------------------------------------------------------------------
    def cancel_active_turn(self, session: Session, reason: str) -> int | None:
        """Stop whatever the assistant is doing for this session: client playback, LLM and TTS."""
        turn, busy = session.cancel_turn()
        if turn is None:
            return None
        self.emit("stop_tts", to=session.sid)
        cancel = CancelTurn(session.sid, turn, reason)
        self.put("requests", cancel)
        self.put("tts", cancel)
        self.emit("turn_cancelled", {"turn_id": turn, "reason": reason}, to=session.sid)
        self.metrics.turns_interrupted.labels(reason).inc()
        self.turn_log.front_ended(session.sid, turn, reason, interrupted=True)
        log.info("turn cancelled (%s)", reason, extra=turn_ids(session.sid, turn))
        if busy:
            self.emit("state", {"state": "listening", "turn_id": turn, "reason": reason}, to=session.sid)
        return turn

    def submit_turn(self, session: Session, audio: bytes = b"", text: str = "", frames: tuple[bytes, ...] = (),
                    details: dict | None = None, speech_end: float | None = None) -> int:
        self.cancel_active_turn(session, "new turn")
        turn_id = session.new_turn(speech_end)
        source = "speech" if audio else "text"
        self.turn_log.begin(session.sid, turn_id, source, typed_text=text)
        self.metrics.turns_started.labels(source).inc()
        if speech_end is not None:
            end_of_speech = time.monotonic() - speech_end
            self.metrics.observe_stage("end_of_speech", end_of_speech)
            self.turn_log.update(session.sid, turn_id, timings={"end_of_speech_s": end_of_speech})
        self.put("requests", TurnRequest(session.sid, turn_id, audio=audio, sample_rate=SAMPLE_RATE, text=text,
                                         frames=frames, voice=session.voice, reply_mode=session.reply_mode))
        log.info("turn started (%s, %d frames)", source, len(frames), extra=turn_ids(session.sid, turn_id))
        info = {"turn_id": turn_id, "source": source, "text": text,
                "frames": len(frames), **(details or {})}
        self.emit("turn", info, to=session.sid)
        if speech_end is not None:
            self.emit("timings", {"turn_id": turn_id, "stage": "vad", "end_of_speech_s": round(end_of_speech, 4)},
                      to=session.sid)
        self.emit("state", {"state": "thinking", "turn_id": turn_id}, to=session.sid)
        return turn_id

    def on_text(self, session: Session, text: str) -> None:
        session.touch()
        listener = session.listener
        if listener is not None and listener.speaking:
            with session.lock:  # the user is mid-sentence: the text joins that turn
                session.pending_text = f"{session.pending_text} {text}".strip()
            self.emit("text_queued", {"text": text}, to=session.sid)
            return
        self.submit_turn(session, text=text, frames=session.frames.sample(time.monotonic() - 2, time.monotonic()))

    # --- called from the session's VAD thread ------------------------------------------------------------
    def on_speech_start(self, session: Session) -> None:
        session.touch()
        self.emit("vad", {"speaking": True}, to=session.sid)
        if session.state is not SessionState.LISTENING:
            self.cancel_active_turn(session, "barge-in")

    def on_utterance(self, session: Session, heard: HeardUtterance) -> None:
        u = heard.utterance
        session.touch()
        self.emit("vad", {"speaking": False}, to=session.sid)
        frames = session.frames.sample(heard.started_at, heard.ended_at, FRAMES_PER_TURN)
        details = {"audio_s": round((u.end_sample - u.start_sample) / SAMPLE_RATE, 3),
                   "start_s": round(u.start_sample / SAMPLE_RATE, 3),
                   "end_s": round(u.end_sample / SAMPLE_RATE, 3),
                   "speech_end_s": round(u.speech_end_sample / SAMPLE_RATE, 3)}
        turn_id = self.submit_turn(session, audio=u.pcm, text=session.take_pending_text(), frames=frames,
                                   details=details, speech_end=heard.ended_at)
        if self.save_dir is not None:
            self._save(session, turn_id, u.pcm)

    def on_tick(self, session: Session) -> None:
        if not self.workers_ready() or session.state is not SessionState.LISTENING:
            session.touch()  # waiting for the models or for an answer is not the user being idle
            return
        if session.idle_for() > self.config.server.timeout:
            log.info("idle for %.0f s: timing out", session.idle_for(), extra=turn_ids(session.sid))
            self.emit("out_time", to=session.sid)
            self.disconnect(session.sid)

    def _save(self, session: Session, turn_id: int, pcm: bytes) -> None:
        try:
            self.save_dir.mkdir(parents=True, exist_ok=True)
            path = self.save_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{session.sid[:8]}-{turn_id}.wav"
            with wave.open(str(path), "wb") as out:
                out.setnchannels(1)
                out.setsampwidth(2)
                out.setframerate(SAMPLE_RATE)
                out.writeframes(pcm)
        except OSError as exc:
            log.warning("could not save utterance: %s", exc)
