"""The front's adapter around each session's turn-taking state machine (``vita/turn_taking.py``).

Socket handlers, the session's VAD thread and the output dispatcher turn what happened into events; the machine
decides; this module carries out its actions: TurnRequests and CancelTurns to the workers, events to the client,
the turn log and metrics, timers, closing the session. Every call for one session runs under its turn lock, so
the machine sees one event at a time and actions leave in the order it gave them.
"""

from __future__ import annotations

import logging
import threading
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vita import messages
from vita.config import Config
from vita.listener import HeardUtterance, ListenerEvents, SpeechListener
from vita.logs import turn_ids
from vita.metrics import FrontMetrics
from vita.sessions import Session
from vita.turn_log import TurnLogger
from vita.turn_taking import (
    Action,
    CancelTurn,
    CloseSession,
    CommitTurn,
    Disconnected,
    Event,
    FinishAfter,
    FirstAudio,
    Interrupted,
    PlaybackDone,
    Send,
    Speech,
    SpeechDropped,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    StartTurn,
    TextTyped,
    Tick,
    TurnDone,
    TurnTaking,
    TurnUnanswered,
    UtteranceEnded,
)
from vita.vad import SAMPLE_RATE, SileroModel, VadSegmenter

log = logging.getLogger("vita.turns")

Emit = Callable[..., None]  # emit(event, payload=None, to=sid)
Put = Callable[[str, Any], bool]  # put(queue_name, message) -> False if the queue was full (message dropped)
FRAMES_PER_TURN = 4
TYPED_FRAMES_WINDOW_S = 2.0  # a typed turn takes the camera frames of the last two seconds
LISTENER_JOIN_S = 2.0  # how long ending a session waits for its VAD thread


