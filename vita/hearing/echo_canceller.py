"""Server-side echo cancellation (and optional noise suppression) for a client that does not cancel its own echo.

A Realtime client on a laptop, a kiosk or a phone line plays the reply through a speaker, and its microphone hears
it again 50-250 ms later, about 10 dB down, smeared by the room. The voice gate (``vita/hearing/voice_gate.py``)
then only asks the user to be louder than that echo; this module takes the echo out of the microphone audio itself,
before Silero and before the audio kept for Whisper, with WebRTC's audio processing module (AEC3, from the
``livekit`` wheel): it is given what the client played and finds the echo path (delay and room) by itself.

What it needs is the played audio on the same clock as the microphone's. The server knows when each piece of the
reply starts playing at the client (the reply pacer's clock, on ``time.monotonic``) and when each piece of the
microphone's audio arrived; both are put on one 16 kHz grid of that clock (``PlayedAudio``, ``MicClock``) and each
10 ms of microphone audio goes to the canceller with the 10 ms that was playing when it arrived. The echo then
always comes after its reference, by the acoustic path and the network (AEC3 finds delays up to ~0.4 s). The
microphone's grid position advances with its samples, not with each message's arrival, so network jitter does not
move the reference; it is set again only when the arrivals say the stream drifted (a gap, a clock skew).

One per session, on the session's thread (``played`` and ``clean`` are both called there): no locks.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import soxr

RATE = 16000
FRAME = 160  # the audio processing module takes exactly 10 ms at a time
MAX_HELD_S = 30.0  # played audio kept ahead of the microphone at most (a client sent a long reply ahead of time)
CLOCK_WINDOW_S = 2.0  # the microphone's grid position: the earliest arrival over this long (least network delay)...
RESYNC_S = 0.03  # ...and it is moved only when that drifts this far from where the samples' count put it
DELAY_HINT_MS = 0  # AEC3 estimates the delay itself; the hint it is required to get
# Whether the client's microphone hears its speaker at all. AEC3 assumes it does until its filter finds the echo or,
# after ~10 s of playback without one, it turns transparent: until then a client that cancels its own echo (or has
# headphones) would have the user's words over the reply cut by 10-13 dB, and barge-in lost. So its output is used
# only once the microphone's audio has been seen to be a copy of what was played: their phase-transform
# cross-correlation (GCC-PHAT, sharp in a reverberant room) has a peak at some lag up to MAX_LAG_S that stands far
# above its level elsewhere, twice running. Until then the microphone's own audio goes on (the voice gate's echo
# guard stands).
DETECT_EVERY = 25  # frames between looks (0.25 s)...
DETECT_S = 1.0  # ...each at the last second of the microphone
MAX_LAG_S = 0.4  # the echo comes up to this long after what was played
ACTIVE_DBFS = -50.0  # a played frame this loud is playing...
MIN_ACTIVE_SHARE = 0.3  # ...and a look needs this share of the last second's frames playing
ECHO_PEAK = 12.0  # a correlation peak this many standard deviations over the rest, in two looks running: the
# echo is heard (an echo 10 dB down through a room: 17-37; two unrelated voices: 4-11, once)
# Once heard, the looks go on while the reply plays: where the echo's delay moves (a client that buffers each
# response anew, a device changed), AEC3 is handed what was played that much earlier or later, so that it sees the
# echo at the delay its filter was fitted to (where the echo was first found). The filter then serves at once, where
# a moved delay has it search again for a second or more: when a user talks over the reply, the cut of a half-fitted
# filter garbles their words for Whisper, and the echo it leaves is heard as speech.
AGREE_S = 0.002  # two looks running find the echo at lags this close: it is where they say...
REALIGN_S = 0.03  # ...and it is realigned when it moves further than this (less, AEC3 follows by itself: a look's
# peak may flit between nearby lags, and realigning at each would unsettle its filter)
READ_AHEAD_S = 0.12  # an echo that comes sooner is handed what is queued to play that much later at most: a paced
# reply is sent 0.15-0.25 s ahead of its playing (the default tts.lead_ms less a tts.pace_chunk_ms), and the
# microphone's clock may be 0.03 s off (RESYNC_S); sooner than that, AEC3 is left to find the echo where it now
# comes, and that is the delay it is fitted to from then on. (A reply's first piece is handed over as it starts
# playing: after a sooner move, AEC3 has no reference for the first READ_AHEAD_S of each reply's echo.)


def _grid(at: float) -> int:
    """Where monotonic time `at` falls on the 16 kHz grid."""
    return round(at * RATE)


class PlayedAudio:
    """What the client plays, at 16 kHz, laid on the grid where it starts playing; read in time order as the
    microphone's audio from the same moments goes to the canceller (and, for an echo's delay that moved, a little
    behind or ahead of it)."""

    def __init__(self) -> None:
        self.start = 0  # grid index of samples[0]
        self.samples = np.zeros(0, np.int16)

    @property
    def end(self) -> int:
        return self.start + self.samples.size

    def add(self, pcm: np.ndarray, at: float) -> None:
        """`pcm` (int16, 16 kHz) starts playing at `at`, or after what is queued before it (the client plays its
        pieces back to back: a WebRTC track is handed a piece when it is made, and plays it after the rest)."""
        index = _grid(at)
        if self.samples.size:
            index = max(index, self.end)
            gap = np.zeros(index - self.end, np.int16)
            self.samples = np.concatenate([self.samples, gap, pcm])
        else:
            self.start, self.samples = index, np.asarray(pcm, np.int16)
        excess = self.samples.size - int(MAX_HELD_S * RATE)
        if excess > 0:
            self.start, self.samples = self.start + excess, self.samples[excess:]

    def at(self, index: int, n: int) -> np.ndarray:
        """The `n` samples playing from grid `index` on (silence where nothing plays, or where it was dropped)."""
        out = np.zeros(n, np.int16)
        lo, hi = max(index, self.start), min(index + n, self.end)
        if hi > lo:
            out[lo - index:hi - index] = self.samples[lo - self.start:hi - self.start]
        return out

    def take(self, index: int, n: int, keep: int = 0) -> np.ndarray:
        """The `n` samples playing from grid `index` on; what comes `keep` samples before their end is dropped."""
        out = self.at(index, n)
        until = index + n - keep
        drop = min(max(0, until - self.start), self.samples.size)
        self.start, self.samples = self.start + drop, self.samples[drop:]
        if not self.samples.size:
            self.start = max(self.start, until)
        return out

    def cut(self, at: float) -> None:
        """Nothing queued to play from `at` on will play (the reply was stopped)."""
        keep = max(0, _grid(at) - self.start)
        self.samples = self.samples[:keep]


class MicClock:
    """Where each microphone sample falls on the grid. The samples are counted, so the position moves with the
    audio, not with each message's arrival (network jitter would shift the echo's reference back and forth); the
    offset is the earliest arrival over the last CLOCK_WINDOW_S (the least delayed message), and it is taken again
    only when it drifts RESYNC_S from the one in use (the client paused its audio, a clock skew)."""

    def __init__(self) -> None:
        self.count = 0  # samples placed so far
        self.offset: int | None = None  # grid index of sample 0, as in use
        self.arrivals: deque[tuple[float, int]] = deque()  # (arrived, offset it implies), over the window

    def place(self, n: int, arrived: float) -> int:
        """`n` samples whose last arrived at `arrived`: the grid index of their first."""
        self.count += n
        implied = _grid(arrived) - self.count
        while self.arrivals and self.arrivals[-1][1] >= implied:  # (a later message that came sooner outdoes it)
            self.arrivals.pop()
        self.arrivals.append((arrived, implied))
        while self.arrivals[0][0] < arrived - CLOCK_WINDOW_S:
            self.arrivals.popleft()
        best = self.arrivals[0][1]
        if self.offset is None or abs(best - self.offset) > RESYNC_S * RATE:
            self.offset = best
        return self.offset + self.count - n


class EchoDetector:
    """Whether the microphone hears what was played (see DETECT_EVERY above), and how long after it the echo comes
    (`lag`, samples, once two looks running agree). Once heard, it stays heard (a speakerphone stays one), and it
    goes on looking for the lag."""

    def __init__(self, keep_looking: bool = True) -> None:
        self.keep_looking = keep_looking  # (False: once heard, it looks no more)
        self.window = int(DETECT_S * RATE)
        self.max_lag = int(MAX_LAG_S * RATE)
        self.far = np.zeros(self.window + self.max_lag, np.float32)  # what was played, the latest last
        self.near = np.zeros(self.window, np.float32)  # what the microphone heard, the latest last
        self.active: deque[bool] = deque(maxlen=self.window // FRAME)  # which recent played frames were playing
        self.size = 1 << (2 * self.window + self.max_lag - 1).bit_length()  # (the FFT's, with no wrap-around)
        self.frames = 0
        self.heard = False
        self.peak = 0.0  # the last look's peak, in standard deviations
        self.looked: int | None = None  # the lag the last look found (None: no peak stood out)
        self.lag: int | None = None  # the lag two looks running found

    def add(self, far: np.ndarray, near: np.ndarray) -> None:
        """One 10 ms frame of what was played and what the microphone heard (int16)."""
        if self.heard and not self.keep_looking:
            return
        self.far = np.roll(self.far, -FRAME)
        self.far[-FRAME:] = far
        self.near = np.roll(self.near, -FRAME)
        self.near[-FRAME:] = near
        self.active.append(_db(far) > ACTIVE_DBFS)
        self.frames += 1
        if (self.frames % DETECT_EVERY == 0 and self.frames * FRAME >= self.window
                and sum(self.active) >= MIN_ACTIVE_SHARE * self.active.maxlen):
            peaked, looked = self.peak >= ECHO_PEAK, self.looked
            self.peak, self.looked = self._look()
            self.heard = self.heard or (peaked and self.peak >= ECHO_PEAK)
            if None not in (looked, self.looked) and abs(self.looked - looked) <= AGREE_S * RATE:
                self.lag = self.looked

    def _look(self) -> tuple[float, int | None]:
        """The phase-transform cross-correlation's highest peak at lags 0..MAX_LAG_S, in standard deviations of
        its values elsewhere, and its lag (samples the echo comes after what was played; None: under ECHO_PEAK)."""
        spectrum = np.conj(np.fft.rfft(self.near, self.size)) * np.fft.rfft(self.far, self.size)
        spectrum /= np.abs(spectrum) + 1e-9
        correlation = np.fft.irfft(spectrum, self.size)  # [k]: the microphone against what played k samples later
        # than MAX_LAG_S before it: the echo `d` seconds late peaks at k = lag - d
        half = self.window // 2  # (elsewhere: lags where the two still overlap by at least half)
        search = correlation[:self.max_lag + 1]
        rest = np.concatenate([correlation[self.max_lag + FRAME:self.max_lag + half], correlation[self.size - half:]])
        spread = float(np.std(rest))
        peak = float(np.max(search)) / spread if spread > 0 else 0.0
        return peak, (self.max_lag - int(np.argmax(search)) if peak >= ECHO_PEAK else None)


def _db(frame: np.ndarray) -> float:
    x = frame.astype(np.float32) / 32768.0
    return 10 * float(np.log10(float(np.mean(x * x)) + 1e-10))


class EchoCanceller:
    """One session's echo canceller: ``played`` what the client plays (from the same place the voice gate's
    EchoReference is fed), ``clean`` the microphone's 16 kHz audio before the VAD sees it. `noise_suppression`:
    WebRTC's suppressor on as well (steady noise; it does not take out other voices)."""

    def __init__(self, noise_suppression: bool = False, apm: Any = None, realign: bool = True):
        from livekit import rtc  # (imported here: only sessions that cancel echo load its native library)

        self.noise_suppression = noise_suppression  # (its output is then always used: the noise is always there)
        self.realign = realign  # (False: AEC3 left to follow a moved delay by itself, as a benchmark compares)

        self._frame = rtc.AudioFrame
        self.apm = apm if apm is not None else rtc.AudioProcessingModule(
            echo_cancellation=True, noise_suppression=noise_suppression, high_pass_filter=True,
            auto_gain_control=False)
        self.playing = PlayedAudio()
        self.clock = MicClock()
        self.held = np.zeros(0, np.int16)  # microphone samples short of a whole 10 ms frame
        self.detector = EchoDetector(keep_looking=realign)
        self.anchor: int | None = None  # the echo's delay AEC3 is fitted to (samples)
        self.lead = 0  # AEC3 is handed what played this many samples before the microphone's moment (< 0: after)

    @property
    def cancelling(self) -> bool:
        """Its output is the module's (the echo was heard, or the noise is suppressed), not the microphone's."""
        return self.detector.heard or self.noise_suppression

    @property
    def held_s(self) -> float:
        """Seconds of microphone audio kept back until its 10 ms frame is whole."""
        return self.held.size / RATE

    def played(self, pcm: bytes, rate: int, at: float) -> None:
        """int16 `pcm` at `rate` starts playing at the client at `at` (monotonic)."""
        samples = np.frombuffer(pcm, dtype="<i2")
        if rate != RATE:
            samples = soxr.resample(samples, rate, RATE).astype(np.int16)  # (each piece alone: its time is exact)
        self.playing.add(samples, at)

    def stop(self, at: float) -> None:
        """The reply was stopped at `at`: what was queued after it will not play."""
        self.playing.cut(at)

    def samples_for(self, wanted: int) -> int:
        """Microphone samples needed for `wanted` cleaned ones (whole frames come out, some are held)."""
        frames = -(-max(0, wanted) // FRAME)
        return max(0, frames * FRAME - self.held.size)

    def clean(self, pcm: np.ndarray, arrived: float) -> np.ndarray:
        """int16 16 kHz microphone audio whose last sample arrived at `arrived`, without the echo of what was
        played; whole 10 ms frames come out (the rest is held for the next call)."""
        first = self.clock.place(pcm.size, arrived)
        audio = np.concatenate([self.held, pcm]) if self.held.size else np.asarray(pcm, np.int16)
        index = first - self.held.size  # (re-placed if the clock moved: the reference follows the clock)
        whole = audio.size - audio.size % FRAME
        out = np.empty(whole, np.int16)
        for i in range(0, whole, FRAME):
            played = self.playing.take(index + i, FRAME, keep=self.detector.max_lag + FRAME)
            heard = audio[i:i + FRAME]
            self.detector.add(played, heard)
            self._realign()
            reference = self.playing.at(index + i - self.lead, FRAME) if self.lead else played  # (< 0: queued)
            self.apm.process_reverse_stream(self._frame(reference.tobytes(), RATE, 1, FRAME))
            near = self._frame(heard.tobytes(), RATE, 1, FRAME)
            self.apm.set_stream_delay_ms(DELAY_HINT_MS)
            self.apm.process_stream(near)  # (always: its filter is converging by the time the echo is known)
            out[i:i + FRAME] = np.frombuffer(near.data, np.int16) if self.cancelling else heard
        self.held = audio[whole:].copy()
        return out

    def _realign(self) -> None:
        """Keep the echo at the delay AEC3 was fitted to (see REALIGN_S)."""
        lag = self.detector.lag
        if lag is None or not self.realign:
            return
        if self.anchor is None:
            self.anchor = lag
        lead = lag - self.anchor
        if abs(lead - self.lead) <= REALIGN_S * RATE:
            return
        if lead < -READ_AHEAD_S * RATE:  # (what would be read is not yet sent)
            self.anchor, lead = lag, 0
        self.lead = lead
