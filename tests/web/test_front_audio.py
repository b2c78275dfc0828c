"""The front process over a real WSS socket: live audio in both formats → VAD → turns, barge-in, camera frames,
and isolation between sessions. Real Silero VAD, real workers behind it.
"""

from __future__ import annotations

import base64
import time

import cv2
import numpy as np
import pytest
import requests

from tests.harness.client import RecordingClient
from tests.harness.server import wait_no_sessions
from tests.harness.speech import RATE, noise, silence, spoken, stream, voiced_span
from tests.test_conversation import metric

QUESTION = "What is the capital of France?"
LEAD_S = 1.0  # silence before the speech in every stream


def turns(client: RecordingClient) -> list[dict]:
    return client.named("turn")


def jpeg_data_url(shade: int) -> str:
    image = np.full((96, 160, 3), shade, dtype=np.uint8)
    cv2.putText(image, str(shade), (10, 60), cv2.FONT_HERSHEY_SIMPLEX, 1.5, (255, 255, 255), 2)
    ok, jpeg = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 70])
    assert ok
    return "data:image/jpeg;base64," + base64.b64encode(jpeg.tobytes()).decode()


def unheard(url: str) -> float:
    """Seconds of audio the handler took that the VAD has not: a shared server's earlier sessions leave some for
    good (an overrun, a session closed with audio still queued), so tests compare with their start."""
    text = requests.get(url + "/metrics", verify=False, timeout=5).text
    return metric(text, "vita_audio_received_seconds_total") - metric(text, "vita_vad_audio_seconds_total")


@pytest.fixture
def client(client):
    """The shared server's recording client, with what its VAD had left unheard before this test."""
    client.unheard_before = unheard(client.url)
    return client


def heard_everything(client: RecordingClient, timeout: float = 10) -> None:
    """Barrier instead of a sleep: every audio message handled so far went through its VAD step (the two
    /metrics counters are as far apart as when the test began), and every event that caused has reached the
    client (an echo sent after them)."""
    deadline = time.monotonic() + timeout
    while (behind := unheard(client.url) - client.unheard_before) > 1e-6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert behind <= 1e-6, f"{behind:.3f} s of audio still not through the VAD after {timeout} s"
    echoes = len(client.named("reply_mode"))
    client.sio.emit("reply_mode", {"mode": "stream"})
    assert client.wait_for(lambda evs: sum(n == "reply_mode" for _, n, _ in evs) > echoes, 5)


def check_turn_covers_speech(turn: dict, speech: np.ndarray, lead_s: float = LEAD_S) -> None:
    first, last = voiced_span(speech)
    truth_start, truth_end = lead_s + first, lead_s + last
    assert turn["source"] == "speech"
    assert turn["start_s"] <= truth_start + 0.05 and truth_start - turn["start_s"] < 0.3 + 0.032, turn
    assert abs(turn["speech_end_s"] - truth_end) < 0.3, turn
    assert turn["end_s"] >= truth_end, turn  # the audio handed on holds all of the speech


def test_vita_json_audio_makes_exactly_one_turn_covering_the_speech(client):
    speech = spoken(QUESTION)
    stream(client.sio, np.concatenate([silence(LEAD_S), speech, silence(1.5)]))  # VITA: JSON, 8 ms
    assert client.wait_event("turn", 2)
    heard_everything(client)
    assert len(turns(client)) == 1, turns(client)
    check_turn_covers_speech(turns(client)[0], speech)
    # The utterance really reached the LLM worker: its transcript comes back to this session.
    assert client.wait_event("transcript", 30)
    assert "capital" in client.named("transcript")[0]["text"].lower()


def test_binary_audio_at_48khz_is_resampled_and_makes_one_turn(client):
    client.sio.emit("audio_format", {"sample_rate": 48000})
    assert client.wait_event("audio_format", 5)
    speech = spoken(QUESTION, 48000)
    audio = np.concatenate([silence(LEAD_S, 48000), speech, silence(1.5, 48000)])
    stream(client.sio, audio, rate=48000, chunk_ms=20, binary=True)
    assert client.wait_event("turn", 2)
    heard_everything(client)
    assert len(turns(client)) == 1, turns(client)
    check_turn_covers_speech(turns(client)[0], spoken(QUESTION))


def test_binary_audio_at_16khz_in_40ms_frames(client):
    speech = spoken("Hello there.")
    stream(client.sio, np.concatenate([silence(LEAD_S), speech, silence(1.0)]), chunk_ms=40, binary=True)
    assert client.wait_event("turn", 2)
    heard_everything(client)
    assert len(turns(client)) == 1
    check_turn_covers_speech(turns(client)[0], speech)


