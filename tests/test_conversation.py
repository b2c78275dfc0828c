"""Whole conversations through the real server: speech in, the reply heard back (its audio transcribed by
Whisper), history across turns, reset, VITA's reply-after-generation mode, and /metrics moving with real turns.
"""

from __future__ import annotations

import functools
import re
import time

import numpy as np
import pytest
import soxr

from tests.harness.client import RecordingClient
from tests.harness.speech import RATE, silence, spoken, stream
from tests.workers.llm.test_llm_worker import LONG_REPLY
from vita.config import Config

REPLY_RATE = 24000


@functools.cache
def whisper():
    from faster_whisper import WhisperModel

    return WhisperModel(str(Config().models_path() / "whisper-base"), device="cpu", compute_type="int8",
                        cpu_threads=2)


def hear(pcm: bytes) -> str:
    """What Whisper hears in the reply audio (24 kHz int16)."""
    audio = soxr.resample(np.frombuffer(pcm, dtype=np.int16), REPLY_RATE, RATE).astype(np.float32) / 32768
    segments, _ = whisper().transcribe(audio, language="en", beam_size=1)
    return " ".join(s.text for s in segments)


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z']+", text.lower()) if len(w) > 2}


def turn_done(client: RecordingClient, turn_id: int, timeout: float = 90) -> bool:
    """The turn's reply has been played out (the server says `listening` for it, without a reason)."""
    return client.wait_for(lambda evs: any(n == "state" and d == {"state": "listening", "turn_id": turn_id}
                                           for _, n, d in evs), timeout)


def of_turn(client: RecordingClient, event: str, turn_id: int) -> list[dict]:
    return [d for d in client.named(event) if isinstance(d, dict) and d.get("turn_id") == turn_id]


def llm_timings(client: RecordingClient, turn_id: int) -> dict:
    """The LLM worker's timings of the turn, sent when its generation ended (other stages' come earlier)."""
    def of_llm() -> list[dict]:
        return [d for d in of_turn(client, "timings", turn_id) if d["stage"] == "llm"]
    assert client.wait_for(lambda evs: of_llm(), 30), of_turn(client, "timings", turn_id)
    return of_llm()[0]


def ask_aloud(client: RecordingClient, question: str, binary: bool) -> None:
    audio = np.concatenate([silence(0.8), spoken(question), silence(1.2)])
    stream(client.sio, audio, chunk_ms=32 if binary else 8, binary=binary)


