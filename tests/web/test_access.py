"""The access token's edges: its minimum length, the per-address throttle on wrong tokens (429 + Retry-After), and
the cookie the page's link leaves (Secure whenever the page is https as the front sees it). The HTTP parts run the
front's own routes and middlewares (http_routes, TokenThrottle, RealtimeRoute, ForwardedHeaders) in this process
around a stand-in for the rest of the front."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request

from vita.config import Config, ConfigError
from vita.config_checks import validate
from vita.web.http.access import (
    FAILURE_WINDOW_S,
    LOCKOUT_S,
    MAX_FAILURES,
    NEAR_CHARS,
    AccessGuard,
    FailureThrottle,
    client_key,
)
from vita.web.http.web_security import ForwardedHeaders
from vita.web.realtime.route import PATH as REALTIME_PATH

pytestmark = pytest.mark.fast  # no model

TOKEN = "a-token-of-24-characters"
PROXY = "10.0.0.2"
A, B = "203.0.113.5", "203.0.113.6"


@dataclass
class SmallFront:
    http: object  # Flask's test client
    guard: AccessGuard
    now: list[float]
    keys: object  # the Realtime door's client keys

    def get(self, path: str, client: str = A, token: str | None = None, bearer: str | None = None, **kwargs):
        headers = {**kwargs.pop("headers", {}), **({"Authorization": f"Bearer {bearer}"} if bearer else {})}
        query = {**kwargs.pop("query_string", {}), **({"token": token} if token is not None else {})}
        return self.http.get(path, query_string=query, headers=headers, environ_base={"REMOTE_ADDR": client},
                             **kwargs)


@pytest.fixture
def front(tmp_path):
    # Flask imported here, not at collection (see tests/conftest.py: vLLM's engine start and Flask's proxies).
    from flask import Flask

    from vita.web.http.access import TokenThrottle
    from vita.web.page_routes import install_routes
    from vita.web.realtime.route import RealtimeRoute

    page = tmp_path / "index.html"
    page.write_text("<!doctype html><title>page</title>")
    now = [1000.0]
    guard = AccessGuard(TOKEN, FailureThrottle(clock=lambda: now[0]))
    flask = Flask(__name__)
    stand_in = SimpleNamespace(
        flask=flask, guard=guard, security_headers={}, graph=SimpleNamespace(ready=lambda: True),
        web=SimpleNamespace(page=page, static=lambda name: None),
        config=SimpleNamespace(server=SimpleNamespace(tls=False, allowed_origins=None),
                               limits=SimpleNamespace(max_frame_bytes=1 << 20)))
    install_routes(stand_in)
    # As FrontApp wires them.
    realtime = RealtimeRoute(flask.wsgi_app, stand_in)
    flask.wsgi_app = ForwardedHeaders(TokenThrottle(realtime, guard, realtime.token_of, realtime.keys.holds), {PROXY})
    return SmallFront(flask.test_client(), guard, now, realtime.keys)


def test_a_token_shorter_than_16_characters_is_refused_with_how_to_make_one(monkeypatch):
    config = Config()
    config.server.access_token = "x" * 15
    with pytest.raises(ConfigError, match="--access_token: must be at least 16 characters") as refused:
        validate(config)
    assert 'python -c "import secrets; print(secrets.token_urlsafe(24))"' in str(refused.value)
    monkeypatch.setenv("VITA_ACCESS_TOKEN", "short-but-9")
    config.server.access_token = None
    with pytest.raises(ConfigError, match="at least 16"):
        validate(config)
    monkeypatch.setenv("VITA_ACCESS_TOKEN", "x" * 16)
    validate(config)


def test_wrong_tokens_from_one_address_earn_it_429_with_retry_after(front, caplog):
    with caplog.at_level(logging.WARNING, logger="vita.web.http.access"):
        for _ in range(MAX_FAILURES):
            assert front.get("/", token="wrong-token-guess").status_code == 401
    refused = front.get("/", bearer="another-wrong-guess")  # a guess is not even checked for a while
    assert refused.status_code == 429 and refused.headers["Retry-After"] == str(int(LOCKOUT_S)), refused.data
    assert [r.getMessage() for r in caplog.records if r.name == "vita.web.http.access"] == [
        f"{MAX_FAILURES} wrong access tokens from {A} within {FAILURE_WINDOW_S:.0f} s: refused (429) for "
        f"{LOCKOUT_S:.0f} s"]
    # Socket.IO and the Realtime route are behind the same gate.
    assert front.get("/socket.io/", query_string={"EIO": "4", "transport": "polling"}).status_code == 429
    # Liveness probes without a token still answer; one offering a token could learn whether it is right.
    assert front.get("/health").status_code == 200 and front.get("/ready").status_code == 200
    assert front.get("/health", bearer="wrong-token-guess").status_code == 429
    # Another address is not touched.
    assert front.get("/", client=B, bearer=TOKEN).status_code == 200
    front.now[0] += LOCKOUT_S - 1
    assert front.get("/", bearer="wrong-token-guess").headers["Retry-After"] == "1"
    front.now[0] += 1
    assert front.get("/", bearer="wrong-token-guess").status_code == 401


def test_realtime_and_bearer_guesses_count_and_missing_tokens_do_not(front):
    for _ in range(3 * MAX_FAILURES):  # a first visit without the link is no guess
        assert front.get("/").status_code == 401
    assert front.get("/", bearer=TOKEN).status_code == 200
    for i in range(MAX_FAILURES):
        if i % 2:
            answer = front.get(REALTIME_PATH, bearer="wrong-token-guess", headers={"Upgrade": "websocket"})
            assert answer.status_code == 401 and answer.json["error"]["code"] == "invalid_api_key"
        else:
            assert front.get("/metrics", bearer="wrong-token-guess").status_code == 401
    assert front.get("/", bearer="wrong-token-guess").status_code == 429


def test_a_success_resets_no_count(front):
    for _ in range(MAX_FAILURES - 1):
        front.get("/", token="wrong-token-guess")
    assert front.get("/", bearer=TOKEN).status_code == 200  # a user behind the guesser's NAT, say
    assert front.get("/", client=B, bearer=TOKEN).status_code == 200
    assert front.get("/", token="wrong-token-guess").status_code == 401
    assert front.get("/", token="wrong-token-guess").status_code == 429


def test_browsers_let_in_before_keep_going_through_their_nats_lockout(front):
    """A guesser and a user behind one NAT share an address: the lockout stops the guesses, not the user's page."""
    answer = front.get("/", token=TOKEN)
    page_pass = answer.headers["Set-Cookie"].split(";")[0].split("=", 1)[1]
    assert page_pass != TOKEN and len(page_pass) == 64  # the cookie never holds the token itself
    front.http.delete_cookie(key="vita_token")  # the guesser has none
    for _ in range(MAX_FAILURES):
        front.get("/", token="wrong-token-guess")
    assert front.get("/", bearer="another-guess-0").status_code == 429  # the guesser is stopped
    front.http.set_cookie(key="vita_token", value=page_pass)
    assert front.get("/").status_code == 200
    assert front.get("/socket.io/", query_string={"EIO": "4", "transport": "polling"}).status_code != 429
    assert front.get("/", bearer="another-guess-1").status_code == 429  # the pass carries no guess through
    front.http.set_cookie(key="vita_token", value="f" * 64)  # a guessed pass is a wrong token like any other
    assert front.get("/").status_code == 429
    front.http.delete_cookie(key="vita_token")
    assert front.get("/", client=B, token="f" * 64).status_code == 401


