"""The phone door end to end: a provider of our own (tests/harness/phone_client.py) calls a real server the way
Twilio, Telnyx and Plivo do — webhook, TwiML/XML, a media stream of a real voice in 8 kHz G.711 — and plays what
comes back; the provider's REST API that hangs calls up is a small local HTTP server that records its requests.

One server for the module (three seats, a 20 s idle timeout, the vLLM API server for its tokens, the turn log on),
started with the providers' credentials pointing at the local REST server."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import requests

from tests.harness.client import wait_until
from tests.harness.phone_client import PhoneCall, stream_of, webhook
from tests.harness.server import start_server, stop_server, wait_health, wait_ready
from tests.harness.speech import silence, spoken

REPLY = 60  # seconds a reply may take on two busy cores
IDLE_S = 20
SEATS = 3
TWILIO_TOKEN = "twilio-auth-token"  # the account's: Twilio signs its webhooks with it


class Phone(PhoneCall):
    """A call from a provider of ours whose Twilio webhooks are signed as Twilio signs them."""

    def __init__(self, url: str, provider: str = "twilio", **kw):
        super().__init__(url, provider, auth_token=TWILIO_TOKEN, **kw)


class ProviderApi:
    """The providers' REST APIs, as far as hanging up goes: every request recorded; a call id of "gone" is
    answered 404 (a call that was over already)."""

    def __init__(self):
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                api.requests.append((self.command, self.path, dict(self.headers), body))
                self.send_response(404 if "gone" in self.path else 200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_POST = do_DELETE = _any

            def log_message(self, *_args) -> None:
                return None

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()


@pytest.fixture(scope="module")
def provider_api():
    api = ProviderApi()
    yield api
    api.close()


@pytest.fixture(scope="module")
def phone_server(tmp_path_factory, vllm_api_starting, provider_api):
    env = {"TWILIO_ACCOUNT_SID": "AC" + "0" * 32, "TWILIO_AUTH_TOKEN": TWILIO_TOKEN,
           "TWILIO_API_BASE": provider_api.url,
           "TELNYX_API_KEY": "KEYtest", "TELNYX_API_BASE": provider_api.url,
           "PLIVO_AUTH_ID": "MAtest", "PLIVO_AUTH_TOKEN": "plivo-secret", "PLIVO_API_BASE": provider_api.url}
    running = start_server(tmp_path_factory.mktemp("phone"), "--max_users", str(SEATS), "--timeout", str(IDLE_S),
                           "--llm_url", vllm_api_starting.url, env=env)
    try:
        wait_ready(running)
        yield running
    finally:
        stop_server(running)


@pytest.fixture
def line(phone_server):
    """The phone server, between tests (no call on it)."""
    wait_health(phone_server, lambda h: not h["sessions"], timeout=15)
    return phone_server


def question(text: str) -> np.ndarray:
    return np.concatenate([silence(0.4), spoken(text), silence(1.2)])


def wait_turns(line, call: PhoneCall, count: int = 1, timeout: float = REPLY) -> list[dict]:
    assert wait_until(lambda: len(call.logged_turns(line.log(), line.state_dir)) >= count, timeout=timeout,
                      interval=0.2), \
        line.log()[-3000:]
    return call.logged_turns(line.log(), line.state_dir)


@pytest.mark.parametrize("provider", ["twilio", "telnyx", "plivo"])
def test_a_spoken_question_on_each_provider_is_heard_and_answered_in_its_words(line, provider):
    call = Phone(line.url, provider)
    try:
        call.start()
        assert wait_health(line, lambda h: h["doors"].get("phone") == 1)["doors"] == {"phone": 1}
        said = call.say(question("What is the capital of France?"))
        media = call.wait_for("media" if provider != "plivo" else "playAudio", timeout=REPLY)
        assert media[0][0] > said - 1.2  # the reply came after the question
        (row,) = wait_turns(line, call)
        assert "capital" in row["transcript"].lower() and "paris" in row["reply"].lower(), row
        marks = call.wait_for("mark" if provider != "plivo" else "checkpoint", timeout=REPLY)
        kind = {"twilio": "streamSid", "telnyx": None, "plivo": "streamId"}[provider]
        for _, message in [*media[:3], *marks]:
            assert kind is None or message[kind] == call.stream_id
        audio = call.reply_audio()
        assert audio.size / 8000 >= 0.8 and np.abs(audio.astype(np.int32)).max() > 1000  # said aloud at 8 kHz
        assert wait_until(lambda: "the caller heard reply-" in line.log(), timeout=30, interval=0.2)
    finally:
        call.hang_up()
    assert wait_health(line, lambda h: not h["sessions"], timeout=15)["sessions"] == 0


def test_speaking_over_the_reply_clears_what_the_phone_has_not_played(line):
    call = Phone(line.url, "twilio")
    try:
        call.start()
        call.say(question("Tell me a long story about a dragon who learns to bake bread, with many details."))
        first = call.wait_for("media", timeout=REPLY)[0][0]
        time.sleep(max(0.0, first + 1.0 - time.monotonic()))  # (a second of the reply on the line)
        interrupted = call.say(np.concatenate([spoken("Wait, stop. What is two plus two?"), silence(1.2)]))
        (at, cleared), = call.wait_for("clear", timeout=REPLY)
        assert cleared["streamSid"] == call.stream_id and first < at < interrupted
        rows = wait_turns(line, call, 2)
        assert rows[0]["interrupted"] == 1, rows
    finally:
        call.hang_up()


def test_keypad_digits_reach_the_turn_as_the_callers_words(line):
    call = Phone(line.url, "twilio")
    try:
        call.start()
        call.say(silence(0.3))
        for digit in "42":
            call.dtmf(digit)
        (row,) = wait_turns(line, call)
        assert "pressed 4 2" in row["typed_text"], row
        call.wait_for("media", timeout=REPLY)
    finally:
        call.hang_up()


def test_only_streams_the_webhook_answered_are_seated(line):
    from websockets.exceptions import InvalidStatus

    base = line.url.replace("https://", "wss://") + "/phone/stream"
    for forged in (base, f"{base}/twilio", f"{base}/twilio/forged-token", f"{base}/nobody/x"):
        with pytest.raises(InvalidStatus) as refused:  # refused before the WebSocket is accepted
            Phone(line.url, "twilio", stream_url=forged)
        assert refused.value.response.status_code == 403
    first = Phone(line.url, "twilio")
    again = Phone(line.url, "twilio", stream_url=first.stream_url)  # opened before the first one starts
    other_call = Phone(line.url, "twilio")
    other_provider = Phone(line.url, "twilio")
    try:
        first.start()
        assert wait_health(line, lambda h: h["sessions"] == 1)["sessions"] == 1
        with pytest.raises(InvalidStatus):  # its token is spent now
            Phone(line.url, "twilio", stream_url=first.stream_url)
        again.start()  # the same token, a moment too late
        other_call.start(call_id="CA" + "9" * 32)  # a token bound to another call
        other_provider.start(provider="plivo")  # a Plivo start on Twilio's stream URL
        for call in (again, other_call, other_provider):
            assert call.closed.wait(10)
        assert wait_health(line, lambda h: h["sessions"] == 1)["sessions"] == 1
        first.hang_up()
    finally:
        for call in (again, other_call, other_provider):
            call.close()
    assert wait_health(line, lambda h: not h["sessions"], timeout=15)["sessions"] == 0


def test_hostile_streams_get_a_closed_stream_and_cost_no_other_call(line):
    good = Phone(line.url, "telnyx")
    good.start()
    bad = [Phone(line.url, "twilio") for _ in range(3)]
    try:
        bad[0].send({"event": "media", "streamSid": "x", "media": {"payload": "AAAA"}})  # media before start
        with contextlib.suppress(Exception):  # (the server may already have closed the stream at the first)
            bad[0].send({"event": "media", "streamSid": "x", "media": {"payload": "AAAA"}})
        bad[1].send("not json at all")
        bad[2].start(encoding="audio/l16")  # a format the door does not hear
        for call in bad:
            assert call.closed.wait(10)
        # a started call that sends garbage: refused message by message, then closed; never a crash
        rude = Phone(line.url, "plivo")
        rude.start()
        rude.send({"event": "media", "streamId": rude.stream_id, "media": {"payload": "!!not base64!!"}})
        rude.send({"event": "media", "streamId": rude.stream_id, "media": {"payload": "A" * 20000}})
        rude.start()  # a second start
        assert wait_health(line, lambda h: h["sessions"] == 2)["sessions"] == 2
        for _ in range(30):  # (the server closes the stream at the 20th: later sends may find it closed)
            with contextlib.suppress(Exception):
                rude.send('{"event": "dtmf", "dtmf": {"digit": "Z"}}')
        assert rude.closed.wait(15)
        huge = Phone(line.url, "twilio")
        huge.start()
        with contextlib.suppress(Exception):  # (the server may close before the whole message is written)
            huge.send(json.dumps({"event": "media", "media": {"payload": "A" * (200 * 1024)}}))
        assert huge.closed.wait(15)
        # the good call is still heard and answered
        good.say(question("What is the capital of France?"))
        good.wait_for("media", timeout=REPLY)
        (row,) = wait_turns(line, good)
        assert "paris" in row["reply"].lower(), row
    finally:
        good.hang_up()
        for call in bad:
            call.close()
    assert "Traceback" not in line.log()


def test_a_full_server_turns_a_call_away_politely(line):
    seated = []
    try:
        for _ in range(SEATS):  # each started as it opens: a stream that names no call within 10 s is closed
            seated.append(Phone(line.url, "twilio"))
            seated[-1].start()
        wait_health(line, lambda h: h["sessions"] == SEATS)
        for provider, say in (("twilio", "Say"), ("telnyx", "Say"), ("plivo", "Speak")):
            answer = webhook(line.url, provider, "CAfull", auth_token=TWILIO_TOKEN if provider == "twilio" else None)
            assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("application/xml")
            assert f"<{say}>" in answer.text and "busy" in answer.text and answer.text.endswith(
                "<Hangup/></Response>"), answer.text
            with pytest.raises(AssertionError):
                stream_of(provider, answer.text)  # no stream to connect to
    finally:
        for call in seated:
            call.hang_up()


def test_an_idle_call_is_hung_up_through_the_providers_api(line, provider_api):
    """Twilio's webhooks are signed here: its calls are the server's to hang up (one answered 404, over already).
    Plivo's webhook is open (no access token): its stream is closed, and no request names a call it may not own."""
    calls = {"twilio": Phone(line.url, "twilio"), "gone": Phone(line.url, "twilio", call_id="CAgone"),
             "plivo": Phone(line.url, "plivo")}
    before = len(provider_api.requests)
    for call in calls.values():
        call.start()
    for call in calls.values():
        assert call.closed.wait(IDLE_S + 15)  # closed by the server after --timeout
    assert wait_until(lambda: len(provider_api.requests) >= before + 2, timeout=15, interval=0.1)
    assert wait_until(lambda: "call was over already (404)" in line.log(), timeout=5)
    made = {path: (method, headers, body) for method, path, headers, body in provider_api.requests[before:]}
    account = f"/2010-04-01/Accounts/AC{'0' * 32}/Calls"
    twilio = made.pop(f"{account}/{calls['twilio'].call_id}.json")
    assert twilio[0] == "POST" and twilio[2] == b"Status=completed" and twilio[1]["Authorization"].startswith("Basic ")
    assert made.pop(f"{account}/CAgone.json")[0] == "POST"
    assert made == {}  # nothing for the Plivo call
    assert "the stream is closed; the provider ends the call" in line.log()
    assert "hanging up the call failed" not in line.log()


def test_webhooks_refuse_what_is_not_a_call(line):
    assert requests.get(line.url + "/phone/twilio", verify=False, timeout=5).status_code == 405
    # Twilio's webhook unsigned, or signed with another account's token, or signed for other parameters
    assert webhook(line.url, "twilio", "CAforged").status_code == 403
    assert webhook(line.url, "twilio", "CAforged", auth_token="someone-else").status_code == 403
    signed = webhook(line.url, "twilio", "CAsigned", auth_token=TWILIO_TOKEN)
    assert signed.status_code == 200 and "<Stream" in signed.text
    plain = requests.get(line.url + "/phone/stream", verify=False, timeout=5)
    assert plain.status_code == 426
    assert requests.post(line.url + "/phone/unknown", verify=False, timeout=5).status_code == 404
