"""Real speech for tests: sentences spoken by the bundled Piper voice, and streaming them like a browser does."""

from __future__ import annotations

import functools
import json
import threading
import time

import numpy as np
import soxr

from vita.config import Config

RATE = 16000


@functools.cache
def _engine():
    from workers.tts_worker import PiperEngine

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


def voiced_span(audio: np.ndarray, rate: int = RATE) -> tuple[float, float]:
    """Seconds from the start of `audio` to its first and last clearly audible sample."""
    loud = np.flatnonzero(np.abs(audio.astype(np.int32)) > 800)
    return loud[0] / rate, loud[-1] / rate


def vita_message(pcm: np.ndarray, rate: int = RATE) -> str:
    """VITA's page format: a JSON string with the PCM's bytes as a list of numbers."""
    return json.dumps({"sample_rate": rate, "audio": list(pcm.astype("<i2").tobytes())})


def stream(sio, audio: np.ndarray, rate: int = RATE, chunk_ms: float = 8, binary: bool = False,
           between=None, stop: threading.Event | None = None) -> None:
    """Send `audio` on the `audio` event at real-time pace, like a microphone, until it ends or `stop` is set.

    between(t) is called after each chunk with the stream time in seconds (for sending camera frames).
    """
    step = int(rate * chunk_ms / 1000)
    started = time.monotonic()
    for i in range(0, len(audio), step):
        if stop is not None and stop.is_set():
            return
        chunk = audio[i:i + step]
        sio.emit("audio", chunk.astype("<i2").tobytes() if binary else vita_message(chunk, rate))
        if between is not None:
            between(i / rate)
        delay = started + (i + step) / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
