"""The page's memory panel over Socket.IO: what is remembered of the session's user (``memory``), one fact deleted
(``memory_forget {id}``), all of it (``memory_forget_all``); each answered with the ``memory`` event as it now
stands. Only the session's own user's facts are ever listed or deleted."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from vita.turns.sessions import Session

if TYPE_CHECKING:
    from vita.web.socketio.door import SocketIoDoor


class MemoryPanel:
    def __init__(self, door: SocketIoDoor):
        self.door = door

    def handlers(self) -> dict[str, Any]:
        return {"memory": self.on_memory, "memory_forget": self.on_forget, "memory_forget_all": self.on_forget_all}

    def on_memory(self, session: Session, _data: Any = None) -> None:
        self.show(session)

    def _change(self, session: Session, change: Any) -> bool:
        """A change to the user's memory; False (told) when the file is busy or broken."""
        try:
            change()
            return True
        except sqlite3.Error as exc:
            self.door.error(session, "memory_busy", f"Your memory could not be changed just now ({exc}); try again.")
            return False

    def on_forget(self, session: Session, data: Any) -> None:
        fact_id = data.get("id") if isinstance(data, dict) else None
        if not isinstance(fact_id, int) or isinstance(fact_id, bool):
            self.door.error(session, "bad_memory", "memory_forget needs the id of a fact, as the memory event gave it")
            return
        store = self.door.front.memory
        if store is not None and session.user_key and not self._change(
                session, lambda: store.forget_one(session.user_key, fact_id)):
            return
        self.show(session)

    def on_forget_all(self, session: Session, _data: Any = None) -> None:
        store = self.door.front.memory
        if store is not None and session.user_key and not self._change(
                session, lambda: store.forget_all(session.user_key)):
            return
        self.show(session)

    def show(self, session: Session) -> None:
        """``{enabled, user, facts: [{id, text, created_at}], off_record}``: enabled is false when the server keeps
        no memory or the connection names no user (a client without the page's cookie)."""
        store = self.door.front.memory
        enabled = store is not None and bool(session.user_key)
        try:
            kept = store.facts(session.user_key) if enabled else []
        except sqlite3.Error as exc:
            self.door.error(session, "memory_busy", f"Your memory could not be read just now ({exc}); try again.")
            return
        facts = [{"id": f.id, "text": f.text, "created_at": round(f.created_at, 3)} for f in kept]
        message = {"enabled": enabled, "facts": facts, "off_record": session.off_record}
        if enabled:
            message["user"] = session.user_key  # what the operator's memory API knows them by
        self.door.emit("memory", message, to=session.sid)
