"""The phone door's routes: a WSGI middleware in front of the app.

- ``POST /phone/twilio``, ``/phone/telnyx``, ``/phone/plivo``: the provider's webhook when a call comes in. Its
  answer (TwiML, TeXML, Plivo XML) connects the call to ``/phone/stream`` with a short-lived, single-use stream
  token; a full server answers with a polite spoken refusal and hangs up. With ``TWILIO_AUTH_TOKEN`` set, Twilio's
  requests must carry a valid ``X-Twilio-Signature``; with the server's access token set, a webhook must be signed
  or carry the token (``?token=``) in the URL the provider calls.
- ``/phone/stream/<provider>/<token>``: the WebSocket the provider streams the call on (``PhoneSession``); only a
  stream with a token this door minted for that provider, unspent and unexpired, is accepted, and its start must
  name the call the webhook named.

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
from urllib.parse import urlsplit

from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request

from vita.web.http.access import AccessGuard
from vita.web.http.bounded_websocket import BoundedWebSocket, SizeLimit, door_request
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
# The webhook's name for the call, as the stream's start names it (Telnyx's TeXML names its call control id when
# it does; otherwise its token is bound to no call, and only its stream is closed when the server ends the call).
# The numbers providers put in From for a caller who withheld theirs (Twilio's anonymous, unavailable, restricted,
# blocked): every such caller would share one memory.
WITHHELD = frozenset({"266696687", "86282452253", "7378742833", "2562533", "0", "1"})
CALL_FIELDS = {"twilio": "CallSid", "telnyx": "CallControlId", "plivo": "CallUUID"}
CREDENTIALS = ("TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_API_BASE", "TELNYX_API_KEY", "TELNYX_API_BASE",
               "PLIVO_AUTH_ID", "PLIVO_AUTH_TOKEN", "PLIVO_API_BASE", "VITA_PHONE_STREAM_URL")


class Callers:
    """Who called, for memory, by call id, from the webhook to its stream's start: only a vouched-for webhook's
    caller (an open webhook's From could be anyone's number, and would open their memory). Kept as the key the
    number gives (vita/memory/user_keys.py), for TOKEN_TTL_S."""

    def __init__(self, ttl_s: float = TOKEN_TTL_S, clock: Callable[[], float] = time.time):
        self.ttl_s, self.clock = ttl_s, clock
        self.keys: dict[str, tuple[str, float]] = {}
        self.lock = threading.Lock()

    def note(self, call_id: str, key: str) -> None:
        now = self.clock()
        with self.lock:
            for old in [c for c, (_, until) in self.keys.items() if until < now]:
                del self.keys[old]
            self.keys[call_id] = (key, now + self.ttl_s)

    def take(self, call_id: str) -> str | None:
        with self.lock:
            key, until = self.keys.pop(call_id, (None, 0.0))
        return key if until >= self.clock() else None


class StreamTokens:
    """Tokens the webhook mints for the stream it connects a call to: signed with a secret of this front's, for one
    provider, good for TOKEN_TTL_S and for one stream, and bound to the call the webhook named when it named one
    (only a bound call is hung up through the provider's API: a stream cannot end someone else's call)."""

    def __init__(self, ttl_s: float = TOKEN_TTL_S, clock: Callable[[], float] = time.time):
        self.secret = secrets.token_bytes(32)
        self.ttl_s, self.clock = ttl_s, clock
        self.spent: dict[bytes, float] = {}  # nonce → when its token expires
        self.lock = threading.Lock()

    def mint(self, provider: str, call_id: str = "") -> str:
        """A token for one stream of `provider`'s, for the call `call_id` ("": whichever call the stream names)."""
        body = secrets.token_bytes(12) + struct.pack(">d", self.clock() + self.ttl_s) + self._call(call_id)
        return base64.urlsafe_b64encode(body + self._sign(body, provider)).decode("ascii").rstrip("=")

    def _sign(self, body: bytes, provider: str) -> bytes:
        return hmac.new(self.secret, body + provider.encode(), hashlib.sha256).digest()[:16]

    def _call(self, call_id: str) -> bytes:
        return hmac.new(self.secret, b"call:" + call_id.encode(), hashlib.sha256).digest()[:8] if call_id else bytes(8)

    def _read(self, token: str | None, provider: str) -> tuple[bytes, float, bytes] | None:
        """(nonce, expiry, call) of a token of ours for `provider`, unexpired and unspent; None otherwise."""
        if not isinstance(token, str) or len(token) > 64:
            return None
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, TypeError):
            return None
        if len(raw) != 44 or base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") != token:
            return None  # (one spelling of each token: base64 would read others as the same bytes)
        if not hmac.compare_digest(raw[28:], self._sign(raw[:28], provider)):
            return None
        nonce, (expires,), call = raw[:12], struct.unpack(">d", raw[12:20]), raw[20:28]
        with self.lock:
            if expires < self.clock() or nonce in self.spent:
                return None
        return nonce, expires, call

    def valid(self, token: str | None, provider: str) -> bool:
        """Whether `token` may open a stream now (checked before the WebSocket is accepted; spent at its start)."""
        return self._read(token, provider) is not None

    def spend(self, token: str | None, provider: str, call_id: str) -> bool | None:
        """Spend `token` for the stream of `provider`'s call `call_id`: True when it was minted for that call,
        False for a token bound to no call, None when it is refused (not ours, expired, spent, another call's)."""
        read = self._read(token, provider)
        if read is None:
            return None
        nonce, expires, call = read
        bound = call != bytes(8)
        if bound and not hmac.compare_digest(call, self._call(call_id)):
            return None
        now = self.clock()
        with self.lock:
            for old in [n for n, until in self.spent.items() if until < now]:
                del self.spent[old]
            if nonce in self.spent:
                return None
            self.spent[nonce] = expires
        return bound