def test_a_cookie_that_holds_the_token_itself_is_swapped_for_the_pass(front):
    front.http.set_cookie(key="vita_token", value=TOKEN)  # as browsers were left before the pass
    answer = front.get("/")
    assert answer.status_code == 200
    assert answer.headers["Set-Cookie"].startswith(f"vita_token={front.guard.page_pass};")
    front.http.set_cookie(key="vita_token", value=front.guard.page_pass)
    assert "Set-Cookie" not in front.get("/").headers  # once


def test_a_valid_token_or_client_key_still_works_from_an_address_locked_out_by_a_guesser(front):
    """Behind one NAT, a script's or app's own token and a browser's client key keep working; guesses do not go
    through, and a client key that is not live is a guess like any other."""
    for _ in range(MAX_FAILURES):
        front.get("/", bearer="wrong-token-guess")
    assert front.get("/", bearer="wrong-token-guess-2").status_code == 429
    assert front.get("/", bearer=TOKEN).status_code == 200
    key, _ = front.keys.mint(None)
    # (without Upgrade the door answers 426 before it spends the key: what matters is that it was reached)
    as_browser = {"Sec-WebSocket-Protocol": f"realtime, openai-insecure-api-key.{key}"}
    assert front.get(REALTIME_PATH, headers=as_browser).status_code == 426
    assert front.get(REALTIME_PATH, bearer=key).status_code == 426
    unknown = {"Sec-WebSocket-Protocol": "openai-insecure-api-key.ek_not-a-live-key"}
    assert front.get(REALTIME_PATH, headers=unknown).status_code == 429


