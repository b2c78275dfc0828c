"""The Socket.IO door: its clients' connect and disconnect (a seat, or a place in line), and their events.

VITA's page and our own speak it. Each seated client gets a ``SocketIoChannel``; everything a session is told goes
through it in this door's words (``wire.py``). The page's own events (its status, its WebRTC signalling, the
settings it changed) are this door's alone, sent with ``emit``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flask import request

from vita.client_events import ClientEvent, ErrorNotice, ServerStatus
from vita.messages import REPLY_MODES
from vita.ops.logs import turn_ids
from vita.pictures import FrameError, FrameOverBudget, decode_frame
from vita.turns.sessions import MIN_TEXT_COST, Session
from vita.turns.turn_events import TextTyped
from vita.web.audio_input import AudioFormatError, check_rate, decode_audio_message
from vita.web.doors import connected_track
from vita.web.http.user_cookie import user_id_of
from vita.web.http.web_security import client_address
from vita.web.socketio.memory_panel import MemoryPanel
from vita.web.socketio.wire import socketio_event

if TYPE_CHECKING:
    from vita.web.front_host import FrontHost

log = logging.getLogger("vita.web.socketio")
REFUSE_DELAY_S = 0.2
RTC_OFFER_INTERVAL_S = 1.0  # a session's WebRTC offers come at most this often


def wants_to_wait(auth: Any) -> bool:
    """A Socket.IO client that will wait for a seat when all are taken (our page: `io({auth: {wait: true}})`); any
    other is refused then, as VITA's page expects."""
    return isinstance(auth, dict) and auth.get("wait") is True


class SocketIoChannel:
    """A seated Socket.IO client, as the front and the turn machine reach it."""

    door = "socketio"

    def __init__(self, door: SocketIoDoor, sid: str):
        self._door, self.sid = door, sid

    def tell(self, event: ClientEvent) -> None:
        self._door.emit(*socketio_event(event), to=self.sid)

    def close(self) -> None:
        self._door.disconnect(self.sid)

    def hears_echo(self, turn: Any) -> bool:
        return turn.speaker_echo_page  # browsers cancel their own echo; VITA's page on a speaker may not

    def track(self) -> Any:
        """Our page's WebRTC peer, once connected: its replies go on the Opus track instead of the socket."""
        return connected_track(self._door.front.rtc, self.sid)


