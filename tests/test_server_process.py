"""The whole process graph, for real: front + Manager + vLLM worker + Piper worker, over HTTPS."""

from __future__ import annotations

import socket
import ssl

import psutil
import requests

from tests.harness.client import RecordingClient
from vita.config import Config

WORKERS = {"llm", "tts"}


def test_health_answers_at_once_while_models_load(server):
    # Recorded by the fixture on the first successful /health, seconds after start: vLLM needs ~1 min. The first
    # request pays a TLS handshake on two cores busy importing three model stacks (0.3-1.2 s measured); a front
    # blocked by the loading would answer after the minute. The behaviour is the state it reports, below.
    health = server.first_health
    assert server.first_health_latency_s < 3.0
    assert set(health["workers"]) == WORKERS
    assert health["workers"]["llm"]["state"] in {"starting", "loading"}
    assert health["status"] == "starting"


def test_ready_after_workers_report_ready(server):
    assert server.get("/ready").status_code == 200
    health = server.get("/health").json()
    assert health["status"] == "ready"
    for name in WORKERS:
        worker = health["workers"][name]
        assert worker["state"] == "ready", worker
        assert psutil.pid_exists(worker["pid"])
        assert worker["ready_after_s"] > 0
    # Which model serves and why (llm.model auto picks by CPU), and which weights and kernel path it loaded.
    model, why = Config().chosen_llm()
    assert health["llm"]["model"] == model and health["llm"]["why"] == why
    assert model in health["workers"]["llm"]["detail"] and "weights" in health["workers"]["llm"]["detail"]
    if model.endswith("-int8"):
        assert "int8 W8A8 weights, oneDNN int8" in health["workers"]["llm"]["detail"] \
            or "AMX int8" in health["workers"]["llm"]["detail"]


def test_https_serves_the_generated_self_signed_certificate(server):
    cert = server.state_dir / "tls" / "cert.pem"
    key = server.state_dir / "tls" / "key.pem"
    assert cert.is_file() and key.is_file()
    assert key.stat().st_mode & 0o077 == 0  # the private key is readable by its owner only
    # Verifying against the generated file as the only CA proves the server presents exactly it.
    response = requests.get(server.url + "/ready", verify=str(cert), timeout=5)
    assert response.status_code == 200
    port = int(server.url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(cert))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.version() in {"TLSv1.2", "TLSv1.3"}


def test_plain_http_is_refused_on_the_tls_port(server):
    http_url = server.url.replace("https://", "http://")
    try:
        response = requests.get(http_url + "/ready", timeout=5)
        assert response.status_code >= 400
    except requests.ConnectionError:
        pass  # the TLS server closed the plaintext connection: also a refusal


def test_typed_question_is_answered_with_text_and_24khz_speech(server):
    client = RecordingClient(server.url).connect()
    try:
        client.sio.emit("text_input", {"text": "What is the capital of France?"})
        assert client.wait_for(lambda evs: any(n == "state" and d["state"] == "listening" and d.get("turn_id") == 1
                                               and any(m == "audio" for _, m, _ in evs) for _, n, d in evs), 60), \
            client.events
        reply = client.named("response_text")
        assert reply and reply[0]["text"].strip()
        audio = b"".join(client.named("audio"))
        assert len(audio) % 2 == 0
        assert len(audio) / 2 / 24000 >= 0.5  # at least half a second of 24 kHz int16 speech
        timings = {d["stage"]: d for d in client.named("timings")}
        assert timings["llm"]["first_token_s"] > 0 and timings["tts"]["audio_s"] > 0.5
    finally:
        client.close()


def test_voices_are_listed_and_a_session_can_pick_one(server):
    voices = server.get("/voices").json()
    assert voices["default"] == "joe-us" and "joe-us" in voices["voices"]
    client = RecordingClient(server.url).connect()
    try:
        client.sio.emit("set_voice", {"voice": "joe-us"})
        assert client.wait_event("voice", 5)
        client.sio.emit("set_voice", {"voice": "../../etc/passwd"})
        assert client.wait_for(lambda evs: any(n == "error" and d["code"] == "unknown_voice" for _, n, d in evs), 5)
    finally:
        client.close()
