"""The phone door's routes: the stream tokens the webhook mints (signed, short-lived, single-use), Twilio's request
signature, and the webhook middleware in front of the app (answer, refusal when full, method and size limits,
Twilio's signature and the access token) over a small fake front. Pure logic: no model, no server, no network."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import pytest
from werkzeug.test import EnvironBuilder

from vita.web.http.access import AccessGuard, FailureThrottle
from vita.web.phone.route import FULL, MAX_WEBHOOK_BYTES, TOKEN_TTL_S, PhoneRoute, StreamTokens, twilio_signature

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

CALLER = "203.0.113.9"
TWILIO_FORM = {"CallSid": "CA5c8ad5ff9e0bde7a1bdd3c8b1a1c1fd2", "AccountSid": "AC0123", "From": "+15005550006",
               "To": "+15005550001", "CallStatus": "ringing", "Direction": "inbound"}


# --- stream tokens -------------------------------------------------------------------------------------------------
class Clock:
    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_minted_token_spends_once():
    tokens = StreamTokens()
    token = tokens.mint("twilio")
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", token)  # fits a URL's query and a TwiML Parameter as it is
    assert tokens.spend(token, "twilio") is True
    assert tokens.spend(token, "twilio") is False  # single-use
    fresh = tokens.mint("twilio")
    assert fresh != token and tokens.spend(fresh, "twilio") is True  # each mint is a token of its own


def test_tokens_spend_in_any_order():
    tokens = StreamTokens()
    first, second = tokens.mint("twilio"), tokens.mint("twilio")
    assert tokens.spend(second, "twilio") and tokens.spend(first, "twilio")
    assert not tokens.spend(first, "twilio") and not tokens.spend(second, "twilio")


def test_a_tampered_token_is_refused():
    tokens = StreamTokens()
    token = tokens.mint("twilio")
    for i in (0, 10, 20, len(token) - 1):  # the nonce, the expiry, the signature
        flipped = token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1:]
        assert tokens.spend(flipped, "twilio") is False
    assert tokens.spend(token[:-1], "twilio") is False and tokens.spend(token + "A", "twilio") is False
    assert tokens.spend(token, "twilio") is True  # the refusals spent nothing


def test_a_token_of_another_front_is_refused():
    ours, theirs = StreamTokens(), StreamTokens()
    token = theirs.mint("twilio")
    assert ours.spend(token, "twilio") is False
    assert theirs.spend(token, "twilio") is True


@pytest.mark.parametrize("token", [None, "", "garbage", "!!!!", "é" * 48, "A" * 48, "A" * 65, "A" * 100_000, 12345,
                                   b"bytes"])
def test_what_is_no_token_is_refused(token):
    assert StreamTokens().spend(token, "twilio") is False


def test_an_overlong_token_is_refused_even_when_it_decodes_to_a_good_one():
    tokens = StreamTokens()
    token = tokens.mint("twilio")
    assert tokens.spend(token + "=" * (65 - len(token)), "twilio") is False  # 65 characters: not read at all
    assert tokens.spend(token, "twilio") is True


def test_an_expired_token_is_refused():
    clock = Clock()
    tokens = StreamTokens(ttl_s=60.0, clock=clock)
    late, in_time = tokens.mint("twilio"), tokens.mint("twilio")
    clock.now += 59.0
    assert tokens.spend(in_time, "twilio") is True
    clock.now += 2.0
    assert tokens.spend(late, "twilio") is False
    assert StreamTokens().ttl_s == TOKEN_TTL_S <= 120  # short-lived by default


def test_spent_tokens_are_forgotten_once_they_expire():
    clock = Clock()
    tokens = StreamTokens(ttl_s=60.0, clock=clock)
    for _ in range(5):
        assert tokens.spend(tokens.mint("twilio"), "twilio")
    assert len(tokens.spent) == 5
    clock.now += 61.0
    assert tokens.spend(tokens.mint("twilio"), "twilio")
    assert len(tokens.spent) == 1  # what it remembers stays bounded by what was minted within the TTL


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


def fake_front(access_token: str | None = None, **sessions) -> SimpleNamespace:
    """What PhoneRoute's webhook uses of the front: its seats, its access guard and its refusal count."""
    guard = AccessGuard(access_token, FailureThrottle(max_failures=1))  # one refusal shows as a lockout
    return SimpleNamespace(sessions=Sessions(**sessions), guard=guard,
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


def stream_token(name: str, body: bytes) -> str:
    """The token an answer connects its call's stream with (asserting the stream URL on the way)."""
    root = ET.fromstring(body)
    stream = root.find(".//Stream")
    assert stream is not None
    url = stream.text if name == "plivo" else stream.get("url")
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("wss", "voice.example.com", "/phone/stream")
    if name == "twilio":
        (parameter,) = stream.findall("Parameter")
        assert parameter.get("name") == "token"
        return parameter.get("value")
    return parse_qs(parts.query)["token"][0]


@pytest.mark.parametrize("name", ["twilio", "telnyx", "plivo"])
def test_a_call_is_answered_with_a_stream_and_a_token_the_stream_can_spend(name):
    route = PhoneRoute(app, fake_front(seated=1, max_users=4), environ={})
    status, headers, body = call(route, f"/phone/{name}", data=TWILIO_FORM)
    assert status == 200 and headers["Content-Type"] == "application/xml"
    assert int(headers["Content-Length"]) == len(body)
    token = stream_token(name, body)
    other = next(p for p in ("twilio", "telnyx", "plivo") if p != name)
    assert route.tokens.spend(token, other) is False  # a stream that says it is another provider's
    assert route.tokens.spend(token, name) is True
    assert route.tokens.spend(token, name) is False  # one stream per answer
    assert route.front.metrics.sessions_refused.value == 0


def test_a_plain_http_front_answers_with_a_ws_stream_url():
    route = PhoneRoute(app, fake_front(), environ={})
    _, _, body = call(route, "/phone/telnyx", data={}, base_url="http://10.0.0.5:8080")
    url = ET.fromstring(body).find("Connect/Stream").get("url")
    assert urlsplit(url)[:3] == ("ws", "10.0.0.5:8080", "/phone/stream")


def test_the_public_stream_url_is_the_configured_one():
    route = PhoneRoute(app, fake_front(), environ={"VITA_PHONE_STREAM_URL": "wss://tunnel.example.net/phone/stream"})
    _, _, body = call(route, "/phone/twilio", data=TWILIO_FORM, base_url="http://127.0.0.1:8080")
    assert ET.fromstring(body).find("Connect/Stream").get("url") == "wss://tunnel.example.net/phone/stream"


@pytest.mark.parametrize(("name", "say"), [("twilio", "Say"), ("telnyx", "Say"), ("plivo", "Speak")])
@pytest.mark.parametrize("sessions", [{"seated": 4, "max_users": 4}, {"seated": 1, "max_users": 4, "waiting": 1}],
                         ids=["every-seat-taken", "others-waiting"])
def test_a_full_server_refuses_the_call_politely(name, say, sessions):
    route = PhoneRoute(app, fake_front(**sessions), environ={})
    status, headers, body = call(route, f"/phone/{name}", data=TWILIO_FORM)
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


def test_twilio_needs_its_signature_when_its_auth_token_is_set():
    environ = {"TWILIO_AUTH_TOKEN": "tw-secret", "TWILIO_ACCOUNT_SID": "AC0123"}
    route = PhoneRoute(app, fake_front(), environ=environ)
    signed = twilio_signature("tw-secret", "https://voice.example.com/phone/twilio", TWILIO_FORM)
    status, _, body = call(route, "/phone/twilio", data=TWILIO_FORM, headers={"X-Twilio-Signature": signed})
    assert status == 200 and route.tokens.spend(stream_token("twilio", body), "twilio")

    assert route.front.guard.throttle.retry_after(CALLER) is None
    for headers in ({}, {"X-Twilio-Signature": "bm90IGl0"}, {"X-Twilio-Signature": signed.lower()}):
        status, _, body = call(route, "/phone/twilio", data=TWILIO_FORM, headers=headers)
        assert status == 403 and b"<Stream" not in body
    forged = {**TWILIO_FORM, "From": "+15005550009"}  # the signature covers every parameter
    assert call(route, "/phone/twilio", data=forged, headers={"X-Twilio-Signature": signed})[0] == 403
    # a signature cannot be guessed: a wrong one is not counted (Twilio's own addresses are never locked out)
    assert route.front.guard.throttle.retry_after(CALLER) is None
    # Twilio's own signature is the test: not the access guard, which here holds no token
    assert route.credentials["TWILIO_AUTH_TOKEN"] == "tw-secret"


def test_twilios_signature_is_over_the_public_url_behind_a_proxy():
    route = PhoneRoute(app, fake_front(), environ={"TWILIO_AUTH_TOKEN": "tw-secret",
                                                   "VITA_PHONE_STREAM_URL": "wss://tunnel.example.net/phone/stream"})
    public = twilio_signature("tw-secret", "https://tunnel.example.net/phone/twilio?line=2", TWILIO_FORM)
    status, _, _ = call(route, "/phone/twilio?line=2", data=TWILIO_FORM, base_url="http://127.0.0.1:8080",
                        headers={"X-Twilio-Signature": public})
    assert status == 200
    local = twilio_signature("tw-secret", "http://127.0.0.1:8080/phone/twilio?line=2", TWILIO_FORM)
    status, _, _ = call(route, "/phone/twilio?line=2", data=TWILIO_FORM, base_url="http://127.0.0.1:8080",
                        headers={"X-Twilio-Signature": local})
    assert status == 403


def test_without_twilios_auth_token_no_signature_is_asked_for():
    route = PhoneRoute(app, fake_front(), environ={"TWILIO_ACCOUNT_SID": "AC0123"})
    assert call(route, "/phone/twilio", data=TWILIO_FORM)[0] == 200


@pytest.mark.parametrize("name", ["twilio", "telnyx", "plivo"])
def test_with_an_access_token_an_unsigned_webhook_must_carry_it(name):
    route = PhoneRoute(app, fake_front(access_token="server-token-0123456789"), environ={})
    status, _, body = call(route, f"/phone/{name}", data=TWILIO_FORM)
    assert status == 403 and b"<Stream" not in body
    status, _, body = call(route, f"/phone/{name}?token=server-token-0123456789", data=TWILIO_FORM)
    assert status == 200 and route.tokens.spend(stream_token(name, body), name)
    assert b"server-token-0123456789" not in body  # the server's own token is never handed on
    assert route.front.guard.throttle.retry_after(CALLER) is None  # (a missing token is no guess)
    status, _, _ = call(route, f"/phone/{name}?token=server-token-0123456789-wrong", data=TWILIO_FORM)
    assert status == 403 and route.front.guard.throttle.retry_after(CALLER) is not None  # a wrong one counts


def test_other_paths_pass_through_to_the_app():
    route = PhoneRoute(app, fake_front(), environ={})
    for path in ("/", "/health", "/phone", "/phone/", "/phone/vonage", "/phone/twilio/extra", "/v1/realtime"):
        status, _, body = call(route, path, method="POST" if path.startswith("/phone") else "GET")
        assert (status, body) == (200, b"the app: " + path.encode())


def test_the_stream_path_is_a_websocket_only():
    route = PhoneRoute(app, fake_front(), environ={})
    status, _, body = call(route, "/phone/stream", method="GET")
    assert status == 426 and b"WebSocket" in body


def test_only_the_providers_settings_are_kept_from_the_environment():
    environ = {"TWILIO_AUTH_TOKEN": "t", "TELNYX_API_KEY": "", "PLIVO_AUTH_ID": "MA1", "HOME": "/root", "PATH": "/bin"}
    route = PhoneRoute(app, fake_front(), environ=environ)
    assert route.credentials == {"TWILIO_AUTH_TOKEN": "t", "PLIVO_AUTH_ID": "MA1"}
