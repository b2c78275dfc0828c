"""What a door may use of the front, as two contracts: a door takes one of these, never the app itself, so that
doors and the app do not import each other and a new door (a phone line, a native SDK) is a module of its own.

``SessionHost`` is the transport-neutral part (sessions, the doorway that seats them, their turns, the budgets, the
metrics, the workers' request queue): the Realtime door needs no more. ``FrontHost`` adds the HTTP side (the Flask
app, the Socket.IO server, the access token, the socket guard, what /health reports) for the routes, the Socket.IO
door and the WebSocket route. ``FrontApp`` is both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from flask import Flask
    from flask_socketio import SocketIO

    from vita.client_events import ClientEvent
    from vita.config import Config
    from vita.memory.store import MemoryStore
    from vita.memory.user_keys import UserKeys
    from vita.ops.metrics import FrontMetrics
    from vita.ops.turn_log import TurnLogger
    from vita.text_cost import TextCost
    from vita.turns.sessions import Session, SessionRegistry
    from vita.turns.turn_control import TurnController
    from vita.web.doors import Doorway
    from vita.web.http.access import AccessGuard
    from vita.web.http.connections import ConnectionTable
    from vita.web.http.socket_guard import SocketGuard
    from vita.web.http.web_root import WebRoot
    from vita.web.message_queue import QueueProbe


class SessionHost(Protocol):
    config: Config
    sessions: SessionRegistry
    doorway: Doorway
    turns: TurnController
    rtc: Any  # the front's WebRTC peers (vita/web/webrtc/hub.py), or None when WebRTC is off
    metrics: FrontMetrics
    voices: list[str]
    llm_choice: dict[str, str | None]
    text_cost: TextCost
    memory: MemoryStore | None  # what is remembered of users (None: memory is off)
    user_keys: UserKeys | None  # who a door's user is, for memory (None: memory is off)

    def admit_audio(self, session: Session, pcm: Any, rate: int, charged: bool = False) -> bool:
        """Microphone audio to the session's VAD, within its real-time budget (`charged`: already, before it was
        decoded); False when refused."""
        ...

    def audio_overrun(self, session: Session) -> None:
        """Audio refused by the session's budget before it was decoded: told and counted as admit_audio's are."""
        ...

    def session_allows_event(self, session: Session) -> bool:
        """The session's event rate: False for an event over it (drop the event)."""
        ...

    def session_of(self, sid: str) -> Session | None:
        """The caller's session, None when it has none or the event is over its rate (drop the event)."""
        ...

    def tell(self, event: ClientEvent, to: str) -> None:
        """An event to one session, through its door's channel."""
        ...

    def refuse(self, session: Session, code: str, message: str) -> None:
        """A client's event refused by a budget or a check: told (each code once a second) and counted."""
        ...

    def overrun(self, session: Session, counted: bool) -> None:
        """Audio dropped (`counted`: against the client's refusals too, when it sent over its budget)."""
        ...

    def refused_too_often(self, session: Session) -> bool:
        """Count an event refused by a budget; True once the session is being closed for drawing too many."""
        ...


class FrontHost(SessionHost, Protocol):
    flask: Flask
    web: WebRoot
    guard: AccessGuard
    socket_guard: SocketGuard
    security_headers: dict[str, str]
    connections: ConnectionTable | None
    queue_probe: QueueProbe | None
    turn_log: TurnLogger
    graph: Any
    socketio: SocketIO
    front_id: str
    started_at: float
