"""Whatever arrives, the server carries on: thousands of random and malformed events from a live client, then
a real spoken turn still gets a real answer; and hundreds of connect/speak/disconnect cycles leave no threads
or memory behind. Counts come from VITA_FUZZ_EVENTS (5,000) and VITA_CHURN_CYCLES (100).
"""

from __future__ import annotations

import base64
import json
import os
import time

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.harness.client import RecordingClient
from tests.harness.server import wait_health, wait_no_sessions
from tests.harness.speech import silence, spoken, stream

FUZZ_EVENTS = int(os.environ.get("VITA_FUZZ_EVENTS", "5000"))
CHURN_CYCLES = int(os.environ.get("VITA_CHURN_CYCLES", "100"))
PER_EXAMPLE = 25
EVENTS_PER_S = 350  # under the default 400/s limit, so the handlers, not the limiter, see most events
RESERVED = {"connect", "connect_error", "disconnect", "message"}  # the client library refuses these names
KNOWN_CODES = {"bad_audio", "bad_audio_format", "bad_frame", "bad_text", "text_too_long", "unknown_voice",
               "bad_reply_mode", "not_ready", "rate_limited", "audio_overrun", "llm_failed"}

NAMES = st.one_of(
    st.sampled_from(["audio", "audio_format", "video_frame", "text_input", "set_voice", "reset_state",
                     "recording-started", "recording-stopped", "reply_mode"]),
    st.text(max_size=20).filter(lambda n: n not in RESERVED),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
BIG = [os.urandom(70_000), os.urandom(64_001), b"\x00" * 63_999]
PAYLOADS = st.one_of(
    JSON_VALUES,
    st.binary(max_size=1500),
    st.sampled_from(BIG),
    st.builds(lambda rate, audio: json.dumps({"sample_rate": rate, "audio": audio}),
              st.one_of(st.integers(), st.sampled_from([16000, 48000]), st.text(max_size=4), st.none()),
              st.lists(st.integers(-300, 300), max_size=300)),
    st.builds(lambda mime, data: f"data:{mime};base64," + base64.b64encode(data).decode(),
              st.sampled_from(["image/jpeg", "image/png", "image/webp", "text/plain", ""]), st.binary(max_size=2000)),
    st.builds(lambda key, value: {key: value},
              st.sampled_from(["text", "sample_rate", "voice", "mode", "audio"]), JSON_VALUES),
)
EVENTS = st.tuples(NAMES, PAYLOADS)


def test_random_and_malformed_events_break_nothing(server):
    wait_no_sessions(server)
    log_from = len(server.log())
    client = RecordingClient(server.url).connect()
    sent = [0]
    started = time.monotonic()

    @settings(max_examples=max(1, FUZZ_EVENTS // PER_EXAMPLE), deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.lists(EVENTS, min_size=PER_EXAMPLE, max_size=PER_EXAMPLE))
    def send(batch):
        for name, payload in batch:
            client.sio.emit(name, payload)
        sent[0] += len(batch)
        ahead = started + sent[0] / EVENTS_PER_S - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)

    try:
        send()
        assert sent[0] >= FUZZ_EVENTS
        assert client.sio.connected  # bad input never costs the session
        errors = client.named("error")
        assert errors and {e["code"] for e in errors} <= KNOWN_CODES, {e["code"] for e in errors}
        assert all(isinstance(e["message"], str) and e["message"] for e in errors)
        health = server.get("/health").json()
        assert health["status"] == "ready" and health["sessions"] == 1 and health["vad_threads"] == 1
    finally:
        client.close()
    log = server.log()[log_from:]
    assert "Traceback" not in log and "handler error" not in log, log[-3000:]

    # And everything still works: a real spoken question gets a real answer.
    wait_no_sessions(server)
    probe = RecordingClient(server.url).connect()
    try:
        stream(probe.sio, np.concatenate([silence(0.5), spoken("What is the capital of France?"), silence(1.2)]),
               chunk_ms=32, binary=True)
        assert probe.wait_event("response_text", 90), probe.events
        assert "capital" in probe.named("transcript")[0]["text"].lower()
        assert probe.named("response_text")[0]["text"]
    finally:
        probe.close()


def test_connect_speak_disconnect_churn_leaves_nothing_behind(server):
    speech = np.concatenate([silence(0.2), spoken("Hello there, how are you?")])
    frames = [speech[i:i + 512].astype("<i2").tobytes() for i in range(0, len(speech), 512)]

    def cycle() -> None:
        c = RecordingClient(server.url).connect()
        try:
            for frame in frames:
                c.sio.emit("audio", frame)
        finally:
            c.close()

    def settled(threads_at_most: int | None = None) -> dict:
        """Health once the sessions and their connections are gone (the front's /health counts engine.io's
        ping timers apart: each sleeps out its interval after its connection closed)."""
        def quiet(h: dict) -> bool:
            return (h["sessions"] == 0 and h["vad_threads"] == 0 and h["connections"]["open"] <= 1
                    and (threads_at_most is None or h["threads"] <= threads_at_most))
        return wait_health(server, quiet, timeout=15)

    wait_no_sessions(server)
    for _ in range(10):  # warm-up: first-use allocations are not leaks
        cycle()
    baseline = settled()
    for _ in range(CHURN_CYCLES):
        cycle()
    after = settled(threads_at_most=baseline["threads"])
    assert after["sessions"] == 0 and after["vad_threads"] == 0
    assert after["threads"] <= baseline["threads"], (baseline, after)
    assert after["rss_mb"] - baseline["rss_mb"] < 20, (baseline, after)
    print(f"churn: {CHURN_CYCLES} cycles, threads {baseline['threads']} → {after['threads']}, "
          f"front RSS {baseline['rss_mb']} → {after['rss_mb']} MB")
