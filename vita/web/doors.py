"""The session lifecycle every door seats its clients through: open → attach → connected → detach.

A door (``vita/web/socketio/``, ``vita/web/realtime/``) owns its wire and its route, and gives each session a
``Channel`` (vita/client_events.py); what a session is — a seat of --max_users, a turn machine with its own thread,
the workers told when it ends, its WebRTC peer closed with it — is the same for every door, and written once here.
See docs/architecture.md, "Doors", for what a new door adds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from vita.client_events import Channel
from vita.ops.logs import turn_ids
from vita.turns.sessions import Session, SessionRegistry
from vita.turns.turn_events import Connected

if TYPE_CHECKING:
    from vita.ops.metrics import FrontMetrics
    from vita.turns.turn_control import TurnController

log = logging.getLogger("vita.web.doors")


class Seats(Protocol):
    """What the doorway uses of the front (the front's SessionHost has it all)."""

    sessions: SessionRegistry
    turns: TurnController
    metrics: FrontMetrics
    rtc: Any


class Doorway:
    """Seats, attaches and ends the sessions of every door, on one front."""

    def __init__(self, host: Seats):
        self.host = host

    def open(self, sid: str, address: str | None) -> Session | None:
        """A seat for a new client; None when all are taken (the door says so in its own words, or puts it in line)."""
        return self.host.sessions.open(sid, address)

    def attach(self, session: Session, channel: Channel) -> None:
        """A seated session (new, or from the line) gets its door's channel, then its turn machine and thread."""
        host = self.host
        session.channel = channel
        host.metrics.sessions_opened.labels(channel.door).inc()
        host.turns.attach(session)
        log.info("connected by %s (%d/%d)", channel.door, len(host.sessions), host.sessions.max_users,
                 extra=turn_ids(session.sid))

    def connected(self, session: Session) -> None:
        """The client has been told it is seated: its idle clock starts (the turn machine's Connected)."""
        self.host.turns.post(session, Connected(time.monotonic()))

    def detach(self, sid: str) -> Session | None:
        """The client went (or was closed): the seat back, its WebRTC peer closed, its turn cancelled, the workers
        told, its thread ended. None when it had no seat (ended already, or never seated)."""
        host = self.host
        session = host.sessions.close(sid)
        if session is None:
            return None
        if host.rtc is not None:  # its peer connection and UDP ports go with it
            with contextlib.suppress(RuntimeError):  # (the WebRTC loop is gone: the front is stopping)
                host.rtc.close(sid, session_ended=True)
        host.turns.detach(session)  # its turn cancelled, then EndSession to the workers, then its thread ends
        log.info("disconnected", extra=turn_ids(sid))
        return session


def connected_track(rtc: Any, sid: str) -> Any:
    """The session's WebRTC peer once it is connected (a channel's ``track``), or None: no WebRTC, no peer yet."""
    peer = rtc.peer(sid) if rtc is not None else None
    return peer if peer is not None and peer.connected else None
