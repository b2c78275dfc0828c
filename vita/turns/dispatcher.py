"""The front's output thread: blocks on the workers' output queue and posts each message to its session's
mailbox, where it is routed (delivered, held or dropped) in turn with the session's other events. Posting never
blocks, so one session's slow client or stuck put cannot delay another session's audio.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from vita.cpu import name_os_thread
from vita.messages import Shutdown, read_messages
from vita.turns.sessions import SessionRegistry
from vita.turns.turn_control import TurnController

log = logging.getLogger("vita.dispatch")


class OutputDispatcher:
    def __init__(self, outputs: Any, sessions: SessionRegistry, turns: TurnController):
        self.outputs = outputs
        self.sessions = sessions
        self.turns = turns
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="output-dispatcher", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=2)

    def _run(self) -> None:
        name_os_thread("dispatcher")
        for message in read_messages(self.outputs, self.stop_event, poll_s=0.5):
            if isinstance(message, Shutdown):
                return
            try:
                self.route(message)
            except Exception:  # a bad message must not stop delivery for every other session
                log.exception("could not deliver %s", type(message).__name__)

    def route(self, message: Any) -> None:
        session = self.sessions.get(message.session_id)
        if session is None or session.actor is None:
            self.turns.record(message)  # an ended session's turn: its facts still go to /metrics and the log
            return
        session.actor.post(message)
