"""The page in a real browser (Debian's headless Chromium) over HTTPS, with a fake microphone that speaks a
Piper-made question: the UI comes up without console errors, and a spoken turn shows up in the log.
Screenshots go to test-artifacts/ for people to look at.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.browser import chromium, open_page, write_wav
from tests.conftest import ARTIFACTS
from tests.harness.server import wait_health
from tests.harness.speech import silence, spoken


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    wav = tmp_path_factory.mktemp("mic") / "question.wav"
    write_wav(wav, np.concatenate([silence(1.5), spoken("What is the capital of France?"), silence(3.0)]))
    with chromium(microphone_wav=wav) as browser:
        yield browser


@pytest.fixture
def page(browser, server):
    with open_page(browser, server.url + "/") as page:
        yield page


def test_page_loads_and_shows_its_ui_without_errors(browser, server):
    """Under the server's own content security policy: every script, style, worklet and socket of the page
    must come from its own origin, or the browser reports a violation (a problem) and the page breaks."""
    ARTIFACTS.mkdir(exist_ok=True)
    with open_page(browser, server.url + "/", enforce_csp=True) as page:
        check_ready_page(page)


def check_ready_page(page) -> None:
    page.wait_for_selector("#connection:text-is('connected')", timeout=10000)
    page.wait_for_selector("#state[data-state='listening']", state="attached", timeout=10000)
    for selector in ("#talk", "#camera", "#reset", "#text", "#send"):
        assert page.is_enabled(selector), selector
    assert page.is_hidden("#loading")
    assert page.eval_on_selector_all("#voice option", "os => os.map(o => o.value)") == ["joe-us"]
    assert page.evaluate("typeof io") == "function"  # the socket.io client came from our server, not a CDN
    page.screenshot(path=str(ARTIFACTS / "page-ready.png"))
    assert not page.problems, page.problems


def test_spoken_question_from_the_microphone_appears_in_the_log(page, server):
    """Over Socket.IO PCM (the setting; WebRTC is the default, tested below)."""
    page.wait_for_function("document.querySelector('#state').dataset.state === 'listening'", timeout=10000)
    page.select_option("#transport", "socket")
    page.click("#talk")
    page.wait_for_function("document.querySelector('#talk').textContent === 'Stop talking'", timeout=5000)
    assert page.inner_text("#transport-live") == "audio: Socket.IO · PCM"
    user = page.wait_for_selector(".msg.user", timeout=30000)
    assert "capital" in user.inner_text().lower()
    page.wait_for_function("document.querySelector('.msg.bot') && document.querySelector('.msg.bot').textContent",
                           timeout=60000)
    page.wait_for_function("window.vita.player.playing", timeout=30000)  # the reply is being played
    # The turn's timings: a collapsed panel under the reply whose headline is the voice-to-voice time.
    summary = page.wait_for_selector(".turn-timings summary:has-text('answered')", timeout=30000)
    assert page.is_hidden(".turn-timings dl")
    summary.click()
    page.wait_for_function("document.querySelector('.turn-timings dl').textContent.includes('first sound "
                           "synthesized')", timeout=30000)
    shown = page.inner_text(".turn-timings dl")
    for label in ("you stopped → first sound", "end of speech detected", "speech recognition", "first word generated"):
        assert label in shown, shown
    page.screenshot(path=str(ARTIFACTS / "page-conversation.png"))
    page.click("#talk")
    page.wait_for_function("document.querySelector('#talk').textContent === 'Start talking'", timeout=5000)
    assert not page.problems, page.problems


def test_typed_text_gets_a_reply(page, server):
    page.wait_for_function("document.querySelector('#state').dataset.state === 'listening'", timeout=10000)
    page.fill("#text", "Hello, who are you?")
    page.click("#send")
    assert page.wait_for_selector(".msg.user", timeout=5000).inner_text() == "Hello, who are you?"
    page.wait_for_function("document.querySelector('.msg.bot') && document.querySelector('.msg.bot').textContent",
                           timeout=60000)
    page.click("#reset")
    page.wait_for_function("!document.querySelector('.msg')", timeout=5000)
    assert not page.problems, page.problems


def test_a_tool_call_shows_as_a_line_above_its_reply(page, server):
    page.wait_for_function("document.querySelector('#state').dataset.state === 'listening'", timeout=10000)
    page.fill("#text", "What is 347 times 29?")
    page.click("#send")
    line = page.wait_for_selector(".msg.tool", timeout=60000).inner_text()
    assert "calculate" in line and "10063" in line, line
    page.wait_for_function("document.querySelector('.msg.bot') && document.querySelector('.msg.bot').textContent",
                           timeout=60000)
    assert page.evaluate("document.querySelector('.msg.tool').nextElementSibling.classList.contains('bot')")
    page.click("#reset")
    page.wait_for_function("!document.querySelector('.msg')", timeout=5000)
    assert not page.problems, page.problems


INBOUND_ENERGY = """async () => {
  const stats = await window.vita.rtc.pc.getStats();
  let energy = 0;
  stats.forEach((s) => { if (s.type === "inbound-rtp" && s.kind === "audio") energy += s.totalAudioEnergy || 0; });
  return energy;
}"""


def test_spoken_question_over_webrtc_is_answered_and_heard(page, server):
    """The default transport: the fake microphone's question goes in Opus over a real browser's peer connection,
    the reply comes back on it (its audio energy rises), and the page says which transport is live."""
    page.wait_for_function("document.querySelector('#state').dataset.state === 'listening'", timeout=10000)
    assert page.input_value("#transport") == "webrtc"
    page.click("#talk")
    page.wait_for_selector("#transport-live[data-transport='webrtc']", timeout=15000)
    assert page.inner_text("#transport-live") == "audio: WebRTC · Opus"
    user = page.wait_for_selector(".msg.user", timeout=30000)
    assert "capital" in user.inner_text().lower()
    page.wait_for_function("document.querySelector('.msg.bot') && document.querySelector('.msg.bot').textContent",
                           timeout=60000)
    page.wait_for_function(f"({INBOUND_ENERGY})().then((e) => e > 0.001)", timeout=30000)
    assert page.evaluate("window.vita.player.received") == 0  # no reply audio came over the socket
    page.screenshot(path=str(ARTIFACTS / "page-webrtc.png"))
    page.click("#talk")
    page.wait_for_selector("#transport-live[data-transport='']", state="attached", timeout=5000)
    health = wait_health(server, lambda h: h["webrtc"]["peers"] == 0)
    assert health["webrtc"]["peers"] == 0, health  # stopping talking closed the peer connection
    assert not page.problems, page.problems


def test_a_stock_realtime_web_client_calls_over_webrtc(browser, server):
    """The Realtime page, written as OpenAI's WebRTC examples are: a client key from the server, a call to
    /v1/realtime/calls, the microphone's question and the reply in the log from the data channel's events, the
    reply heard on the call's track; hanging up frees the seat and the peer."""
    wait_health(server, lambda h: h["sessions"] == 0)
    with open_page(browser, server.url + "/static/realtime.html") as page:
        page.click("#call")
        page.wait_for_selector("#call:text-is('Hang up')", timeout=20000)
        user = page.wait_for_selector(".msg.user", timeout=40000)
        assert "capital" in user.inner_text().lower()
        page.wait_for_function("document.querySelector('.msg.bot') && document.querySelector('.msg.bot').textContent",
                               timeout=60000)
        page.wait_for_function(f"({INBOUND_ENERGY.replace('window.vita.rtc.pc', 'window.vitaCall.pc')})()"
                               ".then((e) => e > 0.001)", timeout=30000)
        page.screenshot(path=str(ARTIFACTS / "page-realtime-call.png"))
        page.click("#call")
        page.wait_for_selector("#call:text-is('Start call')", timeout=5000)
        assert not page.problems, page.problems
    health = wait_health(server, lambda h: h["sessions"] == 0 and h["webrtc"]["peers"] == 0)
    assert health["sessions"] == 0 and health["webrtc"]["peers"] == 0, health