def _speech(heard: HeardUtterance) -> Speech:
    u = heard.utterance
    details = {"audio_s": round((u.end_sample - u.start_sample) / SAMPLE_RATE, 3),
               "start_s": round(u.start_sample / SAMPLE_RATE, 3),
               "end_s": round(u.end_sample / SAMPLE_RATE, 3),
               "speech_end_s": round(u.speech_end_sample / SAMPLE_RATE, 3)}
    return Speech(u.pcm, heard.started_at, heard.ended_at, details)


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
        self.release_held: Callable[[Session], None] = lambda _session: None  # set by the output dispatcher
        self.vad_model = SileroModel(config.vad_model_path())  # shared by every session's VAD thread
        save = config.limits.save_utterances_dir
        self.save_dir = Path(save).expanduser() if save else None

    # --- session lifetime --------------------------------------------------------------------------------
    def attach_listener(self, session: Session) -> None:
        session.turns = TurnTaking(self.config.server.timeout, time.monotonic(),
                                   speculative=self.config.vad.speculative_pause_ms > 0,
                                   stall_s=self.config.limits.turn_stall_s)
        segmenter = VadSegmenter.from_config(self.config.vad, self.vad_model)
        now = time.monotonic
        events = ListenerEvents(
            on_speech_start=lambda: self.handle(session, SpeechStarted(now())),
            on_speech_dropped=lambda: self.handle(session, SpeechDropped(now())),
            on_pause=lambda heard: self.handle(session, SpeechPaused(now(), _speech(heard))),
            on_resume=lambda: self.handle(session, SpeechResumed(now())),
            on_utterance=lambda heard: self.handle(session, UtteranceEnded(now(), _speech(heard))),
            on_tick=lambda: self.handle(session, Tick(now(), self.workers_ready())),
            on_lag=self.metrics.vad_lag.observe,
        )
        tick = min(1.0, self.config.server.timeout / 4, self.config.limits.turn_stall_s / 4)
        session.listener = SpeechListener(session.sid, segmenter, events, tick_s=tick)
        session.listener.start()

    def detach(self, session: Session) -> None:
        if session.listener is not None:
            session.listener.stop()
            # Joined (within one blocking read): a VAD step still running could otherwise start a turn after the
            # session ended, and the LLM worker would keep that session's history for good.
            session.listener.join(LISTENER_JOIN_S)
        self.handle(session, Disconnected(time.monotonic()))

    def report(self, session: Session, code: str, message: str) -> None:
        if session.should_report(code):
            self.emit("error", {"code": code, "message": message}, to=session.sid)

    def on_text(self, session: Session, text: str) -> None:
        self.handle(session, TextTyped(time.monotonic(), text))

    def interrupt(self, session: Session, reason: str) -> bool:
        """Stop whatever the assistant is doing for this session; True if the user had a turn in flight."""
        actions = self.handle(session, Interrupted(time.monotonic(), reason))
        return any(isinstance(a, CancelTurn) and a.audible for a in actions)

    # --- the machine and its actions ---------------------------------------------------------------------
    def handle(self, session: Session, event: Event) -> list[Action]:
        with session.turn_lock:
            if session.turns is None:
                return []
            actions = session.turns.handle(event)
            for action in actions:
                self._carry_out(session, action)
            return actions

    def _carry_out(self, session: Session, action: Action) -> None:
        sid = session.sid
        if isinstance(action, Send):
            if action.payload is None:
                self.emit(action.event, to=sid)
            else:
                self.emit(action.event, action.payload, to=sid)
        elif isinstance(action, StartTurn):
            self._start(session, action)
        elif isinstance(action, CommitTurn):
            self._commit(session, action)
        elif isinstance(action, CancelTurn):
            self._cancel(session, action)
        elif isinstance(action, FirstAudio):
            self._first_audio(session, action)
        elif isinstance(action, FinishAfter):
            self._later(action.delay, session, PlaybackDone(time.monotonic() + action.delay, action.turn_id))
        elif isinstance(action, TurnDone):
            if action.reason == "done":
                self.metrics.turns_completed.inc()
                log.info("turn completed", extra=turn_ids(sid, action.turn_id))
            self.turn_log.front_ended(sid, action.turn_id, action.reason)
        elif isinstance(action, CloseSession):
            log.info("idle for %.0f s: timing out", session.turns.idle_for(time.monotonic()), extra=turn_ids(sid))
            self.disconnect(sid)

    def _later(self, delay: float, session: Session, event: Event) -> None:
        """Feed an event after the current actions are carried out (never from inside handle())."""
        timer = threading.Timer(delay, self.handle, args=(session, event))
        timer.daemon = True
        timer.start()

    def _start(self, session: Session, action: StartTurn) -> None:
        now = time.monotonic()
        speech = action.speech
        if speech is not None:
            frames = session.frames.sample(speech.started_at, speech.ended_at, FRAMES_PER_TURN)
        else:
            frames = session.frames.sample(now - TYPED_FRAMES_WINDOW_S, now)
        session.turn_frames = len(frames)
        sent = self.put("requests", messages.TurnRequest(
            session.sid, action.turn_id, audio=speech.pcm if speech else b"", sample_rate=SAMPLE_RATE,
            text=action.text, frames=frames, voice=session.voice, reply_mode=session.reply_mode,
            speculative=action.speculative))
        if not sent:  # drop policy: this turn goes unanswered, with a readable error to this session only
            self.report(session, "server_busy", "The assistant is overloaded and dropped what you said; "
                                                "please say it again.")
            self._later(0.0, session, TurnUnanswered(now, action.turn_id, "server busy"))
        elif action.speculative:
            log.debug("speculative turn started", extra=turn_ids(session.sid, action.turn_id))

    def _commit(self, session: Session, action: CommitTurn) -> None:
        sid, turn_id, speech = session.sid, action.turn_id, action.speech
        source = "speech" if speech is not None else "text"
        self.turn_log.begin(sid, turn_id, source, typed_text=action.text)
        self.metrics.turns_started.labels(source).inc()
        log.info("turn started (%s, %d frames)", source, session.turn_frames, extra=turn_ids(sid, turn_id))
        self.emit("turn", {"turn_id": turn_id, "source": source, "text": action.text,
                           "frames": session.turn_frames, **(speech.details if speech else {})}, to=sid)
        if speech is not None:
            end_of_speech = time.monotonic() - speech.ended_at
            self.metrics.observe_stage("end_of_speech", end_of_speech)
            self.turn_log.update(sid, turn_id, timings={"end_of_speech_s": end_of_speech})
            self.emit("timings", {"turn_id": turn_id, "stage": "vad", "end_of_speech_s": round(end_of_speech, 4)},
                      to=sid)
            if self.save_dir is not None:
                self._save(session, turn_id, speech.pcm)
        self.release_held(session)

    def _cancel(self, session: Session, action: CancelTurn) -> None:
        cancel = messages.CancelTurn(session.sid, action.turn_id, action.reason, forget=action.forget)
        self.put("requests", cancel)
        self.put("tts", cancel)
        session.held.clear()
        if action.forget:
            log.debug("speculative turn discarded (%s)", action.reason, extra=turn_ids(session.sid, action.turn_id))
            return
        self.metrics.turns_interrupted.labels(action.reason).inc()
        self.turn_log.front_ended(session.sid, action.turn_id, action.reason, interrupted=True)
        log.info("turn cancelled (%s)", action.reason, extra=turn_ids(session.sid, action.turn_id))

    def _first_audio(self, session: Session, action: FirstAudio) -> None:
        for key, seconds in action.times.items():
            self.metrics.observe_stage(key.removesuffix("_s"), seconds)
        self.turn_log.update(session.sid, action.turn_id, timings=action.times)
        self.emit("timings", {"turn_id": action.turn_id, "stage": "front",
                              **{k: round(v, 4) for k, v in action.times.items()}}, to=session.sid)

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
