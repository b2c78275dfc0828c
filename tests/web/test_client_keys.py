"""Client keys for the Realtime door: minted with the server's token (``POST /v1/realtime/client_secrets``),
bound to the session settings they were minted with, refused once used or expired. The store is tested with its
own clock; the HTTP side runs the front's RealtimeRoute and TokenThrottle in this process around a stand-in for
the rest of the front (the key opening a real session is tested in test_realtime)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from vita.config import Config
from vita.web.http.access import AccessGuard, FailureThrottle
from vita.web.realtime.client_keys import MAX_KEYS, ClientKeys, KeyRefused
from vita.web.realtime.route import PATH, SECRETS_PATH

pytestmark = pytest.mark.fast  # no model

TOKEN = "a-token-of-24-characters"


def test_a_key_opens_one_session_with_its_settings_then_is_spent():
    keys = ClientKeys(clock=lambda: 1000.0)
    value, key = keys.mint("the settings", 60)
    assert value.startswith("ek_") and key.expires_at == 1060.0
    assert keys.peek(value).session == "the settings"  # looked at, not spent (a call spends it once answered)
    assert keys.redeem(value).session == "the settings"
    with pytest.raises(KeyRefused, match="already been used"):
        keys.redeem(value)
    with pytest.raises(KeyRefused, match="unknown"):
        keys.redeem("ek_never-minted")
    assert value not in repr(keys.__dict__)  # kept by digest only


def test_a_key_is_refused_after_it_expires_and_forgotten_then():
    now = [1000.0]
    keys = ClientKeys(clock=lambda: now[0])
    value, _ = keys.mint({}, 10)
    now[0] = 1010.0
    with pytest.raises(KeyRefused, match="expired"):
        keys.redeem(value)
    assert keys.counts() == {"live": 0, "used": 0}


def test_unused_keys_are_bounded():
    keys = ClientKeys(clock=lambda: 1000.0)
    for _ in range(MAX_KEYS):
        keys.mint({}, 60)
    with pytest.raises(KeyRefused):
        keys.mint({}, 60)


@pytest.fixture
def front():
    """Named `front` so that the suite runs it after the in-process engines (conftest: Flask in this process)."""
    # Flask imported here, not at collection (see tests/conftest.py: vLLM's engine start and Flask's proxies).
    from flask import Flask

    from vita.web.http.access import TokenThrottle
    from vita.web.realtime.route import RealtimeRoute

    guard = AccessGuard(TOKEN, FailureThrottle())
    flask = Flask(__name__)
    stand_in = SimpleNamespace(config=Config(), guard=guard, voices=["joe-us"], llm_choice={"model": "vita"})
    realtime = RealtimeRoute(flask.wsgi_app, stand_in)
    flask.wsgi_app = TokenThrottle(realtime, guard)
    client = flask.test_client()
    client.realtime = realtime
    return client


def mint(front, body: dict | None = None, token: str | None = TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return front.post(SECRETS_PATH, json=body if body is not None else {}, headers=headers)


def test_a_minted_key_carries_its_session_and_expiry(front):
    answer = mint(front, {"expires_after": {"anchor": "created_at", "seconds": 120},
                          "session": {"type": "realtime", "instructions": "Answer in French.",
                                      "output_modalities": ["text"]}})
    assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store"
    body = answer.json
    assert body["value"].startswith("ek_") and isinstance(body["expires_at"], int)
    assert body["session"]["instructions"] == "Answer in French." and body["session"]["output_modalities"] == ["text"]
    assert front.realtime.keys.redeem(body["value"]).session.instructions == "Answer in French."


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("a-wrong-token-guess", 401), (TOKEN, 200)])
def test_minting_needs_the_servers_own_token(front, token, status):
    assert mint(front, token=token).status_code == status


def test_a_client_key_cannot_mint_another(front):
    value = mint(front).json["value"]
    answer = mint(front, token=value)
    assert answer.status_code == 401 and answer.json["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(("body", "param"), [
    ({"expires_after": {"anchor": "created_at", "seconds": 5}}, "expires_after.seconds"),
    ({"expires_after": {"anchor": "created_at", "seconds": 100_000}}, "expires_after.seconds"),
    ({"expires_after": {"anchor": "last_used", "seconds": 60}}, "expires_after"),
    ({"session": {"output_modalities": ["video"]}}, "session.output_modalities"),
    ({"session": {"type": "transcription"}}, "session.type"),
    ({"session": "realtime"}, "session"),
])
def test_a_bad_request_is_refused_naming_what_is_wrong_and_mints_nothing(front, body, param):
    answer = mint(front, body)
    assert answer.status_code == 400 and answer.json["error"]["param"] == param
    assert front.realtime.keys.counts()["live"] == 0


def test_only_a_post_mints_and_a_body_must_be_a_json_object(front):
    assert front.get(SECRETS_PATH, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405
    answer = front.post(SECRETS_PATH, data="not json", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 400 and answer.json["error"]["code"] == "invalid_json"
    assert mint(front, [1, 2]).status_code == 400


@pytest.mark.parametrize("body", [
    "[" * 20_000 + "]" * 20_000,  # once a RecursionError: a 500 and a traceback
    json.dumps({"session": {"metadata": [{}] * 12_000}}),  # 12,000 objects built for nothing
    json.dumps({"session": {}}).encode("utf-16"),  # a text the bounds' scan cannot read
])
def test_an_outsized_or_foreign_json_body_is_refused_before_it_is_parsed(front, body):
    answer = front.post(SECRETS_PATH, data=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 400 and answer.json["error"]["code"] == "invalid_json", answer.json
    assert front.realtime.keys.counts()["live"] == 0


def test_a_spent_or_unknown_key_is_refused_at_the_door_with_why(front):
    value = mint(front).json["value"]
    front.realtime.keys.redeem(value)  # as a first connection would
    for key, why in ((value, "already been used"), ("ek_never-minted", "unknown")):
        answer = front.get(PATH, headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                          "Sec-WebSocket-Protocol": f"realtime, openai-insecure-api-key.{key}"})
        assert answer.status_code == 401 and answer.json["error"]["code"] == "invalid_api_key"
        assert why in answer.json["error"]["message"]


def test_an_apps_backend_may_name_its_user_for_memory(front):
    answer = mint(front, {"user": "customer-4711"})
    assert answer.status_code == 200
    assert front.realtime.keys.redeem(answer.json["value"]).user == "customer-4711"
    assert front.realtime.keys.redeem(mint(front).json["value"]).user is None  # named nobody: nobody
    for bad in (4711, "", "x" * 129, ["customer"]):
        refused = mint(front, {"user": bad})
        assert refused.status_code == 400 and refused.json["error"]["param"] == "user", bad
