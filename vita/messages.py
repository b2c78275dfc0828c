"""The one message vocabulary that crosses process boundaries (front <-> LLM worker <-> TTS worker).

Every value is a frozen dataclass of plain fields so it pickles through multiprocessing Manager queues.
Cancellation is by (session_id, turn_id): a stage drops any message whose turn is no longer current.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

ALL_TURNS = sys.maxsize  # CancelTurn up to this id: every turn of the session


class WorkerState(StrEnum):
    STARTING = "starting"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    DEAD = "dead"
    STOPPED = "stopped"


# --- front -> LLM worker ------------------------------------------------------------------------------

@dataclass(frozen=True)
class TurnRequest:
    """A finished user turn: an utterance (16 kHz int16 mono PCM), sampled camera frames, typed text.

    reply_mode "stream" speaks each clause as soon as it is generated; "full" generates the whole reply
    before handing it to TTS (VITA's way, kept for comparison). A speculative turn starts at a pause in speech;
    the front holds its outputs until the end of speech commits it, or discards it with CancelTurn(forget).
    """

    session_id: str
    turn_id: int
    audio: bytes = b""
    sample_rate: int = 16000
    frames: tuple[Picture, ...] = ()
    text: str = ""
    voice: str | None = None
    reply_mode: str = "stream"
    speculative: bool = False
    unless_command: tuple[str, ...] = ()  # stop phrases: the speech interrupted a reply ("Wait, stop.", "No, stop."):
    # if its words are only a stop command, nothing is answered
    timezone: str | None = None  # the user's IANA time zone, from their page (the time tool answers in it)
    tools: tuple[str, ...] | None = None  # the tools this session may call (None: all the server offers)
    instructions: str | None = None  # the session's own system prompt (a Realtime client's), else the persona
    client_tools: tuple[ClientTool, ...] = ()  # functions the client runs itself (a Realtime client's session.tools)
    tool_outputs: tuple[ToolOutput, ...] = ()  # the client's results for the calls the previous turn asked of it
    # The reply must call one of these client_tools (a Realtime client's tool_choice "required" or a named
    # function); empty: the model decides
    must_call: tuple[str, ...] = ()
    output_audio: bool = True  # False: a text-only client (no voice)
    max_tokens: int | None = None  # the client's cap on the reply's tokens (a Realtime client's max_output_tokens)
    trace: str = ""  # the turn's span as a W3C traceparent: the worker's stages join its trace ("": not traced)
    record_to: str = ""  # the turn's recording folder: the worker adds the prompt the model saw ("": not recorded)
    user_key: str = ""  # who the user is, for memory (vita/memory/user_keys.py; "": nobody known, nothing kept)
    off_record: bool = False  # the user talks off the record: nothing is kept (what is kept is still recalled)


REPLY_MODES = ("stream", "full")


@dataclass(frozen=True)
class ClientTool:
    """A function the client declared and runs itself: the model may call it; the call goes back to the client."""

    name: str
    description: str = ""
    parameters: str = "{}"  # its JSON schema, as JSON text (plain fields pickle safely)


@dataclass(frozen=True)
class ToolOutput:
    """The client's result for a call of one of its tools (a Realtime `function_call_output` item)."""

    call_id: str
    output: str


@dataclass(frozen=True)
class EditHistory:
    """Change what the session's history keeps of turn_id: its reply cut to what the user heard (``reply``), or
    the whole exchange dropped (``reply`` None)."""

    session_id: str
    turn_id: int
    reply: str | None = None


@dataclass(frozen=True)
class TurnCommitted:
    """The turn is the user's (a speculative one was not discarded): what it would keep in memory is kept now."""

    session_id: str
    turn_id: int


@dataclass(frozen=True)
class CancelTurn:
    """Stop every turn of this session up to and including turn_id (barge-in, reset, disconnect)."""

    session_id: str
    turn_id: int
    reason: str = "barge-in"
    forget: bool = False  # a discarded speculative turn: it never happened (no history)


@dataclass(frozen=True)
class InterjectionCheck:
    """Short speech over turn_id's reply, for ASR alone (no turn): is it "Stop." or "Mm-hmm."?"""

    session_id: str
    turn_id: int
    pause: int
    audio: bytes
    sample_rate: int = 16000


@dataclass(frozen=True)
class Picture:
    """A camera picture checked at the door (vita/pictures.py): the file as the client sent it, and the small
    grey signature made from the checking decode, so that the vision stage tells an unchanged picture without
    decoding it again and decodes a changed one once."""

    image: bytes  # JPEG, PNG or WebP, checked to decode within its cost
    signature: bytes = b""  # SIGNATURE_SIZE grey thumbnail, uint8 row by row; b"": not known (decoded to find it)


@dataclass(frozen=True)
class CameraFrame:
    """The session's newest camera picture while its user speaks: analysed before the question is asked about it
    (a text-only model's vision stage, workers/vision/stage.py)."""

    session_id: str
    picture: Picture


@dataclass(frozen=True)
class ResetHistory:
    session_id: str


@dataclass(frozen=True)
class EndSession:
    """The session is gone: forget its history and drop its pending work."""

    session_id: str


@dataclass(frozen=True)
class Shutdown:
    """Ask a worker loop to finish and release its models."""


# --- LLM worker -> TTS worker --------------------------------------------------------------------------

@dataclass(frozen=True)
class TtsPiece:
    """A speakable piece of a reply; seq orders the pieces of one turn, last marks the end of the reply."""

    session_id: str
    turn_id: int
    seq: int
    text: str
    last: bool = False
    voice: str | None = None
    trace: str = ""  # the turn's traceparent (TurnRequest.trace): the voice's span joins the turn's trace


# --- workers -> front ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TtsChunk:
    """Reply audio: int16 mono PCM at sample_rate (24 kHz, the VITA page's format)."""

    session_id: str
    turn_id: int
    seq: int
    pcm: bytes
    sample_rate: int = 24000
    last: bool = False


@dataclass(frozen=True)
class Transcript:
    session_id: str
    turn_id: int
    text: str


@dataclass(frozen=True)
class SceneSeen:
    """What the camera showed the model for a turn (a text-only model's description of the picture), for the page."""

    session_id: str
    turn_id: int
    description: str  # as the model read it, beside the question
    text: tuple[str, ...] = ()  # the lines of text read in the picture, in reading order
    objects: tuple[str, ...] = ()  # the objects named, most likely first
    people: int | None = None  # faces counted (None: not looked for)
    fingers: int | None = None  # fingers raised in all (None: no hand seen or not looked for)
    image: bytes = b""  # the picture itself, small (JPEG), to show what was seen


@dataclass(frozen=True)
class ToolUsed:
    """A tool the model called during a turn, and what it answered (``result`` is what the model read)."""

    session_id: str
    turn_id: int
    name: str
    arguments: str  # JSON, as the model gave them
    result: str
    ok: bool
    outcome: str  # ok, bad_call, unknown_tool, bad_arguments, failed, timeout
    duration_s: float

    @property
    def counted_name(self) -> str:
        """The name /metrics and traces count it under: a name the model made up is no tool, and one name serves all
        of them (not a new series, or span name, for each)."""
        return self.name if self.outcome not in ("unknown_tool", "bad_call") else "(unknown)"


@dataclass(frozen=True)
class ToolCallRequested:
    """The model called one of the client's own tools: the turn ends here, and the client answers with a
    ``ToolOutput`` in its next turn."""

    session_id: str
    turn_id: int
    call_id: str
    name: str
    arguments: str  # JSON


@dataclass(frozen=True)
class InterjectionText:
    """What ASR heard in an InterjectionCheck (empty: nothing, or it failed)."""

    session_id: str
    turn_id: int
    pause: int
    text: str


@dataclass(frozen=True)
class ReplyText:
    """Reply text as it streams: delta is new text since the last message of this turn. The done message carries
    the whole reply as it was spoken (the one source of the final text: generation may run a few tokens past
    the last spoken word before it is stopped)."""

    session_id: str
    turn_id: int
    delta: str
    done: bool = False
    text: str = ""


@dataclass(frozen=True)
class TurnTimings:
    """Per-stage times of one turn in seconds (names such as asr_s, first_token_s), from one stage."""

    session_id: str
    turn_id: int
    stage: str
    timings: dict[str, float]


@dataclass(frozen=True)
class TurnEnded:
    """The LLM worker has nothing more for this turn (answered, empty transcript, cancelled, failed); spoken is the
    reply as handed to TTS (up to the interruption when cancelled). The TTS worker's end of a turn is its last
    TtsChunk.
    """

    session_id: str
    turn_id: int
    stage: str
    reason: str = "done"
    spoken: str = ""


@dataclass(frozen=True)
class TurnWorking:
    """The LLM worker is still at work on this turn (sent every few seconds while the engine steps): a turn that a
    busy machine makes slow, a tool call generated whole before anything is sent, is not a stuck one."""

    session_id: str
    turn_id: int


@dataclass(frozen=True)
class SessionError:
    """A readable error for one session; code is stable for clients to switch on."""

    session_id: str
    turn_id: int | None
    code: str
    message: str


# What a session's mailbox gets from the workers (the output dispatcher routes each by its session_id).
WorkerOutput = (TtsChunk | Transcript | SceneSeen | ToolUsed | ToolCallRequested | InterjectionText | ReplyText
                | TurnTimings | TurnEnded | TurnWorking | SessionError)


# --- workers -> front, on the status queue (never mixed with a session's outputs) ---------------------

@dataclass(frozen=True)
class MeasuredSpeed:
    """What the LLM worker measured of this machine as it warmed up: the stages of one turn that sessions asking at
    the same moment take one after another (what `--max_users auto` sizes the seats by)."""

    asr_s: float  # Whisper on two seconds of audio
    first_token_s: float  # a fresh prompt prefilled, to its first token
    decode_tok_s: float  # one reply decoded, tokens a second
    prefill_tok_s: float = 0.0  # prompt tokens prefilled a second, not from the cache (0: not measured)


@dataclass(frozen=True)
class WorkerStatus:
    worker: str
    state: WorkerState
    detail: str = ""
    pid: int = 0
    at: float = field(default_factory=time.time)
    measured: MeasuredSpeed | None = None  # (the LLM worker's, with READY)


@dataclass(frozen=True)
class WorkerHeartbeat:
    """Sent from a worker's main loop (not a side thread), so its absence means the loop is stuck."""

    worker: str
    pid: int


PUT_TIMEOUT_S = 2.0  # a put to a queue that stays full this long drops the message (logged), never hangs


def read_messages(inbox: Any, stop: threading.Event, poll_s: float = 1.0) -> Iterator[Any]:
    """Every stage's queue loop: blocking reads until ``stop`` is set or a Shutdown arrives (which is yielded).

    ``poll_s`` only bounds how long a set ``stop`` goes unnoticed. A Manager that has gone away (the server is
    stopping) reads as a Shutdown.
    """
    while not stop.is_set():
        try:
            message = inbox.get(timeout=poll_s)
        except queue.Empty:
            continue
        except (EOFError, OSError):  # BrokenPipeError and ConnectionError are OSErrors
            message = Shutdown()
        yield message
        if isinstance(message, Shutdown):
            return


def put_or_drop(target: Any, message: Any, log: logging.Logger, timeout: float = PUT_TIMEOUT_S,
                what: str = "") -> bool:
    """Put with a deadline: a stuck or full queue costs one dropped message and a log line, never a hung worker."""
    try:
        target.put(message, timeout=timeout)
        return True
    except Exception as exc:  # queue.Full, or the manager is gone while stopping
        log.warning("dropped %s%s: the queue stayed full or is gone (%s)", type(message).__name__,
                    f" for {what}" if what else "", type(exc).__name__ if not str(exc) else exc)
        return False
