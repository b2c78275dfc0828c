"""What a session's client is told, whatever door it came in by: one typed vocabulary for the turn machine and the
turn adapter (vita/turns/), which never know the transport.

Each door turns these into its own wire: `vita/web/socketio/wire.py` for the Socket.IO clients (VITA's page and our
own), `vita/web/realtime/conversation.py` for the OpenAI Realtime clients. A new door adds its serializer, not a
new vocabulary. `EVENT` is the event's Socket.IO name (the original protocol's, which the other doors translate).
``Channel`` is the other half of the contract: what a door gives each of its sessions, so that the front and the
turn machine reach every client the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol


@dataclass(frozen=True)
class ClientEvent:
    EVENT: ClassVar[str]
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()  # fields left off the wire when None
    SPREAD: ClassVar[str | None] = None  # a Mapping field whose items are the payload's own keys


# --- the user's turn ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VadChanged(ClientEvent):
    """The user started or stopped speaking; `dropped`: what they said was too short to be a turn (a cough)."""

    EVENT = "vad"
    OPTIONAL = frozenset({"dropped"})
    speaking: bool
    dropped: bool | None = None


@dataclass(frozen=True)
class TextQueued(ClientEvent):
    """Text typed while the user speaks: it joins the turn their speech makes."""

    EVENT = "text_queued"
    text: str


@dataclass(frozen=True)
class TurnStarted(ClientEvent):
    """A turn is committed: the request the reply answers. `details`: what the VAD measured of the speech."""

    EVENT = "turn"
    SPREAD = "details"
    turn_id: int
    source: str  # "speech" or "text"
    text: str | None = None  # typed text the turn carries
    frames: int = 0  # camera frames seen during the turn
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Transcript(ClientEvent):
    """What the user was heard saying."""

    EVENT = "transcript"
    turn_id: int
    text: str


# --- the assistant's reply ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StateChanged(ClientEvent):
    """thinking / speaking / listening; `reason` says why a turn ended without its reply."""

    EVENT = "state"
    OPTIONAL = frozenset({"reason"})
    state: str
    turn_id: int
    reason: str | None = None


@dataclass(frozen=True)
class ReplyDelta(ClientEvent):
    EVENT = "reply_delta"
    turn_id: int
    text: str


@dataclass(frozen=True)
class ResponseText(ClientEvent):
    """The reply's whole text as spoken: the final word on it."""

    EVENT = "response_text"
    turn_id: int
    text: str


@dataclass(frozen=True)
class ReplyAudio(ClientEvent):
    """24 kHz mono int16 PCM of the reply (over Socket.IO; a WebRTC session hears it on its track instead)."""

    EVENT = "audio"
    pcm: bytes


@dataclass(frozen=True)
class StopSpeaking(ClientEvent):
    """Barge-in or cancel: drop whatever of the reply is queued for playback."""

    EVENT = "stop_tts"


@dataclass(frozen=True)
class Duck(ClientEvent):
    """Speech over the reply, not yet confirmed: play it quieter."""

    EVENT = "duck"
    turn_id: int


@dataclass(frozen=True)
class Unduck(ClientEvent):
    EVENT = "unduck"
    turn_id: int


@dataclass(frozen=True)
class TurnCancelled(ClientEvent):
    EVENT = "turn_cancelled"
    turn_id: int
    reason: str


@dataclass(frozen=True)
class ToolUsed(ClientEvent):
    """A tool the server ran for the reply, and what came of it."""

    EVENT = "tool_call"
    turn_id: int
    name: str
    arguments: Any
    result: Any
    ok: bool
    outcome: str
    duration_s: float


@dataclass(frozen=True)
class FunctionCall(ClientEvent):
    """A tool the client offered: the client runs it and sends its output."""

    EVENT = "function_call"
    turn_id: int
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class SceneSeen(ClientEvent):
    """What the camera showed for the turn, as the reply was told it."""

    EVENT = "scene"
    turn_id: int
    description: str
    text: tuple[str, ...]
    objects: tuple[str, ...]
    people: int | None
    fingers: int | None
    image: str | None  # a data: URL of the picture looked at


@dataclass(frozen=True)
class Timings(ClientEvent):
    """A stage's times for the turn (seconds), for the page's and a benchmark's eyes."""

    EVENT = "timings"
    SPREAD = "values"
    turn_id: int
    stage: str
    values: Mapping[str, Any] = field(default_factory=dict)


# --- the session -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ErrorNotice(ClientEvent):
    """Something the client should know went wrong: a readable message, and a code to act on."""

    EVENT = "error"
    OPTIONAL = frozenset({"turn_id"})
    code: str
    message: str
    turn_id: int | None = None


@dataclass(frozen=True)
class OutOfTime(ClientEvent):
    """The session was idle past the server's timeout: it is being closed."""

    EVENT = "out_time"


@dataclass(frozen=True)
class ServerStatus(ClientEvent):
    """Whether the assistant can answer (its workers' state); on the seat it gives, also the session's pseudonym,
    which front seated it, and what WebRTC it offers (our page starts then)."""

    EVENT = "server_status"
    OPTIONAL = frozenset({"session", "front", "webrtc"})
    ready: bool
    workers: Mapping[str, Any]
    session: str | None = None
    front: str | None = None
    webrtc: Mapping[str, Any] | None = None


class Channel(Protocol):
    """How one session's client is reached, whichever door it came in by (Socket.IO, a Realtime WebSocket or call,
    a phone line): each door gives every session it seats one of these (``vita/web/doors.py``), and nothing else
    asks which door a session has."""

    door: str  # which door ("socketio", "realtime", "call", ...): for the logs

    def tell(self, event: ClientEvent) -> None:
        """An event, in the door's own words (one it has no words for is not sent)."""

    def close(self) -> None:
        """The server ends the connection (idle, refused too often, shutting down); the session ends as the door
        notices the connection is gone."""

    def hears_echo(self, turn: Any) -> bool:
        """Whether this door's clients may send the reply's echo back (a speaker with no echo cancellation of its
        own): the turn machine then guards against it. `turn`: the configuration's ``turn`` section."""

    def track(self) -> Any:
        """The connected WebRTC peer the reply plays on now, or None: it goes out as ``ReplyAudio`` events, paced."""
