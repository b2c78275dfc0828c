"""The operator's memory API and the cookie that names a browser's user, on the front's real routes (Flask's test
client, a real memory file): only the server's own token, as a Bearer header, exports or erases a user's memory —
not the page's pass a user's browser holds, and nothing on a server without a token; erased is gone from the
file. The cookie is given to a browser without one, on the page and on the Socket.IO handshake, and kept."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vita.memory.sayings import Fact
from vita.memory.store import MemoryStore
from vita.memory.user_keys import COOKIE, valid_user_id
from vita.web.http.access import COOKIE as PASS_COOKIE
from vita.web.http.access import AccessGuard, FailureThrottle
from vita.web.http.user_cookie import UserCookie, user_id_of

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

TOKEN = "a-token-of-24-characters"
USER = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def front(tmp_path):
    """The front's routes with a token (or none) and memory (or none); named `front` so that the suite runs it after
    the in-process engines (tests/conftest.py: Flask in this process)."""
    return lambda token, memory=True: front_with(tmp_path / (token or "none") / str(memory), token, memory)


def front_with(tmp_path, token: str | None, memory: bool = True):
    from flask import Flask

    from vita.web.page_routes import install_routes

    tmp_path.mkdir(parents=True, exist_ok=True)
    page = tmp_path / "index.html"
    page.write_text("<!doctype html><title>page</title>")
    store = MemoryStore(tmp_path / "memory.sqlite3") if memory else None
    if store is not None:
        store.keep(USER, Fact("My sister is called Quintessa", "person sister"))
        store.keep("f" * 32, Fact("I collect stamps"))
    flask = Flask(__name__)
    stand_in = SimpleNamespace(flask=flask, guard=AccessGuard(token, FailureThrottle()), security_headers={},
                               memory=store, web=SimpleNamespace(page=page, static=lambda name: None),
                               config=SimpleNamespace(server=SimpleNamespace(tls=True)))
    install_routes(stand_in)
    flask.wsgi_app = UserCookie(flask.wsgi_app, enabled=memory)
    return flask.test_client(), store


def test_only_the_operators_token_exports_and_erases_a_users_memory(front):
    http, store = front(TOKEN)
    operator = {"Authorization": f"Bearer {TOKEN}"}
    assert http.get(f"/v1/memory/{USER}").status_code == 401  # no token at all: the gate in front of everything
    http.set_cookie(PASS_COOKIE, AccessGuard(TOKEN).page_pass)  # a user's browser, let in: the page, not the API
    refused = http.get(f"/v1/memory/{USER}")
    assert refused.status_code == 403 and "access token" in refused.json["error"]
    http.delete_cookie(PASS_COOKIE)
    exported = http.get(f"/v1/memory/{USER}", headers=operator)
    assert exported.status_code == 200
    assert [f["text"] for f in exported.json["facts"]] == ["My sister is called Quintessa"]  # that user's only
    assert http.get("/v1/memory/not-a-key", headers=operator).status_code == 400
    erased = http.delete(f"/v1/memory/{USER}", headers=operator)
    assert erased.json == {"user": USER, "deleted": 1}
    assert b"Quintessa" not in store.path.read_bytes()
    assert [f.text for f in store.facts("f" * 32)] == ["I collect stamps"]


def test_a_server_without_a_token_has_no_memory_api_and_one_without_memory_says_so(front):
    http, _ = front(None)
    refused = http.get(f"/v1/memory/{USER}", headers={"Authorization": "Bearer anything-at-all"})
    assert refused.status_code == 403 and "--access_token" in refused.json["error"]
    off, _ = front(TOKEN, memory=False)
    assert off.get(f"/v1/memory/{USER}", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 404


def test_a_browser_without_the_cookie_is_given_one_and_keeps_it(front):
    http, _ = front(None)
    first = http.get("/")
    given = first.headers.get("Set-Cookie", "")
    assert given.startswith(f"{COOKIE}=") and "HttpOnly" in given and "SameSite=Lax" in given
    assert "Max-Age=34560000" in given and "Path=/" in given
    user = given.split(";")[0].split("=", 1)[1]
    assert valid_user_id(user)
    http.set_cookie(COOKIE, user)
    assert "Set-Cookie" not in http.get("/").headers  # kept: not given again
    http.set_cookie(COOKIE, "forged-value")
    assert http.get("/").headers.get("Set-Cookie", "").startswith(f"{COOKIE}=")  # not ours: a fresh one
    assert user_id_of({"HTTP_COOKIE": f"a=b; {COOKIE}={user}"}) == user
    guarded, _ = front(TOKEN)
    refused = guarded.get("/")
    assert refused.status_code == 401 and "Set-Cookie" not in refused.headers  # a refused page plants nothing
    assert user_id_of({"HTTP_COOKIE": f'{COOKIE}="bad'}) is None


def test_the_socketio_handshake_gives_the_cookie_for_the_next_connection_only():
    seen = []

    def app(environ, start_response):
        seen.append(user_id_of(environ))
        start_response("200 OK", [])
        return [b""]

    headers = []
    wrapped = UserCookie(app, enabled=True)
    wrapped({"PATH_INFO": "/socket.io/", "wsgi.url_scheme": "https"}, lambda s, h, e=None: headers.extend(h))
    assert seen == [None]  # this connection names no user: a client that keeps no cookie is promised nothing
    (cookie,) = [v for k, v in headers if k == "Set-Cookie"]
    assert cookie.endswith("; Secure")
    wrapped({"PATH_INFO": "/health"}, lambda s, h, e=None: headers.append(("other", str(h))))
    assert headers[-1] == ("other", "[]")  # only the page and the handshake
    UserCookie(app, enabled=False)({"PATH_INFO": "/"}, lambda s, h, e=None: headers.append(("off", str(h))))
    assert headers[-1] == ("off", "[]")  # memory off: no cookie
