"""The door of ``/v1/realtime``: a WSGI middleware in front of the Flask app that takes the Realtime WebSocket
(checking its origin and access token, or a client key, before the upgrade) and hands it to a ``RealtimeSession``
(vita/web/realtime/session.py), and mints client keys (``POST /v1/realtime/client_secrets``); every other request
goes to the app."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from werkzeug.wrappers import Request

from vita.web.http.access import AccessGuard
from vita.web.http.bounded_websocket import BoundedWebSocket, SizeLimit, door_request
from vita.web.realtime.call import DataChannelWire
from vita.web.realtime.client_keys import (
    DEFAULT_TTL_S,
    MAX_TTL_S,
    MEMORY_USER,
    MIN_TTL_S,
    ClientKeys,
    KeyRefused,
)
from vita.web.realtime.protocol import ProtocolError, Settings, error_event, new_id, parse_event, updated
from vita.web.realtime.session import RealtimeSession
from vita.web.realtime.settings import first_settings, refuse_push_to_talk, session_summary

if TYPE_CHECKING:
    from vita.web.front_host import FrontHost

PATH = "/v1/realtime"
SECRETS_PATH = "/v1/realtime/client_secrets"
CALLS_PATH = "/v1/realtime/calls"
MAX_SECRET_REQUEST_BYTES = 64 * 1024
MAX_USER_CHARS = 128  # an app's id for its user (a client key's)
MAX_CALL_REQUEST_BYTES = 256 * 1024  # an SDP offer (at most 64 KB) and a session object
CALL_CONNECT_S = 20.0  # a call whose caller has not opened its events channel by then is over (its peer goes at 15)
SUBPROTOCOL_KEY = "openai-insecure-api-key."  # how a browser's Realtime client sends its key (no headers there)


def _json_response(start_response: Callable, status: str, code: str, message: str, param: str | None = None
                   ) -> list[bytes]:
    return _json(start_response, status, error_event(code, message, param))


def _content_length(environ: dict) -> int:
    """The request body's declared length: 0 when none is given, -1 when it is not a number."""
    try:
        return int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return -1


def _json(start_response: Callable, status: str, payload: dict[str, Any]) -> list[bytes]:
    body = json.dumps(payload).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store")])
    return [body]


class RealtimeSocket(BoundedWebSocket):
    """The front's bounded WebSocket (TLS-safe, paced, size-capped), telling a client whose message is too big in
    a Realtime error event."""

    def too_big_notice(self) -> str:
        return json.dumps(error_event("message_too_big", f"A message may be at most {self.limit} bytes."))


