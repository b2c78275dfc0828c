"""Real speech for tests and benchmarks: sentences spoken by the bundled Piper voice, and a microphone that sends
audio at real-time pace as a page does (VITA's JSON every 8 ms, or our page's 32 ms binary frames)."""

from __future__ import annotations

import collections
import functools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import soxr

from vita.config import Config

RATE = 16000


@functools.cache
def _engine():
    from workers.tts.worker import PiperEngine

    return PiperEngine(Config().models_path() / "piper" / "joe-us")


@functools.cache
def spoken(text: str, rate: int = RATE) -> np.ndarray:
    """`text` spoken by Piper, as int16 mono at `rate`: the same samples every time.

    Piper samples noise while it speaks (VITS), so by default no two renderings are alike, and Whisper heard
    one in a few as "capital of friends". Tests need repeatable input: the noise is switched off.
    """
    from piper import SynthesisConfig

    engine = _engine()
    steady = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    audio = np.concatenate([np.frombuffer(c.audio_int16_bytes, dtype=np.int16)
                            for c in engine.voice.synthesize(text, steady)])
    audio.setflags(write=False)  # shared by every caller through the cache
    resampled = soxr.resample(audio, engine.sample_rate, rate).astype(np.int16)
    resampled.setflags(write=False)
    return resampled


def silence(seconds: float, rate: int = RATE) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.int16)


def noise(seconds: float, rate: int = RATE, level: float = 300.0, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, level, int(seconds * rate)).astype(np.int16)


BABBLE_LINES = ("The weather in the mountains was cold and windy all week long.",
                "I told him we would meet at the station around seven in the evening.",
                "She bought three kinds of bread and a jar of honey at the market.",
                "Our team finished the project two days before the deadline.",
                "They walked along the river and talked about their summer plans.",
                "My brother is learning to play the guitar and the piano.")


