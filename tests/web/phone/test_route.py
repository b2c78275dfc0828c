"""The phone door's routes: Twilio's request signature, the webhook middleware in front of the app (answer, refusal when
full, method and size limits, Twilio's signature and the access token) and the stream route's refusals before any
upgrade, over a small fake front (the stream tokens themselves: test_stream_tokens.py). Pure logic: no model, no
server, no network."""

from __future__ import annotations

import re
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from werkzeug.test import EnvironBuilder

from vita.memory.user_keys import UserKeys
from vita.web.http.access import AccessGuard, FailureThrottle
from vita.web.phone import route as route_module
from vita.web.phone.route import (
    CALL_FIELDS,
    FULL,
    MAX_WEBHOOK_BYTES,
    Callers,
    PhoneRoute,
    StreamTokens,
    twilio_signature,
)
from vita.web.phone.wire import Twilio

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

CALLER = "203.0.113.9"
KEY_FILE = Path(tempfile.mkdtemp()) / "memory.key"  # the fake fronts' server secret
TWILIO_FORM = {"CallSid": "CA5c8ad5ff9e0bde7a1bdd3c8b1a1c1fd2", "AccountSid": "AC0123", "From": "+15005550006",
               "To": "+15005550001", "CallStatus": "ringing", "Direction": "inbound"}
TELNYX_FORM = {"CallSid": "v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg",
               "CallControlId": "v3:MdI91X4lWFEs7IgbBEOT9M4AigoY08M0WWZFISt1Yw2axZ_IiE4pqg", "From": "+15005550006"}
PLIVO_FORM = {"CallUUID": "aeb2d8e3-5c4f-4b1c-9a3a-2b7c1e0f1d11", "From": "15005550006", "Direction": "inbound"}
FORMS = {"twilio": TWILIO_FORM, "telnyx": TELNYX_FORM, "plivo": PLIVO_FORM}


# --- Twilio's signature --------------------------------------------------------------------------------------------
TWILIO_URL = "https://mycompany.com/myapp.php?foo=1&bar=2"


@pytest.mark.parametrize(("number", "signature"), [
    ("+14158675309", "RSOYDt4T1cUTdK1PDd93/VVr8B8="),  # the vector of Twilio's own SDKs' tests (php, csharp)
    ("+12349013030", "0/KCTR6DLpKmkAf8muzZqo1nDgQ="),  # the worked example of twilio.com/docs/usage/security
])
def test_twilio_signature_matches_twilios_published_vectors(number, signature):
    params = {"CallSid": "CA1234567890ABCDE", "Caller": number, "Digits": "1234", "From": number, "To": "+18005551212"}
    assert twilio_signature("12345", TWILIO_URL, params) == signature
    assert twilio_signature("12345", TWILIO_URL, dict(reversed(params.items()))) == signature  # sorted by name
    assert twilio_signature("12345", TWILIO_URL, {**params, "Digits": "9999"}) != signature
    assert twilio_signature("12345", TWILIO_URL.replace("bar=2", "bar=3"), params) != signature
    assert twilio_signature("54321", TWILIO_URL, params) != signature


# --- the webhook middleware ----------------------------------------------------------------------------------------
class Sessions:
    def __init__(self, seated: int = 0, max_users: int = 4, waiting: int = 0):
        self.seated, self.max_users, self.waiting = seated, max_users, waiting

    def __len__(self) -> int:
        return self.seated

    def waiting_count(self) -> int:
        return self.waiting


class Counter:
    def __init__(self):
        self.value = 0

    def inc(self) -> None:
        self.value += 1


VOUCH = "server-token-0123456789"  # the server's access token, in a webhook URL: the webhook is vouched for


class Clock:
    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def fake_front(access_token: str | None = None, max_failures: int = 1, phone: bool = True,
               **sessions) -> SimpleNamespace:
    """What PhoneRoute's webhook uses of the front: its seats, its access guard and its refusal count."""
    guard = AccessGuard(access_token, FailureThrottle(max_failures=max_failures))  # 1: one refusal is a lockout
    return SimpleNamespace(sessions=Sessions(**sessions), guard=guard, user_keys=UserKeys(KEY_FILE),
                           config=SimpleNamespace(memory=SimpleNamespace(phone=phone)),
                           metrics=SimpleNamespace(sessions_refused=Counter()), socket_guard=None)


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"the app: " + environ["PATH_INFO"].encode()]