def test_the_memory_panel_shows_what_is_remembered_across_reloads_and_forgets_it(page, server):
    """The page's cookie names its user: what they asked to be remembered is there after a reload (a new
    connection), listed in the panel, and gone when they delete it."""
    page.wait_for_function("document.querySelector('#state').dataset.state === 'listening'", timeout=10000)
    page.fill("#text", "Remember that I collect antique typewriters.")
    page.click("#send")
    page.wait_for_selector(".msg.bot:has-text('antique typewriters')", timeout=60000)
    page.wait_for_function("document.querySelector('#state').dataset.state === 'listening'", timeout=60000)
    cookie = [c for c in page.context.cookies() if c["name"] == "vita_user"]
    assert cookie and cookie[0]["httpOnly"] and cookie[0]["secure"] and cookie[0]["sameSite"] == "Lax"
    page.reload()
    page.wait_for_function("document.querySelector('#state').dataset.state === 'listening'", timeout=10000)
    page.click("#memory-open")
    fact = page.wait_for_selector("#memory-facts li:has-text('I collect antique typewriters')", timeout=10000)
    assert page.inner_text("#memory-key").startswith("Your memory id")
    page.screenshot(path=str(ARTIFACTS / "page-memory.png"))
    fact.query_selector("button").click()
    page.wait_for_selector("#memory-facts li", state="detached", timeout=10000)
    assert page.is_visible("#memory-none")
    assert not page.problems, page.problems
