"""WebRTC audio through the real server: a Python aiortc peer signalled over the session's Socket.IO connection
speaks a question in Opus and hears the reply in Opus; speech over the reply silences it; a disconnect frees the
peer connection; a bad offer is refused with a readable reason and the session goes on over Socket.IO.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.harness.client import RecordingClient
from tests.harness.rtc import RtcAudio
from tests.harness.server import wait_health
from tests.harness.speech import silence, spoken


@pytest.fixture
def rtc(client):
    audio = RtcAudio(client).connect()
    yield audio
    audio.close()


def speaking(evs) -> bool:
    return any(n == "state" and d["state"] == "speaking" for _, n, d in evs)


def test_a_spoken_question_over_webrtc_is_answered_over_webrtc(client, rtc):
    rtc.say(np.concatenate([spoken("What is the capital of France?"), silence(2.0)]))
    assert client.wait_event("turn", 20), client.events
    assert client.wait_for(speaking, 60), client.events
    started = next(t for t, n, d in client.events if n == "state" and d["state"] == "speaking")
    assert rtc.wait(lambda: rtc.loud(after=started), 10), "no reply audio over WebRTC"  # decoded from Opus
    assert client.wait_event("response_text", 30)
    texts = " ".join(d["text"] for d in client.named("transcript")).lower()
    assert "capital" in texts and "france" in texts, texts
    assert "paris" in client.named("response_text")[-1]["text"].lower()
    assert not client.named("audio")  # the reply went over WebRTC only


def test_speech_over_a_reply_silences_it_at_once(client, rtc):
    interruption = np.concatenate([spoken("Wait, stop please."), silence(1.5)])
    client.sio.emit("text_input", {"text": "Tell me a long story about a dragon who learns to cook."})
    assert client.wait_for(speaking, 60), client.events
    rtc.say(interruption)
    assert client.wait_event("turn_cancelled", 10), client.events  # sent right after stop_tts
    stopped = next(t for t, n, _ in client.events if n == "stop_tts")
    assert {"turn_id": 1, "reason": "barge-in"} in client.named("turn_cancelled")
    assert rtc.loud(before=stopped), "the reply was not heard before the interruption"
    # What the server had queued is dropped: the reply's speech ends within 0.3 s of the stop. Frames count by when
    # they were sent (a loaded machine's client may decode late, in one burst, what was sent before the stop); the
    # interruption's own turn may be answered later, seconds after the reply's end: a stretch of its own.
    client.wait_for(lambda evs: any(n == "state" and d["state"] == "speaking" and t > stopped for t, n, d in evs),
                    1.5)
    assert rtc.rtp_clock_problem() is None, rtc.rtp_clock_problem()
    reply = [run for run in rtc.speech_runs(gap_s=0.8) if run[0] < stopped][-1]
    assert reply[1] <= stopped + 0.3, (reply, stopped, rtc.heard[-80:], rtc.sent_at[-80:])


def test_disconnect_frees_the_peer_connection(server):
    client = RecordingClient(server.url).connect()
    rtc = RtcAudio(client).connect()
    assert wait_health(server, lambda h: h["webrtc"]["peers"] == 1)["webrtc"]["peers"] == 1
    client.close()
    assert wait_health(server, lambda h: h["webrtc"]["peers"] == 0 and not h["sessions"])["webrtc"]["peers"] == 0
    rtc.close()


@pytest.mark.parametrize("offer", [None, "hello", {"type": "answer", "sdp": "v=0"}, {"type": "offer", "sdp": 5},
                                   {"type": "offer", "sdp": "v=0\r\nnot sdp at all"},
                                   {"type": "offer", "sdp": "v=0" + "x" * 30000}],
                         ids=["none", "string", "answer", "number", "garbage", "huge"])
def test_a_bad_offer_is_refused_readably_and_the_session_goes_on(client, offer):
    client.sio.emit("rtc_offer", offer)
    assert client.wait_event("rtc_failed", 10), client.events
    assert client.named("rtc_failed")[0]["message"]
    client.sio.emit("text_input", {"text": "Say hello."})
    assert client.wait_event("audio", 60), client.events  # no peer: the reply comes over Socket.IO as before


def test_offers_are_rate_limited(client):
    """Each offer binds UDP ports: a client cannot make the server do it in a loop."""
    client.sio.emit("rtc_offer", {"type": "offer", "sdp": "v=0\r\nnot sdp at all"})
    client.sio.emit("rtc_offer", {"type": "offer", "sdp": "v=0\r\nnot sdp at all"})
    assert client.wait_for(lambda evs: sum(n == "rtc_failed" for _, n, _ in evs) == 2, 10), client.events
    first, second = client.named("rtc_failed")
    assert "Too many" not in first["message"] and "Too many" in second["message"]


@pytest.mark.parametrize("candidate", [{"candidate": "candidate:garbage"}, {"candidate": 5},
                                       {"candidate": "candidate:1 1 udp 1 10.0.0.1 9 typ host",
                                        "sdpMLineIndex": "x"}, "hello",
                                       {"candidate": "candidate:1 1 udp 1 3f2c1a.local 9 typ host", "sdpMid": "0",
                                        "sdpMLineIndex": 0}],
                         ids=["garbage", "number", "bad-index", "string", "mdns"])
def test_a_bad_ice_candidate_is_reported_and_the_call_goes_on(client, rtc, candidate):
    client.sio.emit("rtc_candidate", candidate)
    assert client.wait_event("error", 10), client.events
    assert client.named("error")[0]["code"] == "bad_rtc_candidate"
    rtc.say(np.concatenate([spoken("What is the capital of France?"), silence(2.0)]))  # the call still works
    assert client.wait_event("turn", 20), client.events
