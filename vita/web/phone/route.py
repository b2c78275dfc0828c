"""The phone door's routes: a WSGI middleware in front of the app.

- ``POST /phone/twilio``, ``/phone/telnyx``, ``/phone/plivo``: the provider's webhook when a call comes in. Its
  answer (TwiML, TeXML, Plivo XML) connects the call to ``/phone/stream`` with a short-lived, single-use stream
  token; a full server answers with a polite spoken refusal and hangs up. With ``TWILIO_AUTH_TOKEN`` set, Twilio's
  requests must carry a valid ``X-Twilio-Signature``; with the server's access token set, a webhook must be signed
  or carry the token (``?token=``) in the URL the provider calls.
- ``/phone/stream``: the WebSocket the provider streams the call on (``PhoneSession``); only a stream with a token
  this door minted, unspent and unexpired, is seated.

The providers' settings come from the environment (``TWILIO_ACCOUNT_SID`` / ``TWILIO_AUTH_TOKEN``,
``TELNYX_API_KEY``, ``PLIVO_AUTH_ID`` / ``PLIVO_AUTH_TOKEN``, each ``*_API_BASE``; ``VITA_PHONE_STREAM_URL`` for the
public ``wss://`` URL of the stream behind a proxy or tunnel). See docs/phone.md.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request

from vita.web.http.access import AccessGuard
from vita.web.http.bounded_websocket import BoundedWebSocket
from vita.web.phone.session import PhoneSession
from vita.web.phone.wire import PROVIDERS

if TYPE_CHECKING:
    from vita.web.front_host import FrontHost

WEBHOOK_PREFIX = "/phone/"
STREAM_PATH = "/phone/stream"
TOKEN_TTL_S = 60.0  # from the webhook's answer to the stream's start: a second or two on a real call
MAX_WEBHOOK_BYTES = 64 * 1024
MAX_STREAM_MESSAGE_BYTES = 64 * 1024  # a 20 ms media message is ~300 bytes
FULL = "Sorry, all of our lines are busy right now. Please call again in a few minutes. Goodbye."
CREDENTIALS = ("TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_API_BASE", "TELNYX_API_KEY", "TELNYX_API_BASE",
               "PLIVO_AUTH_ID", "PLIVO_AUTH_TOKEN", "PLIVO_API_BASE", "VITA_PHONE_STREAM_URL")


class StreamTokens:
    """Tokens the webhook mints for the stream it connects a call to: signed with a secret of this front's,
    good for TOKEN_TTL_S and for one stream."""

    def __init__(self, ttl_s: float = TOKEN_TTL_S, clock: Callable[[], float] = time.time):
        self.secret = secrets.token_bytes(32)
        self.ttl_s, self.clock = ttl_s, clock
        self.spent: dict[bytes, float] = {}  # nonce → when its token expires
        self.lock = threading.Lock()

    def mint(self, provider: str) -> str:
        """A token for one stream of `provider`'s (a stream that says it is another's is refused)."""
        body = secrets.token_bytes(12) + struct.pack(">d", self.clock() + self.ttl_s)
        return base64.urlsafe_b64encode(body + self._sign(body, provider)).decode("ascii").rstrip("=")

    def _sign(self, body: bytes, provider: str) -> bytes:
        return hmac.new(self.secret, body + provider.encode(), hashlib.sha256).digest()[:16]

    def spend(self, token: str | None, provider: str) -> bool:
        """Whether `token` is one of ours for `provider`, unexpired and unspent (it is spent now)."""
        if not isinstance(token, str) or len(token) > 64:
            return False
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, TypeError):
            return False
        if len(raw) != 36 or not hmac.compare_digest(raw[20:], self._sign(raw[:20], provider)):
            return False
        nonce, (expires,) = raw[:12], struct.unpack(">d", raw[12:20])
        now = self.clock()
        with self.lock:
            for old in [n for n, until in self.spent.items() if until < now]:
                del self.spent[old]
            if expires < now or nonce in self.spent:
                return False
            self.spent[nonce] = expires
        return True


def twilio_signature(auth_token: str, url: str, params: Mapping[str, str]) -> str:
    """Twilio's request signature: HMAC-SHA1 of the URL and the POST parameters sorted by name, base64."""
    data = url + "".join(k + params[k] for k in sorted(params))
    return base64.b64encode(hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()).decode("ascii")


class PhoneSocket(BoundedWebSocket):
    """The front's bounded WebSocket (TLS-safe, paced, size-capped); a phone hears no notices."""

    def too_big_notice(self) -> str:
        return json.dumps({"event": "error", "message": f"a message may be at most {self.limit} bytes"})


class _Limit:
    def __init__(self, max_bytes: int):
        self.max_http_buffer_size = max_bytes


def _xml(start_response: Callable, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(data))),
                            ("Cache-Control", "no-store")])
    return [data]


