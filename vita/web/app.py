"""The front process's web app: the page, /health and /ready, and the Socket.IO events (VITA's and ours)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask, request
from flask_socketio import SocketIO

from vita.capacity import seats_for
from vita.client_events import ClientEvent, ErrorNotice
from vita.config import PROJECT_ROOT, Config
from vita.machine.models import available_voices
from vita.messages import REPLY_MODES, MeasuredSpeed, put_or_drop
from vita.ops.logs import turn_ids
from vita.ops.metrics import FrontMetrics
from vita.ops.turn_log import TurnLogger
from vita.text_cost import TextCost, local_tokenizer_file
from vita.turns.camera import FrameError, FrameOverBudget, decode_frame
from vita.turns.ears import Ears
from vita.turns.sessions import MIN_TEXT_COST, Session, SessionRegistry
from vita.turns.turn_control import TurnController
from vita.turns.turn_events import Connected, TextTyped
from vita.web.audio_input import AudioFormatError, check_rate, decode_audio_message
from vita.web.http.access import AccessGuard, TokenThrottle, client_key
from vita.web.http.connections import ConnectionTable
from vita.web.http.socket_guard import SocketGuard
from vita.web.http.web_root import WebRoot
from vita.web.http.web_security import ForwardedHeaders, client_address, security_headers
from vita.web.message_queue import QueueProbe, socketio_options
from vita.web.page_routes import install_routes
from vita.web.realtime.route import RealtimeRoute
from vita.web.socketio_wire import socketio_event

log = logging.getLogger("vita.web.app")
WEB_DIR = PROJECT_ROOT / "web"
REFUSE_DELAY_S = 0.2
PING_INTERVAL_S = 10
# Told to clients on top of the interval: a browser counts interval + timeout from the last PING it received, and
# the next PING follows a late pong (one queued behind the client's own paced data) by the interval.
PING_GRACE_S = 5
RTC_OFFER_INTERVAL_S = 1.0  # a session's WebRTC offers come at most this often
SHUTDOWN_NOTICE_S = 1.0  # SIGTERM waits this long per session for its turn to be cancelled before the notice


def rtc_hub(config: Config) -> Any:
    """The front's WebRTC peers (one asyncio loop thread), or None when webrtc.enabled is false."""
    if not config.webrtc.enabled:
        return None
    from vita.web.webrtc.hub import RtcHub, RtcSettings  # aiortc and PyAV: only when WebRTC is on

    return RtcHub(RtcSettings.from_config(config.webrtc, config.limits.max_image_pixels))


def wants_to_wait(auth: Any) -> bool:
    """A Socket.IO client that will wait for a seat when all are taken (our page: `io({auth: {wait: true}})`); any
    other is refused then, as VITA's page expects."""
    return isinstance(auth, dict) and auth.get("wait") is True


def llm_choice(config: Config) -> dict[str, str | None]:
    """Which LLM serves and why, for /health and the start-up log (the LLM worker's ready detail adds the kernel
    path it loaded)."""
    if config.llm.url:
        return {"model": config.llm.remote_model, "source": config.llm.url, "why": "--llm_url",
                "summary": f"remote server {config.llm.url}"}
    name, why = config.chosen_llm()  # a bundled model, or --model_path's folder
    return {"model": name, "source": str(config.llm_model_path()), "why": why, "summary": f"{name} ({why})"}


