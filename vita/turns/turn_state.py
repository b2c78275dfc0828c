"""The turn machine's named state: the turn in flight, the speech being heard and the pause the user is in.
Each is one object, dropped when it ends, so the machine's rules read against named state, not loose flags."""

from __future__ import annotations

from dataclasses import dataclass

from vita.turns.turn_events import Phase, Speech


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
