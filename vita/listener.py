"""One VAD thread per session: reads the session's bounded PCM buffer, resamples to 16 kHz, segments speech.

The socket handler only decodes and enqueues (microseconds); Silero runs here, so a slow VAD step delays this
session alone. `on_tick` runs every `tick_s`, whether audio keeps arriving (a microphone streaming room noise)
or not: that is when the owner checks the idle timeout.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import soxr

from vita.vad import SAMPLE_RATE, Utterance, VadSegmenter

log = logging.getLogger("vita.listener")


@dataclass(frozen=True)
class HeardUtterance:
    """An utterance plus when it was spoken, on the monotonic clock (for picking camera frames)."""

    utterance: Utterance
    started_at: float
    ended_at: float


@dataclass
class ListenerEvents:
    on_speech_start: Callable[[], None]
    on_speech_dropped: Callable[[], None]  # a reported start turned out to be a cough or a click
    on_utterance: Callable[[HeardUtterance], None]
    on_tick: Callable[[], None]
    on_pause: Callable[[HeardUtterance], None] = lambda _heard: None  # a short silence in a kept utterance
    on_resume: Callable[[], None] = lambda: None  # speech went on after a pause
    on_lag: Callable[[float], None] = lambda _seconds: None  # arrival of a message → end of its VAD step


class _Reset:
    """Marker: forget any half-heard speech (recording restarted)."""


_NOTHING = object()  # the inbox stayed empty until the next tick


class SpeechListener:
    def __init__(self, name: str, segmenter: VadSegmenter, events: ListenerEvents, max_buffered: int = 2000,
                 tick_s: float = 1.0):
        self.segmenter = segmenter
        self.events = events
        self.tick_s = tick_s
        self.inbox: queue.Queue = queue.Queue(maxsize=max_buffered)
        self.stopping = threading.Event()
        self.speaking = False
        self._resampler: soxr.ResampleStream | None = None
        self._rate = SAMPLE_RATE
        self.thread = threading.Thread(target=self._run, name=f"vad-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def push(self, pcm: np.ndarray, rate: int) -> bool:
        """Called from the socket handler; never blocks. False when the buffer is full (audio dropped)."""
        try:
            self.inbox.put_nowait((pcm, rate, time.monotonic()))
            return True
        except queue.Full:
            return False

    def reset(self) -> None:
        with contextlib.suppress(queue.Full):
            self.inbox.put_nowait(_Reset())

    def stop(self) -> None:
        """Ask the thread to end; it does within one blocking read. Safe to call from the thread itself."""
        self.stopping.set()
        with contextlib.suppress(queue.Full):
            self.inbox.put_nowait(None)

    def join(self, timeout: float) -> None:
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    def _run(self) -> None:
        next_tick = time.monotonic() + self.tick_s
        while not self.stopping.is_set():
            try:
                item = self.inbox.get(timeout=max(0.0, next_tick - time.monotonic()))
            except queue.Empty:
                item = _NOTHING
            if time.monotonic() >= next_tick:
                next_tick = time.monotonic() + self.tick_s
                self.events.on_tick()
            if item is _NOTHING:
                continue
            if item is None:
                break
            if isinstance(item, _Reset):
                self.segmenter.reset()
                self.speaking = False
                continue
            try:
                self._feed(*item)
            except Exception:  # a VAD failure must end neither this thread silently nor the server
                log.exception("VAD step failed; resetting the segmenter")
                self.segmenter.reset()
        self.speaking = False

    def _feed(self, pcm: np.ndarray, rate: int, arrived: float) -> None:
        if rate != SAMPLE_RATE:
            if self._resampler is None or self._rate != rate:
                self._resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="int16")
                self._rate = rate
            pcm = self._resampler.resample_chunk(pcm)
        dropped = self.segmenter.dropped
        started, done = self.segmenter.feed(pcm)
        self.speaking = self.segmenter.onset_reported
        if self.segmenter.dropped != dropped:
            self.events.on_speech_dropped()
        if started:
            self.events.on_speech_start()
        position = self.segmenter.position + self.segmenter.pending.size

        def heard(utterance: Utterance) -> HeardUtterance:
            ended_at = arrived - (position - utterance.speech_end_sample) / SAMPLE_RATE
            started_at = arrived - (position - utterance.start_sample) / SAMPLE_RATE
            return HeardUtterance(utterance, started_at, ended_at)

        for kind, utterance in self.segmenter.take_turn_events():
            if kind == "pause":
                self.events.on_pause(heard(utterance))
            else:
                self.events.on_resume()
        for utterance in done:
            self.events.on_utterance(heard(utterance))
        self.events.on_lag(time.monotonic() - arrived)