class RealtimeRoute:
    """WSGI middleware: ``/v1/realtime`` here, everything else to the Flask app."""

    def __init__(self, app: Callable, front: FrontHost):
        self.app, self.front = app, front
        self.max_message_bytes = max(front.config.limits.max_frame_bytes, 1 << 20)
        self.keys = ClientKeys()  # this front's: a key opens a session on the front that minted it

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        if environ.get("PATH_INFO") == SECRETS_PATH:
            return self._client_secret(environ, start_response)
        if environ.get("PATH_INFO") == CALLS_PATH:
            return self._call(environ, start_response)
        if environ.get("PATH_INFO") != PATH:
            return self.app(environ, start_response)
        if environ.get("HTTP_UPGRADE", "").lower() != "websocket":
            return _json_response(start_response, "426 Upgrade Required", "websocket_required",
                                  f"{PATH} speaks OpenAI's Realtime protocol over a WebSocket")
        if not self._origin_allowed(environ):
            return _json_response(start_response, "403 Forbidden", "origin_not_allowed",
                                  "This origin may not open a Realtime session here.")
        try:
            bound = self._admitted(environ)
        except KeyRefused as exc:
            return _json_response(start_response, "401 Unauthorized", "invalid_api_key", str(exc))
        protocols = [p.strip() for p in environ.get("HTTP_SEC_WEBSOCKET_PROTOCOL", "").split(",") if p.strip()]
        model = parse_qs(environ.get("QUERY_STRING", "")).get("model", [""])[0]
        upgrade = RealtimeSocket(lambda ws: RealtimeSession(self.front, ws, model, environ, bound).serve(),
                                SizeLimit(self.max_message_bytes), self.front.socket_guard,
                                subprotocols=[p for p in protocols if p == "realtime"] or None)
        return upgrade(door_request(environ), start_response)

    def _admitted(self, environ: dict, spend: bool = True) -> Settings | None:
        """The caller's token, or its client key's session settings (None: none bound); KeyRefused, saying why,
        for neither. A wrong one counts against the address (TokenThrottle). `spend`: the key is used up now
        (else the caller spends it once what it opens is open)."""
        token, address = self.token_of(environ), environ.get("REMOTE_ADDR")
        if ClientKeys.looks_like(token):  # a client key (an app's backend minted it for this browser)
            try:
                key = self.keys.redeem(token) if spend else self.keys.peek(token)
            except KeyRefused:
                self.front.guard.throttle.failed(address)
                raise
            environ[MEMORY_USER] = key.user  # (the app's backend, holding the token, named its user)
            return key.session
        if not self.front.guard.check(token, address):
            raise KeyRefused("This assistant needs an access token (Authorization: Bearer …).")
        return None

    def _call(self, environ: dict, start_response: Callable) -> Any:
        """``POST /v1/realtime/calls``: the caller's SDP offer (the body as application/sdp, or a multipart form
        with ``sdp`` and an optional ``session``), answered with our SDP (201); the session's events then travel on
        the data channel the caller opened (``oai-events``), its audio on the tracks."""
        if environ.get("REQUEST_METHOD") != "POST":
            return _json_response(start_response, "405 Method Not Allowed", "method_not_allowed",
                                  f"{CALLS_PATH} takes a POST with an SDP offer")
        if not self._origin_allowed(environ):
            return _json_response(start_response, "403 Forbidden", "origin_not_allowed",
                                  "This origin may not open a Realtime call here.")
        rtc = self.front.rtc
        if rtc is None:
            return _json_response(start_response, "503 Service Unavailable", "webrtc_disabled",
                                  "WebRTC is switched off on this server (webrtc.enabled): use the WebSocket.")
        try:
            offer, asked = self._offer(environ)
            keyed = self._admitted(environ, spend=False)  # spent once the call is answered
            # The key's settings, then those sent with the offer; refused now, before a seat or a port is taken.
            settings = updated(keyed or first_settings(self.front), asked, self.front.voices) if asked else keyed
            if settings is not None:
                refuse_push_to_talk(settings)
        except KeyRefused as exc:
            return _json_response(start_response, "401 Unauthorized", "invalid_api_key", str(exc))
        except ProtocolError as exc:
            return _json_response(start_response, "400 Bad Request", exc.code, str(exc), exc.param)
        rt: RealtimeSession | None = None
        wire = DataChannelWire(rtc.loop, lambda: rtc.close(rt.sid) if rt is not None else None,
                               self.max_message_bytes, CALL_CONNECT_S,
                               self.front.config.limits.max_socket_bytes_per_s)
        model = parse_qs(environ.get("QUERY_STRING", "")).get("model", [""])[0]
        rt = RealtimeSession(self.front, wire, model, environ, settings)
        rt.conversation.webrtc = True
        try:
            opened = rt.open()
        except ProtocolError as exc:
            return _json_response(start_response, "429 Too Many Requests", exc.code, exc.message, exc.param)
        if not opened:
            return _json_response(start_response, "429 Too Many Requests", "too_many_users",
                                  f"The server is full ({self.front.sessions.max_users} users); try again later.")
        from vita.web.http.web_security import client_address
        from vita.web.webrtc.hub import PeerBudgets, RtcError

        session = rt.session

        def hear(pcm: Any, rate: int) -> bool:  # the track's audio, counted as a client's appends are
            rt.count_audio(len(pcm), rate)
            return self.front.admit_audio(session, pcm, rate, charged=True)  # (charged as RTP, before decoding)

        budgets = PeerBudgets(session.audio_budget, lambda: self.front.audio_overrun(session))
        try:
            answer = rtc.answer(rt.sid, offer, hear, client=client_address(environ), channel=wire.attach,
                                budgets=budgets)
            if keyed is not None:
                self._admitted(environ)  # the key is spent now (refused if another call spent it meanwhile)
        except (RtcError, KeyRefused, RuntimeError) as exc:  # (RuntimeError: the WebRTC loop is gone, stopping)
            rtc.close(rt.sid, session_ended=True)
            rt.end()
            if isinstance(exc, KeyRefused):
                return _json_response(start_response, "401 Unauthorized", "invalid_api_key", str(exc))
            return _json_response(start_response, "400 Bad Request", "invalid_offer", str(exc), "sdp")
        threading.Thread(target=self._serve_call, args=(rt,), name=f"rt-call-{rt.sid}", daemon=True).start()
        body = answer.encode()
        start_response("201 Created", [("Content-Type", "application/sdp"), ("Content-Length", str(len(body))),
                                       ("Location", f"{CALLS_PATH}/{rt.sid}"), ("Cache-Control", "no-store")])
        return [body]

    def _serve_call(self, rt: RealtimeSession) -> None:
        try:
            rt.run()
        finally:
            self.front.rtc.close(rt.sid, session_ended=True)  # its peer connection and ports go with it

    def _offer(self, environ: dict) -> tuple[str, dict]:
        """The SDP offer and the `session` settings asked with it (ProtocolError if they are not readable)."""
        length = _content_length(environ)
        if not 0 < length <= MAX_CALL_REQUEST_BYTES:
            raise ProtocolError("invalid_request", f"a call needs an SDP offer of at most {MAX_CALL_REQUEST_BYTES} "
                                "bytes (application/sdp, or a multipart form with sdp and session)", "sdp")
        request = Request(environ)
        kind = request.mimetype
        if kind == "application/sdp":
            return request.get_data(as_text=True), {}
        if kind != "multipart/form-data":
            raise ProtocolError("invalid_request", "send the offer as application/sdp, or as multipart/form-data "
                                "with sdp and session", "sdp")
        parts = {name: value for name, value in request.form.items()}
        for name, upload in request.files.items():
            parts[name] = upload.read(MAX_CALL_REQUEST_BYTES).decode("utf-8", "replace")
        offer = parts.get("sdp")
        if not offer:
            raise ProtocolError("invalid_request", "the form has no sdp part", "sdp")
        asked: Any = {}
        if parts.get("session"):
            try:
                asked = parse_event(parts["session"])  # bounded: depth and objects checked before parsing
            except ValueError:
                raise ProtocolError("invalid_value", "session must be a JSON object", "session") from None
            if not isinstance(asked, dict):
                raise ProtocolError("invalid_value", "session must be a JSON object", "session")
        return offer, asked

    def _client_secret(self, environ: dict, start_response: Callable) -> Any:
        """``POST /v1/realtime/client_secrets``: a key for one Realtime connection, bound to the `session` settings
        given, expiring after ``expires_after.seconds`` (OpenAI's request and answer). Minting needs the server's
        token itself: a client key cannot mint another."""
        if environ.get("REQUEST_METHOD") != "POST":
            return _json_response(start_response, "405 Method Not Allowed", "method_not_allowed",
                                  f"{SECRETS_PATH} takes a POST")
        offered = AccessGuard.offered(Request(environ))
        if ClientKeys.looks_like(offered) or not self.front.guard.check(offered, environ.get("REMOTE_ADDR")):
            return _json_response(start_response, "401 Unauthorized", "invalid_api_key",
                                  "Minting a client key needs the server's access token (Authorization: Bearer …).")
        length = _content_length(environ)
        if not 0 <= length <= MAX_SECRET_REQUEST_BYTES:
            return _json_response(start_response, "413 Payload Too Large", "invalid_request",
                                  f"the request body must be JSON of at most {MAX_SECRET_REQUEST_BYTES} bytes")
        try:
            request = parse_event(environ["wsgi.input"].read(length) or b"{}")
            if not isinstance(request, dict):
                raise ProtocolError("invalid_value", "the request body must be a JSON object")
            ttl = self._ttl(request.get("expires_after"))
            user = request.get("user")  # ours: the app's own id for its user, for memory (docs/memory.md)
            if user is not None and not (isinstance(user, str) and 0 < len(user) <= MAX_USER_CHARS):
                raise ProtocolError("invalid_value", f"user must be the app's id for its user: a string of 1 to "
                                                     f"{MAX_USER_CHARS} characters", "user")
            session = request.get("session")
            session = {} if session is None else session
            settings = updated(first_settings(self.front), session, self.front.voices)  # refused now, not later
            value, key = self.keys.mint(settings, ttl, user)
        except (ValueError, UnicodeDecodeError):
            return _json_response(start_response, "400 Bad Request", "invalid_json", "the request body is not JSON")
        except ProtocolError as exc:
            return _json_response(start_response, "400 Bad Request", exc.code, str(exc), exc.param)
        except KeyRefused as exc:
            return _json_response(start_response, "429 Too Many Requests", "rate_limit_exceeded", str(exc))
        return _json(start_response, "200 OK", {"value": value, "expires_at": int(key.expires_at),
                                                "session": session_summary(self.front, settings, new_id("sess"))})

    @staticmethod
    def _ttl(expires_after: Any) -> float:
        if expires_after is None:
            return DEFAULT_TTL_S
        if not isinstance(expires_after, dict) or expires_after.get("anchor", "created_at") != "created_at":
            raise ProtocolError("invalid_value", 'expires_after must be {"anchor": "created_at", "seconds": N}',
                                "expires_after")
        seconds = expires_after.get("seconds", DEFAULT_TTL_S)
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not MIN_TTL_S <= seconds <= MAX_TTL_S:
            raise ProtocolError("invalid_value", f"expires_after.seconds must be an integer from {MIN_TTL_S} to "
                                f"{MAX_TTL_S}", "expires_after.seconds")
        return float(seconds)

    def _origin_allowed(self, environ: dict) -> bool:
        """No Origin: not a browser. A browser's page must come from this server, or from one of
        --allowed_origins when they are given (the rule engine.io applies to Socket.IO)."""
        origin = environ.get("HTTP_ORIGIN")
        if not origin:
            return True
        allowed = [o.strip() for o in (self.front.config.server.allowed_origins or "").split(",") if o.strip()]
        return origin in allowed if allowed else urlsplit(origin).netloc == environ.get("HTTP_HOST")  # as engine.io

    @staticmethod
    def token_of(environ: dict) -> str | None:
        """Where the page's requests may carry it (Authorization: Bearer, ?token=, the cookie), or where a browser's
        Realtime client puts its key (a WebSocket subprotocol: browsers cannot set headers on a WebSocket)."""
        for protocol in environ.get("HTTP_SEC_WEBSOCKET_PROTOCOL", "").split(","):
            if protocol.strip().startswith(SUBPROTOCOL_KEY):
                return protocol.strip()[len(SUBPROTOCOL_KEY):]
        return AccessGuard.offered(Request(environ))
