"""The server's echo canceller (vita/hearing/echo_canceller.py): what was played and what the microphone heard reach
WebRTC's audio processing module in step, whatever the network's jitter (fast, with a recording stand-in for the
module); and the real module on real speech (slow: Piper and hibari voices)."""

from __future__ import annotations

import numpy as np
import pytest

from vita.hearing.echo_canceller import FRAME, RATE, RESYNC_S, EchoCanceller, EchoDetector, MicClock, PlayedAudio

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


def bursts(seconds: float, seed: int) -> np.ndarray:
    """Noise switched on and off at random, 50-300 ms at a time (speech's rhythm, not its sound)."""
    rng = np.random.default_rng(seed)
    out, on = [], True
    while sum(p.size for p in out) < seconds * RATE:
        n = int(rng.uniform(0.05, 0.3) * RATE)
        out.append(rng.normal(0, 3000 if on else 0, n))
        on = not on
    return np.concatenate(out)[:int(seconds * RATE)].astype(np.int16)


def detected_after(played: np.ndarray, mic: np.ndarray) -> float | None:
    """Seconds of frames until the detector says the microphone hears what was played (None: never)."""
    detector = EchoDetector()
    for i in range(0, mic.size - FRAME + 1, FRAME):
        detector.add(played[i:i + FRAME], mic[i:i + FRAME])
        if detector.heard:
            return (i + FRAME) / RATE
    return None


@pytest.mark.fast
def test_a_microphone_that_hears_the_speaker_is_found_within_a_second_of_playback():
    played = bursts(4.0, 0)
    hiss = np.random.default_rng(9).normal(0, 30, played.size)
    for delay_s, db in [(0.05, -10), (0.3, -10), (0.15, -25)]:
        echo = np.concatenate([np.zeros(int(delay_s * RATE)), played * 10 ** (db / 20)])[:played.size]
        after = detected_after(played, (echo + hiss).astype(np.int16))
        assert after is not None and after <= 1.5


@pytest.mark.fast
def test_a_microphone_that_does_not_hear_the_speaker_is_not_taken_for_one():
    """A client that cancels its own echo, or has headphones: the canceller's output, which AEC3 would cut by
    10-13 dB over the reply for its first ~10 s, is not used; the user talking over the reply does not change
    that."""
    played = bursts(8.0, 0)
    hiss = np.random.default_rng(9).normal(0, 30, played.size)
    assert detected_after(played, hiss.astype(np.int16)) is None
    assert detected_after(played, np.zeros(played.size, np.int16)) is None  # (a muted line)
    assert detected_after(played, (bursts(8.0, 1) + hiss).astype(np.int16)) is None  # the user alone


@pytest.mark.fast
def test_where_the_echos_delay_moves_the_module_is_handed_what_was_played_at_the_delay_it_first_found():
    """The client's playback moved 0.2 s later (or 0.1 s sooner) between two replies: AEC3 is handed what was played
    that much earlier (or later), so the echo reaches it as late after its reference as before the move. Sooner than
    a reply is sent ahead of its playing (0.2 s, over READ_AHEAD_S): AEC3 is left to find it, and that delay is
    kept."""
    for first_s, then_s, lead_s in [(0.1, 0.3, 0.2), (0.3, 0.2, -0.1), (0.3, 0.1, 0.0)]:
        recorder = Recorder()
        canceller = EchoCanceller(apm=recorder)
        played = bursts(8.0, 0)
        move = 4 * RATE
        mic = np.zeros(played.size)
        for lo, hi, delay_s in [(0, move, first_s), (move, played.size, then_s)]:
            at = lo + int(delay_s * RATE)
            mic[at:hi + int(delay_s * RATE)] = played[lo:hi][:max(0, played.size - at)] * 0.3
        mic = mic.astype(np.int16)
        canceller.played(played.tobytes(), RATE, T0)
        for i in range(0, mic.size, 320):
            canceller.clean(mic[i:i + 320], T0 + (i + 320) / RATE + 0.02)
        far, near = np.concatenate(recorder.far), np.concatenate(recorder.near)
        before, after = slice(2 * RATE, 4 * RATE), slice(6 * RATE, 8 * RATE)
        assert abs(echo_lag(far[before], near[before]) - int((first_s + 0.02) * RATE)) <= FRAME
        assert abs(echo_lag(far[after], near[after]) - int((then_s - lead_s + 0.02) * RATE)) <= FRAME
        assert canceller.lead == pytest.approx(lead_s * RATE, abs=FRAME)


