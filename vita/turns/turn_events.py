"""The turn machine's vocabulary: the user's speech, the events the machine hears and the actions it asks for.
The machine (turn_taking.py) is pure; its adapter (turn_control.py) turns the world into events and carries out
the actions."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from vita.client_events import ClientEvent
from vita.hearing.vad import MAX_JOIN_GAP_S


class Phase(StrEnum):
    LISTENING = "listening"
    THINKING = "thinking"
    SPEAKING = "speaking"


class Route(StrEnum):
    DELIVER = "deliver"  # the committed active turn's output
    HOLD = "hold"  # the speculative turn's output: kept until it is committed or discarded
    DROP = "drop"  # a cancelled, discarded or superseded turn's output


DISCARDED = "speech resumed"  # the reason a speculative turn is dropped
EXTENDED = "extended"  # the reason a committed turn is withdrawn: the user went on with the same request
STALLED = "stalled"  # the reason the watchdog cancels a turn that made no progress
ECHOED = "echo"  # the reason a turn is dropped whose words are the assistant's own reply, heard back from a speaker
STALLED_MESSAGE = "The assistant did not answer in time; please ask again."
STALLED_MID_REPLY = "The assistant's reply stopped before its end; ask again if something is missing."


@dataclass(frozen=True)
class TurnRules:
    """How turns are decided (the config's `turn` section): judge = ask the end-of-turn model at pauses; speech
    that begins before the reply is heard, or within extend_grace_s of its first audio (too soon to be an answer
    to it), extends the request when `extend`."""

    judge: bool = False
    complete_threshold: float = 0.5
    finished_words_wait_s: float = 0.0  # a pause whose words end a sentence ends the turn after this (0 = never)
    incomplete_wait_s: float = 1.5  # the long silence that ends a turn whatever the model and the words say
    extend: bool = False
    extend_grace_s: float = 0.0
    stop_phrases: tuple[str, ...] = ()  # short speech over the reply saying one of these stops it (heard by ASR)
    # A client whose speaker's echo comes back: speech long enough to interrupt the reply but never at the user's own
    # level holds it instead, until ASR has heard its words; the reply goes on if they are its own echo (the
    # canceller let some through), and stops otherwise. At most hold_for_words_s: then it stops.
    hold_for_words_s: float = 0.0
    max_text_chars: int = 2000  # typed text waiting for the user's speech to end holds at most this much


@dataclass(frozen=True)
class Speech:
    """Audio of the user's speech and when it was spoken (monotonic seconds); `samples` = (start, end, end of
    voice) in the session's 16 kHz stream, for the listener to carry it into a continuation."""

    pcm: bytes
    started_at: float
    ended_at: float
    details: dict = field(default_factory=dict, compare=False)
    samples: tuple[int, int, int] | None = field(default=None, compare=False)


def joined(first: Speech, then: Speech) -> Speech:
    """One request said in two parts: `first`, a short silence, `then` (16 kHz int16 both)."""
    gap_s = MAX_JOIN_GAP_S
    if first.samples and then.samples:
        gap_s = min(max(0, then.samples[0] - first.samples[1]) / 16000, MAX_JOIN_GAP_S)
    pcm = first.pcm + bytes(2 * int(gap_s * 16000)) + then.pcm
    samples = (first.samples[0], then.samples[1], then.samples[2]) if first.samples and then.samples else None
    details = {**then.details, **{k: first.details[k] for k in ("start_s",) if k in first.details},
               "audio_s": round(len(pcm) / 2 / 16000, 3)}
    return Speech(pcm, first.started_at, then.ended_at, details, samples)


# --- events ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpeechStarted:
    now: float


@dataclass(frozen=True)
class SpeechConfirmed:
    """The speech goes on: voiced long enough to interrupt or to extend a turn (more than a cough or "mm-hmm")."""

    now: float
    speech: Speech | None = None  # what was heard of it so far
    loud: bool = True  # part of it came near the user's own loud chunks (SpeechListener.at_users_level): not an echo
    room_talks: bool = False  # other people talk in the room (VoiceGate.others_talk)


@dataclass(frozen=True)
class TurnJudged:
    """The end-of-turn model's answer for pause number `pause`: the probability that the user has finished."""

    now: float
    pause: int
    probability: float


@dataclass(frozen=True)
class InterjectionHeard:
    """What ASR heard in short speech over turn_id's reply, up to pause number `pause`."""

    now: float
    turn_id: int
    pause: int
    text: str
    echo: bool = False  # the words are the assistant's own recent reply, heard back from a speaker


@dataclass(frozen=True)
class SpeechDropped:
    """A reported start was too short to keep (a cough, a click)."""

    now: float


@dataclass(frozen=True)
class SpeechPaused:
    """The speech so far, once the user has paused briefly: a candidate for a speculative turn. Not `kept` (too
    short yet to keep, over the reply): only a one-word command's words may matter."""

    now: float
    speech: Speech
    kept: bool = True


@dataclass(frozen=True)
class TurnHeard:
    """What ASR heard for a turn (for a speculative turn: the words up to the pause the user is in)."""

    now: float
    turn_id: int
    text: str


@dataclass(frozen=True)
class PauseWaited:
    """The wait asked for by EndPauseAfter is over (the session's own timer)."""

    now: float
    pause: int


@dataclass(frozen=True)
class SpeechPausedLonger:
    """The same pause ~0.1 s later (the speech so far, with more silence): an end of turn the model doubted at the
    pause's start is asked again, as more silence makes it surer (a robotic voice: 82 % → 93 % called finished)."""

    now: float
    speech: Speech


@dataclass(frozen=True)
class SpeechResumed:
    now: float