def call(route: PhoneRoute, path: str, method: str = "POST", **kwargs) -> tuple[int, dict, bytes]:
    kwargs.setdefault("base_url", "https://voice.example.com")
    builder = EnvironBuilder(path=path, method=method, environ_overrides={"REMOTE_ADDR": CALLER}, **kwargs)
    environ = builder.get_environ()
    answered = {}

    def start_response(status, headers):
        answered["status"], answered["headers"] = int(status.split()[0]), dict(headers)

    body = b"".join(route(environ, start_response))
    return answered["status"], answered["headers"], body


def stream_token(name: str, body: bytes, base: str = "wss://voice.example.com/phone/stream") -> str:
    """The token an answer connects its call's stream with: the last segment of `<base>/<provider>/<token>`."""
    stream = ET.fromstring(body).find(".//Stream")
    assert stream is not None
    url = stream.text if name == "plivo" else stream.get("url")
    assert url.startswith(f"{base}/{name}/")
    token = url[len(f"{base}/{name}/"):]
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", token) and urlsplit(url).query == ""  # in the path, no query
    return token


@pytest.mark.parametrize("name", ["twilio", "telnyx", "plivo"])
def test_a_call_is_answered_with_a_stream_url_whose_token_is_bound_to_the_webhooks_call(name):
    """A webhook vouched for (here by the server's access token) binds the stream to the call it names."""
    route = PhoneRoute(app, fake_front(access_token=VOUCH, seated=1, max_users=4), environ={})
    status, headers, body = call(route, f"/phone/{name}?token={VOUCH}", data=FORMS[name])
    assert status == 200 and headers["Content-Type"] == "application/xml"
    assert int(headers["Content-Length"]) == len(body)
    token, call_id = stream_token(name, body), FORMS[name][CALL_FIELDS[name]]
    assert route.tokens.valid(token, name) is True
    other = next(p for p in ("twilio", "telnyx", "plivo") if p != name)
    assert route.tokens.spend(token, other, call_id) is None  # a stream that says it is another provider's
    assert route.tokens.spend(token, name, "another-call") is None  # a stream that names another call
    assert route.tokens.spend(token, name, call_id) is True
    assert route.tokens.spend(token, name, call_id) is None  # one stream per answer
    assert route.front.metrics.sessions_refused.value == 0


@pytest.mark.parametrize("name", ["twilio", "telnyx", "plivo"])
def test_an_open_webhook_binds_no_call_a_stream_could_then_hang_up(name):
    """Without a signature or the access token anyone may post it, naming anyone's call: its stream is seated for
    whichever call it names, and is never one the server hangs up through the provider."""
    route = PhoneRoute(app, fake_front(), environ={})
    token = stream_token(name, call(route, f"/phone/{name}", data=FORMS[name])[2])
    assert route.tokens.spend(token, name, FORMS[name][CALL_FIELDS[name]]) is False


@pytest.mark.parametrize("name", ["twilio", "telnyx", "plivo"])
def test_a_webhook_that_names_no_call_mints_a_token_for_any_call(name):
    form = {k: v for k, v in FORMS[name].items() if k != CALL_FIELDS[name]}  # (Telnyx's TeXML may name none)
    route = PhoneRoute(app, fake_front(), environ={})
    token = stream_token(name, call(route, f"/phone/{name}", data=form)[2])
    assert route.tokens.spend(token, name, "whichever-call") is False
    assert route.tokens.spend(token, name, "whichever-call") is None


def test_a_plain_http_front_answers_with_a_ws_stream_url():
    route = PhoneRoute(app, fake_front(), environ={})
    _, _, body = call(route, "/phone/telnyx", data=TELNYX_FORM, base_url="http://10.0.0.5:8080")
    token = stream_token("telnyx", body, base="ws://10.0.0.5:8080/phone/stream")
    assert route.tokens.spend(token, "telnyx", TELNYX_FORM["CallControlId"]) is False  # (open: bound to no call)


def test_the_public_stream_url_is_the_configured_one():
    route = PhoneRoute(app, fake_front(), environ={"VITA_PHONE_STREAM_URL": "wss://tunnel.example.net/phone/stream/"})
    _, _, body = call(route, "/phone/twilio", data=TWILIO_FORM, base_url="http://127.0.0.1:8080")
    token = stream_token("twilio", body, base="wss://tunnel.example.net/phone/stream")  # (its trailing / dropped)
    assert route.tokens.valid(token, "twilio")


@pytest.mark.parametrize(("name", "say"), [("twilio", "Say"), ("telnyx", "Say"), ("plivo", "Speak")])
@pytest.mark.parametrize("sessions", [{"seated": 4, "max_users": 4}, {"seated": 1, "max_users": 4, "waiting": 1}],
                         ids=["every-seat-taken", "others-waiting"])
