"""The rooms the benchmark builds (pure): beds of noise, babble and television under the user's voice, and the
speakerphone that plays the reply back into the microphone."""

from __future__ import annotations

import collections
import threading
import time

import numpy as np

RATE = 16000
REPLY_RATE = 24000  # the reply audio both doors send
CUT_MIN_S = 0.05  # a stop that drops less than this of the reply still to sound cuts nothing audible
USER_DB = -26.0  # the user's voice at the microphone while voiced (dBFS): every utterance is brought to it
ECHO_DB = 10.0  # the speaker's echo this much under the user's voice
RT60_S = 0.3
ECHO_DELAYS_S = (0.05, 0.15, 0.25, 0.10, 0.20)  # one per question, in turn
BARGE_AFTER_S = 1.2  # an interruption this long after the reply's first audio was received
STOPPED_WITHIN_S = 3.0  # a stop this soon after an interruption's onset is its doing...
EARLIEST_STOP_S = 0.25  # ...unless it came sooner than this (the echo's, or the room's)
QUESTION_CAP_S = 45.0  # the longest a question is waited on (an utterance the room holds open ends at 30 s)
SETTLE_CAP_S = 25.0  # the longest a question waits for the room to fall quiet (a reply answering its own echo)
SETTLE_S = 1.0  # quiet (nothing playing, no turn) before the next question


# --- building rooms (pure) -----------------------------------------------------------------------------------
def level_db(audio: np.ndarray) -> float:
    """dBFS of the audible part of `audio` (32 ms pieces over -50 dBFS): how loud a voice or a room is."""
    from tests.harness.speech import speech_level_db

    return speech_level_db(audio)


def at_level(audio: np.ndarray, db: float) -> np.ndarray:
    """`audio` scaled so that its audible level is `db` dBFS (int16)."""
    gain = 10 ** ((db - level_db(audio)) / 20)
    return np.clip(np.asarray(audio, np.float64) * gain, -32768, 32767).astype(np.int16)


def steady_noise(seconds: float, seed: int = 1, rate: int = RATE) -> np.ndarray:
    """A fan or a car, synthesized: pink noise (1/f power) rolled off above 1.5 kHz, with a 100 Hz blade hum and its
    harmonics. float32, unscaled."""
    n = int(seconds * rate)
    spectrum = np.fft.rfft(np.random.default_rng(seed).normal(0, 1, n))
    f = np.fft.rfftfreq(n, 1 / rate)
    spectrum *= 1 / np.sqrt(np.maximum(f, 20.0)) / (1 + (f / 1500) ** 2)
    bed = np.fft.irfft(spectrum, n)
    bed /= np.sqrt(np.mean(bed ** 2))
    t = np.arange(n) / rate
    hum = sum(0.3 / k * np.sin(2 * np.pi * 100 * k * t + k) for k in (1, 2, 3))
    return (bed + hum).astype(np.float32)


def music(seconds: float, rate: int = RATE) -> np.ndarray:
    """Synthesized music: a chord every 0.8 s (C, A minor, F, G), each note three harmonics with a decaying
    envelope, over a bass note. float32, unscaled."""
    chords = ((261.6, 329.6, 392.0), (220.0, 261.6, 329.6), (174.6, 220.0, 261.6), (196.0, 246.9, 293.7))
    beat = int(0.8 * rate)
    t = np.arange(beat) / rate
    envelope = np.exp(-t / 0.5) * np.minimum(1, t / 0.01)
    bars = []
    for notes in chords:
        bar = sum(np.sin(2 * np.pi * f * k * t) / k for f in notes for k in (1, 2, 3))
        bar = bar + 1.5 * np.sin(2 * np.pi * notes[0] / 2 * t)
        bars.append(bar * envelope)
    return np.resize(np.concatenate(bars), int(seconds * rate)).astype(np.float32)