@dataclass(frozen=True)
class UtteranceEnded:
    now: float
    speech: Speech
    room_talks: bool = False  # other people talk in the room (VoiceGate.others_talk)


@dataclass(frozen=True)
class TextTyped:
    now: float
    text: str


@dataclass(frozen=True)
class InputCommitted:
    """The client itself says the user's turn is over (push-to-talk, or a Realtime client's `response.create`):
    the speech it committed and/or text, answered now whatever the VAD thinks."""

    now: float
    speech: Speech | None
    text: str = ""


@dataclass(frozen=True)
class RecordingToggled:
    now: float
    reason: str  # "recording started" / "recording stopped"


@dataclass(frozen=True)
class Interrupted:
    """The front stops the turn: "reset" (history cleared), "worker failed", "server stopping"."""

    now: float
    reason: str


@dataclass(frozen=True)
class AudioSent:
    """Reply audio for turn_id went to the client; it plays gap-free from when it arrives."""

    now: float
    turn_id: int
    seconds: float


@dataclass(frozen=True)
class WorkerProgress:
    """A worker told something of turn_id that is not audio (the words heard, a piece of the reply's text, a tool's
    use): it is at work on the turn, however slowly a loaded machine lets it."""

    now: float
    turn_id: int


@dataclass(frozen=True)
class ReplyComplete:
    """The voice sent the turn's last audio."""

    now: float
    turn_id: int


@dataclass(frozen=True)
class PlaybackDone:
    """The time a FinishAfter asked for has come."""

    now: float
    turn_id: int


@dataclass(frozen=True)
class TurnUnanswered:
    """The LLM ended the turn with nothing to say (no speech recognised, an error)."""

    now: float
    turn_id: int
    reason: str


@dataclass(frozen=True)
class Tick:
    now: float
    workers_ready: bool
    give_seat_up: bool = False  # a client waits in line, promised this idle session's seat: it is given up sooner


@dataclass(frozen=True)
class Connected:
    """The client has been told it is connected: the idle clock starts here."""

    now: float


@dataclass(frozen=True)
class Disconnected:
    now: float


Event = (SpeechStarted | SpeechConfirmed | SpeechDropped | SpeechPaused | SpeechPausedLonger | TurnJudged | TurnHeard
         | PauseWaited | InterjectionHeard | InputCommitted
         | SpeechResumed | UtteranceEnded | TextTyped | RecordingToggled | Interrupted | AudioSent | ReplyComplete
         | PlaybackDone | TurnUnanswered | WorkerProgress | Tick | Connected | Disconnected)


# --- actions ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StartTurn:
    """Send a TurnRequest to the workers (speculative: its outputs are held until CommitTurn)."""

    turn_id: int
    speech: Speech | None
    text: str
    speculative: bool = False
    stopped_reply: bool = False  # the speech stopped a reply (by its length, or a command and went on): answer it
    # only if it is more than a stop command ("Wait, stop." is not a request; "Wait, what about Spain?" is)


@dataclass(frozen=True)
class CommitTurn:
    """The turn is real: tell the client, log it, release its held outputs."""

    turn_id: int
    speech: Speech | None
    text: str


@dataclass(frozen=True)
class StopTurn:
    """Stop the turn in the workers. ``audible``: the client knew of it (stop_tts, turn_cancelled, state);
    ``forget``: it never happened (a discarded speculative turn: no history, no log)."""

    turn_id: int
    reason: str
    audible: bool
    forget: bool = False


@dataclass(frozen=True)
class Send:
    """Tell the session's client (each door says it in its own words)."""

    event: ClientEvent


@dataclass(frozen=True)
class ReleaseHeld:
    """Deliver what the active turn produced while it was held, in order (the speech over it was not more)."""


@dataclass(frozen=True)
class FirstAudio:
    """The turn's first reply audio went out: report these times (first_audio_s, voice_to_voice_s)."""

    turn_id: int
    times: dict


@dataclass(frozen=True)
class FinishAfter:
    """Deliver PlaybackDone(turn_id) after ``delay`` seconds: the client is still playing the reply."""

    turn_id: int
    delay: float


@dataclass(frozen=True)
class TurnDone:
    """The turn ended with its reply played (or nothing to play): count and log it."""

    turn_id: int
    reason: str


@dataclass(frozen=True)
class CloseSession:
    reason: str


@dataclass(frozen=True)
class EndPauseAfter:
    """Post PauseWaited(pause) after `delay` seconds (the session's timer)."""

    pause: int
    delay: float


@dataclass(frozen=True)
class JudgeTurn:
    """Ask the end-of-turn model about the speech so far; its answer comes back as TurnJudged(pause)."""

    pause: int
    speech: Speech


@dataclass(frozen=True)
class HearInterjection:
    """Have ASR transcribe short, unconfirmed speech over turn_id's reply; the words come back as
    InterjectionHeard(pause): a command ("Stop.") interrupts, a backchannel does not."""

    turn_id: int
    pause: int
    speech: Speech


@dataclass(frozen=True)
class EndUtterance:
    """The user has finished: end the utterance now (the listener reports it as UtteranceEnded). at_pause: at a
    pause the end-of-turn model judged (speech soon after goes on with it); else it was no one's: what follows is
    heard afresh."""

    at_pause: bool = True


@dataclass(frozen=True)
class CarrySpeech:
    """The utterance being heard continues `speech` (None: it no longer does)."""

    speech: Speech | None


Action = (StartTurn | CommitTurn | StopTurn | Send | FirstAudio | FinishAfter | TurnDone | CloseSession | JudgeTurn
          | EndPauseAfter | HearInterjection | EndUtterance | CarrySpeech | ReleaseHeld)