class FrontApp:
    """Flask + Flask-SocketIO (threading mode) bound to one process graph and one session registry."""

    def __init__(self, config: Config, graph: Any):
        self.config = config
        self.graph = graph
        # An IPv6 client is counted by its /64, which one host usually holds whole (as the token's lockout counts it).
        self.sessions = SessionRegistry(config.server.max_users, config.server.max_waiting, address_key=client_key)
        self.text_cost = TextCost(local_tokenizer_file(config)).load()  # what typed text costs: the model's tokens
        self.sessions.on_seat_freed = self._seat_waiting
        # Seating from the line, telling places, and a connection leaving: one at a time, so a client is never seated
        # after it left, nor told a place after it was seated (re-entered when a seat fails and frees the next).
        self._line_lock = threading.RLock()
        self.started_at = time.time()
        self.front_id = f"{socket.gethostname()}:{config.server.port}"
        self.voices = available_voices(config.models_path())
        web_root = config.server.web_root
        self.web = WebRoot(WEB_DIR, Path(web_root).expanduser() if web_root else None)
        self.flask = Flask(__name__, static_folder=None)
        # async_handlers=False: a client's events run in order on its own connection thread, so audio chunks
        # can't overtake each other and no thread is started per 8 ms message.
        origins = config.server.allowed_origins
        self.guard = AccessGuard(config.access_token())
        # A 10 s ping (engine.io's default is 25 s) frees the seat of a client that vanished without closing
        # (a laptop lid, a dropped network) within 20 s, which matters with a small --max_users.
        queue_url = config.server.message_queue
        self.socketio = SocketIO(self.flask, async_mode="threading", always_connect=True, async_handlers=False,
                                 ping_interval=(PING_INTERVAL_S, PING_GRACE_S), ping_timeout=10,
                                 max_http_buffer_size=max(config.limits.max_frame_bytes, 1 << 20),
                                 # Loggers of ours: the libraries' defaults add a second handler (every line twice).
                                 logger=logging.getLogger("socketio.server"),
                                 engineio_logger=logging.getLogger("engineio.server"),
                                 cors_allowed_origins=[o.strip() for o in origins.split(",")] if origins else None,
                                 **socketio_options(queue_url))
        self.socket_guard = SocketGuard(self.socketio.server, self._bad_event, config.limits.max_attachments,
                                        read_bytes_per_s=config.limits.max_socket_bytes_per_s,
                                        read_messages_per_s=config.limits.max_events_per_s)
        self.socket_guard.install()
        realtime = RealtimeRoute(self.flask.wsgi_app, self)
        self.flask.wsgi_app = ForwardedHeaders(TokenThrottle(realtime, self.guard, realtime.token_of,
                                                             realtime.keys.holds), config.trusted_proxies())
        self.security_headers = security_headers(config.server.tls, operator_page=web_root is not None)
        self.queue_probe = QueueProbe(queue_url) if queue_url else None
        self.connections: ConnectionTable | None = None  # the HTTP server's, once it exists (for /health)
        self.llm_choice = llm_choice(config)
        self.metrics = FrontMetrics(lambda: len(self.sessions), graph.queue_depths, self.sessions.waiting_count)
        self.turn_log = TurnLogger(config.turn_log_path(), config.turn_log.retention_days)
        self.rtc = rtc_hub(config)
        self.turns = TurnController(config, Ears.load(config), self.tell, self._put, self._disconnect, graph.ready,
                                    self.metrics, self.turn_log, rtc=self.rtc,
                                    line=self.sessions)
        graph.on_death = self.on_worker_death
        graph.on_measured = self.on_measured
        install_routes(self)
        self._events()

    # --- plumbing ----------------------------------------------------------------------------------------
    def tell(self, event: ClientEvent, to: str) -> None:
        """A client event to one session, in its door's words: a Realtime client's own wire, else Socket.IO's."""
        if isinstance(event, ErrorNotice):
            self.metrics.errors.labels(event.code).inc()
        session = self.sessions.get(to)
        if session is not None and session.channel is not None:
            session.channel.tell(event)
        else:
            self.emit(*socketio_event(event), to=to)

    def emit(self, event: str, payload: Any = None, to: str | None = None, here: bool = False) -> None:
        """A Socket.IO event (the page's own: status, WebRTC signalling, settings); a Realtime session has its
        own words for what it needs to know (``tell``) and is sent none of these. here: `to` is connected to this
        front without a session (a client in line)."""
        session = self.sessions.get(to) if to is not None else None
        if session is not None and session.channel is not None:
            return
        options: dict[str, Any] = {"to": to}
        if self.queue_probe is not None and (session is not None or here):
            options["ignore_queue"] = True  # our own client: deliver here, no Redis round trip (see message_queue)
        if payload is None:
            self.socketio.emit(event, **options)
        else:
            self.socketio.emit(event, payload, **options)

    def _put(self, queue_name: str, message: Any) -> bool:
        """Hand a message to a worker; False (message dropped, logged) when its queue stays full or is gone."""
        if put_or_drop(self.graph.queues[queue_name], message, log, what=f"the {queue_name} queue"):
            return True
        self.metrics.queue_drops.labels(queue_name).inc()
        return False

    def _session(self, sid: str | None = None) -> Session | None:
        """The caller's session, or None when it has none or is over its event rate (the event is dropped)."""
        session = self.sessions.get(sid or request.sid)
        return session if session is not None and self.session_allows_event(session) else None

    def session_allows_event(self, session: Session) -> bool:
        """Within the session's event rate; else the event is dropped, with a (rate-limited) error."""
        if session.flooding:
            return False
        if session.take_event(self.config.limits.max_events_per_s):
            return True
        self.metrics.events_dropped.inc()
        self.refuse(session, "rate_limited", "Too many messages per second; some were dropped.")
        return False

    def refuse(self, session: Session, code: str, message: str) -> None:
        """A client's event refused: the client is told (each code once a second), and the refusal counted."""
        if not self.refused_too_often(session):
            self.turns.report(session, code, message)

    def refused_too_often(self, session: Session) -> bool:
        """Count a refused event. A client that draws refusals on and on (limits.max_refused_events beyond
        REFUSED_PER_S a second) ignores its errors, and each refused event still costs the front its reading and
        parsing, taken from everyone's voice: it is told why, then closed. True once it is being closed."""
        burst = self.config.limits.max_refused_events
        if session.flooding:
            return True
        if not burst or not session.refused(burst):
            return False
        log.warning("closing a session that kept sending what was refused", extra=turn_ids(session.sid))
        notice = ErrorNotice("refused_too_often", "This connection kept sending what the server refused (too fast, "
                             "too much, or malformed); it is closed. Wait between messages, then reconnect.")

        def close() -> None:
            self.tell(notice, to=session.sid)
            self._disconnect(session.sid)

        if session.actor is not None:  # in order after what its thread already has to send
            session.actor.call(close)
        else:  # (not on the caller's thread: it may be the WebRTC loop, which a disconnect waits on)
            threading.Timer(0.0, close).start()
        return True

    def notify_shutdown(self) -> None:
        """SIGTERM: end every turn in flight with a notice before the workers go (each session's cancel, then its
        notice, in order on its own thread; all sessions at once, waited for up to SHUTDOWN_NOTICE_S in all)."""
        notice = ErrorNotice("server_stopping", "The server is shutting down; please reconnect in a minute.")
        sessions = self.sessions.all()
        for session in sessions:
            self.turns.interrupt(session, "server stopping")
        deadline = time.monotonic() + SHUTDOWN_NOTICE_S
        for session in sessions:
            if session.actor is not None:
                session.actor.call_and_wait(lambda sid=session.sid: self.tell(notice, to=sid),
                                            max(0.0, deadline - time.monotonic()))

    def error(self, code: str, message: str, sid: str | None = None) -> None:
        self.tell(ErrorNotice(code, message), to=sid or request.sid)

    def _disconnect(self, sid: str) -> None:
        """Close the client's whole connection, not only its namespace (a client may ignore the latter and keep
        answering pings)."""
        session = self.sessions.get(sid)
        if session is not None and session.channel is not None:  # a Realtime client's WebSocket
            session.channel.close()
            return
        server = self.socketio.server
        eio_sid = server.manager.eio_sid_from_sid(sid, "/")
        server.disconnect(sid)
        if eio_sid is not None:
            self.socket_guard.close(eio_sid)

    def _bad_event(self, sid: str, code: str, message: str) -> None:
        """A rejected event (socket_guard): counted by the session's rate limit, then answered with an error."""
        session = self._session(sid)
        if session is not None:
            self.refuse(session, code, message)

    def on_measured(self, worker: str, speed: MeasuredSpeed) -> None:
        """The LLM worker measured this machine (as it became ready): --max_users auto takes its seats from that, and
        typed text its price."""
        log.info("typed text: %.0f characters a second per session (%.0f prompt tokens a second prefilled here)",
                 self.sessions.price_text(speed), speed.prefill_tok_s)
        why = self.sessions.size(speed)
        if why is None:
            log.info("measured this machine: --max_users auto would seat %s", seats_for(speed)[1])
            return
        log.info("max_users auto: %s", why)
        if self.config.llm.url or self.config.server.message_queue:
            log.warning("max_users auto measured this front's turns alone: fronts that share one engine or one "
                        "machine should each be given --max_users")

    def on_worker_death(self, worker: str, detail: str) -> None:
        """A worker died (the graph restarts it): end the turns it took with it and tell every session."""
        self.metrics.worker_restarts.labels(worker).inc()
        what = {"llm": "speech recognition and the language model", "tts": "the voice"}.get(worker, worker)
        status = {"ready": False, "workers": self.graph.health()}
        notice = ErrorNotice("worker_failed",
                             f"The assistant lost {what} and is restarting it; please ask again in a moment.")
        for session in self.sessions.all():
            self.turns.interrupt(session, "worker failed", notice)
            self.emit("server_status", status, to=session.sid)

    @staticmethod
    def _after_handshake(action, sid: str) -> None:
        """Run action(sid) a moment after the connect handler returns. A rejected connect could not carry our
        events, and events sent before the handler returns precede the client's connect acknowledgement."""
        timer = threading.Timer(REFUSE_DELAY_S, action, args=(sid,))
        timer.daemon = True
        timer.start()

    def _refuse(self, sid: str) -> None:
        self.emit("too_many_users", to=sid)
        self._disconnect(sid)

    # --- Socket.IO ---------------------------------------------------------------------------------------
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
            session = self._session(sid)
            if session is not None:
                handler(session, data)
        return run

    def on_connect(self, auth=None) -> None:
        if not self.guard.allows(request, auth):
            log.warning("refused %s: no valid access token", request.sid)
            self.tell(ErrorNotice("unauthorized", "This assistant needs an access token."), to=request.sid)
            self._after_handshake(self._disconnect, request.sid)
            return
        with self._line_lock:
            session = self.sessions.open(request.sid, client_address(request.environ))
            place = None
            if session is None and wants_to_wait(auth):
                place = self.sessions.wait(request.sid, client_address(request.environ))
        if session is None:
            if place is not None:
                log.info("waiting %s: %d users already, place %d in line", request.sid, self.sessions.max_users, place)
                self._after_handshake(self._tell_own_place, request.sid)
                if len(self.sessions) < self.sessions.max_users:  # a seat freed between open and wait
                    self._seat_waiting()
                return
            self.metrics.sessions_refused.inc()
            log.info("refused %s: %d users already", request.sid, self.sessions.max_users)
            # Accept, tell, then really disconnect (VITA only warned).
            self._after_handshake(self._refuse, request.sid)
            return
        self._seated(session)

    def _seated(self, session: Session) -> None:
        """A session has its seat: its turn machine, and the status that tells its page to start (on connect, or
        when the line seats it: the first event it gets as a seated client)."""
        self.metrics.sessions_opened.inc()
        self.turns.attach(session)
        log.info("connected (%d/%d)", len(self.sessions), self.sessions.max_users, extra=turn_ids(session.sid))
        self.emit("server_status", {"ready": self.graph.ready(), "workers": self.graph.health(),
                                    "session": self.turn_log.pseudonym(session.sid), "front": self.front_id,
                                    "webrtc": {"enabled": self.rtc is not None,
                                               "ice_servers": list(self.rtc.settings.ice_servers) if self.rtc else []}},
                  to=session.sid)
        self.turns.post(session, Connected(time.monotonic()))

    def _seat_waiting(self) -> None:
        """A seat freed (or the line changed): seat the head of the line, tell the others their new places."""
        failed: list[Session] = []
        with self._line_lock:
            for session in self.sessions.seat_waiting():
                log.info("seated from the line", extra=turn_ids(session.sid))
                try:
                    self._seated(session)
                except Exception:  # its seat goes to the next in line; the client is told by its disconnect
                    log.exception("seating from the line failed", extra=turn_ids(session.sid))
                    failed.append(session)
                    self.sessions.close(session.sid)
            for sid, place in self.sessions.places():
                self._tell_place(sid, place)
        for session in failed:  # (its thread is joined: not while the line waits on the lock)
            self.turns.detach(session)
            self._disconnect(session.sid)

    def _tell_own_place(self, sid: str) -> None:
        """A client just put in line hears its place once its connection is acknowledged."""
        with self._line_lock:
            place = dict(self.sessions.places()).get(sid)
            if place is not None:  # (seated meanwhile: its server_status said so)
                self._tell_place(sid, place)

    def _tell_place(self, sid: str, place: int) -> None:
        """(under the line's lock) Delivered here, never through the scale-out channel, whose outage must not hold
        the line, nor a disconnect waiting on it."""
        self.emit("waiting", {"place": place, "users": self.sessions.max_users}, to=sid, here=True)

    def on_disconnect(self, *_) -> None:
        with self._line_lock:  # (not seated from the line while it leaves)
            if self.sessions.leave_line(request.sid):
                log.info("left the line %s", request.sid)
                return
            session = self.sessions.close(request.sid)
        if session is None:
            return
        if self.rtc is not None:
            self.rtc.close(session.sid, session_ended=True)  # its peer connection and UDP ports go with it
        self.turns.detach(session)  # its turn cancelled, then EndSession to the workers, then its thread ends
        log.info("disconnected", extra=turn_ids(session.sid))

    def on_audio(self, session: Session, data: Any) -> None:
        started = time.perf_counter()
        if not session.audio_budget.open(time.monotonic()):
            # A flood is refused before its text is parsed (parsing it was the cost), and not counted against the
            # client: audio a page buffered through a reconnect comes all at once, and is refused so.
            self._overrun(session, counted=False)
            return
        try:
            pcm, rate = decode_audio_message(data, session.audio_rate, self.config.limits.max_audio_message_bytes)
        except AudioFormatError as exc:
            self.refuse(session, "bad_audio", str(exc))
            return
        self.admit_audio(session, pcm, rate)
        self.metrics.audio_handler.observe(time.perf_counter() - started)

    def admit_audio(self, session: Session, pcm: Any, rate: int, charged: bool = False) -> bool:
        """Microphone audio, from the socket or (decoded Opus) from the session's WebRTC peer, to its VAD, within
        the session's real-time budget (`charged`: already, before it was decoded)."""
        if not pcm.size:
            return True
        within = charged or session.audio_budget.take(pcm.size / rate, time.monotonic())
        heard = within and self.turns.post_audio(session, pcm, rate)
        if not heard:  # over the client's budget, or its session's thread behind (the server's doing: not counted)
            self._overrun(session, counted=not within)
        self.metrics.audio_seconds.inc(pcm.size / rate)
        return heard

    def audio_overrun(self, session: Session) -> None:
        """Audio refused by the session's budget before it was decoded (a WebRTC packet): told and counted, as
        admit_audio's refusals are."""
        self._overrun(session, counted=True)

    def _overrun(self, session: Session, counted: bool) -> None:
        self.metrics.audio_dropped.inc()
        message = "Audio is arriving faster than it can be processed; some was dropped."
        if counted:
            self.refuse(session, "audio_overrun", message)
        else:
            self.turns.report(session, "audio_overrun", message)

    def on_rtc_offer(self, session: Session, data: Any) -> None:
        """The page's WebRTC offer (ICE gathered, no trickle needed): the answer, or `rtc_failed` and the page stays
        on Socket.IO audio."""
        from vita.web.webrtc.hub import PeerBudgets, RtcError

        if self.rtc is None:
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
            sdp = self.rtc.answer(session.sid, offer.get("sdp"),
                                  lambda pcm, rate: self.admit_audio(session, pcm, rate, charged=True),
                                  client=client_address(request.environ),
                                  see=lambda image: self.turns.camera_frame(session, image),
                                  budgets=PeerBudgets(session.audio_budget, lambda: self.audio_overrun(session),
                                                      session.image_budget))
        except RtcError as exc:
            log.warning("WebRTC offer refused: %s", exc, extra=turn_ids(session.sid))
            self.emit("rtc_failed", {"message": str(exc)}, to=session.sid)
            return
        if self.sessions.get(session.sid) is not session:  # it disconnected meanwhile (on another thread)
            self.rtc.close(session.sid)
            return
        self.emit("rtc_answer", {"type": "answer", "sdp": sdp}, to=session.sid)

    def on_rtc_candidate(self, session: Session, data: Any) -> None:
        if self.rtc is None:
            return
        try:
            if not isinstance(data, dict):
                raise ValueError("rtc_candidate needs an object")
            self.rtc.add_candidate(session.sid, data)
        except Exception as exc:  # a malformed candidate: this one is ignored, the call goes on
            self.refuse(session, "bad_rtc_candidate", f"ICE candidate ignored: {exc}")

    def on_rtc_close(self, session: Session, _data: Any) -> None:
        if self.rtc is not None and self.rtc.close(session.sid):
            self.emit("rtc_closed", to=session.sid)

    def on_audio_format(self, session: Session, data: Any) -> None:
        try:
            session.audio_rate = check_rate(data.get("sample_rate") if isinstance(data, dict) else None)
        except AudioFormatError as exc:
            self.error("bad_audio_format", str(exc))
            return
        self.emit("audio_format", {"sample_rate": session.audio_rate}, to=session.sid)

    def on_reply_mode(self, session: Session, data: Any) -> None:
        mode = data.get("mode") if isinstance(data, dict) else None
        if mode not in REPLY_MODES:
            self.error("bad_reply_mode", f"mode must be one of: {', '.join(REPLY_MODES)}")
            return
        session.reply_mode = mode
        self.emit("reply_mode", {"mode": mode}, to=session.sid)

    def on_video_frame(self, session: Session, data: Any) -> None:
        try:
            image = decode_frame(data, self.config.limits.max_frame_bytes, self.config.limits.max_image_pixels,
                                 session.image_budget)
        except FrameOverBudget as exc:
            self.refuse(session, "rate_limited", str(exc))
            return
        except FrameError as exc:
            self.refuse(session, "bad_frame", str(exc))
            return
        self.turns.camera_frame(session, image)

    def on_text_input(self, session: Session, data: Any) -> None:
        text = data.get("text") if isinstance(data, dict) else None
        if not isinstance(text, str) or not text.strip():
            self.refuse(session, "bad_text", "text_input needs {\"text\": \"...\"} with some text")
            return
        if len(text) > self.config.limits.max_text_chars:
            self.refuse(session, "text_too_long", f"text is longer than {self.config.limits.max_text_chars} characters")
            return
        if not self.graph.ready():
            self.error("not_ready", "The assistant is still loading its models; try again in a moment.")
            return
        if not session.charge_texts([(text, None)], self.text_cost, time.monotonic(), least=MIN_TEXT_COST):
            self.refuse(session, "rate_limited", "Too many typed messages; wait a moment between them.")
            return
        self.turns.post(session, TextTyped(time.monotonic(), text.strip()))

    def on_set_voice(self, session: Session, data: Any) -> None:
        voice = data.get("voice") if isinstance(data, dict) else None
        if voice not in self.voices:
            self.error("unknown_voice", f"voice must be one of: {', '.join(self.voices)}")
            return
        session.voice = voice
        self.emit("voice", {"voice": voice}, to=session.sid)

    def on_client_settings(self, session: Session, data: Any) -> None:
        """{timezone?: IANA name, tools?: [names] or null}: the user's time zone (the time tool answers in it) and
        the tools this session allows (null: all the server offers; []: none). A key left out keeps its setting."""
        from zoneinfo import ZoneInfo

        settings = data if isinstance(data, dict) else {}
        zone, tools = settings.get("timezone"), settings.get("tools")
        try:
            if zone is not None:
                if not isinstance(zone, str) or len(zone) > 64:
                    raise ValueError
                ZoneInfo(zone)
        except (ValueError, KeyError, OSError):
            self.error("bad_settings", "timezone must be an IANA time zone name such as Europe/Paris")
            return
        if tools is not None and (not isinstance(tools, list) or len(tools) > 64
                                  or not all(isinstance(t, str) and 0 < len(t) <= 64 for t in tools)):
            self.error("bad_settings", "tools must be a list of tool names, or null for all of them")
            return
        session.timezone = zone if zone is not None else session.timezone
        if "tools" in settings:
            session.tools = tuple(tools) if tools is not None else None
        self.emit("client_settings", {"timezone": session.timezone, "tools": list(session.tools)
                                      if session.tools is not None else None}, to=session.sid)

    def on_reset_state(self, session: Session, _data: Any) -> None:
        self.turns.reset_history(session, then=lambda: self.emit("history_cleared", to=session.sid))

    def on_recording_started(self, session: Session, _data: Any) -> None:
        self.turns.restart_listening(session, "recording started")

    def on_recording_stopped(self, session: Session, _data: Any) -> None:
        self.turns.restart_listening(session, "recording stopped")