def twilio_signature(auth_token: str, url: str, params: Mapping[str, str]) -> str:
    """Twilio's request signature: HMAC-SHA1 of the URL and the POST parameters sorted by name, base64."""
    data = url + "".join(k + params[k] for k in sorted(params))
    return base64.b64encode(hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()).decode("ascii")


class PhoneSocket(BoundedWebSocket):
    """The front's bounded WebSocket (TLS-safe, paced, size-capped); a phone hears no notices."""

    def too_big_notice(self) -> str:
        return json.dumps({"event": "error", "message": f"a message may be at most {self.limit} bytes"})


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
        self.callers = Callers()

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        path = environ.get("PATH_INFO", "")
        if path == STREAM_PATH or path.startswith(STREAM_PATH + "/"):
            return self._stream(path, environ, start_response)
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
        allowed, vouched = self._webhook_allowed(name, request, form)
        if not allowed:  # (a wrong access token counts against the address)
            return _plain(start_response, "403 Forbidden", "this webhook needs the provider's signature or the "
                          "server's access token (?token=) in its URL")
        provider = PROVIDERS[name]
        sessions = self.front.sessions
        if len(sessions) >= sessions.max_users or sessions.waiting_count():
            self.front.metrics.sessions_refused.inc()
            return _xml(start_response, "200 OK", provider.refusal(FULL))
        # Bound to the call it names only when the webhook is vouched for (signed, or with the access token): an
        # open webhook could name anyone's call, and a bound call is one the server may hang up.
        call_id = form.get(CALL_FIELDS[name], "")
        token = self.tokens.mint(name, call_id if vouched else "")
        caller = "".join(c for c in form.get("From", "") if c.isdigit() or c == "+")
        if (vouched and call_id and caller.lstrip("+") not in WITHHELD and len(caller) >= 6
                and self.front.user_keys is not None and self.front.config.memory.phone):
            self.callers.note(call_id, self.front.user_keys.key("phone", caller))
        return _xml(start_response, "200 OK", provider.answer(f"{self._stream_url(environ)}/{name}/{token}"))

    def _webhook_allowed(self, name: str, request: Request, form: dict[str, str]) -> tuple[bool, bool]:
        """(allowed, vouched for): Twilio's signature when its auth token is set; the access token when the server
        has one and the request is not signed; an open webhook otherwise (allowed, not vouched for)."""
        auth_token = self.credentials.get("TWILIO_AUTH_TOKEN")
        if name == "twilio" and auth_token:
            offered = request.headers.get("X-Twilio-Signature", "").encode()
            signed = any(hmac.compare_digest(offered, twilio_signature(auth_token, url, form).encode())
                         for url in self._public_urls(request))
            return signed, signed
        guard: AccessGuard = self.front.guard
        if not guard.enabled:
            return True, False
        ok = guard.check(request.args.get("token"), request.remote_addr)
        return ok, ok

    def _public_urls(self, request: Request) -> list[str]:
        """The URLs the provider may have signed: as the server saw the request, and at VITA_PHONE_STREAM_URL's host
        behind a proxy; each with and without its port (Twilio's own validators try both)."""
        query = request.query_string.decode("latin-1")
        tail = request.path + (f"?{query}" if query else "")
        hosts = [request.host_url.rstrip("/")]
        public = self.credentials.get("VITA_PHONE_STREAM_URL")
        if public:  # (and under the path a proxy mounts the server at)
            parts = urlsplit(public)
            hosts += [f"https://{parts.netloc}", f"https://{parts.netloc}{parts.path.removesuffix(STREAM_PATH)}"]
        urls = []
        for host in dict.fromkeys(hosts):
            parts = urlsplit(host)
            name = parts.netloc.rsplit("@", 1)[-1]
            name = name[:name.rindex("]") + 1] if name.startswith("[") else name.split(":")[0]  # (an IPv6 in [])
            bare, prefix = f"{parts.scheme}://{name}", parts.path.rstrip("/")
            port = parts.port or (443 if parts.scheme == "https" else 80)
            urls += [bare + prefix + tail, f"{bare}:{port}{prefix}{tail}"]
        return urls

    def _stream_url(self, environ: dict) -> str:
        """The public URL of /phone/stream (the provider and token follow it)."""
        public = self.credentials.get("VITA_PHONE_STREAM_URL")
        if public:
            return public.rstrip("/")
        scheme = "wss" if environ.get("wsgi.url_scheme") == "https" else "ws"
        host = environ.get("HTTP_HOST") or f"{environ.get('SERVER_NAME')}:{environ.get('SERVER_PORT')}"
        return f"{scheme}://{host}{STREAM_PATH}"

    def _stream(self, path: str, environ: dict, start_response: Callable) -> Any:
        """``/phone/stream/<provider>/<token>``: a call's media stream, accepted only with a token the webhook
        minted for that provider, unexpired and unspent (a stream without one costs no connection's slot)."""
        if environ.get("HTTP_UPGRADE", "").lower() != "websocket":
            return _plain(start_response, "426 Upgrade Required", f"{STREAM_PATH} is a provider's media stream "
                          "(a WebSocket)")
        name, _, token = path[len(STREAM_PATH) + 1:].partition("/")
        if name not in PROVIDERS or not self.tokens.valid(token, name):
            return _plain(start_response, "403 Forbidden", "a phone stream needs the stream URL a webhook answer "
                          "gave (it is good for one stream, for a minute)")
        upgrade = PhoneSocket(lambda ws: PhoneSession(self.front, ws, environ, PROVIDERS[name],
                                                      lambda call_id: self.tokens.spend(token, name, call_id),
                                                      self.credentials, self.callers.take).serve(),
                              SizeLimit(MAX_STREAM_MESSAGE_BYTES), self.front.socket_guard)
        return upgrade(door_request(environ), start_response)
