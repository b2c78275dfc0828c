"""A Realtime session's push-to-talk input audio buffer, and the cap on all the audio one response hears.

Appends arrive in the session's input format and are resampled to 16 kHz as one stream (no seams between
appends); a commit takes the buffer as one utterance. Everything waiting for the next response (the buffer,
committed speech, audio items) is one Whisper run on the shared ASR threads, so it is held to an utterance's cap,
as the VAD's speech is.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import soxr

from vita.hearing.vad import SAMPLE_RATE
from vita.turns.turn_events import Speech
from vita.web.realtime.protocol import ProtocolError

MIN_COMMIT_S = 0.1  # the protocol's floor: a commit with less audio is input_audio_buffer_commit_empty


class PushToTalkBuffer:
    def __init__(self, max_audio_s: float):
        self.max_audio_s = max_audio_s  # all the audio one response hears: one utterance's worth
        self.chunks: list[np.ndarray] = []  # 16 kHz, since the last commit or clear
        self.waiting = 0  # samples waiting for a response: the buffer's and those of committed speech and items
        self.started: float | None = None
        self.resampler: Any = None

    def room_for(self, seconds: float) -> None:
        """Refuse audio that would take what waits for one response past the cap."""
        waiting = self.waiting / SAMPLE_RATE
        if waiting + seconds > self.max_audio_s + 1e-3:
            raise ProtocolError("input_audio_buffer_full", f"at most {self.max_audio_s:g} s of audio may wait for "
                                f"one response ({waiting:.2f} s do already, this brings {seconds:.2f} s); commit "
                                "and answer it, or clear it")

    def append(self, pcm: np.ndarray, rate: int) -> None:
        if self.resampler is None:
            self.resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="int16")
        self.started = self.started or time.monotonic()
        self.chunks.append(self.resampler.resample_chunk(pcm))
        self.waiting += len(self.chunks[-1])

    def flush(self) -> None:
        """What the resampler holds back joins the buffer; a later append starts a new stream (at the input
        format's rate then)."""
        if self.resampler is not None:
            self.chunks.append(self.resampler.resample_chunk(np.zeros(0, np.int16), last=True))
            self.waiting += len(self.chunks[-1])
            self.resampler = None

    def clear(self) -> None:
        self.waiting -= sum(len(c) for c in self.chunks)
        self.chunks, self.started, self.resampler = [], None, None

    def commit(self) -> Speech:
        """The buffer as one utterance (its samples stay counted as waiting until a response takes them)."""
        self.flush()
        pcm = np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.int16)
        if len(pcm) < MIN_COMMIT_S * SAMPLE_RATE:
            raise ProtocolError("input_audio_buffer_commit_empty", "buffer too small: at least "
                                f"{MIN_COMMIT_S * 1000:.0f} ms of audio is needed, got "
                                f"{len(pcm) / SAMPLE_RATE * 1000:.0f} ms")
        now = time.monotonic()
        speech = Speech(pcm.astype(np.int16).tobytes(), self.started or now, now,
                        {"audio_s": round(len(pcm) / SAMPLE_RATE, 3)})
        self.chunks, self.started = [], None
        return speech

    def hold(self, samples: int) -> None:
        """Audio of an item (not the buffer's) now waits for the response too."""
        self.waiting += samples

    def release(self, samples: int) -> None:
        """Audio a response took (or a deleted item held) no longer waits."""
        self.waiting -= samples
