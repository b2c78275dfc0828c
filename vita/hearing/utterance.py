"""What a session's segmenter hears in its stream (vita/hearing/vad.py), as its owner is told: the start of speech,
its confirmation, a pause, the end with the utterance."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class Utterance:
    """Speech found in the stream; start/end are sample offsets into the session's stream (16 kHz)."""

    pcm: bytes
    start_sample: int
    end_sample: int
    speech_end_sample: int


class Heard(StrEnum):
    START = "start"  # onset_ms of speech voiced: the start of speech is reported (the assistant ducks its reply)
    CONFIRM = "confirm"  # confirm_ms voiced: speech that goes on (it interrupts the assistant; a "mm-hmm" does not)
    DROPPED = "dropped"  # a reported start ended too short to keep (a cough, a click)
    PAUSE = "pause"  # a short silence inside a kept utterance, or over the reply inside one that may be a one-word
    # command (carries the speech so far, and whether it is kept)
    RESUME = "resume"  # speech went on after a reported pause
    PAUSE_LONGER = "pause_longer"  # the reported pause has gone on ~0.1 s more (the end of turn may be asked again)
    END = "end"  # the utterance is over (carries it)


@dataclass(frozen=True)
class VadEvent:
    kind: Heard
    utterance: Utterance | None = None
    kept: bool = True  # a PAUSE: the speech so far is long enough to keep (vad.min_utterance_ms voiced)