def under_user(bed: np.ndarray, db: float) -> np.ndarray:
    """`bed` scaled so that its level is `db` under the user's voice (float64, to be mixed)."""
    bed = np.asarray(bed, np.float64)
    bed = bed * 3000 / max(1e-9, float(np.sqrt(np.mean(bed ** 2))))  # audible to level_db first, whatever its scale
    for _ in range(4):  # pieces that fall under level_db's floor once scaled down stop counting: again until stable
        bed = bed * 10 ** ((USER_DB - db - level_db(bed)) / 20)
    return bed


def room_impulse_response(rt60_s: float = RT60_S, seed: int = 2, rate: int = RATE) -> np.ndarray:
    """A synthetic room: exponentially decaying noise (60 dB down at `rt60_s`) after a direct path, scaled to unit
    energy, so that what goes through it comes out about as loud as it went in."""
    n = int(rt60_s * rate)
    t = np.arange(n) / rate
    h = np.random.default_rng(seed).normal(0, 1, n) * np.exp(-6.908 * t / rt60_s)
    h[0] = 4 * np.abs(h[:64]).max()  # the speaker's direct path, ahead of the reflections
    return (h / np.sqrt(np.sum(h ** 2))).astype(np.float32)


def echo_delay(i: int) -> float:
    return ECHO_DELAYS_S[i % len(ECHO_DELAYS_S)]


def build_bed(room: str, seconds: float = 40.0) -> np.ndarray | None:
    """The room's sound without the user and without the echo (int16 at RATE, looped by the microphone)."""
    from tests.harness.speech import babble

    if room in ("quiet", "speaker", "doubletalk"):
        return None
    if room == "noise10":
        bed = under_user(steady_noise(seconds), 10)
    elif room.startswith("babble") and room[6:].isdigit():
        bed = under_user(babble(seconds), int(room[6:]))
    elif room == "babble_noise10":
        bed = under_user(babble(seconds), 13) + under_user(steady_noise(seconds), 13)
    elif room == "tv10":
        talker = babble(seconds, talkers=1)
        both = music(seconds) * 10 ** ((level_db(talker) - level_db(music(seconds))) / 20) + talker
        bed = under_user(both, 10)
    else:
        raise SystemExit(f"unknown room {room!r}: {', '.join(ROOMS)}")
    return np.clip(bed, -32768, 32767).astype(np.int16)


ROOMS = ("quiet", "noise10", "babble20", "babble10", "babble5", "babble_noise10", "tv10", "speaker", "doubletalk")
ECHO_ROOMS = ("speaker", "doubletalk")


class Speaker:
    """The client's loudspeaker and the room between it and its microphone. `play` a reply chunk when it arrives
    (it sounds after the one before, as VITA's page plays them), `stop` drops what is still to sound; `echo(a, b)`
    is what the microphone hears of it at its samples a..b, on the microphone's clock (sample 0 at `t0`)."""

    def __init__(self, t0: float, gain: float, rir: np.ndarray, delay_s: float = 0.1):
        self.t0, self.gain, self.rir, self.delay_s = t0, gain, rir, delay_s
        self.segments: list[tuple[int, np.ndarray]] = []  # (first sample, 16 kHz float32), in order
        self.end_t = 0.0  # when what is queued has sounded
        self.lock = threading.Lock()
        self.energy, self.voiced = 0.0, 0  # what came out of it, for the level report
        self.cuts: list[float] = []  # when a stop dropped reply audio still to sound (a stop with none cuts nothing)
        self.silent_at: dict[float, float] = {}  # each stop's time -> when the reply had stopped sounding by then

    def play(self, pcm24: bytes, at: float) -> None:
        import soxr

        samples = np.frombuffer(pcm24, np.int16).astype(np.float32)
        if not samples.size:
            return
        with self.lock:
            start = max(at, self.end_t)
            self.end_t = start + samples.size / REPLY_RATE
            self.segments.append((round((start - self.t0) * RATE), soxr.resample(samples, REPLY_RATE, RATE)))

    def stop(self, at: float) -> None:
        cut = round((at - self.t0) * RATE)
        with self.lock:
            if self.end_t > at + CUT_MIN_S:
                self.cuts.append(at)
            self.end_t = min(self.end_t, at)
            self.silent_at[at] = self.end_t  # (earlier than the stop where the server held the reply meanwhile)
            kept = []
            for first, samples in self.segments:
                if first < cut:
                    kept.append((first, samples[:cut - first]))
            self.segments = kept

    def playing(self, now: float) -> bool:
        return now < self.end_t + self.delay_s + len(self.rir) / RATE

    def echo(self, a: int, b: int) -> np.ndarray:
        """The echo at microphone samples a..b: what sounded delay_s earlier, through the room, at `gain`."""
        from scipy.signal import fftconvolve

        d, taps = round(self.delay_s * RATE), len(self.rir)
        lo, hi = a - d - taps + 1, b - d  # the dry samples that reach a..b
        dry = np.zeros(hi - lo, np.float32)
        with self.lock:
            self.segments = [(f, s) for f, s in self.segments if f + len(s) > lo - RATE]
            for first, samples in self.segments:
                s, e = max(first, lo), min(first + len(samples), hi)
                if s < e:
                    dry[s - lo:e - lo] += samples[s - first:e - first]
        if not dry.any():
            return np.zeros(b - a, np.float32)
        wet = fftconvolve(dry, self.rir)[taps - 1:taps - 1 + b - a] * self.gain
        power = float(np.mean(wet ** 2))
        if power > (32768 * 10 ** (-50 / 20)) ** 2:
            self.energy += power * (b - a)
            self.voiced += b - a
        return wet.astype(np.float32)

    def level_db(self) -> float | None:
        return round(10 * np.log10(self.energy / self.voiced / 32768 ** 2), 1) if self.voiced else None


