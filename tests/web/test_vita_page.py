"""A page that speaks VITA-1.5's own web-demo protocol, in real Chromium with a fake microphone: it loads
VITA's worklet from `../static/js/audio-processor.js`, streams JSON `audio` events, plays the binary 24 kHz
replies, shows `response_text` and stops on `stop_tts`, using only what our server serves. Once served at `/` of
the shared server (the browser is handed the page, every other request goes to the server), once from a folder
given to `--web_root`.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.browser import chromium, open_page, write_wav
from tests.harness.server import ROOT, running_server, wait_health
from tests.harness.speech import silence, spoken, voiced_span
from vita.capacity import MOST_AUTO_SEATS

VITA_PAGE = ROOT / "tests" / "data" / "vita_page"
QUESTION = "What is the capital of France?"
LEAD_S = 1.0


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    wav = tmp_path_factory.mktemp("mic") / "question.wav"
    write_wav(wav, np.concatenate([silence(LEAD_S), spoken(QUESTION), silence(6.0)]))
    # A page handed over by request interception has no address of its own, so Chromium's Local Network Access
    # check would treat it as public and refuse its WebSocket to 127.0.0.1 (socket.io then falls back to long
    # polling). Pages the server itself serves (the --web_root test) pass the check either way.
    with chromium(microphone_wav=wav, extra_args=["--disable-features=LocalNetworkAccessChecks"]) as browser:
        yield browser


def spoken_turn(page) -> dict:
    """Start the dialogue, wait for a played reply and its text, stop: what the page saw."""
    page.wait_for_function("window.probe && window.io && document.readyState === 'complete'", timeout=10000)
    page.click("#startButton")
    page.wait_for_function("window.probe.audioSent > 0", timeout=10000)
    # At least 0.1 s of the reply played (check_turn's bar), not merely its first samples: stopped earlier, what
    # was played depends on how far the playback had gone (2400 samples exactly, once, under load).
    page.wait_for_function("window.probe.samplesPlayed > 2400 && window.probe.responseText", timeout=60000)
    stops_before = page.evaluate("window.probe.stopTts")
    page.click("#stopButton")
    page.wait_for_function(f"window.probe.stopTts > {stops_before}", timeout=10000)
    return page.evaluate("window.probe")


def check_turn(probe: dict, page) -> None:
    assert probe["audioSent"] > 100, probe  # ~125 JSON events a second while recording
    assert probe["audioReceived"] > 0 and probe["samplesPlayed"] > 2400, probe  # at least 0.1 s of 24 kHz audio
    assert probe["responseText"].strip(), probe
    assert probe["events"] == [], probe
    assert not page.problems, page.problems
    question_ends = LEAD_S + voiced_span(spoken(QUESTION))[1]  # in the fake microphone's timeline
    after = (probe["firstAudioAt"] - probe["startedAt"]) / 1000 - question_ends
    print(f"VITA page: first reply audio ~{after:.2f} s after the question's last voiced sample (the fake microphone "
          f"starts with the recording); reply {probe['responseText']!r}")


def test_worklet_is_served_where_vitas_page_looks_for_it(server):
    response = server.get("/static/js/audio-processor.js")
    assert response.status_code == 200
    assert "javascript" in response.headers["Content-Type"]
    assert "registerProcessor(\"audio-processor\"" in response.text


def test_vita_protocol_page_completes_a_spoken_turn(browser, server):
    html = (VITA_PAGE / "index.html").read_text()
    context = browser.new_context(ignore_https_errors=True)
    try:
        context.route(server.url + "/", lambda route: route.fulfill(status=200, content_type="text/html",
                                                                    body=html))
        page = context.new_page()
        page.problems = []
        page.on("console", lambda m: m.type == "error" and page.problems.append(m.text))
        page.on("pageerror", lambda e: page.problems.append(str(e)))
        page.goto(server.url + "/")
        check_turn(spoken_turn(page), page)
    finally:
        context.close()


@pytest.fixture(scope="module")
def web_root_server(tmp_path_factory, vllm_api):
    """Generating on the shared vLLM API server: the page's protocol, not the engine, is under test here. Its seats
    are the default's, sized from the speed measured as it starts."""
    with running_server(tmp_path_factory.mktemp("web-root"), "--web_root", str(VITA_PAGE),
                        "--turn_log", "off", "--llm_url", vllm_api.url, "--max_users", "auto") as running:
        yield running


def test_auto_seats_are_sized_from_the_measured_speed_and_said(web_root_server):
    health = wait_health(web_root_server, lambda h: not str(h.get("max_users_auto")).startswith("not measured"))
    seats, why = health["max_users"], health["max_users_auto"]
    assert 1 <= seats <= MOST_AUTO_SEATS and why.startswith(f"{seats} (measured here: ASR "), health
    assert f"max_users auto: {why}" in web_root_server.log()


def test_web_root_serves_the_operators_page_and_falls_back_to_ours(web_root_server):
    assert "VITA protocol page" in web_root_server.get("/").text
    assert web_root_server.get("/static/vendor/socket.io.min.js").status_code == 200  # ours: the page has none
    for path in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/..%2fREADME.md",
                 "/static//etc/passwd", "/static/vendor/../../vita/web/app.py"):
        response = web_root_server.get(path)
        assert response.status_code == 404, path


def test_vita_protocol_page_through_web_root(browser, web_root_server):
    with open_page(browser, web_root_server.url + "/") as page:
        check_turn(spoken_turn(page), page)