class SocketIoDoor:
    """The Socket.IO server's handlers, bound to the front (its sessions, turn machine and budgets)."""

    def __init__(self, front: FrontHost):
        self.front = front
        self.config = front.config
        self.socketio = front.socketio
        # Seating from the line, telling places, and a connection leaving: one at a time, so a client is never seated
        # after it left, nor told a place after it was seated (re-entered when a seat fails and frees the next).
        self._line_lock = threading.RLock()
        self.memory_panel = MemoryPanel(self)
        self._users: dict[str, str] = {}  # sid -> its user's key, from connect until it is seated (or leaves)
        front.sessions.on_seat_freed = self.seat_waiting
        self._events()

    # --- the wire ------------------------------------------------------------------------------------------
    def emit(self, event: str, payload: Any = None, to: str | None = None, here: bool = False) -> None:
        """A Socket.IO event. here: `to` is connected to this front without a session (a client in line)."""
        front = self.front
        options: dict[str, Any] = {"to": to}
        if front.queue_probe is not None and (here or (to is not None and front.sessions.get(to) is not None)):
            options["ignore_queue"] = True  # our own client: deliver here, no Redis round trip (see message_queue)
        if payload is None:
            self.socketio.emit(event, **options)
        else:
            self.socketio.emit(event, payload, **options)

    def disconnect(self, sid: str) -> None:
        """Close the client's whole connection, not only its namespace (a client may ignore the latter and keep
        answering pings)."""
        server = self.socketio.server
        eio_sid = server.manager.eio_sid_from_sid(sid, "/")
        server.disconnect(sid)
        if eio_sid is not None:
            self.front.socket_guard.close(eio_sid)

    def error(self, session: Session, code: str, message: str) -> None:
        self.front.tell(ErrorNotice(code, message), to=session.sid)

    def _events(self) -> None:
        self.socketio.on_event("connect", self.on_connect)
        self.socketio.on_event("disconnect", self.on_disconnect)
        # The streams (VITA's page sends audio every 8 ms) skip the Flask request context Flask-SocketIO builds for
        # each event (a seventh of the socket threads' time with four VITA clients): their handlers need only the
        # caller's sid, which Socket.IO gives them.
        for event, handler in {"audio": self.on_audio, "video_frame": self.on_video_frame}.items():
            self.socketio.server.on(event, self._in_own_session(handler), namespace="/")
        for event, handler in {
            "audio_format": self.on_audio_format,
            "reply_mode": self.on_reply_mode,
            "text_input": self.on_text_input,
            "set_voice": self.on_set_voice,
            "client_settings": self.on_client_settings,
            "reset_state": self.on_reset_state,
            "recording-started": self.on_recording_started,
            "recording-stopped": self.on_recording_stopped,
            "rtc_offer": self.on_rtc_offer,
            "rtc_candidate": self.on_rtc_candidate,
            "rtc_close": self.on_rtc_close,
            **self.memory_panel.handlers(),
        }.items():
            self.socketio.on_event(event, self._in_session(handler))

    def _in_session(self, handler: Callable[[Session, Any], None]) -> Callable[..., None]:
        """A session event's handler gets the caller's session; without one, or over its event rate, the event
        is dropped (SocketGuard has already refused events with more than one argument)."""
        with_sid = self._in_own_session(handler)

        def run(data: Any = None) -> None:
            with_sid(request.sid, data)
        return run

    def _in_own_session(self, handler: Callable[[Session, Any], None]) -> Callable[..., None]:
        """As ``_in_session``, for a handler Socket.IO calls directly (with the caller's sid first). Such a
        handler runs outside Flask's request context: ``request`` is not there, so whatever it tells the client
        names the session's sid."""
        def run(sid: str, data: Any = None) -> None:
            session = self.front.session_of(sid)
            if session is not None:
                handler(session, data)
        return run

    # --- a seat, or a place in line ------------------------------------------------------------------------
    @staticmethod
    def _after_handshake(action: Callable[[str], None], sid: str) -> None:
        """Run action(sid) a moment after the connect handler returns. A rejected connect could not carry our
        events, and events sent before the handler returns precede the client's connect acknowledgement."""
        timer = threading.Timer(REFUSE_DELAY_S, action, args=(sid,))
        timer.daemon = True
        timer.start()

    def _refuse(self, sid: str) -> None:
        self.emit("too_many_users", to=sid)
        self.disconnect(sid)

    def on_connect(self, auth: Any = None) -> None:
        front = self.front
        if not front.guard.allows(request, auth):
            log.warning("refused %s: no valid access token", request.sid)
            front.tell(ErrorNotice("unauthorized", "This assistant needs an access token."), to=request.sid)
            self._after_handshake(self.disconnect, request.sid)
            return
        user = user_id_of(request.environ)
        if user is not None and front.user_keys is not None:
            self._users[request.sid] = front.user_keys.key("page", user)
        with self._line_lock:
            session = front.doorway.open(request.sid, client_address(request.environ))
            place = None
            if session is None and wants_to_wait(auth):
                place = front.sessions.wait(request.sid, client_address(request.environ))
        if session is None:
            if place is not None:
                log.info("waiting %s: %d users already, place %d in line", request.sid, front.sessions.max_users,
                         place)
                self._after_handshake(self._tell_own_place, request.sid)
                if len(front.sessions) < front.sessions.max_users:  # a seat freed between open and wait
                    self.seat_waiting()
                return
            front.metrics.sessions_refused.inc()
            log.info("refused %s: %d users already", request.sid, front.sessions.max_users)
            # Accept, tell, then really disconnect (VITA only warned).
            self._after_handshake(self._refuse, request.sid)
            return
        self._seated(session)

    def _seated(self, session: Session) -> None:
        """A session has its seat: its turn machine, and the status that tells its page to start (on connect, or
        when the line seats it: the first event it gets as a seated client)."""
        front = self.front
        session.user_key = self._users.pop(session.sid, None)
        front.doorway.attach(session, SocketIoChannel(self, session.sid))
        rtc = front.rtc
        front.tell(ServerStatus(front.graph.ready(), front.graph.health(), front.turn_log.pseudonym(session.sid),
                                front.front_id, {"enabled": rtc is not None,
                                                 "ice_servers": list(rtc.settings.ice_servers) if rtc else []}),
                   to=session.sid)
        front.doorway.connected(session)

    def seat_waiting(self) -> None:
        """A seat freed (or the line changed): seat the head of the line, tell the others their new places."""
        failed: list[Session] = []
        sessions = self.front.sessions
        with self._line_lock:
            for session in sessions.seat_waiting():
                log.info("seated from the line", extra=turn_ids(session.sid))
                try:
                    self._seated(session)
                except Exception:  # its seat goes to the next in line; the client is told by its disconnect
                    log.exception("seating from the line failed", extra=turn_ids(session.sid))
                    failed.append(session)
            for sid, place in sessions.places():
                self._tell_place(sid, place)
        for session in failed:  # (its thread is joined: not while the line waits on the lock)
            self.front.doorway.detach(session.sid)
            self.disconnect(session.sid)

    def _tell_own_place(self, sid: str) -> None:
        """A client just put in line hears its place once its connection is acknowledged."""
        with self._line_lock:
            place = dict(self.front.sessions.places()).get(sid)
            if place is not None:  # (seated meanwhile: its server_status said so)
                self._tell_place(sid, place)

    def _tell_place(self, sid: str, place: int) -> None:
        """(under the line's lock) Delivered here, never through the scale-out channel, whose outage must not hold
        the line, nor a disconnect waiting on it."""
        self.emit("waiting", {"place": place, "users": self.front.sessions.max_users}, to=sid, here=True)

    def on_disconnect(self, *_: Any) -> None:
        self._users.pop(request.sid, None)
        with self._line_lock:  # (not seated from the line while it leaves)
            if self.front.sessions.leave_line(request.sid):
                log.info("left the line %s", request.sid)
                return
        self.front.doorway.detach(request.sid)

    # --- the client's events -------------------------------------------------------------------------------
    def on_audio(self, session: Session, data: Any) -> None:
        started = time.perf_counter()
        if not session.audio_budget.open(time.monotonic()):
            # A flood is refused before its text is parsed (parsing it was the cost), and not counted against the
            # client: audio a page buffered through a reconnect comes all at once, and is refused so.
            self.front.overrun(session, counted=False)
            return
        try:
            pcm, rate = decode_audio_message(data, session.audio_rate, self.config.limits.max_audio_message_bytes)
        except AudioFormatError as exc:
            self.front.refuse(session, "bad_audio", str(exc))
            return
        self.front.admit_audio(session, pcm, rate)
        self.front.metrics.audio_handler.observe(time.perf_counter() - started)

    def on_rtc_offer(self, session: Session, data: Any) -> None:
        """The page's WebRTC offer (ICE gathered, no trickle needed): the answer, or `rtc_failed` and the page stays
        on Socket.IO audio."""
        from vita.web.webrtc.hub import PeerBudgets, RtcError

        if self.front.rtc is None:
            self.emit("rtc_failed", {"message": "WebRTC is switched off on this server (webrtc.enabled)."},
                      to=session.sid)
            return
        offer = data if isinstance(data, dict) else {}
        now = time.monotonic()
        if now - session.rtc_offered_at < RTC_OFFER_INTERVAL_S:  # each offer binds UDP ports: not a loop's worth
            self.emit("rtc_failed", {"message": "Too many WebRTC offers; wait a second."}, to=session.sid)
            return
        session.rtc_offered_at = now
        try:
            if offer.get("type") != "offer":
                raise RtcError("rtc_offer needs {\"type\": \"offer\", \"sdp\": \"...\"}")
            front = self.front
            sdp = front.rtc.answer(session.sid, offer.get("sdp"),
                                   lambda pcm, rate: front.admit_audio(session, pcm, rate, charged=True),
                                   client=client_address(request.environ),
                                   see=lambda image: front.turns.camera_frame(session, image),
                                   budgets=PeerBudgets(session.audio_budget, lambda: front.audio_overrun(session),
                                                       session.image_budget))
        except RtcError as exc:
            log.warning("WebRTC offer refused: %s", exc, extra=turn_ids(session.sid))
            self.emit("rtc_failed", {"message": str(exc)}, to=session.sid)
            return
        if self.front.sessions.get(session.sid) is not session:  # it disconnected meanwhile (on another thread)
            self.front.rtc.close(session.sid)
            return
        self.emit("rtc_answer", {"type": "answer", "sdp": sdp}, to=session.sid)

    def on_rtc_candidate(self, session: Session, data: Any) -> None:
        if self.front.rtc is None:
            return
        try:
            if not isinstance(data, dict):
                raise ValueError("rtc_candidate needs an object")
            self.front.rtc.add_candidate(session.sid, data)
        except Exception as exc:  # a malformed candidate: this one is ignored, the call goes on
            self.front.refuse(session, "bad_rtc_candidate", f"ICE candidate ignored: {exc}")

    def on_rtc_close(self, session: Session, _data: Any) -> None:
        if self.front.rtc is not None and self.front.rtc.close(session.sid):
            self.emit("rtc_closed", to=session.sid)

    def on_audio_format(self, session: Session, data: Any) -> None:
        try:
            session.audio_rate = check_rate(data.get("sample_rate") if isinstance(data, dict) else None)
        except AudioFormatError as exc:
            self.error(session, "bad_audio_format", str(exc))
            return
        self.emit("audio_format", {"sample_rate": session.audio_rate}, to=session.sid)

    def on_reply_mode(self, session: Session, data: Any) -> None:
        mode = data.get("mode") if isinstance(data, dict) else None
        if mode not in REPLY_MODES:
            self.error(session, "bad_reply_mode", f"mode must be one of: {', '.join(REPLY_MODES)}")
            return
        session.reply_mode = mode
        self.emit("reply_mode", {"mode": mode}, to=session.sid)

    def on_video_frame(self, session: Session, data: Any) -> None:
        try:
            image = decode_frame(data, self.config.limits.max_frame_bytes, self.config.limits.max_image_pixels,
                                 session.image_budget)
        except FrameOverBudget as exc:
            self.front.refuse(session, "rate_limited", str(exc))
            return
        except FrameError as exc:
            self.front.refuse(session, "bad_frame", str(exc))
            return
        self.front.turns.camera_frame(session, image)

    def on_text_input(self, session: Session, data: Any) -> None:
        text = data.get("text") if isinstance(data, dict) else None
        if not isinstance(text, str) or not text.strip():
            self.front.refuse(session, "bad_text", "text_input needs {\"text\": \"...\"} with some text")
            return
        most = self.config.limits.max_text_chars
        if len(text) > most:
            self.front.refuse(session, "text_too_long", f"text is longer than {most} characters")
            return
        if not self.front.graph.ready():
            self.error(session, "not_ready", "The assistant is still loading its models; try again in a moment.")
            return
        if not session.charge_texts([(text, None)], self.front.text_cost, time.monotonic(), least=MIN_TEXT_COST):
            self.front.refuse(session, "rate_limited", "Too many typed messages; wait a moment between them.")
            return
        self.front.turns.post(session, TextTyped(time.monotonic(), text.strip()))

    def on_set_voice(self, session: Session, data: Any) -> None:
        voice = data.get("voice") if isinstance(data, dict) else None
        if voice not in self.front.voices:
            self.error(session, "unknown_voice", f"voice must be one of: {', '.join(self.front.voices)}")
            return
        session.voice = voice
        self.emit("voice", {"voice": voice}, to=session.sid)

    def on_client_settings(self, session: Session, data: Any) -> None:
        """{timezone?: IANA name, tools?: [names] or null, record_turns?: bool, off_record?: bool}: the user's time
        zone (the time tool answers in it), the tools this session allows (null: all the server offers; []: none),
        whether its turns are recorded for a bug report (vita/ops/turn_recording.py), and whether it talks off the
        record (nothing kept in memory: vita/memory/). A key left out keeps its setting."""
        from zoneinfo import ZoneInfo

        settings = data if isinstance(data, dict) else {}
        zone, tools = settings.get("timezone"), settings.get("tools")
        try:
            if zone is not None:
                if not isinstance(zone, str) or len(zone) > 64:
                    raise ValueError
                ZoneInfo(zone)
        except (ValueError, KeyError, OSError):
            self.error(session, "bad_settings", "timezone must be an IANA time zone name such as Europe/Paris")
            return
        if tools is not None and (not isinstance(tools, list) or len(tools) > 64
                                  or not all(isinstance(t, str) and 0 < len(t) <= 64 for t in tools)):
            self.error(session, "bad_settings", "tools must be a list of tool names, or null for all of them")
            return
        record, off_record = settings.get("record_turns"), settings.get("off_record")
        if (record is not None and not isinstance(record, bool)) or (
                off_record is not None and not isinstance(off_record, bool)):
            self.error(session, "bad_settings", "record_turns and off_record must be true or false")
            return
        recording = self.front.config.recording
        if record and not (recording.per_session or recording.enabled):
            self.error(session, "recording_off", "This server does not record turns (recording.per_session is off).")
            return
        session.timezone = zone if zone is not None else session.timezone
        if "tools" in settings:
            session.tools = tuple(tools) if tools is not None else None
        if record is not None:
            session.record_turns = record
        if off_record is not None:
            session.off_record = off_record
        self.emit("client_settings", {"timezone": session.timezone, "tools": list(session.tools)
                                      if session.tools is not None else None,
                                      "record_turns": session.record_turns or recording.enabled,
                                      "off_record": session.off_record}, to=session.sid)

    def on_reset_state(self, session: Session, _data: Any) -> None:
        self.front.turns.reset_history(session, then=lambda: self.emit("history_cleared", to=session.sid))

    def on_recording_started(self, session: Session, _data: Any) -> None:
        self.front.turns.restart_listening(session, "recording started")

    def on_recording_stopped(self, session: Session, _data: Any) -> None:
        self.front.turns.restart_listening(session, "recording stopped")
