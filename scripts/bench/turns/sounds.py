"""The sounds the turn-taking benchmark plays: a text said in a voice (cached; optionally trimmed to its audible
span, so a pause put after it is exact) and generated noises (cough, knocks, claps, keyboard typing), all int16 at
16 kHz."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from scripts.eval.voices import synthesize
from tests.harness.speech import RATE, voiced_span


@functools.cache
def say(voice: str, text: str, trim: bool = False) -> np.ndarray:
    """`text` in `voice` (int16, 16 kHz); trim: cut to its audible span (so a pause put after it is exact)."""
    audio = np.asarray(synthesize(voice, text))
    if not trim:
        return audio
    first, last = voiced_span(audio)
    return audio[int(first * RATE):int(last * RATE) + 1]


def _band(x: np.ndarray, low: float, high: float) -> np.ndarray:
    spectrum = np.fft.rfft(x)
    freqs = np.fft.rfftfreq(x.size, 1 / RATE)
    spectrum[(freqs < low) | (freqs > high)] = 0
    return np.fft.irfft(spectrum, x.size)


def _pcm(x: np.ndarray, peak: float) -> np.ndarray:
    return (x / np.abs(x).max() * peak * 32767).astype(np.int16)


def _click(rng: np.random.Generator, n_s: float, decay_s: float, low: float, high: float) -> np.ndarray:
    t = np.arange(int(n_s * RATE)) / RATE
    return _band(rng.normal(size=t.size), low, high) * np.exp(-t / decay_s)


def cough(seed: int) -> np.ndarray:
    """~250 ms of band-passed noise, 12 ms attack, fast exponential decay."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(rng.uniform(0.22, 0.28) * RATE)) / RATE
    envelope = np.minimum(t / 0.012, 1.0) * np.exp(-np.maximum(t - 0.012, 0) / rng.uniform(0.05, 0.08))
    return _pcm(_band(rng.normal(size=t.size), 250, 2500) * envelope, rng.uniform(0.4, 0.6))


def knock(seed: int) -> np.ndarray:
    """Two or three knocks ~170 ms apart: each a few-ms click with a short wooden ring."""
    rng = np.random.default_rng(seed)
    out = np.zeros(int(0.65 * RATE))
    for k in range(int(rng.integers(2, 4))):
        t = np.arange(int(0.03 * RATE)) / RATE
        hit = (_click(rng, 0.03, 0.0015, 100, 3000)
               + 0.5 * np.sin(2 * np.pi * rng.uniform(180, 320) * t) * np.exp(-t / 0.006))
        start = int((0.02 + k * rng.uniform(0.15, 0.2)) * RATE)
        out[start:start + t.size] += hit * rng.uniform(0.8, 1.0)
    return _pcm(out, rng.uniform(0.3, 0.5))


def clap(seed: int) -> np.ndarray:
    """One or two hand claps: ~40 ms broadband bursts, 1 ms attack, ~6 ms decay."""
    rng = np.random.default_rng(seed)
    out = np.zeros(int(0.5 * RATE))
    for k in range(int(rng.integers(1, 3))):
        burst = _click(rng, 0.04, rng.uniform(0.004, 0.008), 700, 6000)
        burst[:16] *= np.linspace(0, 1, 16)
        start = int((0.02 + k * rng.uniform(0.3, 0.4)) * RATE)
        out[start:start + burst.size] += burst
    return _pcm(out, rng.uniform(0.5, 0.7))


def typing(seed: int) -> np.ndarray:
    """About a second of keyboard typing: short clicks every 60-160 ms, each with a softer release click."""
    rng = np.random.default_rng(seed)
    out = np.zeros(int(1.1 * RATE))
    at = 0.02
    while at < 1.0:
        for delay, level in ((0.0, 1.0), (rng.uniform(0.04, 0.07), 0.5)):
            c = _click(rng, 0.006, 0.0008, 1500, 7000) * level * rng.uniform(0.7, 1.0)
            start = int((at + delay) * RATE)
            out[start:start + c.size] += c[:max(0, out.size - start)]
        at += rng.uniform(0.06, 0.16)
    return _pcm(out, rng.uniform(0.12, 0.2))


SOUNDS: dict[str, Callable[[int], np.ndarray]] = {"cough": cough, "knock": knock, "clap": clap, "typing": typing}