def speech_level_db(audio: np.ndarray) -> float:
    """dBFS of the voiced part of `audio` (its 32 ms pieces over -50 dBFS): how loud a voice is while it speaks."""
    x = audio[:len(audio) // 512 * 512].astype(np.float64).reshape(-1, 512) / 32768
    levels = 10 * np.log10((x * x).mean(axis=1) + 1e-10)
    voiced = levels[levels > -50]
    return float(10 * np.log10(np.mean(10 ** (voiced / 10)))) if voiced.size else -100.0


def babble(seconds: float, talkers: int = 3, rate: int = RATE) -> np.ndarray:
    """Other people talking at once, as float32 at `rate`: the Piper voice speaking different sentences, each
    talker pitched and paced differently (resampled) and starting at a different point."""
    n = int(seconds * rate)
    bed = np.zeros(n, np.float32)
    for k in range(talkers):
        lines = [spoken(BABBLE_LINES[(2 * k + j) % len(BABBLE_LINES)], rate) for j in range(4)]
        voice = soxr.resample(np.concatenate(lines).astype(np.float32), rate, int(rate * (0.87 + 0.14 * k)))
        bed += np.resize(np.roll(voice, k * 7001), n)
    return bed


def under(bed: np.ndarray, speech: np.ndarray, db: float) -> np.ndarray:
    """`bed` scaled so that its voiced level is `db` under that of `speech` (int16)."""
    gain = 10 ** ((speech_level_db(speech) - db - speech_level_db(bed)) / 20)
    return np.clip(bed * gain, -32768, 32767).astype(np.int16)


def voiced_span(audio: np.ndarray, rate: int = RATE) -> tuple[float, float]:
    """Seconds from the start of `audio` to its first and last clearly audible sample."""
    loud = np.flatnonzero(np.abs(audio.astype(np.int32)) > 800)
    return loud[0] / rate, loud[-1] / rate


def vita_message(pcm: np.ndarray, rate: int = RATE) -> str:
    """VITA's page format: a JSON string with the PCM's bytes as a list of numbers."""
    return json.dumps({"sample_rate": rate, "audio": list(pcm.astype("<i2").tobytes())})


class RealTime:
    """The clock of a microphone: after `sent` samples, wait until they would have been spoken."""

    def __init__(self, rate: int = RATE):
        self.rate, self.started = rate, time.monotonic()
        self.late_max_s = 0.0  # how far the sender fell behind (a loaded machine)

    def wait(self, sent: int) -> None:
        delay = self.started + sent / self.rate - time.monotonic()
        self.late_max_s = max(self.late_max_s, -delay)
        if delay > 0:
            time.sleep(delay)


def frame(pcm: np.ndarray, binary: bool, rate: int = RATE) -> bytes | str:
    """One `audio` message: our page's raw int16 bytes, or VITA's JSON."""
    return pcm.astype("<i2").tobytes() if binary else vita_message(pcm, rate)


def stream(sio, audio: np.ndarray, rate: int = RATE, chunk_ms: float = 8, binary: bool = False,
           between=None, stop: threading.Event | None = None) -> None:
    """Send `audio` on the `audio` event at real-time pace, like a microphone, until it ends or `stop` is set.

    between(t) is called after each chunk with the stream time in seconds (for sending camera frames).
    """
    step = int(rate * chunk_ms / 1000)
    clock = RealTime(rate)
    for i in range(0, len(audio), step):
        if stop is not None and stop.is_set():
            return
        sio.emit("audio", frame(audio[i:i + step], binary, rate))
        if between is not None:
            between(i / rate)
        clock.wait(i + step)


@dataclass
class Said:
    """One utterance handed to the microphone, and when its first and last voiced samples went out."""

    speech: np.ndarray
    first_voiced: int = 0
    last_voiced: int = 0
    onset_sent: float = 0.0
    end_sent: float = 0.0
    failed: bool = False  # the connection broke before it was all sent
    done: threading.Event = field(default_factory=threading.Event)  # all of it sent (or failed)
    voiced_end: threading.Event = field(default_factory=threading.Event)  # its last voiced sample sent (or failed)


class Microphone:
    """Always open, like a page's: real-time frames of silence (or of `background`, looped), with what `say` is
    given mixed in, one utterance after another. A connection that breaks ends it (`broken`); what was still to
    be said is marked failed."""

    def __init__(self, client: Any, binary: bool, background: np.ndarray | None = None, name: str = "mic"):
        self.client, self.binary = client, binary
        self.step = RATE * (32 if binary else 8) // 1000
        self.background = background
        self.queue: collections.deque[Said] = collections.deque()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.broken = False
        self.clock = RealTime()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    @property
    def late_max_s(self) -> float:
        return self.clock.late_max_s

    def say(self, speech: np.ndarray) -> Said:
        loud = np.flatnonzero(np.abs(speech.astype(np.int32)) > 800)
        first, last = (int(loud[0]), int(loud[-1])) if loud.size else (0, len(speech) - 1)
        said = Said(speech, first, last)
        with self.lock:
            self.queue.append(said)
        return said

    def _bed(self, k: int) -> np.ndarray:
        if self.background is None:
            return np.zeros(self.step, np.int32)
        offset = (k * self.step) % (len(self.background) - self.step)
        return self.background[offset:offset + self.step].astype(np.int32)

    def _run(self) -> None:
        k, current, pos = 0, None, 0
        while not self.stop.is_set():
            chunk = self._bed(k)
            if current is None:
                with self.lock:
                    current, pos = (self.queue.popleft(), 0) if self.queue else (None, 0)
            if current is not None:
                piece = current.speech[pos:pos + self.step]
                chunk[:len(piece)] += piece
            try:
                self.client.sio.emit("audio", frame(np.clip(chunk, -32768, 32767), self.binary))
            except Exception:  # the connection is gone
                self.broken = True
                self._fail(current)
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
                    current.voiced_end.set()
                    current.done.set()
                    current = None
            k += 1
            self.clock.wait(k * self.step)
        self._fail(current)

    def _fail(self, current: Said | None) -> None:
        with self.lock:
            left = ([current] if current is not None else []) + list(self.queue)
            self.queue.clear()
        for said in left:
            said.failed = True
            said.voiced_end.set()
            said.done.set()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
