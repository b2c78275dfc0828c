"""A server's life on a server of its own: the page while models load, --max_users 1, --timeout 3, the turn
log across a restart, SIGTERM."""

from __future__ import annotations

import contextlib
import signal
import time

import numpy as np
import psutil
import pytest
import socketio

from tests.browser import chromium, open_page
from tests.conftest import ARTIFACTS, start_server, stop_server, wait_ready
from tests.helpers import RecordingClient
from tests.speech import silence, spoken, stream
from vita.turn_log import read_turns

TIMEOUT_S = 3


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    """Started, not yet ready: the first test sees it loading; the others wait for it."""
    server = start_server(tmp_path_factory.mktemp("small"), "--max_users", "1", "--timeout", str(TIMEOUT_S))
    try:
        yield server
    finally:
        stop_server(server)


def test_page_tells_the_user_while_models_load(small_server):
    ARTIFACTS.mkdir(exist_ok=True)
    deadline = time.monotonic() + 30
    while True:  # the front answers within seconds; vLLM takes about a minute more
        try:
            if small_server.get("/health").json()["status"] == "starting":
                break
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)
    with chromium() as browser, open_page(browser, small_server.url + "/") as page:
        page.wait_for_function("document.querySelector('#state').dataset.state === 'loading'", timeout=10000)
        assert page.is_visible("#loading")
        assert "Language model" in page.inner_text("#loading-detail")
        page.screenshot(path=str(ARTIFACTS / "page-loading.png"))
        wait_ready(small_server)
        # The page polls /health and lets the user start once the workers are ready; the wait for the models
        # (far longer than --timeout) did not count as the user being idle.
        page.wait_for_function("document.querySelector('#state').dataset.state === 'listening'", timeout=10000)
        assert page.is_hidden("#loading")
        assert page.inner_text("#connection") == "connected"
        assert not page.problems, page.problems


def wait_health(server, predicate, timeout: float = 5.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        health = server.get("/health").json()
        if predicate(health) or time.monotonic() > deadline:
            return health
        time.sleep(0.1)


def test_extra_client_is_told_and_disconnected(small_server):
    wait_ready(small_server)
    assert wait_health(small_server, lambda h: h["sessions"] == 0)["sessions"] == 0  # the page's, just closed
    first = RecordingClient(small_server.url).connect()
    extra = RecordingClient(small_server.url)
    try:
        # The refusal follows the handshake within 0.2 s: under load it can overtake connect() returning.
        with contextlib.suppress(socketio.exceptions.ConnectionError):
            extra.connect()
        assert extra.wait_event("too_many_users", 5)
        assert extra.wait_event("disconnect", 5)
        assert not first.named("too_many_users")
        assert small_server.get("/health").json()["sessions"] == 1
    finally:
        first.close()
        extra.close()
    health = wait_health(small_server, lambda h: h["sessions"] == 0)
    assert health["sessions"] == 0 and health["vad_threads"] == 0


def test_idle_session_is_timed_out_and_freed(small_server):
    client = RecordingClient(small_server.url).connect()
    try:
        assert wait_health(small_server, lambda h: h["vad_threads"] == 1)["vad_threads"] == 1
        # Silence from an open microphone is not activity: the session still times out.
        stream(client.sio, silence(1.0))
        assert client.wait_event("out_time", TIMEOUT_S + 3)
        assert client.wait_event("disconnect", 3)
        out_at = next(t for t, name, _ in client.events if name == "out_time")
        connected_at = client.events[0][0]
        assert out_at - connected_at >= TIMEOUT_S
        health = wait_health(small_server, lambda h: h["sessions"] == 0 and h["vad_threads"] == 0)
        assert health["sessions"] == 0 and health["vad_threads"] == 0
    finally:
        client.close()


def test_activity_keeps_a_session_alive(small_server):
    assert wait_health(small_server, lambda h: h["sessions"] == 0)["sessions"] == 0
    client = RecordingClient(small_server.url).connect()
    try:
        for _ in range(3):
            time.sleep(TIMEOUT_S * 0.6)
            client.sio.emit("recording-started")
        assert not client.named("out_time"), client.events
        assert client.sio.connected, client.events
    finally:
        client.close()


def turn_log_of(server) -> list[dict]:
    return read_turns(server.state_dir / "turns.sqlite3")


def speak_one_turn(server) -> dict:
    """A spoken question answered and played out; returns the session's pseudonymous id and its events."""
    assert wait_health(server, lambda h: h["sessions"] == 0)["sessions"] == 0
    question = spoken("What is the capital of France?")
    client = RecordingClient(server.url).connect()
    try:
        stream(client.sio, np.concatenate([silence(0.5), question, silence(1.2)]), chunk_ms=32, binary=True)
        # Waiting for an answer is not idleness: the 3 s timeout does not cut the turn short.
        assert client.wait_for(lambda evs: any(n == "state" and d == {"state": "listening", "turn_id": 1}
                                               for _, n, d in evs), 60), client.events
        return {"session": client.named("server_status")[0]["session"],
                "reply": client.named("response_text")[0]["text"]}
    finally:
        client.close()


def test_a_spoken_turn_is_logged_with_its_texts_and_timings(small_server):
    wait_ready(small_server)
    said = speak_one_turn(small_server)
    deadline = time.monotonic() + 5
    while not turn_log_of(small_server) and time.monotonic() < deadline:
        time.sleep(0.1)
    [row] = turn_log_of(small_server)
    assert row["session"] == said["session"] and row["turn_id"] == 1 and row["source"] == "speech"
    assert "capital" in row["transcript"].lower()
    assert row["reply"] == said["reply"] and not row["interrupted"] and row["end_reason"] == "done"
    for key in ("end_of_speech_s", "asr_s", "first_token_s", "first_piece_s", "tts_first_chunk_s",
                "first_audio_s", "voice_to_voice_s"):
        assert 0 < row["timings"][key] < 30, (key, row["timings"])


def test_sigterm_stops_everything_within_15_s(small_server):
    # Runs last in this module: the server does not survive it.
    front = psutil.Process(small_server.process.pid)
    family = front.children(recursive=True)
    names = " ".join(p.name() for p in family)
    assert len(family) >= 4, names  # manager, llm, tts and vLLM's own engine core at least
    started = time.monotonic()
    small_server.process.send_signal(signal.SIGTERM)
    small_server.process.wait(timeout=15)
    assert time.monotonic() - started < 15
    assert small_server.process.returncode == 0
    gone, alive = psutil.wait_procs(family, timeout=2)
    assert not alive, [(p.pid, p.name()) for p in alive]


def test_the_turn_log_survives_a_restart(small_server):
    before = turn_log_of(small_server)
    assert before, "the first life logged a turn"
    again = start_server(small_server.state_dir.parent, "--max_users", "1", "--timeout", str(TIMEOUT_S))
    try:
        wait_ready(again)
        said = speak_one_turn(again)
        deadline = time.monotonic() + 5
        while len(turn_log_of(again)) == len(before) and time.monotonic() < deadline:
            time.sleep(0.1)
        after = turn_log_of(again)
        assert after[:len(before)] == before
        assert [r["session"] for r in after[len(before):]] == [said["session"]]
    finally:
        stop_server(again)