def check_full_loop(client: RecordingClient, turn_id: int, topic: str) -> None:
    """In order: transcript, streamed reply text, then reply audio that says the reply text."""
    assert turn_done(client, turn_id), client.events
    names = [n for _, n, d in client.events
             if n == "audio" or (isinstance(d, dict) and d.get("turn_id") == turn_id)]
    assert names.index("transcript") < names.index("reply_delta") < names.index("audio"), names
    assert topic in of_turn(client, "transcript", turn_id)[0]["text"].lower()
    reply = of_turn(client, "response_text", turn_id)[0]["text"]
    streamed = "".join(d["text"] for d in of_turn(client, "reply_delta", turn_id))
    assert reply and streamed.strip() == reply
    pcm = b"".join(client.named("audio"))
    assert len(pcm) / 2 / REPLY_RATE >= 0.5
    heard, said = words(hear(pcm)), words(reply)
    assert len(heard & said) >= max(1, len(said) // 2), (heard, said)


def test_vita_protocol_full_loop(client):
    ask_aloud(client, "What is the capital of France?", binary=False)  # VITA's 8 ms JSON messages
    check_full_loop(client, 1, "capital")


def test_our_protocol_full_loop_history_and_reset(client):
    ask_aloud(client, "What is the capital of France?", binary=True)
    check_full_loop(client, 1, "capital")
    first = llm_timings(client, 1)
    assert first["context_turns"] == 0

    client.sio.emit("text_input", {"text": "And what about Germany?"})
    assert turn_done(client, 2)
    second = llm_timings(client, 2)
    assert second["context_turns"] == 1  # the first exchange is in the prompt
    # How much of a prompt the shared prefix cache held would tell one user how another's conversation began.
    assert "cached_tokens" not in first and "cached_tokens" not in second
    assert second["prompt_tokens"] > first["prompt_tokens"]

    client.sio.emit("reset_state")
    assert client.wait_event("history_cleared", 5)
    client.sio.emit("text_input", {"text": "And what about Germany?"})
    assert turn_done(client, 3)
    third = llm_timings(client, 3)
    assert third["context_turns"] == 0
    assert third["prompt_tokens"] < second["prompt_tokens"]


def test_full_reply_mode_speaks_only_after_generation(client):
    # A question the bundled model answers in several clauses (see test_llm_worker.LONG_REPLY).
    # The LLM's timings come when generation ends: neither reply need be played out.
    story = {"text": LONG_REPLY}
    client.sio.emit("text_input", story)
    streamed = llm_timings(client, 1)
    client.sio.emit("reply_mode", {"mode": "full"})
    assert client.wait_event("reply_mode", 5)
    client.sio.emit("reset_state")
    client.sio.emit("text_input", story)
    full = llm_timings(client, 2)
    # Streaming hands the first clause to TTS long before generation ends; VITA's way hands over the whole
    # reply at the end.
    assert streamed["first_piece_s"] < streamed["generate_s"] - 0.3, streamed
    assert full["first_piece_s"] >= full["generate_s"] - 0.05, full
    assert client.wait_for(lambda evs: of_turn(client, "response_text", 2), 30), client.events[-8:]
    assert of_turn(client, "response_text", 2)[0]["text"]


def test_bad_reply_mode_is_refused(client):
    client.sio.emit("reply_mode", {"mode": "fast"})
    assert client.wait_for(lambda evs: any(n == "error" and d["code"] == "bad_reply_mode" for _, n, d in evs), 5)


def test_an_interruption_gets_its_own_answer(client):
    interruption = np.concatenate([spoken("What is the capital of France?"), silence(1.2)])  # Piper takes time
    client.sio.emit("text_input", {"text": "Tell me a long story about a dragon who learns to cook."})
    assert client.wait_for(lambda evs: any(n == "state" and d["state"] == "speaking" for _, n, d in evs), 60)
    stream(client.sio, interruption, chunk_ms=32, binary=True)
    assert client.wait_event("stop_tts", 5)
    assert turn_done(client, 2)
    assert "capital" in of_turn(client, "transcript", 2)[0]["text"].lower()
    assert of_turn(client, "response_text", 2)[0]["text"]
    assert client.named("turn_cancelled")[0] == {"turn_id": 1, "reason": "barge-in"}


def metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" ([0-9.e+-]+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def wait_metrics(server, predicate, timeout: float = 5.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = server.get("/metrics").text
        if predicate(text) or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def test_metrics_move_with_real_turns(server, client):
    before = server.get("/metrics").text
    ask_aloud(client, "What is the capital of France?", binary=True)
    assert turn_done(client, 1)
    # The dispatcher counts a completed turn just after the client hears of it.
    after = wait_metrics(server, lambda text: metric(text, "vita_turns_completed_total")
                         > metric(before, "vita_turns_completed_total"))
    assert metric(after, "vita_turns_started_total", source="speech") == \
        metric(before, "vita_turns_started_total", source="speech") + 1
    assert metric(after, "vita_turns_completed_total") == metric(before, "vita_turns_completed_total") + 1
    for stage in ("end_of_speech", "asr", "first_token", "first_piece", "tts_first_chunk", "first_audio",
                  "voice_to_voice"):
        assert metric(after, "vita_stage_seconds_count", stage=stage) == \
            metric(before, "vita_stage_seconds_count", stage=stage) + 1, stage
        assert metric(after, "vita_stage_seconds_bucket", le="+Inf", stage=stage) > 0
    audio_s = metric(after, "vita_audio_received_seconds_total") - metric(before, "vita_audio_received_seconds_total")
    assert audio_s == pytest.approx(0.8 + len(spoken("What is the capital of France?")) / RATE + 1.2, abs=0.1)
    messages = metric(after, "vita_audio_handler_seconds_count") - metric(before, "vita_audio_handler_seconds_count")
    assert messages >= audio_s / 0.032 - 1
    assert metric(after, "vita_vad_lag_seconds_count") > metric(before, "vita_vad_lag_seconds_count")
    assert metric(after, "vita_sessions") >= 1
    assert 'vita_queue_depth{queue="requests"}' in after
    client.sio.emit("reply_mode", {"mode": "nonsense"})
    assert client.wait_event("error", 5)
    assert metric(wait_metrics(server, lambda text: 'code="bad_reply_mode"' in text), "vita_errors_total",
                  code="bad_reply_mode") >= 1


def test_an_unwritable_turn_log_is_one_clear_error_and_turns_go_on(server, client):
    health = server.get("/health").json()["turn_log"]
    assert health["ok"] is False and "not-a-folder" in health["error"]
    client.sio.emit("text_input", {"text": "Hello, how are you today?"})
    assert turn_done(client, 1)
    assert of_turn(client, "response_text", 1)[0]["text"]
    lines = [line for line in server.log().splitlines() if "turn log disabled" in line]
    assert len(lines) == 1 and "ERROR" in lines[0], lines