def test_a_full_server_refuses_the_call_politely(name, say, sessions):
    route = PhoneRoute(app, fake_front(**sessions), environ={})
    status, headers, body = call(route, f"/phone/{name}", data=FORMS[name])
    assert status == 200 and headers["Content-Type"] == "application/xml"
    root = ET.fromstring(body)
    assert [c.tag for c in root] == [say, "Hangup"] and root[0].text == FULL
    assert root.find(".//Stream") is None  # no stream, no token
    assert route.front.metrics.sessions_refused.value == 1


@pytest.mark.parametrize("method", ["GET", "PUT", "HEAD"])
def test_a_webhook_takes_only_a_post(method):
    route = PhoneRoute(app, fake_front(), environ={})
    status, _, body = call(route, "/phone/plivo", method=method)
    assert status == 405 and b"takes a POST" in body
    assert route.front.metrics.sessions_refused.value == 0 and len(route.tokens.spent) == 0


def test_an_oversized_webhook_is_refused_unread():
    route = PhoneRoute(app, fake_front(), environ={})
    status, _, _ = call(route, "/phone/telnyx", data=b"x" * (MAX_WEBHOOK_BYTES + 1),
                        content_type="application/x-www-form-urlencoded")
    assert status == 413
    status, _, _ = call(route, "/phone/telnyx", data={"a": "b" * 100})
    assert status == 200


def signed(route: PhoneRoute, signed_url: str, path: str = "/phone/twilio", **kwargs) -> int:
    """The status of a Twilio webhook at `path` signed over `signed_url`."""
    signature = twilio_signature("tw-secret", signed_url, TWILIO_FORM)
    return call(route, path, data=TWILIO_FORM, headers={"X-Twilio-Signature": signature}, **kwargs)[0]


def test_twilio_needs_its_signature_when_its_auth_token_is_set():
    environ = {"TWILIO_AUTH_TOKEN": "tw-secret", "TWILIO_ACCOUNT_SID": "AC0123"}
    route = PhoneRoute(app, fake_front(), environ=environ)
    good = twilio_signature("tw-secret", "https://voice.example.com/phone/twilio", TWILIO_FORM)
    status, _, body = call(route, "/phone/twilio", data=TWILIO_FORM, headers={"X-Twilio-Signature": good})
    assert status == 200 and route.tokens.spend(stream_token("twilio", body), "twilio", TWILIO_FORM["CallSid"])

    assert route.front.guard.throttle.retry_after(CALLER) is None
    for headers in ({}, {"X-Twilio-Signature": "bm90IGl0"}, {"X-Twilio-Signature": good.lower()}):
        status, _, body = call(route, "/phone/twilio", data=TWILIO_FORM, headers=headers)
        assert status == 403 and b"<Stream" not in body
    forged = {**TWILIO_FORM, "From": "+15005550009"}  # the signature covers every parameter
    assert call(route, "/phone/twilio", data=forged, headers={"X-Twilio-Signature": good})[0] == 403
    # a signature cannot be guessed: a wrong one is not counted (Twilio's own addresses are never locked out)
    assert route.front.guard.throttle.retry_after(CALLER) is None
    # Twilio's own signature is the test: not the access guard, which here holds no token
    assert route.credentials["TWILIO_AUTH_TOKEN"] == "tw-secret"


def test_twilios_signature_may_name_the_default_port_or_leave_it_out():
    route = PhoneRoute(app, fake_front(), environ={"TWILIO_AUTH_TOKEN": "tw-secret"})
    assert signed(route, "https://voice.example.com:443/phone/twilio") == 200  # the request came without it
    assert signed(route, "https://voice.example.com/phone/twilio") == 200
    assert signed(route, "https://voice.example.com/phone/twilio", base_url="https://voice.example.com:443") == 200
    for url in ("http://voice.example.com/phone/twilio", "https://voice.example.com:8443/phone/twilio",
                "https://voice.example.com:443/phone/telnyx", "https://tunnel.example.net/phone/twilio"):
        assert signed(route, url) == 403  # another scheme, port, path or host


