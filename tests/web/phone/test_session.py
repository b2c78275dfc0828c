"""A call's channel, its pure part: the reply goes out in whole 20 ms frames in the reply's law (Telnyx takes no
shorter media), a barge-in clears what is queued, and each reply ends with a mark that says whether it was cut.
Over a fake stream and front: no model, no server."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

import numpy as np
import pytest

from vita.client_events import ReplyAudio, StateChanged, StopSpeaking
from vita.web.phone.session import FRAME, PhoneSession
from vita.web.phone.wire import CallStarted, Telnyx

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


class Stream:
    def __init__(self):
        self.sent: list[dict] = []

    def send(self, text: str) -> None:
        self.sent.append(json.loads(text))

    def close(self) -> None:
        pass


def call() -> tuple[PhoneSession, Stream]:
    stream = Stream()
    session = PhoneSession(SimpleNamespace(), stream, {}, Telnyx, lambda _call: True, {})
    session.provider = Telnyx("stream-1")
    session.call = CallStarted("stream-1", "v3:call", "alaw", "ulaw")  # (an A-law call, played back in PCMU)
    return session, stream


def reply(session: PhoneSession, turn: int, sizes: list[int]) -> None:
    session.tell(StateChanged("speaking", turn))
    rng = np.random.default_rng(turn)
    for size in sizes:
        session.tell(ReplyAudio(rng.integers(-8000, 8000, size).astype(np.int16).tobytes()))


def test_the_reply_goes_out_in_whole_20_ms_frames_and_ends_with_its_mark():
    session, stream = call()
    reply(session, 3, [4800, 4800, 2400, 337])  # 200 ms chunks, then the pacer's odd remainder
    session.tell(StateChanged("listening", 3))
    media = [m for m in stream.sent if m["event"] == "media"]
    sizes = [len(base64.b64decode(m["media"]["payload"])) for m in media]
    assert all(size % FRAME == 0 and size > 0 for size in sizes), sizes
    assert abs(sum(sizes) - (4800 + 4800 + 2400 + 337) / 3) < FRAME  # all of it, at 8 kHz, padded once
    assert stream.sent[-1] == {"event": "mark", "mark": {"name": "reply-3"}}


def test_a_barge_in_clears_the_phone_and_its_reply_is_marked_cut_short():
    session, stream = call()
    reply(session, 5, [4800, 1000])
    session.tell(StopSpeaking())
    session.tell(StateChanged("listening", 5))
    events = [m["event"] for m in stream.sent]
    assert "clear" in events and events[-1] == "mark"
    assert stream.sent[-1]["mark"]["name"] == "reply-5-cut-short"
    after_clear = stream.sent[events.index("clear") + 1:-1]
    assert after_clear == []  # what was held back of the cut reply is never sent