def speaker_gain(reply_db: float) -> float:
    """The gain that brings a reply of `reply_db` to ECHO_DB under the user (the room keeps its energy)."""
    return 10 ** ((USER_DB - ECHO_DB - reply_db) / 20)


# --- the microphone ----------------------------------------------------------------------------------------------
class RoomMicrophone:
    """Always open: the room's bed (looped), the speaker's echo and what `say` is given, mixed at the microphone and
    sent at real-time pace through `send` in `chunk_ms` pieces."""

    def __init__(self, send, chunk_ms: int, bed: np.ndarray | None, speaker: Speaker | None):
        from tests.harness.speech import RealTime

        self.send, self.step = send, RATE * chunk_ms // 1000
        self.bed, self.speaker = bed, speaker
        self.queue: collections.deque = collections.deque()
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.clock = RealTime()
        if speaker is not None:
            speaker.t0 = self.clock.started
        self.thread = threading.Thread(target=self._run, name="room-mic", daemon=True)
        self.thread.start()

    def say(self, speech: np.ndarray):
        from tests.harness.speech import Said

        loud = np.flatnonzero(np.abs(speech.astype(np.int32)) > 800)
        said = Said(speech, int(loud[0]), int(loud[-1]))
        with self.lock:
            self.queue.append(said)
        return said

    def _run(self) -> None:
        k, current, pos = 0, None, 0
        while not self.stop.is_set():
            a = k * self.step
            chunk = np.zeros(self.step, np.float32)
            if self.bed is not None:
                offset = a % (len(self.bed) - self.step)
                chunk += self.bed[offset:offset + self.step]
            if self.speaker is not None:
                chunk += self.speaker.echo(a, a + self.step)
            if current is None:
                with self.lock:
                    current, pos = (self.queue.popleft(), 0) if self.queue else (None, 0)
            if current is not None:
                piece = current.speech[pos:pos + self.step]
                chunk[:len(piece)] += piece
            try:
                self.send(np.clip(chunk, -32768, 32767).astype(np.int16))
            except Exception:  # the connection is gone: what was to be said fails
                if current is not None:
                    current.failed = True
                    current.done.set()
                return
            if current is not None:
                sent = time.monotonic()
                if pos <= current.first_voiced < pos + self.step:
                    current.onset_sent = sent
                if pos <= current.last_voiced < pos + self.step:
                    current.end_sent = sent
                    current.voiced_end.set()
                pos += self.step
                if pos >= len(current.speech):
                    current.done.set()
                    current = None
            k += 1
            self.clock.wait(k * self.step)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
