"""The front process's web app: what its doors share (sessions, turn machine, budgets, workers), composed with the
doors themselves (Socket.IO, the Realtime WebSocket and calls) and the page's routes (/health, /ready, /metrics)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

from flask import Flask
from flask_socketio import SocketIO

from vita.capacity import seats_for
from vita.client_events import ClientEvent, ErrorNotice, ServerStatus
from vita.config import PROJECT_ROOT, Config
from vita.machine.models import available_voices
from vita.memory.store import open_memory
from vita.messages import MeasuredSpeed, put_or_drop
from vita.ops.logs import turn_ids
from vita.ops.metrics import FrontMetrics
from vita.ops.tracing import Tracing
from vita.ops.turn_log import TurnLogger
from vita.text_cost import TextCost, local_tokenizer_file
from vita.turns.ears import Ears
from vita.turns.sessions import Session, SessionRegistry
from vita.turns.turn_control import TurnController
from vita.web.doors import Doorway
from vita.web.http.access import AccessGuard, TokenThrottle, client_key
from vita.web.http.connections import ConnectionTable
from vita.web.http.socket_guard import SocketGuard
from vita.web.http.user_cookie import UserCookie
from vita.web.http.web_root import WebRoot
from vita.web.http.web_security import ForwardedHeaders, security_headers
from vita.web.message_queue import QueueProbe, socketio_options
from vita.web.page_routes import install_routes
from vita.web.phone.route import PhoneRoute
from vita.web.realtime.route import RealtimeRoute
from vita.web.socketio.door import SocketIoDoor
from vita.web.socketio.wire import socketio_event

log = logging.getLogger("vita.web.app")
WEB_DIR = PROJECT_ROOT / "web"
PING_INTERVAL_S = 10
# Told to clients on top of the interval: a browser counts interval + timeout from the last PING it received, and
# the next PING follows a late pong (one queued behind the client's own paced data) by the interval.
PING_GRACE_S = 5
SHUTDOWN_NOTICE_S = 1.0  # SIGTERM waits this long per session for its turn to be cancelled before the notice


def rtc_hub(config: Config) -> Any:
    """The front's WebRTC peers (one asyncio loop thread), or None when webrtc.enabled is false."""
    if not config.webrtc.enabled:
        return None
    from vita.web.webrtc.hub import RtcHub, RtcSettings  # aiortc and PyAV: only when WebRTC is on

    return RtcHub(RtcSettings.from_config(config.webrtc, config.limits.max_image_pixels))


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
        self.security_headers = security_headers(config.server.tls, operator_page=web_root is not None)
        self.queue_probe = QueueProbe(queue_url) if queue_url else None
        self.connections: ConnectionTable | None = None  # the HTTP server's, once it exists (for /health)
        self.llm_choice = llm_choice(config)
        self.metrics = FrontMetrics(lambda: len(self.sessions), graph.queue_depths, self.sessions.waiting_count)
        self.turn_log = TurnLogger(config.turn_log_path(), config.turn_log.retention_days)
        self.rtc = rtc_hub(config)
        self.tracing = Tracing.for_process("front", config.tracing.endpoint, config.tracing.protocol,
                                           config.tracing.content)
        self.memory, self.user_keys = open_memory(config)
        self.turns = TurnController(config, Ears.load(config), self.tell, self._put, self._disconnect, graph.ready,
                                    self.metrics, self.turn_log, line=self.sessions, tracing=self.tracing)
        graph.on_death = self.on_worker_death
        graph.on_measured = self.on_measured
        self.doorway = Doorway(self)  # every door seats and ends its sessions through it
        # The doors, each a folder of vita/web/ (its wire, its route): Socket.IO's handlers on the server above, and
        # each door with a route of its own around the app's (a new door is one more line: `routes = Door(routes,
        # self)`).
        self.socketio_door = SocketIoDoor(self)
        routes = realtime = RealtimeRoute(self.flask.wsgi_app, self)
        routes = PhoneRoute(routes, self)
        routes = UserCookie(routes, enabled=self.memory is not None)  # who a browser's user is, for memory
        # Every HTTP request, the doors' included: a locked-out address waits (a Realtime client key lets it in).
        self.flask.wsgi_app = ForwardedHeaders(TokenThrottle(routes, self.guard, realtime.token_of,
                                                             realtime.keys.holds), config.trusted_proxies())
        install_routes(self)

    # --- plumbing ----------------------------------------------------------------------------------------
    def tell(self, event: ClientEvent, to: str) -> None:
        """A client event to one session, through its door's channel (a client with no seat yet, or refused one,
        is a Socket.IO client)."""
        if isinstance(event, ErrorNotice):
            self.metrics.errors.labels(event.code).inc()
        session = self.sessions.get(to)
        if session is not None and session.channel is not None:
            session.channel.tell(event)
        else:
            self.socketio_door.emit(*socketio_event(event), to=to)

    def _put(self, queue_name: str, message: Any) -> bool:
        """Hand a message to a worker; False (message dropped, logged) when its queue stays full or is gone."""
        if put_or_drop(self.graph.queues[queue_name], message, log, what=f"the {queue_name} queue"):
            return True
        self.metrics.queue_drops.labels(queue_name).inc()
        return False

    def session_of(self, sid: str) -> Session | None:
        """The caller's session, or None when it has none or is over its event rate (the event is dropped)."""
        session = self.sessions.get(sid)
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

    def _disconnect(self, sid: str) -> None:
        """Close the client's whole connection, through its door (a client with no seat: a Socket.IO client)."""
        session = self.sessions.get(sid)
        if session is not None and session.channel is not None:
            session.channel.close()
        else:
            self.socketio_door.disconnect(sid)

    def _bad_event(self, sid: str, code: str, message: str) -> None:
        """A rejected event (socket_guard): counted by the session's rate limit, then answered with an error."""
        session = self.session_of(sid)
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
        status = {"workers": self.graph.health()}
        notice = ErrorNotice("worker_failed",
                             f"The assistant lost {what} and is restarting it; please ask again in a moment.")
        for session in self.sessions.all():
            self.turns.interrupt(session, "worker failed", notice)
            self.tell(ServerStatus(False, status["workers"]), to=session.sid)

    def admit_audio(self, session: Session, pcm: Any, rate: int, charged: bool = False) -> bool:
        """Microphone audio, from the socket or (decoded Opus) from the session's WebRTC peer, to its VAD, within
        the session's real-time budget (`charged`: already, before it was decoded)."""
        if not pcm.size:
            return True
        within = charged or session.audio_budget.take(pcm.size / rate, time.monotonic())
        heard = within and self.turns.post_audio(session, pcm, rate)
        if not heard:  # over the client's budget, or its session's thread behind (the server's doing: not counted)
            self.overrun(session, counted=not within)
        self.metrics.audio_seconds.inc(pcm.size / rate)
        return heard

    def audio_overrun(self, session: Session) -> None:
        """Audio refused by the session's budget before it was decoded (a WebRTC packet): told and counted, as
        admit_audio's refusals are."""
        self.overrun(session, counted=True)

    def overrun(self, session: Session, counted: bool) -> None:
        """Audio dropped: counted; `counted` also against the client's refusals (its own doing, not the server's)."""
        self.metrics.audio_dropped.inc()
        message = "Audio is arriving faster than it can be processed; some was dropped."
        if counted:
            self.refuse(session, "audio_overrun", message)
        else:
            self.turns.report(session, "audio_overrun", message)
