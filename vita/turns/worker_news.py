"""What the turn adapter does with a worker's output for a session, on its thread: the reply's own echo and speech
over it that made no sense dropped, a speculative turn's outputs held until it is committed, facts recorded, and
what the client is told of the rest, as a client event (the words heard, a tool's use, what the camera showed, a
tool the client must run, a stage's timings). Reply audio and text wait for the reply to be heard (the adapter's
pacing and its unheard text)."""

from __future__ import annotations

import base64
import logging
import re
import time

from vita import client_events, messages
from vita.client_events import ClientEvent, ErrorNotice, ReplyDelta, ResponseText
from vita.messages import ReplyText, SessionError, Transcript, TtsChunk, TurnEnded, WorkerOutput
from vita.ops.logs import turn_ids
from vita.turns.reply_sinks import PaceDue
from vita.turns.sessions import Session
from vita.turns.turn_events import (
    ECHOED,
    InterjectionHeard,
    Interrupted,
    Route,
    TurnHeard,
    TurnUnanswered,
    WorkerProgress,
)
from vita.words import asks_again, echoes

log = logging.getLogger("vita.turns")

SENTENCE_END = re.compile(r"[.!?](\s|$)")  # a reply's first sentence is over
# Timings the turn log keeps but no client is sent: the prefix cache is shared by every session, and each of these
# tells whether it held a prompt's opening (another user's words): the count, and whether the reading of unsure
# words found them already cached.
SERVER_ONLY_TIMINGS = frozenset({"cached_tokens", "prefilled_tokens", "words_unread", "words_logprob"})


