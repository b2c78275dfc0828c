"""Has the user finished their turn? Smart Turn v3.2 (pipecat-ai, BSD-2-Clause), an audio-only classifier, asked
when the VAD hears a short pause: silence alone cannot tell "What is the capital of France?" from "My name is
Anna, and..." — the intonation and the words can.

The model takes Whisper-style log-mel features (80 bins, 8 s at 16 kHz, the last 8 s of the utterance,
zero-padded in front) and returns the probability that the turn is complete. The features are computed here with
numpy (Whisper's own recipe; checked against transformers' WhisperFeatureExtractor in
tests/hearing/test_end_of_turn.py), so the front imports neither torch nor transformers. One ONNX session on one
thread of its own, shared by every
session (`EndOfTurnJudge`): a session's VAD keeps running while the model thinks, and the model's buffers stay
in one thread's memory instead of growing in every session thread's malloc arena.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path

import numpy as np

from vita.cpu import name_os_thread
from vita.rate_budget import RateBudget

log = logging.getLogger("vita.hearing.end_of_turn")

SAMPLE_RATE = 16000
WINDOW_S = 8
N_FFT = 400
HOP = 160
N_MELS = 80
# One session's share of the model's thread: a speaker whose every word is followed by a pause (a pause each 0.3 s)
# would keep it busy and take the CPU from everyone's turns. A session over its share has
# its next pause judged later (deferred, not dropped); a person pausing now and then never reaches it.
SESSION_SHARE = 0.25  # seconds of the model a second, per session
SESSION_BURST_S = 0.6  # a few judgements at once, before the share applies
MAX_SHARES_KEPT = 1024  # sessions whose use is remembered (those back to a full share are forgotten first)


def _mel_filters() -> np.ndarray:
    """Slaney-scale, area-normalised triangular filters, (N_MELS, N_FFT // 2 + 1): Whisper's (librosa's)."""
    def hz_to_mel(f: np.ndarray) -> np.ndarray:
        f = np.asarray(f, dtype=np.float64)
        linear = 3.0 * f / 200.0
        return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-9) / 1000.0) * 27.0 / np.log(6.4), linear)

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        m = np.asarray(m, dtype=np.float64)
        linear = 200.0 * m / 3.0
        return np.where(m >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0)), linear)

    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(SAMPLE_RATE / 2), N_MELS + 2))
    bins = np.linspace(0, SAMPLE_RATE // 2, N_FFT // 2 + 1)
    slopes = edges[None, :] - bins[:, None]
    down = -slopes[:, :-2] / np.diff(edges)[:-1]
    up = slopes[:, 2:] / np.diff(edges)[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    filters *= 2.0 / (edges[2:] - edges[:-2])
    return filters.T


_FILTERS = _mel_filters()
_WINDOW = np.hanning(N_FFT + 1)[:-1]  # periodic Hann, as torch.hann_window


def log_mel(audio: np.ndarray) -> np.ndarray:
    """float audio in [-1, 1] at 16 kHz, exactly WINDOW_S long → (80, 800) float32 features, normalised the way
    WhisperFeatureExtractor(do_normalize=True) does (zero mean, unit variance over the waveform first)."""
    x = audio.astype(np.float32)
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP]
    power = np.abs(np.fft.rfft(frames * _WINDOW, axis=-1)) ** 2
    mel = np.log10(np.maximum(1e-10, _FILTERS @ power.T))[:, :-1]
    mel = np.maximum(mel, mel.max() - 8.0)
    return ((mel + 4.0) / 4.0).astype(np.float32)


def last_window(pcm: np.ndarray) -> np.ndarray:
    """int16 speech → the last WINDOW_S seconds as float, zero-padded in front (how the model was trained)."""
    samples = WINDOW_S * SAMPLE_RATE
    audio = pcm[-samples:].astype(np.float32) / 32768.0
    return np.pad(audio, (samples - audio.size, 0)) if audio.size < samples else audio


class EndOfTurnModel:
    """The Smart Turn ONNX graph (onnxruntime's run is thread-safe: one session serves every session)."""

    def __init__(self, onnx_path: Path):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        self.session = onnxruntime.InferenceSession(str(onnx_path), sess_options=options,
                                                    providers=["CPUExecutionProvider"])

    def probability(self, pcm: np.ndarray) -> float:
        """int16 speech at 16 kHz (the utterance so far) → probability that the speaker's turn is complete."""
        features = log_mel(last_window(pcm))[None]
        (out,) = self.session.run(None, {"input_features": features})
        return float(np.asarray(out).reshape(-1)[0])


class EndOfTurnJudge:
    """The model's own thread: sessions hand it speech and get the probability back through a callback (which
    posts it to their mailbox). Pauses of several sessions are judged one after another (~30-60 ms each), and each
    session has at most one job waiting: a newer pause of the same session replaces its older, unstarted one (whose
    answer would be stale anyway), so one client pausing every 128 ms cannot queue work that delays the others; and
    a session past SESSION_SHARE of the thread waits its turn behind those within theirs."""

    def __init__(self, model: EndOfTurnModel, clock: Callable[[], float] = time.monotonic):
        self.model = model
        self.clock = clock
        self.pending: OrderedDict[Hashable, tuple[np.ndarray, Callable[[float, float], None]]] = OrderedDict()
        self.shares: dict[Hashable, RateBudget] = {}  # each session's use of the model (SESSION_SHARE)
        self.changed = threading.Condition()
        self.closed = False
        # Its thread starts now (not at the first pause: a thread count taken before must hold), warming the model.
        self.thread = threading.Thread(target=self._run, name="end-of-turn", daemon=True)
        self.thread.start()

    def judge(self, key: Hashable, pcm: np.ndarray, answer: Callable[[float, float], None]) -> None:
        """answer(probability, seconds the model took), on the model's thread, unless `key` (a session) hands in
        newer speech before this was started; a failure answers 0.0 (not finished: the long silence still ends
        the turn)."""
        with self.changed:
            self.pending.pop(key, None)
            self.pending[key] = (pcm, answer)  # to the back of the line
            self.changed.notify()

    def _run(self) -> None:
        # At the server's own priority, beside the speculative turn's ASR (one thread an utterance) that starts at
        # the same pause: raised 5 nice steps ahead of it, four users' judgements took a core from their ASR and
        # voice-to-voice was 0.2 s slower, while one user's end of turn was no faster (Zen 4).
        name_os_thread("end-of-turn")
        try:
            self.model.probability(np.zeros(SAMPLE_RATE, np.int16))
        except Exception:  # each job reports its own failure; the thread must live on to answer them
            log.exception("end-of-turn model warm-up failed")
        while True:
            job = self._next()
            if job is None:
                return
            key, pcm, answer = job
            started = self.clock()
            try:
                probability = self.model.probability(pcm)
            except Exception:  # a model failure must not leave the session waiting: silence ends the turn
                log.exception("end-of-turn model failed")
                probability = 0.0
            took = self.clock() - started
            with self.changed:
                share = self.shares.setdefault(key, RateBudget(SESSION_SHARE, SESSION_BURST_S, started))
                share.spend(took, started + took)
            try:
                answer(probability, took)
            except Exception:
                log.exception("end-of-turn answer failed")

    def _next(self) -> tuple[Hashable, np.ndarray, Callable[[float, float], None]] | None:
        """The oldest waiting job of a session within its share, waiting for one if need be; None once closed."""
        with self.changed:
            while not self.closed:
                now, soonest = self.clock(), None
                for key in self.pending:
                    share = self.shares.get(key)
                    if share is None or share.available(now) > 0:
                        pcm, answer = self.pending.pop(key)
                        self._forget_full(now)
                        return key, pcm, answer
                    due = -share.left / share.rate + 1e-3  # when its share is back above nothing
                    soonest = due if soonest is None else min(soonest, due)
                self.changed.wait(soonest)
            return None

    def _forget_full(self, now: float) -> None:
        if len(self.shares) > MAX_SHARES_KEPT:
            self.shares = {k: b for k, b in self.shares.items()
                           if k in self.pending or b.available(now) < b.burst}

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.pending.clear()
            self.changed.notify()