def test_twilios_signature_is_over_the_url_as_seen_or_the_public_one_behind_a_proxy():
    route = PhoneRoute(app, fake_front(), environ={"TWILIO_AUTH_TOKEN": "tw-secret",
                                                   "VITA_PHONE_STREAM_URL": "wss://tunnel.example.net/phone/stream"})
    local = {"path": "/phone/twilio?line=2", "base_url": "http://127.0.0.1:8080"}
    for url in ("https://tunnel.example.net/phone/twilio?line=2", "https://tunnel.example.net:443/phone/twilio?line=2",
                "http://127.0.0.1:8080/phone/twilio?line=2"):  # the public URL, and the URL as the server saw it
        assert signed(route, url, **local) == 200
    for url in ("http://tunnel.example.net/phone/twilio?line=2", "https://tunnel.example.net/phone/twilio",
                "https://tunnel.example.net/phone/twilio?line=3", "https://evil.example.org/phone/twilio?line=2"):
        assert signed(route, url, **local) == 403


def test_twilios_signature_is_over_the_path_a_proxy_mounts_the_server_at():
    route = PhoneRoute(app, fake_front(), environ={"TWILIO_AUTH_TOKEN": "tw-secret",
                                                   "VITA_PHONE_STREAM_URL": "wss://example.net/vita/phone/stream"})
    local = {"path": "/phone/twilio", "base_url": "http://127.0.0.1:8080"}
    assert signed(route, "https://example.net/vita/phone/twilio", **local) == 200
    assert signed(route, "https://example.net/other/phone/twilio", **local) == 403


def test_without_twilios_auth_token_no_signature_is_asked_for():
    route = PhoneRoute(app, fake_front(), environ={"TWILIO_ACCOUNT_SID": "AC0123"})
    assert call(route, "/phone/twilio", data=TWILIO_FORM)[0] == 200


@pytest.mark.parametrize("name", ["twilio", "telnyx", "plivo"])
def test_with_an_access_token_an_unsigned_webhook_must_carry_it(name):
    route = PhoneRoute(app, fake_front(access_token="server-token-0123456789", max_failures=2), environ={})
    status, _, body = call(route, f"/phone/{name}", data=FORMS[name])
    assert status == 403 and b"<Stream" not in body
    status, _, body = call(route, f"/phone/{name}?token=server-token-0123456789", data=FORMS[name])
    assert status == 200 and route.tokens.spend(stream_token(name, body), name, FORMS[name][CALL_FIELDS[name]])
    assert b"server-token-0123456789" not in body  # the server's own token is never handed on
    assert route.front.guard.throttle.retry_after(CALLER) is None  # (a missing token is no guess)
    wrong = f"/phone/{name}?token=server-token-0123456789-wrong"
    assert call(route, wrong, data=FORMS[name])[0] == 403
    assert route.front.guard.throttle.retry_after(CALLER) is None  # a wrong one counts once: 1 of 2...
    assert call(route, wrong, data=FORMS[name])[0] == 403
    assert route.front.guard.throttle.retry_after(CALLER) is not None  # ...and the second locks the address out


@pytest.mark.parametrize("name", ["twilio", "telnyx", "plivo"])
def test_only_a_vouched_for_webhooks_caller_is_known_to_memory(name):
    form = {**FORMS[name], "From": "+33 6 12 34 56 78"}
    call_id = form[CALL_FIELDS[name]]
    route = PhoneRoute(app, fake_front(access_token="server-token-0123456789"), environ={})
    assert call(route, f"/phone/{name}?token=server-token-0123456789", data=form)[0] == 200
    key = route.callers.take(call_id)
    assert key == route.front.user_keys.key("phone", "+33612345678") and "33612345678" not in key
    assert route.callers.take(call_id) is None  # taken once, by the call's stream
    open_route = PhoneRoute(app, fake_front(), environ={})  # an open webhook: its From could be anyone's
    assert call(open_route, f"/phone/{name}", data=form)[0] == 200
    assert open_route.callers.take(call_id) is None
    for off, withheld in ((False, form["From"]), (True, "+266696687")):  # not allowed; a withheld number
        route = PhoneRoute(app, fake_front(access_token="server-token-0123456789", phone=off), environ={})
        call(route, f"/phone/{name}?token=server-token-0123456789", data={**form, "From": withheld})
        assert route.callers.take(call_id) is None


def test_a_callers_key_waits_for_its_stream_no_longer_than_a_token_does():
    clock = Clock()
    callers = Callers(ttl_s=60.0, clock=clock)
    callers.note("CA1", "k1")
    callers.note("CA2", "k2")
    clock.now += 61.0
    assert callers.take("CA1") is None
    callers.note("CA3", "k3")  # (noting sweeps what expired)
    assert set(callers.keys) == {"CA3"} and callers.take("CA3") == "k3"


