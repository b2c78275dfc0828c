"""The front's adapter around each session's turn-taking state machine (``vita/turns/turn_taking.py``).

Socket handlers, the VAD and the output dispatcher post what happened to the session's mailbox
(``vita/turns/session_actor.py``); on the session's thread the machine decides and this module carries out its
actions: TurnRequests and CancelTurns to the workers, events to the client, the turn log and metrics, timers,
closing the session. What an action sets off (a committed turn's held outputs, a failed put's unanswered turn)
is handled after the action list, never inside it, so actions leave in the order the machine gave them.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, get_args

import numpy as np

from vita import messages
from vita.client_events import (
    Duck,
    ErrorNotice,
    ReplyAudio,
    StopSpeaking,
    Timings,
    TurnStarted,
    Unduck,
)
from vita.config import Config
from vita.cpu import trim_heap
from vita.hearing.end_of_turn import WINDOW_S
from vita.hearing.vad import SAMPLE_RATE
from vita.ops.logs import turn_ids
from vita.ops.metrics import FrontMetrics
from vita.ops.session_trace import SessionTrace
from vita.ops.tracing import Tracing
from vita.ops.turn_log import TurnLogger
from vita.turns.ears import Ears
from vita.turns.reply_pacer import Fate
from vita.turns.reply_sinks import PaceDue, ReplyOutput, SinkEvents, reply_output
from vita.turns.session_actor import AudioIn, ClockTick, Mail, SessionActor
from vita.turns.sessions import SeatLine, Session
from vita.turns.turn_events import (
    STALLED,
    Action,
    AudioSent,
    CarrySpeech,
    CloseSession,
    CommitTurn,
    Disconnected,
    EndPauseAfter,
    EndUtterance,
    Event,
    FinishAfter,
    FirstAudio,
    HearInterjection,
    Interrupted,
    JudgeTurn,
    PauseWaited,
    Phase,
    PlaybackDone,
    RecordingToggled,
    ReleaseHeld,
    ReplyComplete,
    Route,
    Send,
    SpeechDropped,
    StartTurn,
    StopTurn,
    Tick,
    TurnDone,
    TurnJudged,
    TurnRules,
    TurnUnanswered,
)
from vita.turns.turn_records import TurnRecords
from vita.turns.turn_taking import TurnTaking
from vita.turns.worker_news import WorkerNews
from vita.words import stop_phrases

log = logging.getLogger("vita.turns")

Tell = Callable[..., None]  # tell(ClientEvent, to=sid): each door says it in its own words
Put = Callable[[str, Any], bool]  # put(queue_name, message) -> False if the queue was full (message dropped)
FRAMES_PER_TURN = 4
INTERJECTION_MAX_S = 3.0  # ASR hears at most the last 3 s of speech over a reply (a command is a few words)
HOLD_FOR_WORDS_S = 1.2  # over a speaker's echo, speech holds the reply at most this long for ASR to hear it (~0.3 s)
TYPED_FRAMES_WINDOW_S = 2.0  # a typed turn takes the camera frames of the last two seconds
MAX_SILENT_TURNS = 16  # text-only turns remembered per session
AUDIO_GONE_S = 2.0  # no audio for this long while the user was speaking: their speech has ended
SESSION_JOIN_S = 2.0  # how long ending a session waits for its thread (then it ends on its own, after its puts)
END_SESSION_PATIENCE_S = 30.0  # how long a session's EndSession is retried while a worker's queue stays full
END_SESSION_RETRY_S = 0.5  # between those retries (a queue that is gone refuses at once)
FRAME_SEND_EVERY_S = 0.9  # while the user speaks, their camera's newest picture goes to the vision stage this often
EVENTS = get_args(Event)  # the turn machine's events, as mail


class TurnController(WorkerNews):
    def __init__(self, config: Config, ears: Ears, tell: Tell, put: Put, disconnect: Callable[[str], None],
                 workers_ready: Callable[[], bool], metrics: FrontMetrics, turn_log: TurnLogger, *,
                 line: SeatLine | None, tracing: Tracing | None = None):
        self.config = config
        self.tracing = tracing or Tracing.off()
        self.line = line  # clients waiting for a seat: an idle session gives its up sooner (None: no line)
        self.metrics = metrics
        self.records = TurnRecords.for_config(config, metrics, turn_log)
        self.workers_ready = workers_ready
        self.tell = tell
        self.put = put
        self.disconnect = disconnect
        self.ears = ears
        self.end_of_turn = ears.judge
        turn = config.turn
        self.rules = TurnRules(judge=self.end_of_turn is not None, complete_threshold=turn.complete_threshold,
                               extend=turn.extend, extend_grace_s=turn.extend_grace_ms / 1000,
                               finished_words_wait_s=turn.finished_words_wait_ms / 1000,
                               incomplete_wait_s=turn.incomplete_wait_ms / 1000,
                               max_text_chars=config.limits.max_text_chars,
                               stop_phrases=stop_phrases(turn.stop_words))
        vision = config.vision
        self.vision_on = vision.text or vision.objects or vision.people or vision.hands
        self.closing = False
        self.end_retry = threading.Event()  # set when the server stops: retries of EndSession give up at once
        self._mail = self._mail_handlers()

    # --- session lifetime (any thread) ---------------------------------------------------------------------
    def attach(self, session: Session) -> None:
        """Give the session its turn machine, its ears and its mailbox thread."""
        limits = self.config.limits
        turn = self.config.turn
        session.speaker_echo = session.channel is not None and session.channel.hears_echo(turn)
        # A client whose speaker's echo comes back: speech that starts once the reply is playing may be its echo,
        # and taken as the user going on with the request it withdrew the reply ("extended") and asked again with
        # the reply's own first words in it. There it is an interruption, judged as one by its words, or nothing.
        echo_rules = dataclasses.replace(self.rules, extend_grace_s=0.0, hold_for_words_s=HOLD_FOR_WORDS_S)
        rules = echo_rules if session.speaker_echo else self.rules
        session.turns = TurnTaking(self.config.server.timeout, time.monotonic(),
                                   speculative=self.config.vad.speculative_pause_ms > 0, stall_s=limits.turn_stall_s,
                                   rules=rules, idle_when_waiting_s=self.config.server.timeout_when_waiting)
        session.listener = self.ears.session_listener(session.speaker_echo, turn)
        session.output = self._output(session)
        session.trace = SessionTrace(self.tracing, session.door, self.records.turn_log.pseudonym(session.sid))
        session.audio_at = time.monotonic()
        tick = min(1.0, self.config.server.timeout / 4, limits.turn_stall_s / 4)
        session.actor = SessionActor(f"vad-{session.sid}", lambda item: self.receive(session, item), tick_s=tick,
                                     vad_needs=lambda: session.listener.samples_to_next_step())
        session.actor.start()

    def _output(self, session: Session) -> ReplyOutput:
        """The session's reply audio: `ReplyAudio` events through its channel, paced, or its door's WebRTC track."""
        def fate(turn_id: int) -> Fate:
            route = session.turns.route(turn_id)
            return Fate.SEND if route is Route.DELIVER else Fate.HOLD if route is Route.HOLD else Fate.DROP

        events = SinkEvents(sent=lambda now, turn_id, seconds: self._handle(session, AudioSent(now, turn_id, seconds)),
                            complete=lambda now, turn_id: self._handle(session, ReplyComplete(now, turn_id)),
                            played=session.listener.played)
        return reply_output(self.config.tts, lambda pcm: self.tell(ReplyAudio(pcm), to=session.sid), fate,
                            lambda delay: session.actor.after(delay, PaceDue()), events,
                            lambda: session.channel.track() if session.channel is not None else None)

    def detach(self, session: Session) -> None:
        """End the session: its turn is cancelled, then the workers forget it, then its thread ends — in that
        order, on its thread, so no VAD step can start a turn after the workers were told the session ended."""
        if session.actor is None:
            return
        session.actor.post(Disconnected(time.monotonic()))
        session.actor.call(lambda: self._end_session(session))
        session.actor.call(trim_heap)  # what its messages took is free now: the OS gets it back
        session.actor.stop()
        session.actor.join(SESSION_JOIN_S)

    def _end_session(self, session: Session) -> None:
        """Tell the workers to forget the session (its history, its voice's state). A turn's put may be dropped
        when a queue stays full; this one is retried for END_SESSION_PATIENCE_S on the ending session's own
        thread (no other session waits), or the workers would keep that state for good."""
        sid = self.records.session_ended(session)
        deadline = time.monotonic() + END_SESSION_PATIENCE_S
        for name in ("requests", "tts"):
            while not self.put(name, messages.EndSession(sid)):
                if self.closing or time.monotonic() >= deadline:
                    log.warning("%s: the end of the session was not delivered", name, extra=turn_ids(sid))
                    break
                self.end_retry.wait(END_SESSION_RETRY_S)  # a queue that is gone fails at once: do not spin

    def post(self, session: Session, event: Event) -> None:
        if session.actor is not None:
            session.actor.post(event)

    def post_audio(self, session: Session, pcm: Any, rate: int) -> bool:
        """Microphone audio for the session's VAD; False when its backlog is full (dropped)."""
        session.audio_at = time.monotonic()  # as it arrives (a busy session thread still has audio coming)
        return session.actor is not None and session.actor.post_audio(pcm, rate)

    def camera_frame(self, session: Session, picture: messages.Picture) -> None:
        """A checked camera picture: kept for the turns; while the user speaks, the newest one also goes to the
        vision stage now and then, so that the question's picture is analysed before the question ends (while
        they are silent, nothing is analysed: a camera left on costs no CPU)."""
        now = time.monotonic()
        session.frames.add(picture, now)
        if (self.vision_on and session.turns is not None and session.turns.user_speaking
                and now - session.frame_sent_at >= FRAME_SEND_EVERY_S and session.actor is not None):
            session.frame_sent_at = now
            session.actor.call(lambda: self.put("requests", messages.CameraFrame(session.sid, picture)))

    def restart_listening(self, session: Session, reason: str) -> None:
        """VITA's recording-started/-stopped: activity, stop any playback, start the VAD afresh."""
        self.post(session, RecordingToggled(time.monotonic(), reason))
        if session.actor is not None:
            session.actor.call(session.listener.reset)

    def report(self, session: Session, code: str, message: str) -> None:
        if session.should_report(code):
            self.tell(ErrorNotice(code, message), to=session.sid)

    def interrupt(self, session: Session, reason: str, notice: ErrorNotice | None = None) -> None:
        """Stop whatever the assistant is doing for this session; `notice` goes to the client only if it had a
        turn in flight."""
        def run() -> None:
            actions = self._handle(session, Interrupted(time.monotonic(), reason))
            if notice is not None and any(isinstance(a, StopTurn) and a.audible for a in actions):
                self.tell(notice, to=session.sid)

        if session.actor is not None:
            session.actor.call(run)

    def reset_history(self, session: Session, then: Callable[[], None]) -> None:
        """Forget the conversation: the turn in flight is cancelled, then the workers clear the history (of that
        turn too), then `then` (the door tells its client), in that order on the session's thread."""
        def reset() -> None:
            self.put("requests", messages.ResetHistory(session.sid))
            then()

        self.interrupt(session, "reset")
        if session.actor is not None:
            session.actor.call(reset)

    def edit_history(self, session: Session, turn_id: int, reply: str | None) -> None:
        """Change what the history keeps of one turn: its reply cut to what the user heard, or (None) the whole
        exchange dropped."""
        self.put("requests", messages.EditHistory(session.sid, turn_id, reply))

    def close(self) -> None:
        """The server is stopping: the end-of-turn model's thread goes too, and no session's end is retried."""
        self.closing = True
        self.end_retry.set()
        self.records.close()
        if self.end_of_turn is not None:
            self.end_of_turn.close()

    # --- the session's thread --------------------------------------------------------------------------------
    def receive(self, session: Session, item: Mail) -> None:
        """One item of the session's mail (see SessionActor), to the handler of its kind; every other kind is a
        worker's output."""
        self._mail.get(type(item), self._on_output)(session, item)

    def _mail_handlers(self) -> dict[type, Callable[[Session, Any], None]]:
        """The kinds of mail a session's thread gets that are not plain worker outputs, and what handles each: the
        microphone, the clock, the reply's pacing, the worker's word that it is at work or heard an interjection,
        the turn machine's own events."""
        handlers: dict[type, Callable[[Session, Any], None]] = {
            AudioIn: self._listen,
            ClockTick: self._tick,
            PaceDue: lambda session, due: session.output.due(time.monotonic(), timer=due.timer),
            messages.TurnWorking: self._working,
            messages.InterjectionText: self._interjection,
        }
        handlers.update({kind: self._handle for kind in EVENTS})
        return handlers

    def _tick(self, session: Session, _tick: ClockTick) -> None:
        now = time.monotonic()
        if session.turns.user_speaking and now - session.audio_at > AUDIO_GONE_S:
            # The client stopped sending audio mid-speech (a muted or broken microphone, or a client that never
            # meant to finish): what was heard ends where its audio did, as silence would have ended it.
            for event in session.listener.end_now(session.audio_at) or [SpeechDropped(now)]:
                session.actor.follow(event)
        give_up = self._may_give_seat_up(session, now)
        try:
            self._handle(session, Tick(now, self.workers_ready(), give_up))
        finally:
            line = self.line
            if give_up and line is not None and not session.timed_out:  # not idle after all: the line may ask
                line.keep_seat(session.sid)  # another session

    def _listen(self, session: Session, audio: AudioIn) -> None:
        try:
            events = session.listener.hear(audio.pcm, audio.rate, audio.arrived, time.monotonic())
        except Exception:  # a VAD failure must end neither this session's thread nor its turns
            log.exception("VAD step failed; resetting the segmenter", extra=turn_ids(session.sid))
            session.listener.reset()
            session.actor.follow(SpeechDropped(time.monotonic()))  # the machine forgets the half-heard speech too
            return
        for event in events:
            session.actor.follow(event)
        self.metrics.vad_lag.observe(time.monotonic() - audio.arrived)
        self.metrics.vad_audio_seconds.inc(audio.pcm.size / audio.rate)

    def _handle(self, session: Session, event: Event) -> list[Action]:
        if session.handling:  # the mailbox makes this impossible; a bug that breaks it must not go unseen
            raise RuntimeError(f"turn machine re-entered with {type(event).__name__}")
        session.handling = True
        try:
            actions = session.turns.handle(event)
            for action in actions:
                try:
                    self._carry_out(session, action)
                except Exception:  # one failed action must not skip the others (a cancel, a stop_tts)
                    log.exception("could not carry out %s", type(action).__name__, extra=turn_ids(session.sid))
            # While the reply plays, its echo must not pass for the user (vad.py _echo_guard).
            session.listener.segmenter.guarded = session.turns.phase is Phase.SPEAKING
            return actions
        finally:
            session.handling = False

    # --- the machine's actions -----------------------------------------------------------------------------
    def _carry_out(self, session: Session, action: Action) -> None:
        sid = session.sid
        if isinstance(action, Send):
            if isinstance(action.event, StopSpeaking):
                session.output.stop()  # what the client has not been sent (or heard, over WebRTC) is never sent
                if session.listener.canceller is not None:  # ...nor played: no echo of it to take out
                    session.listener.canceller.stop(time.monotonic())
            elif isinstance(action.event, Duck | Unduck):
                session.output.duck(isinstance(action.event, Duck))
            self.tell(action.event, to=sid)
        elif isinstance(action, StartTurn):
            self._start(session, action)
        elif isinstance(action, CommitTurn):
            self._commit(session, action)
        elif isinstance(action, StopTurn):
            self._cancel(session, action)
        elif isinstance(action, FirstAudio):
            self._first_audio(session, action)
        elif isinstance(action, FinishAfter):
            session.actor.after(action.delay, PlaybackDone(time.monotonic() + action.delay, action.turn_id))
        elif isinstance(action, TurnDone):
            session.silent_turns.discard(action.turn_id)
            self._say_unheard(session)  # a reply with no audio at all still shows its text
            self.records.finished(session, action.turn_id, action.reason)
        elif isinstance(action, JudgeTurn):
            self._judge(session, action)
        elif isinstance(action, EndPauseAfter):
            session.actor.after(action.delay, PauseWaited(time.monotonic() + action.delay, action.pause))
        elif isinstance(action, HearInterjection):
            pcm = action.speech.pcm[-int(INTERJECTION_MAX_S * SAMPLE_RATE) * 2:]
            self.put("requests", messages.InterjectionCheck(sid, action.turn_id, action.pause, pcm, SAMPLE_RATE))
        elif isinstance(action, EndUtterance):
            for event in session.listener.end_now(time.monotonic(), at_pause=action.at_pause):
                session.actor.follow(event)
        elif isinstance(action, CarrySpeech):
            session.listener.carry(action.speech)
        elif isinstance(action, ReleaseHeld):
            self._release_held(session)
        elif isinstance(action, CloseSession):
            log.info("idle for %.0f s: timing out", session.turns.idle_for(time.monotonic()), extra=turn_ids(sid))
            self.disconnect(sid)
            session.timed_out = True  # (not if the disconnect failed: its seat promise goes back to the line)

    def _may_give_seat_up(self, session: Session, now: float) -> bool:
        """Idle past the line's limit, and a waiting client not yet promised another session's seat."""
        return (self.line is not None and session.turns.idle_for(now) > self.config.server.timeout_when_waiting
                and self.line.give_seat_to_line(session.sid))

    def _start(self, session: Session, action: StartTurn) -> None:
        now = time.monotonic()
        speech = action.speech
        if speech is not None:
            frames = session.frames.sample(speech.started_at, speech.ended_at, FRAMES_PER_TURN)
        else:
            frames = session.frames.sample(now - TYPED_FRAMES_WINDOW_S, now)
        session.turn_frames = len(frames)
        source = "speech" if speech is not None else "text"
        # Speech over the reply's audible echo that did not interrupt it (an interruption is the user's own: misheard,
        # they are asked again)
        if (speech is not None and session.speaker_echo and not action.stopped_reply
                and session.listener.began_over_echo(speech)):
            session.over_echo.append(action.turn_id)
        if not self.workers_ready():  # a worker is restarting: say so now instead of a turn that waits for it
            if not action.speculative:
                self.report(session, "not_ready", "The assistant is still loading or restarting its models; "
                                                  "please ask again in a moment.")
            session.actor.follow(TurnUnanswered(now, action.turn_id, "not ready"))
            return
        sent = self.put("requests", messages.TurnRequest(
            session.sid, action.turn_id, audio=speech.pcm if speech else b"", sample_rate=SAMPLE_RATE,
            text=action.text, frames=frames, voice=session.voice, reply_mode=session.reply_mode,
            speculative=action.speculative, unless_command=self.rules.stop_phrases if action.stopped_reply else (),
            timezone=session.timezone, tools=session.tools, instructions=session.instructions,
            client_tools=session.client_tools, tool_outputs=() if action.speculative else session.tool_outputs,
            output_audio=session.output_audio, max_tokens=session.max_tokens, must_call=session.must_call,
            trace=session.trace.started(action.turn_id, speech, source, action.speculative),
            record_to=self.records.recording(session.sid, action.turn_id, source)
            if session.record_turns or self.config.recording.enabled else "",
            user_key=session.user_key or "", off_record=session.off_record))
        if not session.output_audio:  # (a Realtime response's own modality lasts its turn: the session's may change)
            session.silent_turns.add(action.turn_id)
            if len(session.silent_turns) > MAX_SILENT_TURNS:  # a discarded turn never reaches TurnDone
                session.silent_turns.discard(min(session.silent_turns))
        if not action.speculative:
            session.tool_outputs = ()  # taken by this turn
        if not sent:  # drop policy: this turn goes unanswered, with a readable error to this session only
            self.report(session, "server_busy", "The assistant is overloaded and dropped what you said; "
                                                "please say it again.")
            session.actor.follow(TurnUnanswered(now, action.turn_id, "server busy"))
        elif action.speculative:
            log.debug("speculative turn started", extra=turn_ids(session.sid, action.turn_id))

    def _commit(self, session: Session, action: CommitTurn) -> None:
        sid, turn_id, speech = session.sid, action.turn_id, action.speech
        source = "speech" if speech is not None else "text"
        self.records.committed(session, turn_id, source, action.text, speech)
        if session.user_key:  # what the turn would keep in memory is kept now (vita/memory/)
            self.put("requests", messages.TurnCommitted(sid, turn_id))
        self.tell(TurnStarted(turn_id, source, action.text, session.turn_frames, speech.details if speech else {}),
                  to=sid)
        if speech is not None:
            end_of_speech = time.monotonic() - speech.ended_at
            self.records.end_of_speech(sid, turn_id, end_of_speech, speech.pcm)
            self.tell(Timings(turn_id, "vad", {"end_of_speech_s": round(end_of_speech, 4)}), to=sid)
        self._release_held(session)  # what the speculative turn produced meanwhile

    def _judge(self, session: Session, action: JudgeTurn) -> None:
        """Ask the end-of-turn model (on its own thread, ~30-60 ms); the answer comes back as mail, and the VAD
        goes on meanwhile (speech resuming makes the answer stale: the machine then ignores it)."""
        def answer(probability: float, took: float) -> None:
            self.metrics.observe_stage("end_of_turn_model", took)
            log.debug("end of turn p=%.2f (%.0f ms)", probability, took * 1000, extra=turn_ids(session.sid))
            session.actor.post(TurnJudged(time.monotonic(), action.pause, probability))

        window = WINDOW_S * SAMPLE_RATE  # the model hears the last 8 s: hand over no more than that
        self.end_of_turn.judge(session.sid, np.frombuffer(action.speech.pcm, np.int16)[-window:].copy(), answer)

    def _cancel(self, session: Session, action: StopTurn) -> None:
        session.over_echo_reply.pop(action.turn_id, None)
        cancel = messages.CancelTurn(session.sid, action.turn_id, action.reason, forget=action.forget)
        self.put("requests", cancel)
        self.put("tts", cancel)
        session.held.clear()
        if action.reason == STALLED:
            self._say_unheard(session)  # the voice is stuck, not the text: the user still reads the reply
        session.unheard.clear()
        self.records.cancelled(session, action.turn_id, action.reason, action.forget)

    def _first_audio(self, session: Session, action: FirstAudio) -> None:
        self.records.first_audio(session, action.turn_id, action.times)
        self.tell(Timings(action.turn_id, "front", {k: round(v, 4) for k, v in action.times.items()}), to=session.sid)
        self._say_unheard(session)
