"""OpenAI's Realtime over WebRTC through the real server: the `openai` package's own ``realtime.calls.create``
posts an aiortc peer's offer; the question is spoken on the track and the reply heard on ours, with the Realtime
events (transcripts, output_audio_buffer.*) on the ``oai-events`` data channel; speech over the reply clears it;
hanging up frees the seat and the peer; a client key opens one call; a bad offer is refused readably."""

from __future__ import annotations

import json

import numpy as np
import pytest
import requests

from tests.harness.rtc import RealtimeCall
from tests.harness.server import wait_health, wait_no_sessions
from tests.harness.speech import silence, spoken

REPLY = 90


@pytest.fixture
def call(server):
    wait_no_sessions(server)
    peer = RealtimeCall(server.url).connect()
    yield peer
    peer.close()


def test_a_spoken_question_is_answered_on_the_track_with_its_events_on_the_data_channel(server, call):
    assert call.wait_type("session.created")[0]["session"]["type"] == "realtime"
    assert wait_health(server, lambda h: h["sessions"] == 1 and h["webrtc"]["peers"] == 1)
    call.say(np.concatenate([spoken("What is the capital of France?"), silence(2.0)]))
    heard = call.wait_type("conversation.item.input_audio_transcription.completed", timeout=30)[0]["transcript"]
    assert "capital" in heard.lower()
    started = call.wait_type("output_audio_buffer.started", timeout=REPLY)[0]
    assert call.wait(lambda: call.loud(), 10), "no reply audio on the track"
    done = call.wait_type("response.done", timeout=REPLY)[0]["response"]
    assert done["status"] == "completed" and started["response_id"] == done["id"]
    assert call.wait_type("response.output_audio_transcript.done")[0]["transcript"]
    assert not call.of("response.output_audio.delta")  # the audio went on the track, not the channel
    assert call.wait_type("output_audio_buffer.stopped", timeout=30)[0]["response_id"] == done["id"]


def test_speech_over_the_reply_clears_the_audio_buffer_and_the_sound_stops(call):
    call.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Tell me a long story about a dragon who learns to cook."}]}})
    call.send({"type": "response.create"})
    call.wait_type("output_audio_buffer.started", timeout=REPLY)
    assert call.wait(lambda: call.loud(), 10)
    # The user speaks once a second of the reply has played: until half a second of it has, the server cannot know
    # whether this client's microphone hears it back (a call's echo is its client's to cancel, or not), and only
    # speech within 4 dB of the reply's loudest moment, or over it, interrupts there.
    heard_from = call.loud()[0]
    assert call.wait(lambda: call.loud(after=heard_from + 1.0), 10)
    call.say(np.concatenate([spoken("Wait, stop please."), silence(1.5)]))
    call.wait_type("output_audio_buffer.cleared", timeout=20)
    cancelled = call.wait_type("response.done", timeout=20)[0]["response"]
    assert cancelled["status"] == "cancelled"
    cleared_at = next(t for t, e in call.events if e["type"] == "output_audio_buffer.cleared")
    # What was queued is never heard: the reply's speech ends within 0.3 s, by when its frames were sent (a starved
    # client decodes late what was sent in time).
    call.wait(lambda: bool(call.loud_sent(after=cleared_at + 0.3)), 1.5)  # speech sent after it, if any
    assert call.rtp_clock_problem() is None, call.rtp_clock_problem()
    reply = [run for run in call.speech_runs(gap_s=0.8) if run[0] < cleared_at][-1]
    assert reply[1] <= cleared_at + 0.3, (reply, cleared_at, call.sent_at[-80:])


def test_settings_sent_with_the_offer_apply_and_hanging_up_frees_the_seat_and_the_peer(server):
    wait_no_sessions(server)
    peer = RealtimeCall(server.url, session={"type": "realtime", "instructions": "Be brief."}).connect()
    assert peer.wait_type("session.created")[0]["session"]["instructions"] == "Be brief."  # (a multipart offer)
    assert wait_health(server, lambda h: h["sessions"] == 1 and h["webrtc"]["peers"] == 1)
    peer.close()
    assert wait_health(server, lambda h: h["sessions"] == 0 and h["webrtc"]["peers"] == 0)


def test_a_client_key_opens_one_call_with_its_settings(server):
    from openai import DefaultHttpxClient, OpenAI

    wait_no_sessions(server)
    backend = OpenAI(api_key="no-token", base_url=server.url + "/v1", http_client=DefaultHttpxClient(verify=False))
    key = backend.realtime.client_secrets.create(session={"type": "realtime", "instructions": "Answer in French."})
    peer = RealtimeCall(server.url, token=key.value).connect()
    try:
        assert peer.wait_type("session.created")[0]["session"]["instructions"] == "Answer in French."
    finally:
        peer.close()
    again = RealtimeCall(server.url, token=key.value)
    try:
        with pytest.raises(Exception, match="already been used"):
            again.connect()
    finally:
        again.close()


@pytest.mark.parametrize(("body", "kind", "code"), [
    ("v=0 but not an offer", "application/sdp", "invalid_offer"),
    ("", "application/sdp", "invalid_request"),
    ('{"sdp": "v=0"}', "application/json", "invalid_request"),
])
def test_a_bad_offer_is_refused_readably_and_takes_no_seat(server, body, kind, code):
    wait_no_sessions(server)
    answer = requests.post(server.url + "/v1/realtime/calls", data=body, headers={"Content-Type": kind},
                           verify=False, timeout=30)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == code, answer.text
    assert wait_health(server, lambda h: h["sessions"] == 0 and h["webrtc"]["peers"] == 0)


def test_push_to_talk_is_refused_on_a_call_naming_the_setting(server):
    """The microphone is on the track: a call cannot commit audio itself (the WebSocket can)."""
    session = json.dumps({"type": "realtime", "audio": {"input": {"turn_detection": None}}})
    form = {"sdp": (None, "v=0\r\n"), "session": (None, session)}
    answer = requests.post(server.url + "/v1/realtime/calls", files=form, verify=False, timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "session.audio.input.turn_detection"