def echo_lag(far: np.ndarray, near: np.ndarray) -> int:
    """Samples `near` comes after `far` (their cross-correlation's peak, up to 0.5 s)."""
    n = far.size + near.size
    spectrum = np.fft.rfft(near.astype(np.float64), n) * np.conj(np.fft.rfft(far.astype(np.float64), n))
    correlation = np.fft.irfft(spectrum, n)
    return int(np.argmax(correlation[:RATE // 2]))


# --- the real audio processing module on real speech (loads Piper, hibari and Silero: not in the fast lane) ------

REPLY = ("The capital of France is Paris. It is a lovely city in spring, with wide avenues and old cafes.",
         "Would you like to hear more about its museums and its history?")
USER_AT_S = 4.0


@pytest.fixture(scope="module")
def voices() -> tuple[np.ndarray, np.ndarray]:
    """(the reply in the Piper voice the server speaks with, the user in hibari's natural voice), 16 kHz."""
    from scripts.eval.voices import synthesize
    from tests.harness.speech import spoken

    return np.concatenate([np.asarray(spoken(line)) for line in REPLY]), synthesize("hibari", "No, wait. "
                                                                                     "Tell me about Berlin instead.")


def speakerphone_call(voices, delay_s: float, user: bool):
    from tests.harness.speakerphone import Call, Speakerphone
    from tests.harness.speech import under

    reply, words = voices
    seconds = 0.5 + reply.size / RATE + 0.5
    near = np.zeros(int(seconds * RATE))
    if user:  # 6 dB under the reply as played: 4 dB over its echo
        voice = under(words.astype(np.float32), reply, 6.0).astype(np.float64)
        near[int(USER_AT_S * RATE):int(USER_AT_S * RATE) + voice.size] = voice
    return Call(reply, near.astype(np.int16), seconds, Speakerphone(delay_s=delay_s, echo_db=-10.0, rt60_s=0.3))


@pytest.mark.parametrize("delay_s", [0.05, 0.25])
def test_the_echo_of_a_spoken_reply_is_cut_by_15_db_and_the_user_over_it_is_kept(voices, delay_s):
    """A speakerphone: the reply comes back 50-250 ms later, 10 dB down, through a room; the user says something
    over it. Once the canceller has had the reply's first two seconds, the echo is at least 15 dB down; the user's
    words over it lose at most 6 dB."""
    from tests.harness.speakerphone import level_db

    alone = speakerphone_call(voices, delay_s, user=False)
    canceller = EchoCanceller()
    out = alone.run(canceller.played, canceller.clean)
    _, mic = alone.timeline()
    settled = slice(int(2.5 * RATE), out.size)
    assert level_db(mic[settled]) - level_db(out[settled]) >= 15

    talk = speakerphone_call(voices, delay_s, user=True)
    canceller = EchoCanceller()
    out = talk.run(canceller.played, canceller.clean)
    said = slice(int(USER_AT_S * RATE), int(USER_AT_S * RATE) + voices[1].size)
    assert level_db(out[said]) - level_db(talk.near[said]) >= -6


@pytest.mark.parametrize(("first_s", "then_s"), [(0.05, 0.25), (0.15, 0.05)])
def test_where_the_echos_delay_moves_between_replies_the_next_replys_echo_is_cut_within_a_second(voices, first_s,
                                                                                                then_s):
    """The same reply twice, the second time heard back 0.2 s later (or 0.1 s sooner) than the first: from a second
    into the second reply's echo it is cut by 15 dB (where AEC3 was left to search for the moved delay by itself, by
    0-12 dB for the next 2.5 s)."""
    from tests.harness.speakerphone import level_db, replied_twice

    call, second_at = replied_twice(voices[0], first_s, then_s, 3.0)
    canceller = EchoCanceller()
    out = call.run(canceller.played, canceller.clean)
    _, mic = call.timeline()
    settled = slice(int((second_at + then_s + 1.0) * RATE), int((second_at + 3.0) * RATE))
    assert level_db(mic[settled]) - level_db(out[settled]) >= 15


def ears_on_a_call(voices, cancel: bool, user: bool) -> list[tuple[float, str]]:
    """A session's ears (Silero, the voice gate with what was played, the canceller) on a speakerphone call,
    guarded as while a reply plays: what they heard, when (seconds into the call)."""
    from vita.config import Config
    from vita.hearing.silero import SileroModel
    from vita.hearing.vad import VadSegmenter
    from vita.hearing.voice_gate import EchoReference
    from vita.turns.listener import SpeechListener

    config = Config()
    reference = EchoReference()
    segmenter = VadSegmenter.from_config(config.vad, SileroModel(config.vad_model_path()), config.turn,
                                         echo=reference)
    segmenter.guarded = True
    listener = SpeechListener(segmenter, EchoCanceller() if cancel else None)
    call = speakerphone_call(voices, 0.15, user)
    heard = []

    def played(pcm: bytes, rate: int, at: float) -> None:
        reference.play(pcm, rate, at)
        if listener.canceller is not None:
            listener.canceller.played(pcm, rate, at)

    def hear(pcm: np.ndarray, arrived: float) -> np.ndarray:
        heard.extend((arrived - call.t0, type(e).__name__) for e in listener.hear(pcm, RATE, arrived, arrived))
        return pcm

    call.run(played, hear)
    return heard


def test_with_the_canceller_the_replys_echo_starts_nothing_and_the_user_over_it_interrupts(voices):
    assert not [k for _, k in ears_on_a_call(voices, cancel=True, user=False) if k == "SpeechStarted"]
    heard = ears_on_a_call(voices, cancel=True, user=True)
    confirmed = [t for t, k in heard if k == "SpeechConfirmed"]
    # Barge-in, on the user's words (measured: 1.9 s into them, against 0.6-1.0 s without the canceller, where the
    # echo alone also started speech before the user spoke)
    assert confirmed and USER_AT_S < confirmed[0] < USER_AT_S + voices[1].size / RATE + 0.5
    assert not [t for t, k in heard if k == "SpeechStarted" and t < USER_AT_S]


def test_a_client_whose_microphone_does_not_hear_its_speaker_keeps_the_users_words_over_the_reply(voices):
    """A client that cancels its own echo: AEC3 alone would cut the user over the reply by 10-13 dB (it assumes an
    echo until it has played ~10 s without finding one); the canceller passes the microphone's audio on."""
    from tests.harness.speakerphone import Call, Speakerphone, level_db

    plain = speakerphone_call(voices, 0.15, user=True)
    call = Call(plain.reply, plain.near, plain.seconds, Speakerphone(delay_s=0.15, echo_db=-200.0))
    canceller = EchoCanceller()
    out = call.run(canceller.played, canceller.clean)
    said = slice(int(USER_AT_S * RATE), int(USER_AT_S * RATE) + voices[1].size)
    assert not canceller.detector.heard
    assert level_db(out[said]) - level_db(call.near[said]) >= -1


class Switching:
    """A canceller whose output turns to the module's at its first message (the echo was just heard)."""

    held_s = 0.0
    cancelling = False

    def clean(self, pcm: np.ndarray, arrived: float) -> np.ndarray:
        self.cancelling = True
        return pcm

    def samples_for(self, wanted: int) -> int:
        return wanted


@pytest.mark.fast
def test_once_the_echo_is_taken_out_what_the_voice_gate_learnt_of_it_is_learnt_again():
    """The voice gate learnt the echo's level (and took it for the room's loud end) from the microphone before the
    canceller's output was used: kept, it would ask the user over the reply to stand over the uncancelled echo until
    it aged out, 4 s on."""
    from tests.turns.test_turn_control import SilentProbe
    from vita.config import Config
    from vita.hearing.vad import VadSegmenter
    from vita.hearing.voice_gate import EchoReference
    from vita.turns.listener import SpeechListener

    config, echo = Config(), EchoReference()
    listener = SpeechListener(VadSegmenter.from_config(config.vad, SilentProbe(), config.turn, echo=echo),
                              Switching())
    gate = listener.segmenter.gate
    echo.coupling.extend([-10.0] * 40)
    gate.room.extend([-30.0] * 40)  # the echo, taken for the room's loud end
    gate._room_loud = -30.0
    listener.hear(np.zeros(512, np.int16), RATE, T0, T0)
    assert not echo.coupling and gate.needed(None) < -30.0
