"""The session lifecycle every door seats its clients through, over a real registry and turn machine."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from tests.turns.test_turn_control import PageChannel, Wire, controller
from vita.ops.metrics import FrontMetrics
from vita.turns.sessions import SessionRegistry
from vita.web.doors import Doorway

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


class Rtc:
    """The WebRTC hub's close, as the doorway calls it (a fake for this unit test: no peer exists)."""

    def __init__(self):
        self.closed: list[tuple[str, bool]] = []

    def close(self, sid: str, session_ended: bool = False) -> bool:
        self.closed.append((sid, session_ended))
        return False


def host(max_users: int = 1) -> SimpleNamespace:
    wire = Wire()
    sessions = SessionRegistry(max_users=max_users)
    front = SimpleNamespace(sessions=sessions, turns=controller(wire, line=sessions), rtc=Rtc(), wire=wire,
                            metrics=FrontMetrics(lambda: len(sessions), dict, sessions.waiting_count))
    front.doorway = Doorway(front)
    return front


def test_a_session_is_seated_attached_told_connected_and_ended_once():
    front = host(max_users=1)
    try:
        session = front.doorway.open("a", "10.0.0.1")
        assert session is not None and front.doorway.open("b", "10.0.0.2") is None  # one seat
        channel = PageChannel()
        front.doorway.attach(session, channel)
        assert session.channel is channel and session.actor.thread.is_alive()  # its turn machine and thread
        before = time.monotonic()
        front.doorway.connected(session)
        assert session.actor.call_and_wait(lambda: None, 5)
        assert session.turns.last_activity >= before  # its idle clock runs from Connected
        assert front.doorway.detach("a") is session
        assert not session.actor.thread.is_alive()  # its thread ended
        assert front.rtc.closed == [("a", True)]  # its WebRTC peer (if any) went with it
        assert len(front.sessions) == 0 and front.doorway.open("b", "10.0.0.2") is not None  # the seat is free
        assert front.doorway.detach("a") is None and front.rtc.closed == [("a", True)]  # ended once
    finally:
        front.turns.close()
        for s in front.sessions.all():
            front.doorway.detach(s.sid)
