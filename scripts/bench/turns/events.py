"""A turn-taking trial's microphone and what its session's events say: the microphone held open while waiting, audio
streamed with the moments its marked samples were sent, and the turns the server committed, answered, ended and
transcribed."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from scripts.bench.measure import FRAME_MS, open_mic
from scripts.eval.scoring import digits, norm
from tests.harness.client import RecordingClient
from tests.harness.speech import RATE, stream

Events = list[tuple[float, str, object]]
STOP_WORDS = {"the", "and", "for", "you", "are", "was", "what", "how", "who", "why", "when", "where", "which", "this",
              "that", "with", "about", "please", "can", "could", "would", "should", "does", "did", "have", "has",
              "had", "its", "it's", "i'm", "what's", "tell", "like", "there", "some", "any", "him", "her", "she"}


def since(client: RecordingClient, t0: float, name: str | None = None) -> Events:
    with client.changed:
        return [(t, n, d) for t, n, d in client.events if t >= t0 and (name is None or n == name)]


def wait_open_mic(client: RecordingClient, predicate: Callable[[Events], bool], timeout: float) -> bool:
    """Wait for predicate(events) while the microphone stays open, as a page's does."""
    with open_mic(client, timeout + 1):
        return client.wait_for(predicate, timeout)


def play(client: RecordingClient, audio: np.ndarray, marks: dict[str, int]) -> dict[str, float]:
    """Stream `audio` like send_speech (tests.harness.speech.stream, 32 ms binary frames, real time); returns when the
    frame holding each marked sample index was sent."""
    step = RATE * FRAME_MS // 1000
    sent: dict[str, float] = {}

    def between(t: float) -> None:
        now, first = time.monotonic(), round(t * RATE)
        for name, k in marks.items():
            if name not in sent and k < first + step:
                sent[name] = now

    stream(client.sio, audio, chunk_ms=FRAME_MS, binary=True, between=between)
    return sent


def state_of(events: Events) -> str:
    states = [d.get("state") for _, n, d in events if n == "state" and isinstance(d, dict)]
    return states[-1] if states else "listening"


def turns(events: Events) -> list[int]:
    return [d["turn_id"] for _, n, d in events if n == "turn"]


def answered(events: Events) -> list[int]:
    """Turns that got reply audio (`state` speaking) and kept it, in order: a reply withdrawn because the user went
    on with the request (`turn_cancelled` "extended", within turn.extend_grace_ms of its first audio) is stopped
    and leaves no text on the page; the whole request is answered by a later turn."""
    withdrawn = {d.get("turn_id") for _, n, d in events if n == "turn_cancelled" and d.get("reason") == "extended"}
    ids: list[int] = []
    for _, n, d in events:
        if n == "state" and d.get("state") == "speaking" and d.get("turn_id") not in {*ids, *withdrawn}:
            ids.append(d.get("turn_id"))
    return ids


def over(events: Events, turn_id: int) -> bool:
    """The turn got reply audio, or ended without (other than withdrawn to be extended)."""
    return any(n == "state" and d.get("turn_id") == turn_id and (d.get("state") == "speaking" or (
        d.get("state") == "listening" and d.get("reason") != "extended")) for _, n, d in events)


def gave_up(name: str, data: object) -> bool:
    """The server ended a turn with no reply to come (unanswered, or cancelled by its watchdog)."""
    return name == "state" and isinstance(data, dict) and data.get("state") == "listening" and bool(
        data.get("reason")) and data.get("reason") != "extended"


def settled(events: Events) -> bool:
    """The user's speech has ended (the last `vad` says so) and the last turn it made was answered or ended."""
    vad = [d.get("speaking") for _, n, d in events if n == "vad"]
    ids = turns(events)
    return bool(vad) and not vad[-1] and bool(ids) and over(events, ids[-1])


def transcript(events: Events, turn_id: int) -> str | None:
    texts = [d.get("text", "") for _, n, d in events if n == "transcript" and d.get("turn_id") == turn_id]
    return texts[-1] if texts else None


def content_words(text: str, leave_out: str = "") -> list[str]:
    left = set(digits(norm(leave_out)).split())
    return [w for w in digits(norm(text)).split() if len(w) >= 3 and w not in STOP_WORDS and w not in left]


def mentions(text: str, words: list[str]) -> bool:
    heard = digits(norm(text))
    return any(f" {w.rstrip('s')}" in heard for w in words)


def ended_naturally_at(events: Events, turn_id: int) -> float | None:
    """When the reply's turn ended by itself (played out), if it did."""
    return next((t for t, n, d in events if n == "state" and d.get("turn_id") == turn_id
                 and d.get("state") == "listening" and not d.get("reason")), None)