class WorkerNews:
    """A part of TurnController (vita/turns/turn_control.py): its methods run on the session's thread, with the
    controller's own (``_handle``, ``tell``, ``records``, ``_release_held``, ``_say_unheard``)."""

    def _working(self, session: Session, working: messages.TurnWorking) -> None:
        """The LLM worker is at work on the turn: nothing to tell, nothing to record, no stall."""
        self._handle(session, WorkerProgress(time.monotonic(), working.turn_id))

    def _interjection(self, session: Session, heard: messages.InterjectionText) -> None:
        """Short speech over the reply, heard: the machine decides whether it was a command."""
        log.debug("heard over the reply: %r", heard.text, extra=turn_ids(session.sid, heard.turn_id))
        replying, so_far = session.replying
        said = (*session.said, so_far) if replying == heard.turn_id else tuple(session.said)
        # (speech that held the reply: it began over it, and was quieter than the user, so the letters may tell too)
        echo = (session.turns.held_for(heard.pause)
                and echoes(heard.text, said, True, self.rules.stop_phrases, alike=True))
        if echo:
            log.info("heard the reply's own echo over it: %r", heard.text, extra=turn_ids(session.sid, heard.turn_id))
        self._handle(session, InterjectionHeard(time.monotonic(), heard.turn_id, heard.pause, heard.text, echo))

    def record(self, message: WorkerOutput) -> None:
        """Facts for /metrics and the turn log, taken whether or not the turn is still current."""
        self.records.worker_fact(message)

    def _on_output(self, session: Session, message: WorkerOutput) -> None:
        turn_id = getattr(message, "turn_id", None)
        if (isinstance(message, Transcript) and session.speaker_echo and turn_id == session.turns.active_turn
                and echoes(message.text, tuple(session.said), over_echo=turn_id in session.over_echo,
                           phrases=self.rules.stop_phrases)):
            # the reply heard back from a speaker: no question
            log.info("dropped the reply's own echo: %r", message.text, extra=turn_ids(session.sid, turn_id))
            self._handle(session, Interrupted(time.monotonic(), ECHOED))
            return
        if turn_id in session.over_echo and turn_id == session.turns.active_turn:
            # Speech that began over the reply's audible echo and did not interrupt it, answered with a request to
            # say it again (Whisper, or the model reading it, made nothing of it): what is left of the echo ("Thank
            # you so much.", "There are days going to be."), not a question. Judged on the reply's first sentence,
            # its audio held until then with the other held outputs (a request to say it again is quick to voice:
            # its first words played).
            if isinstance(message, TtsChunk):
                session.held.append(message)
                return
            if isinstance(message, ReplyText) and self._echo_made_no_sense(session, message):
                return
        if isinstance(message, Transcript):  # a speculative turn's words have a say in whether the turn ends
            self._handle(session, TurnHeard(time.monotonic(), turn_id, message.text))
        decision = session.turns.route(turn_id)
        if decision is Route.HOLD:  # a speculative turn's: facts and delivery wait for its commit
            session.held.append(message)
            return
        self._said(session, message)
        self.record(message)
        session.trace.worker_fact(message)
        if isinstance(message, SessionError):
            self.tell(ErrorNotice(message.code, message.message, turn_id), to=session.sid)
        elif decision is Route.DELIVER:
            self._deliver(session, message)

    @staticmethod
    def _said(session: Session, message: WorkerOutput) -> None:
        """What the assistant has said (once a message is past any hold: a held one comes this way again)."""
        turn_id = getattr(message, "turn_id", None)
        if isinstance(message, ReplyText) and not message.done:
            replying, so_far = session.replying
            session.replying = (turn_id, (so_far if replying == turn_id else "") + message.delta)
        elif isinstance(message, ReplyText) and message.text:
            session.said.append(message.text)
        elif (isinstance(message, TurnEnded) and message.reason == "cancelled" and message.spoken
              and turn_id in session.voiced):  # a reply cut short: what was sent of it echoes as well
            session.said.append(message.spoken)

    def _echo_made_no_sense(self, session: Session, message: ReplyText) -> bool:
        """Judge the reply to speech over the echo on its first sentence: drop the turn (True), or let its held
        audio go on."""
        turn_id = message.turn_id
        so_far = message.text if message.done else session.over_echo_reply.get(turn_id, "") + message.delta
        session.over_echo_reply = {turn_id: so_far}
        if not message.done and not SENTENCE_END.search(so_far):
            return False
        if asks_again(so_far):  # (its cancel drops what was held)
            log.info("dropped speech over the reply's echo that made no sense", extra=turn_ids(session.sid, turn_id))
            self._handle(session, Interrupted(time.monotonic(), ECHOED))
            return True
        session.over_echo.remove(turn_id)  # a request of the user's after all: its reply goes as any other
        self._release_held(session)
        return False

    def _deliver(self, session: Session, message: WorkerOutput) -> None:
        sid, turn_id, now = session.sid, message.turn_id, time.monotonic()
        if isinstance(message, TtsChunk):
            if message.pcm and turn_id not in session.voiced:
                session.voiced.append(turn_id)
            session.output.play(message, now)
            return
        self._handle(session, WorkerProgress(now, turn_id))  # a slow worker at work on the turn is not a stuck one
        if isinstance(message, ReplyText):
            session.unheard.append(message)  # a reply that may yet be withdrawn unheard leaves no text on the page
            if session.turns.first_audio_sent or turn_id in session.silent_turns:  # (a text-only turn hears none)
                self._say_unheard(session)
        elif isinstance(message, TurnEnded) and message.stage == "llm" and message.reason != "done":
            # Nothing will be spoken (no speech recognised, cancelled, error): back to listening.
            self._handle(session, TurnUnanswered(now, turn_id, message.reason))
        elif (event := client_event_for(message)) is not None:
            self.tell(event, to=sid)

    @staticmethod
    def _release_held(session: Session) -> None:
        """Deliver the held outputs of the active turn in order, after the current actions."""
        held, session.held = session.held, []
        for message in held:
            session.actor.follow(message)
        session.actor.follow(PaceDue(timer=False))  # the paced audio of a reply held while the user spoke goes on

    def _say_unheard(self, session: Session) -> None:
        """The reply's text so far, now that its audio is heard (or it ended with none)."""
        unheard, session.unheard = session.unheard, []
        for message in unheard:
            if message.done:
                self.tell(ResponseText(message.turn_id, message.text), to=session.sid)
            else:
                self.tell(ReplyDelta(message.turn_id, message.delta), to=session.sid)


def client_event_for(message: WorkerOutput) -> ClientEvent | None:
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