def test_two_utterances_seconds_apart_make_two_turns(client):
    """The second utterance begins after the first one's reply was heard, so it is a turn of its own (speech before
    that, or within turn.extend_grace_ms of the reply's first audio, joins the first request instead). The
    barrier is the first reply ending, not a fixed gap: how soon a reply starts depends on the CPU."""
    a, b = spoken("Good morning."), spoken("How are you today?")
    stream(client.sio, np.concatenate([silence(0.5), a, silence(1.0)]), chunk_ms=32, binary=True)
    assert client.wait_event("turn", 2)
    first_id = turns(client)[0]["turn_id"]
    assert client.wait_for(lambda evs: any(n == "state" and d.get("state") == "listening"
                                           and d.get("turn_id") == first_id for _, n, d in evs), 60), client.events
    stream(client.sio, np.concatenate([silence(0.5), b, silence(1.0)]), chunk_ms=32, binary=True)
    assert client.wait_for(lambda evs: sum(n == "turn" for _, n, _ in evs) >= 2, 2)
    heard_everything(client)
    got = turns(client)
    assert len(got) == 2 and got[0]["turn_id"] < got[1]["turn_id"]  # (a pause inside may use an id speculatively)
    assert got[0]["end_s"] < got[1]["start_s"]


def test_silence_and_noise_make_no_turn(client):
    stream(client.sio, np.concatenate([silence(1.0), noise(2.5), silence(1.0)]), chunk_ms=32, binary=True)
    heard_everything(client)
    assert not turns(client)
    assert not client.named("vad")


def test_short_yes_is_kept(client):
    # VITA dropped everything under 1 s, losing one-word answers.
    yes = spoken("Yes.")
    assert len(yes) / RATE < 1.0
    stream(client.sio, np.concatenate([silence(LEAD_S), yes, silence(1.0)]), chunk_ms=32, binary=True)
    assert client.wait_event("turn", 2)


def test_speech_during_a_reply_interrupts_it(client):
    interruption = np.concatenate([spoken("Wait, tell me about dogs instead."), silence(1.0)])  # made before: Piper
    client.sio.emit("text_input", {"text": "Tell me a long story about a dragon who learns to cook."})
    assert client.wait_for(lambda evs: any(n == "state" and d["state"] == "speaking" for _, n, d in evs), 60), \
        client.events
    barge_at = time.monotonic()
    stream(client.sio, interruption, chunk_ms=32, binary=True)
    assert client.wait_event("turn_cancelled", 2)
    cancelled = client.named("turn_cancelled")[0]
    assert cancelled == {"turn_id": 1, "reason": "barge-in"}
    stop_at = next(t for t, n, _ in client.events if n == "stop_tts")
    assert stop_at > barge_at
    assert stop_at - barge_at < 1.0  # the onset is confirmed 250 ms into the speech
    states = [d for _, n, d in client.events if n == "state"]
    assert {"state": "listening", "turn_id": 1, "reason": "barge-in"} in states
    # The interruption itself becomes the next turn, and nothing more of turn 1 is sent.
    # (turn 1's own "turn" event is there already: wait for the interruption's)
    assert client.wait_for(lambda evs: any(n == "turn" and d["turn_id"] > 1 for _, n, d in evs), 3), client.story()
    assert turns(client)[-1]["turn_id"] > 1  # ids increase; a pause in it may have used one speculatively
    after = [(n, d) for t, n, d in client.events if t > stop_at]
    late = [(n, d) for n, d in after if n in {"reply_delta", "response_text", "timings", "audio"}
            and (n == "audio" or d.get("turn_id") == 1)]
    spoke_again = [i for i, (n, d) in enumerate(after) if n == "state" and d["state"] == "speaking"]
    late_audio = [n for n, _ in (after[:spoke_again[0]] if spoke_again else after) if n == "audio"]
    assert not late_audio and not [x for x in late if x[0] != "audio"], late


def speaking_a_long_reply(client: RecordingClient) -> None:
    client.sio.emit("text_input", {"text": "Tell me a long story about a dragon who learns to cook."})
    assert client.wait_for(lambda evs: any(n == "state" and d["state"] == "speaking" for _, n, d in evs), 60), \
        client.events