def _plain(start_response: Callable, status: str, text: str) -> list[bytes]:
    data = (text + "\n").encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))])
    return [data]


class PhoneRoute:
    """WSGI middleware: the phone webhooks and stream here, everything else to the app."""

    def __init__(self, app: Callable, front: FrontHost, environ: Mapping[str, str] | None = None):
        self.app, self.front = app, front
        source = os.environ if environ is None else environ
        self.credentials = {k: source[k] for k in CREDENTIALS if source.get(k)}
        self.tokens = StreamTokens()

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        path = environ.get("PATH_INFO", "")
        if path == STREAM_PATH:
            return self._stream(environ, start_response)
        if path.startswith(WEBHOOK_PREFIX) and path[len(WEBHOOK_PREFIX):] in PROVIDERS:
            return self._webhook(path[len(WEBHOOK_PREFIX):], environ, start_response)
        return self.app(environ, start_response)

    def _webhook(self, name: str, environ: dict, start_response: Callable) -> Any:
        """A call comes in: connect it to the stream (or turn it away, politely, when every seat is taken)."""
        if environ.get("REQUEST_METHOD") != "POST":
            return _plain(start_response, "405 Method Not Allowed", f"{WEBHOOK_PREFIX}{name} is the provider's "
                          "webhook for an incoming call: it takes a POST")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_WEBHOOK_BYTES:
            return _plain(start_response, "413 Payload Too Large", f"a webhook is at most {MAX_WEBHOOK_BYTES} bytes")
        request = Request(environ)
        request.max_content_length = MAX_WEBHOOK_BYTES  # (a chunked body declares no length)
        try:
            form = {k: v for k, v in request.form.items()}
        except RequestEntityTooLarge:
            return _plain(start_response, "413 Payload Too Large", f"a webhook is at most {MAX_WEBHOOK_BYTES} bytes")
        if not self._webhook_allowed(name, request, form):  # (a wrong access token counts against the address)
            return _plain(start_response, "403 Forbidden", "this webhook needs the provider's signature or the "
                          "server's access token (?token=) in its URL")
        provider = PROVIDERS[name]
        sessions = self.front.sessions
        if len(sessions) >= sessions.max_users or sessions.waiting_count():
            self.front.metrics.sessions_refused.inc()
            return _xml(start_response, "200 OK", provider.refusal(FULL))
        token = self.tokens.mint(name)
        return _xml(start_response, "200 OK", provider.answer(self._stream_url(environ), {"token": token}))

    def _webhook_allowed(self, name: str, request: Request, form: dict[str, str]) -> bool:
        """Twilio's signature when its auth token is set; the access token when the server has one and the request
        is not signed."""
        auth_token = self.credentials.get("TWILIO_AUTH_TOKEN")
        if name == "twilio" and auth_token:
            offered = request.headers.get("X-Twilio-Signature", "")
            expected = twilio_signature(auth_token, self._public_url(request), form)
            return hmac.compare_digest(offered.encode(), expected.encode())
        guard: AccessGuard = self.front.guard
        return not guard.enabled or guard.check(request.args.get("token"), request.remote_addr)

    def _public_url(self, request: Request) -> str:
        """The URL the provider called, as it signed it (behind a proxy: VITA_PHONE_STREAM_URL's host)."""
        public = self.credentials.get("VITA_PHONE_STREAM_URL")
        if public:
            host = urlsplit(public).netloc
            query = request.query_string.decode("latin-1")
            return f"https://{host}{request.path}" + (f"?{query}" if query else "")
        return request.url

    def _stream_url(self, environ: dict) -> str:
        public = self.credentials.get("VITA_PHONE_STREAM_URL")
        if public:
            return public
        scheme = "wss" if environ.get("wsgi.url_scheme") == "https" else "ws"
        host = environ.get("HTTP_HOST") or f"{environ.get('SERVER_NAME')}:{environ.get('SERVER_PORT')}"
        return f"{scheme}://{host}{STREAM_PATH}"

    def _stream(self, environ: dict, start_response: Callable) -> Any:
        if environ.get("HTTP_UPGRADE", "").lower() != "websocket":
            return _plain(start_response, "426 Upgrade Required", f"{STREAM_PATH} is a provider's media stream "
                          "(a WebSocket)")
        upgrade = PhoneSocket(lambda ws: PhoneSession(self.front, ws, environ, self.tokens.spend,
                                                      self.credentials).serve(),
                              _Limit(MAX_STREAM_MESSAGE_BYTES), self.front.socket_guard)
        # A `sid` here names no engine.io session: BoundedWebSocket would take it for a polling client upgrading.
        query = urlencode([(k, v) for k, v in parse_qsl(environ.get("QUERY_STRING", "")) if k != "sid"])
        return upgrade({**environ, "QUERY_STRING": query}, start_response)
