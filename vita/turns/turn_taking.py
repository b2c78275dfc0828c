"""One session's turn-taking, decided in one place.

What speech onset, a pause, end of speech, typed text, recording start/stop, reset, the workers' outputs and the
clock do to the assistant's turn. Pure: no threads, no I/O, the time comes with each event. ``TurnTaking.handle``
takes an event and returns the actions the front carries out (``vita/turns/turn_control.py``); ``route`` says whether a
worker output for a turn is delivered, held or dropped. The user's speech is ruled here; the reply's progress, the
clock and the session's life in ``vita/turns/reply_progress.py``, a part of the same machine.

A turn's life: LISTENING → (start) THINKING → (first audio) SPEAKING → (client played the last audio) LISTENING.
A pause in speech starts a *speculative* turn (ASR and generation run while the end-of-speech wait goes on; its
outputs are held) and asks the end-of-turn model whether the user has finished: "complete" ends the utterance at
once, otherwise a longer silence does. The end of speech commits the speculative turn without redoing anything;
speech resuming discards it: no audio, no history, no turn-log row. Ended by the model before the speculative
turn's words are in, the turn's reply waits for them: words that go on ("I have a question.") hold it until the
long silence, and speech meanwhile joins the request (``ActiveTurn.held_by``).

Speech while a committed turn is active is judged when it is *confirmed* (voiced long enough to be more than a
cough or a "mm-hmm"): over the reply it interrupts it (barge-in; the reply is ducked from the onset meanwhile); before
any reply audio it *extends* the turn: the request goes on, so the turn sent is withdrawn and the next utterance
carries its audio (one reply for the whole request, not two). Unconfirmed speech over a turn is not a turn.
"""

from __future__ import annotations

from vita.client_events import (
    ErrorNotice,
    TextQueued,
    VadChanged,
)
from vita.hearing.voice_gate import quieter_by
from vita.turns.reply_progress import ReplyProgress
from vita.turns.turn_events import (
    DISCARDED,
    Action,
    CarrySpeech,
    EndPauseAfter,
    EndUtterance,
    Event,
    HearInterjection,
    InputCommitted,
    InterjectionHeard,
    JudgeTurn,
    PauseWaited,
    Phase,
    ReleaseHeld,
    Route,
    Send,
    Speech,
    SpeechConfirmed,
    SpeechDropped,
    SpeechPaused,
    SpeechPausedLonger,
    SpeechResumed,
    SpeechStarted,
    StartTurn,
    TextTyped,
    TurnHeard,
    TurnJudged,
    TurnRules,
    UtteranceEnded,
    joined,
)
from vita.turns.turn_state import ActiveTurn, OpenPause, TurnMaking, UserSpeech
from vita.words import ends_sentence, is_stop_command, only_asks_to_stop, sounds_unfinished

SPECULATE_MAX_S = 10.0  # speech longer than this is not speculated on (its ASR alone costs ~0.3 s)
SPECULATION_BACKOFF_S = 0.5  # after a discarded speculative turn, the next waits this long, doubling each time
# A request already this long is not extended further: what follows is a turn of its own. Bounds what one turn
# sends to ASR (speech cut into words, each pause answered and withdrawn by the next word, grew one request
# without end: Whisper then took seconds on it and every other session's turns waited behind it).
MAX_EXTENDED_S = 12.0
# A request whose turn ended at a pause and was withdrawn because the user went on (`extended`) this often is
# ended by the long silence alone for the rest of it, and the end-of-turn model is no longer asked at its pauses.
# A person with a list to say is not answered at every comma; speech cut into words no longer makes a turn (and a
# shared end-of-turn model job) at every gap.
EARLY_ENDS_PER_REQUEST = 2
# Among other people talking, speech going on with a request after its reply began, or begun over the reply and
# ended after it without being confirmed, is the user's only within this of the request's voice (VoiceGate's
# quieter_by). People 10 dB under the voice (`python -m scripts.bench.stages.interruptions grace`): what went on as
# the reply began stood more than 4 dB under the request in 21 of 21 (195 requests); the same voices going on with
# their requests 0.3 s into the reply, in 0 of 61.
ROOM_UNDER_REQUEST_DB = 4.0


