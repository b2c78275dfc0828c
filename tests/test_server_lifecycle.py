"""A server's life on a server of its own: the page while models load, --max_users 1, --timeout 3, the turn
log across a restart, SIGTERM."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable

import numpy as np
import psutil
import pytest
import socketio
from websockets.exceptions import InvalidStatus

from tests.browser import chromium, open_page
from tests.conftest import ARTIFACTS
from tests.harness.client import RawSocketIO, RecordingClient
from tests.harness.held_back_llm import HeldBackLlm
from tests.harness.realtime_client import RealtimeClient
from tests.harness.server import probe_first_health, start_server, stop_server, wait_health, wait_ready
from tests.harness.speech import noise, silence, spoken, stream
from tests.workers.llm.test_llm_worker import LONG_REPLY
from vita.ops.turn_log import read_turns
from vita.web.http.access import AccessGuard

TIMEOUT_S = 3


class SmallServerLives:
    """The small server's lives: one is started when a test first needs one, and another when a test finds the
    last one stopped (after the SIGTERM test) or needs one that is still loading. In this file's order one life
    serves every test; in any other order the tests still pass, paying a start where they need one.

    Each life generates on the vLLM API server (`--llm_url`, not waited for: a life loads until it answers),
    reached through a port the tests can hold shut (`HeldBackLlm`) so that a life is still loading for as long
    as a test needs, however fast the API server is. What is tested here (supervision, timeouts, the turn log,
    signals) does not depend on where the tokens come from, and a killed LLM worker is back in seconds instead
    of reloading an engine. The in-process engine's own start and stop are the shared server's
    (tests/conftest.py stop_server checks every server's SIGTERM).
    """

    def __init__(self, tmp_path_factory, llm_url: str):
        self.tmp_path_factory = tmp_path_factory
        self.llm = HeldBackLlm(llm_url)
        self.llm.open()
        self.lives: list = []

    def current(self):
        self.llm.open()  # (after a test that failed while holding its life loading, too)
        if not self.lives or self.lives[-1].process.poll() is not None:
            self._start()
        return self.lives[-1]

    def loading(self):
        """A new life whose language model stays loading until `self.llm.open()` (the last life is stopped
        first: one at a time)."""
        if self.lives:
            stop_server(self.lives[-1])
        self.llm.close()
        self._start()
        return self.lives[-1]

    def ended(self):
        """The last life, stopped, with a turn in its log (one is spoken first if none is): a state folder to
        start the next life in."""
        life = self.lives[-1] if self.lives else self.current()
        if not turn_log_of(life):
            life = self.current()
            wait_ready(life)
            speak_one_turn(life)
        stop_server(life)
        return life

    def stop(self) -> None:
        try:
            for life in self.lives:
                stop_server(life)
        finally:
            self.llm.stop()

    def start_in(self, folder, *extra: str):
        """A small server (--max_users 1, --timeout 3, on the API server) in this folder, with extra flags."""
        return start_server(folder, "--max_users", "1", "--timeout", str(TIMEOUT_S), "--llm_url", self.llm.url,
                            *extra)

    def _start(self) -> None:
        self.lives.append(self.start_in(self.tmp_path_factory.mktemp("small")))


@pytest.fixture(scope="module")
def small_server_lives(tmp_path_factory, vllm_api_starting):
    lives = SmallServerLives(tmp_path_factory, vllm_api_starting.url)
    try:
        yield lives
    finally:
        lives.stop()


@pytest.fixture
def small_server(small_server_lives):
    """The small server (--max_users 1, --timeout 3), possibly still loading: tests wait for it themselves."""
    return small_server_lives.current()


def test_page_tells_the_user_while_models_load(small_server_lives):
    small_server = small_server_lives.loading()
    ARTIFACTS.mkdir(exist_ok=True)
    probe_first_health(small_server, time.monotonic() + 60)  # the front answers within seconds
    assert small_server.first_health.get("status") == "starting", (small_server.first_health, small_server.log())
    with chromium() as browser, open_page(browser, small_server.url + "/") as page:
        # (the page is opened as soon as the front answers; the language model loads until the test lets it)
        page.wait_for_function("document.querySelector('#state').dataset.state === 'loading'", timeout=30000)
        assert page.is_visible("#loading")
        page.wait_for_function("document.querySelector('#loading-detail').innerText.includes('Language model')",
                               timeout=30000)
        assert small_server.get("/health").json()["status"] == "starting"
        page.screenshot(path=str(ARTIFACTS / "page-loading.png"))
        small_server_lives.llm.open()
        wait_ready(small_server)
        # The page polls /health and lets the user start once the workers are ready; the wait for the models
        # (far longer than --timeout) did not count as the user being idle.
        page.wait_for_function("document.querySelector('#state').dataset.state === 'listening'", timeout=10000)
        assert page.is_hidden("#loading")
        assert page.inner_text("#connection") == "connected"
        assert not page.problems, page.problems


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


def keep_active(client: RecordingClient) -> Callable[[], None]:
    """The client's session stays active (--timeout 3 would free its seat while a test looks at the line) until
    the function returned is called."""
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(1.0) and client.client.connected:
            client.sio.emit("recording-started")

    keeper = threading.Thread(target=keep, daemon=True)
    keeper.start()

    def stop_keeping() -> None:
        stop.set()
        keeper.join(5)

    return stop_keeping


def test_clients_that_wait_are_seated_in_their_turn_and_nobody_jumps_the_line(small_server):
    wait_ready(small_server)
    assert wait_health(small_server, lambda h: h["sessions"] == 0)["sessions"] == 0
    first = RecordingClient(small_server.url).connect()
    second = RecordingClient(small_server.url)
    third = RecordingClient(small_server.url)
    newcomer = RecordingClient(small_server.url)
    stop_keeping = keep_active(first)
    try:
        second.connect(auth={"wait": True})
        assert second.wait_event("waiting", 5), second.events
        third.connect(auth={"wait": True})
        assert third.wait_event("waiting", 5), third.events
        assert second.named("waiting")[-1] == {"place": 1, "users": 1}
        assert third.named("waiting")[-1] == {"place": 2, "users": 1}
        assert not second.named("server_status") and not third.named("too_many_users")
        health = small_server.get("/health").json()
        assert (health["sessions"], health["waiting"]) == (1, 2)
        assert "vita_sessions_waiting 2.0" in small_server.get("/metrics").text
        stop_keeping()
        first.close()
        assert second.wait_event("server_status", 10), second.events
        second.sio.emit("text_input", {"text": "Hello, how are you today?"})
        assert third.wait_for(lambda evs: any(n == "waiting" and d["place"] == 1 for _, n, d in evs), 5)
        # A client that does not ask to wait is refused (tests/turns/test_sessions.py: nor may one that finds a
        # free seat while others wait take it).
        with contextlib.suppress(socketio.exceptions.ConnectionError):
            newcomer.connect()
        assert newcomer.wait_event("too_many_users", 5)
        # The seat is a real one: its typed question is answered.
        assert second.wait_for(lambda evs: any(n == "response_text" for _, n, _ in evs), 60), second.events
        assert not third.named("server_status")
        second.close()
        assert third.wait_event("server_status", 10), third.events
        assert wait_health(small_server, lambda h: h["waiting"] == 0)["sessions"] == 1
    finally:
        stop_keeping()
        for client in (first, second, third, newcomer):
            client.close()
    health = wait_health(small_server, lambda h: h["sessions"] == 0)
    assert health["sessions"] == 0 and health["waiting"] == 0 and health["vad_threads"] == 0


def test_the_page_shows_its_place_in_line_and_starts_by_itself_when_seated(small_server):
    wait_ready(small_server)
    assert wait_health(small_server, lambda h: h["sessions"] == 0)["sessions"] == 0
    first = RecordingClient(small_server.url).connect()
    stop_keeping = keep_active(first)
    try:
        with chromium() as browser, open_page(browser, small_server.url + "/") as page:
            page.wait_for_function("!document.querySelector('#banner').hidden && "
                                   "document.querySelector('#banner').textContent.includes('next in line')",
                                   timeout=10000)
            assert page.inner_text("#connection") == "waiting"
            assert page.get_attribute("#state", "data-state") == "waiting"
            assert page.is_disabled("#talk")
            page.screenshot(path=str(ARTIFACTS / "page-waiting.png"))
            stop_keeping()
            first.close()
            page.wait_for_function("document.querySelector('#state').dataset.state === 'listening'", timeout=10000)
            assert page.is_hidden("#banner") and page.inner_text("#connection") == "connected"
            assert page.is_enabled("#talk")
            assert not page.problems, page.problems
    finally:
        stop_keeping()
        first.close()


def test_idle_session_is_timed_out_and_freed(small_server):
    wait_ready(small_server)  # every test on this server waits for it: any one may run alone
    connecting_at = time.monotonic()  # the server's idle clock cannot start before this
    client = RecordingClient(small_server.url).connect()
    try:
        assert wait_health(small_server, lambda h: h["vad_threads"] == 1)["vad_threads"] == 1
        # Silence from an open microphone is not activity: the session still times out.
        stream(client.sio, silence(1.0))
        assert client.wait_event("out_time", TIMEOUT_S + 3)
        assert client.wait_event("disconnect", 3)
        out_at = next(t for t, name, _ in client.events if name == "out_time")
        # Not measured from the first event received: its delivery may lag the server's clock start by tens of ms.
        assert TIMEOUT_S <= out_at - connecting_at < TIMEOUT_S + 2
        health = wait_health(small_server, lambda h: h["sessions"] == 0 and h["vad_threads"] == 0)
        assert health["sessions"] == 0 and health["vad_threads"] == 0
    finally:
        client.close()


def test_a_microphone_streaming_room_noise_is_still_timed_out(small_server):
    """Audio that is not speech is not activity, even while it never stops arriving (it used to hold off
    the idle check, which ran only when the VAD thread's queue stayed empty)."""
    wait_ready(small_server)
    assert wait_health(small_server, lambda h: h["sessions"] == 0)["sessions"] == 0
    client = RecordingClient(small_server.url).connect()
    streaming, done = threading.Event(), threading.Event()

    def room_noise() -> None:
        streaming.set()
        with contextlib.suppress(Exception):  # the server closes the connection mid-stream
            stream(client.sio, noise(TIMEOUT_S + 4, level=150), chunk_ms=32, binary=True, stop=done)

    sender = threading.Thread(target=room_noise, daemon=True)
    sender.start()
    try:
        assert streaming.wait(5)
        assert client.wait_event("out_time", TIMEOUT_S + 3), client.events
        assert sender.is_alive()  # out_time came while the noise was still streaming
        assert not client.named("turn")
    finally:
        done.set()
        client.close()
        sender.join(TIMEOUT_S + 6)


def test_activity_keeps_a_session_alive(small_server):
    wait_ready(small_server)
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
    path = server.state_dir / "turns.sqlite3"
    return read_turns(path) if path.exists() else []  # made when the server starts


def speak_one_turn(server, auth: dict | None = None) -> dict:
    """A spoken question answered and played out; returns the session's pseudonymous id and its reply."""
    token = (auth or {}).get("token")
    assert wait_health(server, lambda h: h["sessions"] == 0, token=token)["sessions"] == 0
    question = spoken("What is the capital of France?")
    client = RecordingClient(server.url).connect(auth)
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
    earlier = len(turn_log_of(small_server))
    said = speak_one_turn(small_server)
    deadline = time.monotonic() + 5
    while len(turn_log_of(small_server)) == earlier and time.monotonic() < deadline:
        time.sleep(0.1)
    row = turn_log_of(small_server)[-1]
    assert row["session"] == said["session"] and row["turn_id"] == 1 and row["source"] == "speech"
    assert "capital" in row["transcript"].lower()
    assert row["reply"] == said["reply"] and not row["interrupted"] and row["end_reason"] == "done"
    for key in ("end_of_speech_s", "asr_s", "first_token_s", "first_piece_s", "tts_first_chunk_s",
                "first_audio_s", "voice_to_voice_s"):
        assert 0 < row["timings"][key] < 30, (key, row["timings"])


def kill_mid_turn(server, client: RecordingClient, worker: str, turn_id: int, restarts: int) -> None:
    """kill -9 one worker while a typed turn is in flight; the session hears about it within seconds."""
    client.sio.emit("text_input", {"text": LONG_REPLY})
    assert client.wait_for(lambda evs: any(n == "state" and d == {"state": "thinking", "turn_id": turn_id}
                                           for _, n, d in evs), 10)
    pid = server.get("/health").json()["workers"][worker]["pid"]
    descendants = psutil.Process(pid).children(recursive=True)
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    assert client.wait_for(lambda evs: any(n == "error" and d["code"] == "worker_failed" and t > killed_at
                                           for t, n, d in evs), 5), client.events[-10:]
    told_at = next(t for t, n, d in client.events if n == "error" and d["code"] == "worker_failed" and t > killed_at)
    assert told_at - killed_at < 3
    assert {"turn_id": turn_id, "reason": "worker failed"} in client.named("turn_cancelled")
    assert server.get("/ready").status_code == 503
    health = server.get("/health").json()["workers"][worker]
    if health["state"] == "dead":  # backing off: 1 s after a first death, longer after recent ones
        assert re.search(r"restarting in \d+ s", health["detail"]), health
    else:  # already restarted
        assert health["state"] in ("starting", "loading"), health
    wait_ready(server, timeout=240)
    health = server.get("/health").json()["workers"][worker]
    assert health["restarts"] == restarts and health["pid"] != pid
    gone, alive = psutil.wait_procs(descendants, timeout=5)
    assert not alive, [(p.pid, p.name()) for p in alive]  # whatever the worker started went with it


def test_killed_workers_are_restarted_and_the_next_turn_is_answered(small_server):
    wait_ready(small_server)
    assert wait_health(small_server, lambda h: h["sessions"] == 0)["sessions"] == 0
    restarts = {name: w["restarts"] for name, w in small_server.get("/health").json()["workers"].items()}
    client = RecordingClient(small_server.url).connect()
    try:
        kill_mid_turn(small_server, client, "tts", 1, restarts["tts"] + 1)
        kill_mid_turn(small_server, client, "llm", 2, restarts["llm"] + 1)
        client.sio.emit("text_input", {"text": "Hello, how are you today?"})
        assert client.wait_for(lambda evs: any(n == "state" and d == {"state": "listening", "turn_id": 3}
                                               for _, n, d in evs), 60), client.events
        assert [d["text"] for d in client.named("response_text") if d["turn_id"] == 3][0]
        spoken_at = next(t for t, n, d in client.events if n == "state" and d.get("turn_id") == 3
                         and d["state"] == "speaking")
        assert any(n == "audio" and t >= spoken_at for t, n, _ in client.events)
        metrics = small_server.get("/metrics").text
        for worker in ("llm", "tts"):
            assert f'vita_worker_restarts_total{{worker="{worker}"}} {restarts[worker] + 1}.0' in metrics
    finally:
        client.close()


def test_a_frozen_voice_worker_is_found_restarted_and_speaks_again(small_server):
    """SIGSTOP: the process lives but answers nothing. Its heartbeats stop; it is killed, restarted, and the next
    turn is spoken."""
    wait_ready(small_server)
    before = small_server.get("/health").json()["workers"]["tts"]
    frozen_at = time.monotonic()
    os.kill(before["pid"], signal.SIGSTOP)
    try:
        stuck = wait_health(small_server, lambda h: h["workers"]["tts"]["pid"] != before["pid"], timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(before["pid"], signal.SIGCONT)
    assert stuck["workers"]["tts"]["pid"] != before["pid"], stuck
    assert 5 < time.monotonic() - frozen_at < 30  # found by its silence (liveness 10 s), not at once
    assert "tts worker sent nothing for" in small_server.log()
    wait_ready(small_server, timeout=120)
    assert small_server.get("/health").json()["workers"]["tts"]["restarts"] == before["restarts"] + 1
    assert wait_health(small_server, lambda h: h["sessions"] == 0)["sessions"] == 0
    client = RecordingClient(small_server.url).connect()
    try:
        client.sio.emit("text_input", {"text": "Hello, how are you today?"})
        assert client.wait_for(lambda evs: any(n == "audio" for _, n, _ in evs), 60), client.events
    finally:
        client.close()


def test_sigterm_stops_everything_within_15_s(small_server):
    # The server does not survive it: a later test on the small server gets a new life.
    wait_ready(small_server)
    front = psutil.Process(small_server.process.pid)
    family = front.children(recursive=True)
    names = " ".join(p.name() for p in family)
    assert len(family) >= 4, names  # resource tracker, manager, llm and tts at least
    assert wait_health(small_server, lambda h: h["sessions"] == 0)["sessions"] == 0
    client = RecordingClient(small_server.url).connect()
    try:
        client.sio.emit("text_input", {"text": LONG_REPLY})  # a turn in flight when the signal comes
        assert client.wait_for(lambda evs: any(n == "state" and d["state"] == "thinking" for _, n, d in evs), 10)
        started = time.monotonic()
        small_server.process.send_signal(signal.SIGTERM)
        small_server.process.wait(timeout=15)
        assert time.monotonic() - started < 15
        assert small_server.process.returncode == 0
        assert {"turn_id": 1, "reason": "server stopping"} in client.named("turn_cancelled")
        assert "server_stopping" in [e["code"] for e in client.named("error")]
    finally:
        client.close()
    gone, alive = psutil.wait_procs(family, timeout=2)
    assert not alive, [(p.pid, p.name()) for p in alive]


TOKEN = "s3cret-token-for-tests"


def test_restarted_with_an_access_token_keeps_the_turn_log_and_guards_everything(small_server_lives):
    """The next life starts in the last one's state folder, now with an access token."""
    first = small_server_lives.ended()
    before = turn_log_of(first)
    assert before, "the first life logged a turn"
    again = small_server_lives.start_in(first.state_dir.parent, "--access_token", TOKEN, "--log_level", "debug")
    try:
        wait_ready(again)
        # Access: the page, /metrics and Socket.IO need the token; /health and /ready stay open for probes.
        assert again.get("/").status_code == 401
        wrong = again.get("/?token=wrong-token-123", allow_redirects=False)
        assert wrong.status_code == 401 and "Set-Cookie" not in wrong.headers  # a wrong link plants no cookie
        assert again.get("/metrics").status_code == 401
        assert again.get("/health").status_code == 200 and again.get("/ready").status_code == 200
        # ...but /health's detail (workers, paths, addresses, errors) only with the token
        assert set(again.get("/health").json()) == {"status", "detail"}
        detailed = again.get("/health", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert "workers" in detailed and "turn_log" in detailed
        link = again.get(f"/?token={TOKEN}", allow_redirects=False)
        assert link.status_code == 303 and link.headers["Location"] == "/"
        cookie = link.cookies.get("vita_token")
        # the browser keeps a pass (an HMAC of the token), never the token itself
        assert cookie == AccessGuard(TOKEN).page_pass and "HttpOnly" in link.headers["Set-Cookie"]
        assert again.get("/", cookies={"vita_token": cookie}).status_code == 200
        assert again.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        # A Realtime client's api key is the token (Authorization: Bearer, as the openai package sends it).
        with pytest.raises(InvalidStatus) as refused:
            RealtimeClient(again.url, token="wrong-token-123")
        assert refused.value.response.status_code == 401
        realtime = RealtimeClient(again.url, token=TOKEN)
        try:
            assert realtime.wait_type("session.created")[0]["session"]["type"] == "realtime"
        finally:
            realtime.close()
        stranger = RecordingClient(again.url)
        try:
            with contextlib.suppress(socketio.exceptions.ConnectionError):
                stranger.connect()
            assert stranger.wait_event("disconnect", 5)
            assert [e["code"] for e in stranger.named("error")] == ["unauthorized"]
        finally:
            stranger.close()
        # A refused client is closed entirely, not only its namespace; a lone surrogate is just a wrong token.
        raw = RawSocketIO(again.url, join=False)
        try:
            raw.send('40{"token": "\\ud800"}')
            assert raw.closed_within(5) and raw.error_codes() == ["unauthorized"]
        finally:
            raw.close()
        # The turn log of the first life is still there, and this life's turns join it.
        said = speak_one_turn(again, auth={"token": TOKEN})
        deadline = time.monotonic() + 5
        while len(turn_log_of(again)) == len(before) and time.monotonic() < deadline:
            time.sleep(0.1)
        after = turn_log_of(again)
        assert after[:len(before)] == before
        assert [r["session"] for r in after[len(before):]] == [said["session"]]
        log = again.log()
        assert "token=[redacted]" in log  # werkzeug's debug request lines, redacted
        assert "UnicodeEncodeError" not in log
        assert TOKEN not in log.replace(f"--access_token {TOKEN}", "")
    finally:
        stop_server(again)