def test_only_a_guesser_who_knows_how_the_token_begins_can_lock_its_holders_out():
    """Wrong tokens that begin as the right one are counted on their own; past MAX_FAILURES of those, the right
    one waits out the lockout too (so a guess there is not confirmed either)."""
    now = [0.0]
    guard = AccessGuard(TOKEN, FailureThrottle(clock=lambda: now[0]))
    near_guess = TOKEN[:NEAR_CHARS] + "x" * (len(TOKEN) - NEAR_CHARS)
    assert guard.near(TOKEN) and guard.near(near_guess) and not guard.near("wrong-token-guess")
    assert not guard.near(TOKEN[:NEAR_CHARS - 1]) and not guard.near(None)
    for _ in range(MAX_FAILURES):
        assert not guard.check("wrong-token-guess", A)
    assert guard.throttle.retry_after(A) and guard.throttle.retry_after(A, near=True) is None
    for _ in range(MAX_FAILURES):
        assert not guard.check(near_guess, A)
    assert guard.throttle.retry_after(A, near=True) == LOCKOUT_S
    assert guard.throttle.retry_after(B, near=True) is None
    short = AccessGuard("sixteen-chars-ok")  # at most half a token is its beginning
    assert short.near("sixteen-" + "?" * 8) and not short.near("sixteen?")


def test_a_near_lockout_answers_the_right_token_429_too(front):
    near_guess = TOKEN[:NEAR_CHARS] + "y" * (len(TOKEN) - NEAR_CHARS)
    for _ in range(MAX_FAILURES):
        assert front.get("/", bearer=near_guess).status_code == 401
    answer = front.get("/", bearer=TOKEN)
    assert answer.status_code == 429 and answer.headers["Retry-After"] == str(int(LOCKOUT_S))
    assert front.get("/", client=B, bearer=TOKEN).status_code == 200


def test_failures_count_within_their_window_only(front):
    for _ in range(MAX_FAILURES - 1):
        front.get("/", token="wrong-token-guess")
    front.now[0] += FAILURE_WINDOW_S + 1
    front.get("/", token="wrong-token-guess")
    assert front.get("/", bearer=TOKEN).status_code == 200


def test_behind_a_trusted_proxy_the_client_is_counted_not_the_proxy(front):
    behind = {"X-Forwarded-For": A, "X-Forwarded-Proto": "https"}
    for _ in range(MAX_FAILURES):
        assert front.get("/", client=PROXY, token="wrong-token-guess", headers=behind).status_code == 401
    assert front.get("/", client=PROXY, bearer="wrong-token-guess", headers=behind).status_code == 429
    assert front.get("/", client=PROXY, bearer=TOKEN, headers={**behind, "X-Forwarded-For": B}).status_code == 200


def test_an_ipv6_client_is_counted_by_its_64():
    now = [0.0]
    throttle = FailureThrottle(clock=lambda: now[0])
    assert client_key("2001:db8:1:2::5") == client_key("2001:db8:1:2:ffff::1") == "2001:db8:1:2::/64"
    assert client_key("::ffff:203.0.113.5") == "203.0.113.5"
    for i in range(MAX_FAILURES):
        throttle.failed(f"2001:db8:1:2::{i + 1:x}")
    assert throttle.retry_after("2001:db8:1:2:abcd::9") == LOCKOUT_S
    assert throttle.retry_after("2001:db8:1:3::1") is None


def test_socket_io_connects_count_against_the_requests_address():
    """FrontApp's connect handler and the polling handshake ask `allows` with the request (the Socket.IO `auth`)."""
    guard = AccessGuard(TOKEN, FailureThrottle(clock=lambda: 0.0))
    request = Request(EnvironBuilder(path="/socket.io/", environ_base={"REMOTE_ADDR": A}).get_environ())
    for _ in range(MAX_FAILURES):
        assert not guard.allows(request, {"token": "wrong-token-guess"})
    assert guard.throttle.retry_after(A) == LOCKOUT_S and guard.throttle.retry_after(B) is None


@pytest.mark.parametrize("how, secure", [
    ({"base_url": "https://localhost"}, True),  # our own TLS
    ({}, False),  # --no_tls, plain http: a Secure cookie would never come back
    ({"client": PROXY, "headers": {"X-Forwarded-For": A, "X-Forwarded-Proto": "https"}}, True),  # a TLS proxy
    ({"client": "198.51.100.9", "headers": {"X-Forwarded-Proto": "https"}}, False),  # anyone may claim it
])
def test_the_links_cookie_is_secure_whenever_the_page_is_https(front, how, secure):
    answer = front.get("/", token=TOKEN, **how)
    assert answer.status_code == 303 and answer.headers["Location"] == "/"
    cookie = answer.headers["Set-Cookie"]
    assert cookie.startswith(f"vita_token={front.guard.page_pass};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert ("; Secure" in cookie) is secure, cookie