def test_a_one_word_stop_over_the_reply_stops_it(client):
    """"Stop." is voiced as briefly as "Mm-hmm.": its words, heard by the ASR at its pause, stop the reply."""
    stop = np.concatenate([spoken("Stop."), silence(2.0)])
    assert voiced_span(stop)[1] - voiced_span(stop)[0] < 0.65  # shorter than what interrupts by duration alone
    speaking_a_long_reply(client)
    stream(client.sio, stop, chunk_ms=32, binary=True)
    assert client.wait_event("turn_cancelled", 5), client.events
    assert client.named("turn_cancelled")[0] == {"turn_id": 1, "reason": "barge-in"}
    assert client.named("duck") and client.named("stop_tts")
    assert client.wait_for(lambda evs: any(n == "vad" and d == {"speaking": False} for _, n, d in evs), 5)
    heard_everything(client)
    assert [d["turn_id"] for d in turns(client)] == [1]  # "Stop." asked for nothing more: no turn of its own


def test_a_backchannel_over_the_reply_is_heard_and_lets_it_go_on(client):
    speaking_a_long_reply(client)
    stream(client.sio, np.concatenate([spoken("Okay."), silence(0.3)]), chunk_ms=32, binary=True)
    assert client.wait_event("unduck", 5), client.events  # heard, and not a command: full volume again
    heard_everything(client)
    assert not client.named("turn_cancelled") and not client.named("stop_tts")


def audio_after(client: RecordingClient, start: float, end: float = float("inf")) -> list[tuple[float, np.ndarray]]:
    return [(t, np.frombuffer(d, "<i2")) for t, n, d in list(client.events) if n == "audio" and start <= t < end]


def test_reply_audio_goes_out_just_ahead_of_playback(client):
    """Socket.IO clients are sent a reply no further ahead of their playback than tts.lead_ms, in short pieces:
    what they have not been sent can still be ducked or dropped (VITA's page knows only stop_tts)."""
    speaking_a_long_reply(client)
    assert client.wait_for(lambda evs: any(n == "state" and d["state"] == "listening" for _, n, d in evs), 60)
    chunks = audio_after(client, 0.0)
    first = chunks[0][0]
    received = 0.0
    for arrived, pcm in chunks:
        assert len(pcm) <= 0.1 * 24000  # tts.pace_chunk_ms
        received += len(pcm) / 24000
        # what the client holds unplayed, had it played from its first chunk on: at most the lead (0.25 s),
        # with 0.1 s for the socket and this machine's scheduling
        assert received - (arrived - first) <= 0.25 + 0.1, (arrived - first, received)
    assert received > 2.0  # a long reply, so the pacing was tested over several seconds


def test_the_server_ducks_a_reply_for_clients_that_cannot(client):
    """From the onset of speech over the reply until it is known to be a backchannel, what is sent is at a fifth
    of its volume; then at full volume again."""
    speaking_a_long_reply(client)
    # A backchannel over the reply, again if the reply had nothing to send while it was ducked (its next piece still
    # being synthesized on a loaded machine): the duck is seen on audio sent in the window. Each backchannel's
    # utterance is closed (its silence heard out) before the next: two running on would add up to a barge-in.
    ducked: list[int] = []
    for _attempt in range(3):
        sent = time.monotonic()
        stream(client.sio, np.concatenate([spoken("Okay."), silence(0.3)]), chunk_ms=32, binary=True)
        assert client.wait_for(lambda evs, s=sent: any(n == "unduck" and t > s for t, n, _ in evs), 5), client.story()
        duck_at = next(t for t, n, _ in client.events if n == "duck" and t > sent)
        unduck_at = next(t for t, n, _ in client.events if n == "unduck" and t > duck_at)
        # what was sent before the duck (at most the lead, 0.25 s, plus the socket's time) may still arrive loud
        ducked = [int(np.abs(pcm).max()) for _, pcm in audio_after(client, duck_at + 0.3, unduck_at)]
        over = any(n == "state" and d["state"] == "listening" and t > sent for t, n, d in client.events)
        if ducked or over or client.named("turn_cancelled"):
            break
        stream(client.sio, silence(1.7), chunk_ms=32, binary=True)
        assert client.wait_for(lambda evs, s=sent: any(n == "vad" and d == {"speaking": False} and t > s
                                                       for t, n, d in evs), 5), client.story()
    assert not client.named("turn_cancelled"), client.story()  # backchannels: the reply went on
    first_duck = next(t for t, n, _ in client.events if n == "duck")
    before = [int(np.abs(pcm).max()) for _, pcm in audio_after(client, 0.0, first_duck)]
    assert ducked, "no audio arrived while the reply was ducked, three times"
    assert max(ducked) <= 0.3 * max(before), (ducked, max(before))
    assert client.wait_for(lambda evs: any(n == "state" and d["state"] == "listening" for _, n, d in evs), 60)
    loud_again = [int(np.abs(pcm).max()) for _, pcm in audio_after(client, unduck_at + 0.3)]
    assert max(loud_again, default=0) > 0.3 * max(before)


