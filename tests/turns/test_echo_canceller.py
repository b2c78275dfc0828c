"""The server's echo canceller (vita/turns/echo_canceller.py): what was played and what the microphone heard reach
WebRTC's audio processing module in step, whatever the network's jitter (fast, with a recording stand-in for the
module); and the real module on real speech (slow: Piper and hibari voices)."""

from __future__ import annotations

import numpy as np
import pytest

from vita.turns.echo_canceller import FRAME, RATE, RESYNC_S, EchoCanceller, MicClock, PlayedAudio

T0 = 1000.0


class Recorder:
    """Stands in for the audio processing module: keeps each far and near frame it is handed, in order."""

    def __init__(self) -> None:
        self.far: list[np.ndarray] = []
        self.near: list[np.ndarray] = []

    def process_reverse_stream(self, frame) -> None:
        assert frame.samples_per_channel == FRAME and frame.sample_rate == RATE
        assert len(self.far) == len(self.near)  # one far frame before each near one
        self.far.append(np.frombuffer(frame.data, np.int16).copy())

    def set_stream_delay_ms(self, ms: int) -> None:
        pass

    def process_stream(self, frame) -> None:
        assert frame.samples_per_channel == FRAME
        self.near.append(np.frombuffer(frame.data, np.int16).copy())


def clicks(n: int, at: list[int]) -> np.ndarray:
    out = np.zeros(n, np.int16)
    out[at] = 10000
    return out


def first_loud(frames: list[np.ndarray], since: int = 0) -> int:
    return next(k for k in range(since, len(frames)) if np.abs(frames[k]).max() > 5000)


@pytest.mark.fast
def test_played_pieces_lie_where_they_play_back_to_back_and_read_once():
    played = PlayedAudio()
    played.add(np.full(1600, 1, np.int16), T0)  # 0.1 s from T0
    played.add(np.full(1600, 2, np.int16), T0 + 0.05)  # handed early (a WebRTC track): it plays after the first
    played.add(np.full(800, 3, np.int16), T0 + 0.3)  # after a pause
    got = played.take(round(T0 * RATE) - 160, 4800 + 160)
    assert got[:160].tolist() == [0] * 160  # nothing played before T0
    assert set(got[160:1760]) == {1} and set(got[1760:3360]) == {2}
    assert set(got[3360:4960]) == {0}  # the pause is silence
    assert set(played.take(round((T0 + 0.3) * RATE), 800)) == {3}
    assert played.samples.size == 0  # read, then dropped


@pytest.mark.fast
def test_a_stopped_reply_leaves_nothing_queued_after_the_stop():
    played = PlayedAudio()
    played.add(np.full(16000, 7, np.int16), T0)
    played.cut(T0 + 0.25)
    got = played.take(round(T0 * RATE), 16000)
    assert set(got[:4000]) == {7} and set(got[4000:]) == {0}


@pytest.mark.fast
def test_the_microphones_position_follows_its_samples_not_each_messages_jitter():
    clock = MicClock()
    rng = np.random.default_rng(0)
    firsts = []
    for k in range(200):  # 20 ms messages, each 20-40 ms late
        firsts.append(clock.place(320, T0 + (k + 1) * 0.02 + 0.02 + rng.uniform(0, 0.02)))
    steps = np.diff(firsts)
    assert (steps == 320).sum() >= 195  # in step with the samples (moved at most a few times early on)
    # ...at the least delayed arrival, within what it lets drift before it moves
    assert 0 <= firsts[-1] - round((T0 + 199 * 0.02 + 0.02) * RATE) <= RESYNC_S * RATE


@pytest.mark.fast
def test_after_a_gap_in_the_microphones_audio_its_position_catches_up():
    clock = MicClock()
    for k in range(100):
        clock.place(320, T0 + (k + 1) * 0.02)
    later = T0 + 2.0 + 1.0  # the client sent nothing for a second
    firsts = [clock.place(320, later + (k + 1) * 0.02) for k in range(150)]
    assert abs(firsts[-1] - round((later + 149 * 0.02) * RATE)) <= RESYNC_S * RATE


def run_clicks(jitter_s: float) -> tuple[Recorder, list[int]]:
    """A click played every 0.5 s, heard back 0.1 s later; the microphone's 20 ms messages arrive 20 ms plus up to
    `jitter_s` after their last sample. The lag, in 10 ms frames,
    from each click handed as played to the same click heard."""
    recorder = Recorder()
    canceller = EchoCanceller(apm=recorder)
    rng = np.random.default_rng(3)
    seconds, delay = 6.0, 0.1
    played_at = [int((0.5 + 0.5 * k) * RATE) for k in range(10)]
    played = clicks(int(seconds * RATE), played_at)
    mic = clicks(int(seconds * RATE), [i + int(delay * RATE) for i in played_at])
    canceller.played(played.tobytes(), RATE, T0)  # all queued at once, as a WebRTC track may be
    for i in range(0, mic.size, 320):
        canceller.clean(mic[i:i + 320], T0 + (i + 320) / RATE + 0.02 + rng.uniform(0, jitter_s))
    lags, far_from, near_from = [], 0, 0
    while True:
        try:
            far_from = first_loud(recorder.far, far_from)
            near_from = first_loud(recorder.near, near_from)
        except StopIteration:
            return recorder, lags
        lags.append(near_from - far_from)
        far_from, near_from = far_from + 1, near_from + 1


@pytest.mark.fast
def test_each_click_reaches_the_canceller_after_what_was_played_by_the_same_delay_whatever_the_jitter():
    recorder, lags = run_clicks(jitter_s=0.03)
    assert len(lags) == 10
    assert len(recorder.far) == len(recorder.near) == 6 * 100  # every 10 ms of audio, with its far frame
    assert all(lag > 0 for lag in lags)  # the echo comes after its reference, as the canceller needs
    assert max(lags) - min(lags) <= 1  # ...by a steady delay (the 30 ms jitter does not move it)
    assert 9 <= lags[-1] <= 13  # 0.1 s of air, 0.02 s of network


@pytest.mark.fast
def test_microphone_audio_comes_out_in_whole_frames_and_none_is_lost():
    recorder = Recorder()
    canceller = EchoCanceller(apm=recorder)
    audio = np.arange(1000, dtype=np.int16)
    out = [canceller.clean(audio[i:i + 128], T0 + (i + 128) / RATE) for i in range(0, 1000, 128)]  # VITA's 8 ms
    assert [o.size % FRAME for o in out] == [0] * len(out)
    joined = np.concatenate(out)
    assert joined.tolist() == list(range(joined.size)) and canceller.held.size == 1000 - joined.size
    assert canceller.samples_for(512) == 640 - canceller.held.size  # the VAD's next step: four frames out
