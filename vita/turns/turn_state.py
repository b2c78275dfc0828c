"""The turn machine's named state: the turn in flight, the speech being heard and the pause the user is in.
Each is one object, dropped when it ends, so the machine's rules read against named state, not loose flags. And
the steps that make and end the turn in flight (``TurnMaking``)."""

from __future__ import annotations

from dataclasses import dataclass

from vita.client_events import Duck, StateChanged, StopSpeaking, TurnCancelled, Unduck
from vita.turns.turn_events import (
    DISCARDED,
    ECHOED,
    EXTENDED,
    Action,
    CommitTurn,
    EndUtterance,
    Phase,
    Send,
    Speech,
    StartTurn,
    StopTurn,
)


@dataclass
class OpenPause:
    """The pause the user is in, and what is known of it: the end-of-turn model's view and the speculative turn's
    words. The turn ends at the pause when the model says finished and the words, once heard, do not disagree."""

    seq: int
    opened_at: float = 0.0
    doubted: bool = False  # the model said unfinished: asked once more when the pause goes on (SpeechPausedLonger)
    later: Speech | None = None  # the speech with the pause gone on (SpeechPausedLonger), for that second question
    asked_again: bool = False
    sounds_finished: bool = False  # the model said finished
    words: str | None = None  # what the speculative turn heard up to the pause


@dataclass
class ActiveTurn:
    """The turn in flight, speculative (its outputs held) until committed; ending a turn drops it."""

    turn_id: int
    speculative: bool = False
    committed_at: float = 0.0
    progress_at: float = 0.0  # its commit, its latest reply audio or worker news (the watchdog's clock)
    speech: Speech | None = None  # what the committed turn heard (carried on if the user goes on)
    speech_end_at: float | None = None  # its last voiced sample
    first_audio_at: float | None = None  # when its reply was first heard
    playback_ends_at: float = 0.0
    ducked: bool = False  # the client was told to duck its reply under the user's (unconfirmed) speech
    # The pause it was ended at by the end-of-turn model before the speculative turn's words were in: its reply
    # is held until they are, and, if they say the user is going on ("I have a question."), until the long
    # silence has passed (more speech meanwhile extends the request). None: nothing of the kind to wait for.
    held_by: OpenPause | None = None
    heard_from: UserSpeech | None = None  # the speech it was ended in (its speculation backoff carries on)
    # Its speech stopped a reply ("Wait, stop."): so does the request it goes on to, if the user goes on with it
    # (its words are then read after the command, as if said in one breath).
    stopped_reply: bool = False
    played_out: bool = False  # its reply was all played while speech held it (ended once it goes on)

    @property
    def phase(self) -> Phase:
        if self.speculative:
            return Phase.LISTENING
        return Phase.THINKING if self.first_audio_at is None else Phase.SPEAKING


@dataclass
class UserSpeech:
    """The user's speech being heard, from its onset to its end (or drop)."""

    started_at: float
    confirmed: bool = False  # voiced long enough to interrupt or extend a turn
    before_reply: bool = False  # began before the committed turn's reply was heard (or within the grace)
    commanded: bool = False  # stopped the reply by its words ("Stop."): not a request by itself
    stopped_reply: bool = False  # stopped the reply: a request only if it is more than a command
    carrying: Speech | None = None  # a withdrawn turn's speech, carried into this utterance
    discarded_in_a_row: int = 0  # speculative turns of this speech that it went on from
    speculated_at: float = 0.0  # when its latest speculative turn started
    pause: OpenPause | None = None  # the pause the user is in now, if any
    checking: tuple[int, int] | None = None  # (turn, check) of its words that holds that turn's reply (TurnRules)
    over: Speech | None = None  # the request whose reply was playing when it began
    others: bool = False  # taken for other people's talk: neither the request going on nor an interruption