def test_other_paths_pass_through_to_the_app():
    route = PhoneRoute(app, fake_front(), environ={})
    for path in ("/", "/health", "/phone", "/phone/", "/phone/vonage", "/phone/twilio/extra", "/phone/streams",
                 "/v1/realtime"):
        status, _, body = call(route, path, method="POST" if path.startswith("/phone") else "GET")
        assert (status, body) == (200, b"the app: " + path.encode())


# --- the stream route ----------------------------------------------------------------------------------------------
UPGRADE = {"Upgrade": "websocket", "Connection": "Upgrade"}


@pytest.fixture
def sockets(monkeypatch) -> list:
    """The upgrades begun (handler, environ), answered 101 unshaken; then each session's (provider, admitted)."""
    opened = []

    class Socket:
        def __init__(self, handler, limit, guard):
            self.handler = handler

        def __call__(self, environ, start_response):
            opened.append((self.handler, environ))
            start_response("101 Switching Protocols", [])
            return [b""]

    def session(front, ws, environ, expected, admitted, credentials, caller):
        return SimpleNamespace(serve=lambda: opened.append((expected, admitted)))

    monkeypatch.setattr(route_module, "PhoneSocket", Socket)
    monkeypatch.setattr(route_module, "PhoneSession", session)
    return opened


def test_the_stream_path_is_a_websocket_only(sockets):
    route = PhoneRoute(app, fake_front(), environ={})
    token = route.tokens.mint("twilio")
    for path in ("/phone/stream", f"/phone/stream/twilio/{token}"):
        status, _, body = call(route, path, method="GET")
        assert status == 426 and b"WebSocket" in body
    assert sockets == [] and route.tokens.valid(token, "twilio")


def test_a_stream_without_a_good_token_is_refused_before_any_upgrade(sockets):
    clock = Clock()
    route = PhoneRoute(app, fake_front(), environ={})
    route.tokens = StreamTokens(ttl_s=60.0, clock=clock)
    spent, expired = route.tokens.mint("twilio", "CA1"), route.tokens.mint("twilio", "CA1")
    assert route.tokens.spend(spent, "twilio", "CA1") is True
    clock.now += 30.0
    token = route.tokens.mint("twilio", "CA1")  # (minted later: still good when `expired` is not)
    clock.now += 31.0
    for path in ("/phone/stream", "/phone/stream/", "/phone/stream/twilio", "/phone/stream/twilio/",
                 "/phone/stream/twilio/garbage", f"/phone/stream/twilio/{spent}", f"/phone/stream/twilio/{expired}",
                 f"/phone/stream/vonage/{token}", f"/phone/stream/telnyx/{token}", f"/phone/stream/{token}",
                 f"/phone/stream/twilio/{token}/extra"):
        status, _, body = call(route, path, method="GET", headers=UPGRADE)
        assert status == 403 and b"stream URL" in body, path
    assert sockets == []  # no upgrade was begun
    assert route.tokens.valid(token, "twilio")  # and the good token was spent by none of them


def test_a_stream_with_a_good_token_is_upgraded_and_spends_it_for_the_webhooks_call(sockets):
    route = PhoneRoute(app, fake_front(access_token=VOUCH), environ={})
    _, _, body = call(route, f"/phone/twilio?token={VOUCH}", data=TWILIO_FORM)
    path = f"/phone/stream/twilio/{stream_token('twilio', body)}"
    status, _, _ = call(route, path, method="GET", headers=UPGRADE, query_string="sid=abc&x=1")
    assert status == 101
    ((handler, environ),) = sockets
    assert environ["QUERY_STRING"] == "x=1"  # (a `sid` names no engine.io session here)
    handler(object())  # the stream opens: its session serves
    expected, admitted = sockets[1]
    assert expected is Twilio  # a stream on the Twilio URL must start as Twilio's
    assert admitted("CA-another-call") is None  # its start must name the webhook's call
    assert admitted(TWILIO_FORM["CallSid"]) is True and admitted(TWILIO_FORM["CallSid"]) is None
    assert call(route, path, method="GET", headers=UPGRADE)[0] == 403  # its URL opens one stream


def test_only_the_providers_settings_are_kept_from_the_environment():
    environ = {"TWILIO_AUTH_TOKEN": "t", "TELNYX_API_KEY": "", "PLIVO_AUTH_ID": "MA1", "HOME": "/root", "PATH": "/bin"}
    route = PhoneRoute(app, fake_front(), environ=environ)
    assert route.credentials == {"TWILIO_AUTH_TOKEN": "t", "PLIVO_AUTH_ID": "MA1"}
