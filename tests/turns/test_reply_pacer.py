from __future__ import annotations

import numpy as np
import pytest

from vita.turns.reply_pacer import DUCK_GAIN, Fate, ReplyPacer

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

RATE = 24000


def send(_turn_id: int) -> Fate:
    return Fate.SEND


def pcm(seconds: float, level: int = 10000) -> bytes:
    return np.full(int(seconds * RATE), level, dtype="<i2").tobytes()


def test_audio_goes_out_at_most_the_lead_ahead_of_playback():
    pacer = ReplyPacer(lead_s=0.25, chunk_s=0.1)
    pacer.push(1, pcm(1.0), RATE)
    first = pacer.take(0.0, send)
    assert [round(c.seconds, 3) for c in first] == [0.1, 0.1]  # a third would put the client 0.3 s ahead
    assert pacer.wake_in(0.0, send) == pytest.approx(0.05)
    assert pacer.take(0.04, send) == []
    assert len(pacer.take(0.05, send)) == 1
    sent = 0.3
    now = 0.05
    while pacer.queue:  # driven by its own wake-ups, the client never holds more than the lead
        now += pacer.wake_in(now, send)
        for chunk in pacer.take(now, send):
            sent += chunk.seconds
            assert pacer.played_until - now <= 0.25 + 1e-9
    assert sent == pytest.approx(1.0)
    assert pacer.played_until == pytest.approx(1.0)  # played back to back: no gap


def test_first_chunk_goes_at_once_and_a_reply_end_right_after_its_audio():
    pacer = ReplyPacer(lead_s=0.25, chunk_s=0.1)
    pacer.push(3, pcm(0.1), RATE)
    pacer.push(3, b"", RATE, last=True)
    out = pacer.take(10.0, send)
    assert [(c.turn_id, len(c.pcm) > 0, c.last) for c in out] == [(3, True, False), (3, False, True)]
    assert pacer.wake_in(10.0, send) is None


def test_a_duck_reaches_what_has_not_been_sent_and_an_unduck_restores_it():
    pacer = ReplyPacer(lead_s=0.2, chunk_s=0.1)
    pacer.push(1, pcm(0.6), RATE)
    loud = pacer.take(0.0, send)
    pacer.duck(True)
    ducked = pacer.take(0.1, send)
    pacer.duck(False)
    restored = pacer.take(0.2, send)
    peak = [int(np.abs(np.frombuffer(c.pcm, "<i2")).max()) for c in (*loud, *ducked, *restored)]
    assert peak == [10000, 10000, int(10000 * DUCK_GAIN), 10000]


def test_stop_drops_everything_unsent_and_resets_the_volume():
    pacer = ReplyPacer(lead_s=0.2, chunk_s=0.1)
    pacer.push(1, pcm(1.0), RATE, last=True)
    pacer.take(0.0, send)
    pacer.duck(True)
    pacer.clear()
    assert pacer.take(0.5, send) == [] and pacer.wake_in(0.5, send) is None and not pacer.queue
    pacer.push(2, pcm(0.1), RATE)
    (chunk,) = pacer.take(0.6, send)
    assert chunk.turn_id == 2 and int(np.frombuffer(chunk.pcm, "<i2").max()) == 10000


def test_without_a_lead_everything_goes_as_it_comes():
    pacer = ReplyPacer(lead_s=float("inf"), chunk_s=3600.0)
    pacer.push(1, pcm(2.0), RATE)
    pacer.push(1, pcm(2.0), RATE, last=True)
    out = pacer.take(0.0, send)
    assert [c.seconds for c in out] == [2.0, 2.0] and out[-1].last


def test_a_held_turn_waits_in_the_queue_and_an_ended_one_takes_no_time():
    pacer = ReplyPacer(lead_s=0.25, chunk_s=0.1)
    pacer.push(1, pcm(0.3), RATE)
    pacer.push(2, pcm(0.2), RATE, last=True)
    fates = {1: Fate.HOLD, 2: Fate.SEND}
    assert pacer.take(0.0, fates.get) == [] and pacer.wake_in(0.0, fates.get) is None  # held: no timer to spin
    fates[1] = Fate.DROP  # withdrawn while held: its audio never goes, and the next reply does not wait for it
    out = pacer.take(0.0, fates.get)
    assert [c.turn_id for c in out] == [2, 2] and out[-1].last
    assert pacer.played_until == pytest.approx(0.2)


def test_a_reply_that_began_here_is_known_to_have_begun_here_even_once_drained():
    pacer = ReplyPacer(lead_s=0.25, chunk_s=0.1)
    assert not pacer.began(3)
    pacer.push(3, pcm(0.1), RATE)
    pacer.take(0.0, send)
    assert pacer.began(3) and not pacer.began(4)  # (a WebRTC peer connecting now does not split the reply)


def test_each_chunk_says_when_the_client_starts_playing_it():
    """What the client plays, and when, is what its echo is judged by (vita/hearing/voice_gate.py)."""
    pacer = ReplyPacer(lead_s=0.25, chunk_s=0.1)
    pacer.push(1, pcm(0.3), RATE)
    first = pacer.take(5.0, send)
    assert [round(c.at, 3) for c in first] == [5.0, 5.1]  # back to back from the first one's arrival
    assert [round(c.at, 3) for c in pacer.take(5.05, send)] == [5.2]