def others_speech(heard: Speech, request: Speech | None, room_talks: bool) -> bool:
    """Among other people talking, speech more than ROOM_UNDER_REQUEST_DB under the voice of the user's `request` is
    theirs (a request's own voice unknown: the user's)."""
    return room_talks and request is not None and quieter_by(heard.pcm, request.pcm) > ROOM_UNDER_REQUEST_DB


class TurnTaking(ReplyProgress, TurnMaking):
    """The turn state of one session: the turn in flight and the speech being heard, each None when there is
    none. Not thread-safe: its owner serialises calls."""

    def __init__(self, idle_timeout_s: float, now: float, speculative: bool = True, stall_s: float = 15.0,
                 rules: TurnRules | None = None, idle_when_waiting_s: float | None = None):
        self.idle_timeout_s = idle_timeout_s
        self.idle_when_waiting_s = idle_when_waiting_s  # the idle limit while others wait for a seat (None: the same)
        self.rules = rules or TurnRules()
        self.stall_s = stall_s  # a committed turn with no reply audio nor worker news for this long is cancelled
        self.speculative_enabled = speculative
        self.turn: ActiveTurn | None = None
        self.speech: UserSpeech | None = None
        self.pending_text = ""  # typed while the user was speaking: joins the spoken turn
        self.last_activity = now
        self.pause_seq = 0  # pauses so far; a TurnJudged counts only for the latest, still-open one
        # Turns of the request being made withdrawn because the user went on (EARLY_ENDS_PER_REQUEST); counted
        # afresh by speech that goes on with no request, or by a request the client commits.
        self.went_on = 0
        self._last_turn = 0
        # Speech that ended while its words, which hold the reply, were still being heard, and its end.
        self.unchecked: tuple[UserSpeech, UtteranceEnded] | None = None

    # --- queries -----------------------------------------------------------------------------------------------
    @property
    def active_turn(self) -> int | None:
        return self.turn.turn_id if self.turn is not None else None

    @property
    def phase(self) -> Phase:
        return self.turn.phase if self.turn is not None else Phase.LISTENING

    @property
    def speculative(self) -> bool:
        return self.turn is not None and self.turn.speculative

    @property
    def user_speaking(self) -> bool:
        return self.speech is not None

    @property
    def first_audio_sent(self) -> bool:
        return self.turn is not None and self.turn.first_audio_at is not None

    @property
    def pause(self) -> OpenPause | None:
        return self.speech.pause if self.speech is not None else None

    def held_for(self, check: int) -> bool:
        """The active turn's reply is held for the words of that check (of speech over it)."""
        return self._held_for_words(check) is not None

    def route(self, turn_id: int | None) -> Route:
        if turn_id is None or turn_id != self.active_turn:
            return Route.DROP
        # Held too: the reply of a request the user may be going on with (speech began before any of it was heard):
        # if they are, it is withdrawn unheard; if it was a cough, it is released (ReleaseHeld).
        # And the reply of a turn whose words are still to be heard, or said that the user is going on (held_by).
        # And the reply speech over it may have stopped, while its words are heard (checking).
        turn = self.turn
        checking = self._held_for_words() is not None
        return (Route.HOLD if turn.speculative or turn.held_by is not None or checking or self._may_continue()
                else Route.DELIVER)

    # --- the machine -------------------------------------------------------------------------------------------
    def handle(self, event: Event) -> list[Action]:
        handler = getattr(self, f"_on_{type(event).__name__}")
        return handler(event)

    def _on_SpeechStarted(self, e: SpeechStarted) -> list[Action]:
        self.last_activity = e.now
        turn = self.turn
        # Speech that began before any of the reply was heard goes on with the request, even if the reply's first
        # audio arrives before the speech is confirmed (the user cannot have been answering it).
        before_reply = self._committed() and (
            turn.first_audio_at is None or e.now - turn.first_audio_at <= self.rules.extend_grace_s)
        carrying = self.speech.carrying if self.speech is not None else None
        if not before_reply and carrying is None:
            self.went_on = 0  # a request of its own, not one going on: after a reply, a barge-in, a reset
        stopped_reply = carrying is not None and self.speech.stopped_reply
        over = turn.speech if self.first_audio_sent and self._committed() else None
        self.speech = UserSpeech(e.now, before_reply=before_reply, carrying=carrying, stopped_reply=stopped_reply,
                                 over=over)
        actions: list[Action] = [Send(VadChanged(speaking=True))]
        return actions + self._duck()  # quieter until the speech is confirmed (an interruption) or not

    def _on_SpeechConfirmed(self, e: SpeechConfirmed) -> list[Action]:
        speech = self.speech
        if speech is None:
            return []
        if self._others_going_on(speech, e.speech, e.room_talks):
            speech.others = True  # (nor a request, nor an interruption: heard on as a "mm-hmm" is)
            return self._unduck()
        speech.confirmed = True
        if not self._committed():
            return []
        if self._continues_request(speech):
            return self._extend(speech)
        waiting = self._held_for_words() is not None  # (one check at a time)
        if self.rules.hold_for_words_s and self.first_audio_sent and e.speech and not e.loud and not waiting:
            # (over a speaker's echo, and quieter than the user's voice: the reply is held, not stopped, until the
            # words say whose they are)
            self.pause_seq += 1
            speech.checking = (self.active_turn, self.pause_seq)
            return [HearInterjection(self.active_turn, self.pause_seq, e.speech),
                    EndPauseAfter(self.pause_seq, self.rules.hold_for_words_s)]
        speech.stopped_reply = True
        return self._cancel("barge-in")

    def _on_SpeechDropped(self, e: SpeechDropped) -> list[Action]:
        held_before = self._may_continue()
        speech, self.speech = self.speech, None
        actions: list[Action] = [Send(VadChanged(speaking=False, dropped=True))] + self._unduck()
        if speech is not None and speech.carrying is not None:  # a cough after all: the request goes as it was
            carried = speech.carrying
            text, self.pending_text = self.pending_text, ""
            turn_id = self._new_turn(stopped_reply=speech.stopped_reply)
            return actions + [CarrySpeech(None), StartTurn(turn_id, carried, text, stopped_reply=speech.stopped_reply),
                              *self._commit(turn_id, carried, text, e.now)]
        return actions + self._release(held_before) + self._typed_turn(e.now)

    def _on_SpeechPaused(self, e: SpeechPaused) -> list[Action]:
        speech = self.speech
        if speech is None:
            return []
        if self._committed():
            if self._continues_request(speech) and self.rules.judge:  # "Keep it short." before the reply: finished?
                if not e.kept:  # (a word too short to keep: the model neither judges nor ends it, nor drops it)
                    return []
                return [JudgeTurn(self._open_pause(e.now), e.speech)] if self._trust_pauses() else []
            if self.rules.stop_phrases and self.first_audio_sent and not speech.confirmed:
                # Short speech over the reply: "Stop." is as short as "Mm-hmm.", so its words decide (ducked
                # meanwhile; a backchannel unducks when they come back).
                return [HearInterjection(self.active_turn, self._open_pause(e.now), e.speech)]
            # Unconfirmed speech over a reply is not a request; if it was a "mm-hmm", the reply need not stay quiet
            # for the whole end-of-speech wait.
            return self._unduck()
        if not e.kept:  # (the reply ended meanwhile: no turn is started on a word too short to keep)
            return []
        pause = self._open_pause(e.now)
        actions: list[Action] = []
        if self.speculative_enabled and self._may_speculate(speech, e):
            actions += self._cancel(DISCARDED)
            turn_id = self._new_turn(speculative=True, stopped_reply=speech.stopped_reply)
            speech.speculated_at = e.now
            actions.append(StartTurn(turn_id, e.speech, "", speculative=True, stopped_reply=speech.stopped_reply))
        if self.rules.judge and self._trust_pauses():  # (an answer that could end nothing costs the shared model)
            actions.append(JudgeTurn(pause, e.speech))
        return actions

    def _on_SpeechPausedLonger(self, e: SpeechPausedLonger) -> list[Action]:
        pause = self.pause
        if pause is None:
            return []
        pause.later = e.speech  # if the model's first answer is still to come, it is asked again when it is
        return self._judge_again(pause)

    def _on_TurnJudged(self, e: TurnJudged) -> list[Action]:
        pause = self.pause
        if pause is None or e.pause != pause.seq:
            return []  # the user went on (or the utterance ended) while the model thought
        if e.probability < self.rules.complete_threshold:
            pause.doubted = True
            return self._judge_again(pause)
        pause.sounds_finished = True
        if self.speculative and pause.words is None and not self.rules.extend:
            return []  # the words decide first: a turn ended early could not take the rest of the request in
        # Ended now even if the speculative turn's words are still to come: they come before its reply could, and
        # still have their say (the turn's reply is held for them: ActiveTurn.held_by).
        return self._end_at_pause(pause)

    def _on_TurnHeard(self, e: TurnHeard) -> list[Action]:
        turn = self.turn
        if turn is not None and turn.turn_id == e.turn_id and turn.held_by is not None:  # (set on committed turns)
            return self._words_after_the_end(turn, e)
        pause = self.pause
        if pause is None or e.turn_id != self.active_turn or not self.speculative:
            return []  # not the words of the pause the user is in
        pause.words = e.text
        if pause.sounds_finished:
            return self._end_at_pause(pause)
        if self.rules.judge and self.rules.finished_words_wait_s and ends_sentence(e.text) and self._trust_pauses():
            # The model doubts it, the words say a sentence ended: a shorter wait than the long silence.
            return [EndPauseAfter(pause.seq, max(0.0, pause.opened_at + self.rules.finished_words_wait_s - e.now))]
        return []

    def _on_PauseWaited(self, e: PauseWaited) -> list[Action]:
        held = self._held_for_words(e.pause)
        if held is not None:  # its words not heard in time: taken for the user's
            return self._words_checked(held, echo=False, now=e.now)
        turn = self.turn
        if turn is not None and turn.held_by is not None and turn.held_by.seq == e.pause:
            turn.held_by = None  # the long silence has passed: the reply goes, whatever the words said
            return self._release(True)
        if self.pause is None or self.pause.seq != e.pause:
            return []  # the user went on meanwhile
        return [EndUtterance()]

    def _on_InterjectionHeard(self, e: InterjectionHeard) -> list[Action]:
        held = self._held_for_words(e.pause)
        if held is not None:  # (its words decide; nothing heard, or ASR failing, is no echo: the reply stops)
            return self._words_checked(held, echo=e.echo, now=e.now)
        if e.turn_id != self.active_turn or e.pause != self.pause_seq or not self._committed():
            return []  # the reply ended or was interrupted meanwhile, or the speech went on to a later pause
        speech = self.speech
        if is_stop_command(e.text, self.rules.stop_phrases):
            # "Stop." said all there was to say, unless the speech goes on or said more ("Stop, do cats bark?"); if
            # so ("No, stop.", "Wait, tell me..."), its words decide whether it is a request (the turn goes with
            # unless_command)
            if speech is not None:
                speech.commanded = speech.pause is not None and only_asks_to_stop(e.text, self.rules.stop_phrases)
                speech.stopped_reply = speech.stopped_reply or not speech.commanded
            return self._cancel("barge-in")
        return self._unduck() if speech is None or speech.pause is not None else []

    def _on_SpeechResumed(self, e: SpeechResumed) -> list[Action]:
        self.last_activity = e.now
        speech = self.speech
        if speech is not None:
            speech.stopped_reply = speech.stopped_reply or speech.commanded  # "Stop. What about Spain?": a request
            speech.pause, speech.commanded = None, False
        if self._committed():
            return self._duck()  # the speech over the reply goes on after all
        if not self.speculative:
            return []
        if speech is not None:
            speech.discarded_in_a_row += 1
        return self._cancel(DISCARDED)

    def _on_UtteranceEnded(self, e: UtteranceEnded) -> list[Action]:
        self.last_activity = e.now
        held = self.speech is not None and self.speech is self._held_for_words()
        heard, self.speech = self.speech or UserSpeech(e.now), None
        if held:  # its words, still to come, decide what its end makes
            self.unchecked = (heard, e)
            return [Send(VadChanged(speaking=False))]
        return self._utterance_ended(heard, e, [Send(VadChanged(speaking=False))])

    def _utterance_ended(self, heard: UserSpeech, e: UtteranceEnded, actions: list[Action]) -> list[Action]:
        """What the end of the speech `heard` makes: a turn, the request going on, or nothing."""
        actions = actions + self._unduck()
        if heard.commanded:  # "Stop." stopped the reply; it asks for nothing more
            return actions + self._typed_turn(e.now)
        if self._committed() and not heard.confirmed:
            heard.others = False  # (judged again on the whole of it: the user's own words may have come in it)
            if self._continues_request(heard) and not self._others_going_on(heard, e.speech, e.room_talks):
                # a short continuation before the reply was heard: one request
                speech, stopped_reply = joined(self.turn.speech, e.speech), self.turn.stopped_reply
                actions += self._withdraw()
                turn_id = self._new_turn(stopped_reply=stopped_reply)
                text, self.pending_text = self.pending_text, ""
                return actions + [StartTurn(turn_id, speech, text, stopped_reply=stopped_reply)] + self._commit(
                    turn_id, speech, text, e.now)
            # "mm-hmm", "yeah" over the reply: not a turn, not an interruption (typed text waiting for the
            # utterance goes on its own)
            return actions + self._typed_turn(e.now)
        if (not heard.confirmed and not heard.stopped_reply and heard.over is not None
                and others_speech(e.speech, heard.over, e.room_talks)):
            # Begun over the reply and ended after it, well under the request's voice among other people talking:
            # theirs, heard over the reply's end (it was asked as a request: "There were times that made me out of
            # time."). Not speech that stopped the reply ("Stop, why?"): its words were the user's.
            return actions + (self._cancel(DISCARDED) if self.speculative else []) + self._typed_turn(e.now)
        text, self.pending_text = self.pending_text, ""
        if self.speculative and not text:
            self.turn.speculative = False  # the speculative turn heard exactly this: keep its work
            pause = heard.pause
            if pause is not None and pause.sounds_finished and pause.words is None:
                # Ended by the model before the words were in: they still have a say, until the long silence at
                # most (so words that never come, a failed ASR, hold nothing for longer than the silence would).
                self.turn.held_by, self.turn.heard_from = pause, heard
                actions.append(EndPauseAfter(pause.seq, max(0.0, pause.opened_at + self.rules.incomplete_wait_s
                                                            - e.now)))
            return actions + self._commit(self.turn.turn_id, e.speech, text, e.now)
        if self.turn is not None:
            actions += self._cancel("new turn")
        turn_id = self._new_turn(stopped_reply=heard.stopped_reply)
        return actions + [StartTurn(turn_id, e.speech, text, stopped_reply=heard.stopped_reply)] + self._commit(
            turn_id, e.speech, text, e.now)

    def _on_TextTyped(self, e: TextTyped) -> list[Action]:
        self.last_activity = e.now
        if self.user_speaking:  # the user is mid-sentence: the text joins that turn
            if len(f"{self.pending_text} {e.text}".strip()) > self.rules.max_text_chars:  # a flood, not a request
                return [Send(ErrorNotice("text_too_long", "Too much text typed while you were speaking (at most "
                                                 f"{self.rules.max_text_chars} characters wait for the turn); "
                                                 "this text was dropped."))]
            self.pending_text = f"{self.pending_text} {e.text}".strip()
            actions: list[Action] = [Send(TextQueued(e.text))]
            if self.speculative:
                actions += self._cancel(DISCARDED)  # the speculative turn did not have this text
            return actions
        self.pending_text = e.text
        return self._typed_turn(e.now)

    def _on_InputCommitted(self, e: InputCommitted) -> list[Action]:
        """A turn the client ended itself: whatever is in flight gives way (as a new utterance would)."""
        self.last_activity = e.now
        carried = self.speech is not None and self.speech.carrying is not None
        self.speech, self.pending_text = None, ""
        self.went_on = 0  # the client ended the request here
        actions: list[Action] = self._unduck() + ([CarrySpeech(None)] if carried else [])  # nothing half heard stays
        if self.turn is not None:
            actions += self._cancel("new turn")  # a speculative one is discarded, unheard
        turn_id = self._new_turn()
        return actions + [StartTurn(turn_id, e.speech, e.text)] + self._commit(turn_id, e.speech, e.text, e.now)

    # --- helpers -----------------------------------------------------------------------------------------------
    def _judge_again(self, pause: OpenPause) -> list[Action]:
        """The model doubted the pause and it has gone on: ask once more, with the silence since."""
        if not pause.doubted or pause.later is None or pause.asked_again:
            return []
        pause.asked_again = True
        return [JudgeTurn(pause.seq, pause.later)]

    def _may_speculate(self, speech: UserSpeech, e: SpeechPaused) -> bool:
        """Speculate at this pause? Each one costs the shared workers an ASR run and a prefill: after speculative
        turns that speech went on from, the next waits longer (0.5, 1, 2, 4 s...), and speech longer than
        SPECULATE_MAX_S is not speculated on (a client pausing every 0.3 s for a minute starved other sessions)."""
        if e.speech.ended_at - e.speech.started_at > SPECULATE_MAX_S:
            return False
        if not speech.discarded_in_a_row:
            return True
        return e.now - speech.speculated_at >= SPECULATION_BACKOFF_S * 2 ** (speech.discarded_in_a_row - 1)

    def _open_pause(self, now: float) -> int:
        self.pause_seq += 1
        self.speech.pause = OpenPause(self.pause_seq, now)
        return self.pause_seq

    def _end_at_pause(self, pause: OpenPause) -> list[Action]:
        """The audio model says the user has finished: so the turn ends here, unless their words say they are
        going on ("I have a question.", "...and"), or they went on after such a pause of this request twice
        already: then the long silence (or more speech) decides."""
        if pause.words is not None and sounds_unfinished(pause.words) or not self._trust_pauses():
            return []
        return [EndUtterance()]

    def _trust_pauses(self) -> bool:
        return self.went_on < EARLY_ENDS_PER_REQUEST

    def _committed(self) -> bool:
        return self.turn is not None and not self.turn.speculative

    def _may_continue(self) -> bool:
        """The user is speaking, and may be going on with the committed request (nothing of its reply heard)."""
        return (self.speech is not None and self._continues_request(self.speech) and not self.first_audio_sent
                and self._committed())

    def _release(self, held_before: bool) -> list[Action]:
        return [ReleaseHeld()] if held_before and self.route(self.active_turn) is Route.DELIVER else []

    def _words_after_the_end(self, turn: ActiveTurn, e: TurnHeard) -> list[Action]:
        """The words of a turn the model ended before they were in: a sentence that goes on ("I have a question.",
        "...and") keeps its reply held until the long silence has passed (more speech meanwhile extends the
        request, as if the turn had never ended); otherwise the reply goes."""
        pause = turn.held_by
        pause.words = e.text
        if sounds_unfinished(e.text):
            return []  # held until the long silence (the wait set at the commit), or more speech
        turn.held_by = None
        return self._release(True)

    def _continues_request(self, speech: UserSpeech) -> bool:
        """The speech goes on with the committed (spoken) request: it began before the reply was heard (and is not
        other people's talk)."""
        request = self.turn.speech if self.turn is not None else None
        return (self.rules.extend and request is not None and speech.before_reply and not speech.others
                and len(request.pcm) / 32000 < MAX_EXTENDED_S)

    def _others_going_on(self, speech: UserSpeech, heard: Speech | None, room_talks: bool) -> bool:
        """Speech that would go on with the request once its reply has begun to play is other people's when they
        talk in the room and it stands well under the request's own voice (``others_speech``): the user going on
        speaks as they asked. (Their syllables, taken for the user's going on, withdrew a reply just begun and sent
        the request again with them in it, over and over, and a "Wait, stop." after it went on with the request.)"""
        return (heard is not None and self.first_audio_sent and self._continues_request(speech)
                and others_speech(heard, self.turn.speech, room_talks))

    def _extend(self, speech: UserSpeech) -> list[Action]:
        """The user goes on with the request before any reply was heard: withdraw the turn (no history, no
        reply) and carry its speech into the utterance being heard, which becomes the turn."""
        turn = self.turn
        if turn.held_by is not None and turn.held_by.words is None and turn.heard_from is not None:
            # Gone on before the words were in: as if the speculative turn had been discarded (SpeechResumed), and
            # the next speculation waits as it would have (a client pausing between every word gains nothing).
            speech.discarded_in_a_row = turn.heard_from.discarded_in_a_row + 1
            speech.speculated_at = turn.heard_from.speculated_at
        actions = self._withdraw()
        speech.carrying = turn.speech
        speech.stopped_reply = speech.stopped_reply or turn.stopped_reply  # ("Wait, stop." ... "What is 2 plus 2?")
        return actions + [CarrySpeech(turn.speech)]