def test_camera_frames_join_the_turn_and_a_corrupt_frame_is_reported(client):
    sent: list[float] = []

    def frames(t: float) -> None:  # 2 fps, like VITA's page
        if not sent or t - sent[-1] >= 0.5:
            sent.append(t)
            client.sio.emit("video_frame", jpeg_data_url(40 + 10 * len(sent)))

    client.sio.emit("video_frame", "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8not a jpeg").decode())
    assert client.wait_for(lambda evs: any(n == "error" and d["code"] == "bad_frame" for _, n, d in evs), 5)
    speech = spoken(QUESTION)
    stream(client.sio, np.concatenate([silence(LEAD_S), speech, silence(1.0)]), chunk_ms=32, binary=True,
           between=frames)
    assert client.wait_event("turn", 2)
    turn = turns(client)[0]
    assert 1 <= turn["frames"] <= 4, turn
    check_turn_covers_speech(turn, speech)


def test_bad_audio_is_reported_and_the_session_goes_on(client):
    client.sio.emit("audio", b"\x01\x02\x03")  # half a sample
    client.sio.emit("audio", '{"sample_rate": 16000, "audio": [1, 2, 999]}')
    client.sio.emit("audio", "not json")
    assert client.wait_for(lambda evs: any(n == "error" and d["code"] == "bad_audio" for _, n, d in evs), 5)
    speech = spoken("Hello there.")
    stream(client.sio, np.concatenate([silence(LEAD_S), speech, silence(1.0)]), chunk_ms=32, binary=True)
    assert client.wait_event("turn", 2)


def test_two_sessions_never_see_each_others_messages(server):
    import threading

    wait_no_sessions(server)
    a, b = RecordingClient(server.url).connect(), RecordingClient(server.url).connect()
    try:
        words = {a: "What is the capital of France?", b: "Please tell me a joke about cats."}
        threads = [threading.Thread(target=stream, args=(c.sio, np.concatenate([silence(0.5), spoken(w),
                                                                                silence(1.0)])),
                                    kwargs={"chunk_ms": 32, "binary": True}) for c, w in words.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for c in (a, b):
            assert c.wait_event("transcript", 30)
            assert c.wait_event("response_text", 60)
        assert "capital" in a.named("transcript")[0]["text"].lower()
        assert "cat" in b.named("transcript")[0]["text"].lower()
        assert "cat" not in a.named("transcript")[0]["text"].lower()
        assert "capital" not in b.named("transcript")[0]["text"].lower()
        for c in (a, b):
            assert len(turns(c)) == 1 and turns(c)[0]["turn_id"] == 1
    finally:
        a.close()
        b.close()


def test_audio_faster_than_real_time_is_refused_and_the_session_goes_on(client):
    """A client sending ten seconds of audio at once (whatever its transport, the VAD runs in real time) gets
    `audio_overrun` for what is over its budget; its real-time speech afterwards is heard as ever."""
    frame = np.zeros(16000, np.int16).astype("<i2").tobytes()  # 1 s in one message
    for _ in range(10):
        client.sio.emit("audio", frame)
    assert client.wait_for(lambda evs: any(n == "error" and d["code"] == "audio_overrun" for _, n, d in evs), 5)
    # The budget refills at 1.5 s of audio a second: a real-time stream right after the flood is never refused.
    speech = spoken("Hello there.")
    stream(client.sio, np.concatenate([silence(LEAD_S), speech, silence(1.0)]), chunk_ms=32, binary=True)
    assert client.wait_event("turn", 2)


def test_typed_messages_faster_than_a_person_types_are_refused(client):
    """Each typed message starts a turn (a prompt to prefill, longer the longer it is) and cancels the one before:
    a flood of them used to keep the shared LLM worker busy for every session. Two long pastes in a row pass."""
    long = "Please summarise this: " + "words " * 300  # a paste of ~1800 characters
    for _ in range(6):
        client.sio.emit("text_input", {"text": long})
    assert client.wait_for(lambda evs: any(n == "error" and d["code"] == "rate_limited" for _, n, d in evs), 5)
    assert len([1 for _, n, _ in client.events if n == "text_queued" or n == "turn"]) <= 3
