"""The front's HTTP routes beside Socket.IO: the page and its files, the health and readiness probes, metrics."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

import psutil
from flask import Response, abort, jsonify, redirect, request, send_file

from vita.memory.user_keys import valid_user_id
from vita.ops.metrics import CONTENT_TYPE
from vita.web.http.access import COOKIE, OPEN_PATHS

if TYPE_CHECKING:
    from vita.web.front_host import FrontHost


def thread_counts() -> dict[str, int]:
    """Live threads, with engine.io's ping timers apart: a closed connection's timer sleeps out its ping
    interval (10 s) before it ends, which is not a leak."""
    timers = sum(t.name.endswith("(_send_ping)") for t in threading.enumerate())
    return {"threads": threading.active_count() - timers, "ping_timers": timers}


def install_routes(front: FrontHost) -> None:
    """The page, its static files, /health (the detail behind the token), /metrics, /voices and /ready."""
    app = front.flask

    @app.before_request
    def check_access():
        if request.path in OPEN_PATHS or front.guard.allows(request):
            return None
        return Response("<!doctype html><title>Vita</title><p>This assistant needs an access token. Open the "
                        "link you were given (it ends in <code>/?token=…</code>).</p>", status=401,
                        content_type="text/html; charset=utf-8")

    @app.after_request
    def keep_token(response):
        # A valid link's token leaves the address bar and history; the browser keeps the page's pass instead, in
        # an HttpOnly cookie (it lets the browser through a lockout its NAT's guesser earned).
        token = request.args.get("token")
        secure = front.config.server.tls or request.is_secure  # our TLS, or a trusted proxy's X-Forwarded-Proto
        if front.guard.enabled and request.path == "/" and token and front.guard.check(token):
            response = redirect("/", code=303)
            response.set_cookie(COOKIE, front.guard.page_pass, httponly=True, samesite="Strict", secure=secure)
        elif front.guard.enabled and front.guard.holds_old_cookie(request):  # the token itself: the pass instead
            response.set_cookie(COOKIE, front.guard.page_pass, httponly=True, samesite="Strict", secure=secure)
        response.headers.update(front.security_headers)
        return response

    @app.get("/")
    def index():
        return send_file(front.web.page, max_age=0)

    @app.get("/static/<path:name>")
    def static_file(name: str):
        path = front.web.static(name)
        if path is None:
            abort(404)
        return send_file(path, max_age=0)

    @app.get("/health")
    def health():
        if not front.guard.allows(request):  # a probe without the token learns whether it is up, no more
            return jsonify({"status": "ready" if front.graph.ready() else "starting",
                            "detail": "send the access token for the detailed view"})
        workers = front.graph.health()
        return jsonify({
            "status": "ready" if front.graph.ready() else "starting",
            "workers": workers,
            "sessions": len(front.sessions),
            "doors": dict(Counter(s.channel.door for s in front.sessions.all() if s.channel is not None)),
            "waiting": front.sessions.waiting_count(),
            "vad_threads": sum(t.name.startswith("vad-") for t in threading.enumerate()),
            **thread_counts(),
            "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1),
            "max_users": front.sessions.max_users,
            "max_users_auto": front.sessions.sized_by or (f"not measured: {front.sessions.max_users} until it is"
                                                          if front.sessions.auto else None),
            "uptime_s": round(time.time() - front.started_at, 1),
            "turn_log": {"path": str(front.turn_log.path) if front.turn_log.path else None,
                         "ok": front.turn_log.error is None, "error": front.turn_log.error,
                         "written": front.turn_log.written, "dropped": front.turn_log.dropped},
            "message_queue": front.queue_probe.status() if front.queue_probe else None,
            "connections": ({**front.connections.counts(), **front.socket_guard.counts()} if front.connections
                            else None),
            "front": front.front_id,
            "llm": front.llm_choice,
            "webrtc": ({"enabled": True, "peers": len(front.rtc.peers)} if front.rtc is not None
                       else {"enabled": False}),
        })

    @app.get("/metrics")
    def metrics():
        return Response(front.metrics.render(), content_type=CONTENT_TYPE)

    @app.get("/voices")
    def voices():
        return jsonify({"default": front.config.tts.voice, "voices": front.voices})

    @app.route("/v1/memory/<user>", methods=["GET", "DELETE"])
    def memory(user: str):
        """The operator's memory API: one user's facts exported (GET) or erased (DELETE), by the key the page's
        memory panel shows them; the access token's, as a Bearer header."""
        if front.memory is None:
            return jsonify({"error": "memory is off on this server"}), 404
        if not front.guard.operator(request):
            return jsonify({"error": "the memory API needs the server's access token (Authorization: Bearer); a "
                                     "server without one (--access_token) has no memory API"}), 403
        if not valid_user_id(user):
            return jsonify({"error": "not a user key: 32 hexadecimal digits, as the memory panel shows it"}), 400
        try:
            if request.method == "DELETE":
                return jsonify({"user": user, "deleted": front.memory.forget_all(user)})
            return jsonify({"user": user, "facts": [f.as_dict() for f in front.memory.facts(user)]})
        except sqlite3.Error as exc:  # (the file busy past its lock wait, or broken)
            return jsonify({"error": f"the memory file could not be read or changed: {exc}"}), 503

    @app.get("/ready")
    def ready():
        ok = front.graph.ready()
        return jsonify({"ready": ok}), 200 if ok else 503