class TurnMaking:
    """A part of TurnTaking (vita/turns/turn_taking.py): its methods run on the machine itself, over its turn in
    flight (``turn``), its last turn id, its typed text waiting and its count of requests gone on with, and the
    speech whose words hold the reply (``speech``, or ``unchecked`` once it ended)."""

    def _duck(self) -> list[Action]:
        turn = self.turn
        if not self._committed() or turn.first_audio_at is None or turn.ducked:
            return []
        turn.ducked = True
        return [Send(Duck(turn.turn_id))]

    def _unduck(self) -> list[Action]:
        if self.turn is None or not self.turn.ducked:
            return []
        self.turn.ducked = False
        return [Send(Unduck(self.turn.turn_id))]

    def _withdraw(self) -> list[Action]:
        """Withdraw the committed turn: the request goes on (no reply, no history; a few words already sent are
        stopped)."""
        turn, self.turn = self.turn, None
        if turn.held_by is None:  # (a pause its words kept open, or that went on before they came, was no early end)
            self.went_on += 1
        return [*([Send(StopSpeaking())] if turn.first_audio_at is not None else []),  # words of a reply too soon
                StopTurn(turn.turn_id, EXTENDED, audible=False, forget=True),
                Send(TurnCancelled(turn.turn_id, EXTENDED)),
                Send(StateChanged("listening", turn.turn_id, EXTENDED))]

    def _held_for_words(self, check: int | None = None) -> UserSpeech | None:
        """The speech whose words hold the active turn's reply (still being heard, or ended and waiting for them);
        `check`: only if that is its check."""
        for speech in (self.speech, self.unchecked[0] if self.unchecked is not None else None):
            if (speech is not None and speech.checking is not None and speech.checking[0] == self.active_turn
                    and check in (None, speech.checking[1])):
                return speech
        return None

    def _words_checked(self, speech: UserSpeech, echo: bool, now: float) -> list[Action]:
        """The words of speech that held the reply: its echo (the reply goes on, or ends if it was played out
        meanwhile, and the speech, no longer taken for the user's, makes no turn), or the user's (the reply stops: an
        interruption, and its end a turn)."""
        speech.checking = None
        ended = self.unchecked if self.unchecked is not None and self.unchecked[0] is speech else None
        if ended is not None:
            self.unchecked = None
        if echo:  # (ended now, if it goes on: the user speaking next is heard afresh, and may interrupt)
            speech.confirmed = False
            played_out = self.turn is not None and self.turn.played_out
            actions = self._finish(self.turn.turn_id, "done", now) if played_out else self._release(True)
            actions += self._unduck()
            return actions + (self._typed_turn(ended[1].now) if ended is not None else [EndUtterance(at_pause=False)])
        speech.stopped_reply = True
        actions = self._cancel("barge-in")
        if ended is None:
            return actions
        actions = self._utterance_ended(speech, ended[1], actions)
        if self.speech is not None and self.turn is not None:  # begun while its words were heard: it goes on with it
            self.speech.before_reply = True
        return actions

    def _typed_turn(self, now: float) -> list[Action]:
        """Text typed while the user spoke, when that speech made no turn to join: it is a request of its own."""
        text, self.pending_text = self.pending_text, ""
        if not text:
            return []
        actions = self._cancel("new turn") if self.turn is not None else []
        turn_id = self._new_turn()
        return actions + [StartTurn(turn_id, None, text)] + self._commit(turn_id, None, text, now)

    def _new_turn(self, speculative: bool = False, stopped_reply: bool = False) -> int:
        self._last_turn += 1
        self.turn = ActiveTurn(self._last_turn, speculative=speculative, stopped_reply=stopped_reply)
        return self._last_turn

    def _commit(self, turn_id: int, speech: Speech | None, text: str, now: float) -> list[Action]:
        turn = self.turn
        turn.committed_at = turn.progress_at = now
        turn.speech_end_at = speech.ended_at if speech is not None else None
        turn.speech = speech
        return [CommitTurn(turn_id, speech, text), Send(StateChanged("thinking", turn_id))]

    def _cancel(self, reason: str, forget: bool = False) -> list[Action]:
        """Cancel the active turn; the client hears of it only if it had been told of the turn (`forget`: the
        workers keep nothing of it)."""
        turn, self.turn = self.turn, None
        if turn is None:
            return []
        if turn.speculative:
            return [StopTurn(turn.turn_id, DISCARDED, audible=False, forget=True)]
        # (the echo's own turn, with no audio of its own, stops nothing: the reply it echoed may still be ending)
        silent = reason == ECHOED and turn.first_audio_at is None
        return [*([] if silent else [Send(StopSpeaking())]),
                StopTurn(turn.turn_id, reason, audible=True, forget=forget),
                Send(TurnCancelled(turn.turn_id, reason)),
                Send(StateChanged("listening", turn.turn_id, reason))]
