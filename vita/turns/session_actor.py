"""One mailbox per session, and the one thread that empties it.

Everything that happens to a session goes through its mailbox: microphone audio, socket events, the workers'
outputs, the clock, and the follow-ups its own actions ask for. The thread handles one item to completion —
including the follow-ups that item produced, in order — before it takes the next, so the turn machine never
sees two events at once, never re-entrantly, and its actions leave in the order it gave them. No lock is held
while it works: a put to a worker that waits its timeout delays this session alone.

This thread is also the session's VAD thread (the listener runs inside it), as the design card asks for one.

Microphone audio is gathered before it is posted: VITA's page sends a message every 8 ms, the VAD reads 32 ms
steps, and waking this thread for each message cost a sixth of the front's CPU with four users (~7 % of a core).
A message is posted once the audio gathered reaches the end of the VAD's next step (the session's thread says
where that is after each item), so the VAD reads each step as soon as it would have otherwise.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vita.cpu import name_os_thread
from vita.hearing.vad import CHUNK, SAMPLE_RATE
from vita.messages import WorkerOutput
from vita.turns.reply_sinks import PaceDue
from vita.turns.turn_events import Event

log = logging.getLogger("vita.session")


@dataclass(frozen=True)
class AudioIn:
    """A message of microphone audio (int16 at `rate`), and when it arrived."""

    pcm: np.ndarray
    rate: int
    arrived: float
    parts: int = 1  # the client's messages joined in it (the backlog is counted in those)


@dataclass(frozen=True)
class Call:
    """Run `fn` on the session's thread, in turn with everything else (socket handlers use it for what needs
    the session's state, e.g. an interrupt whose notice depends on whether a turn was in flight)."""

    fn: Callable[[], None]


@dataclass(frozen=True)
class ClockTick:
    """The session's periodic tick: idle timeout and turn watchdog."""


# Everything a session's mailbox holds for its receiver (Call runs on the thread and is not handed on).
Mail = AudioIn | ClockTick | PaceDue | Event | WorkerOutput


_STOP = object()
_NOTHING = object()

GATHERED_RATE = SAMPLE_RATE  # the VAD's own rate; audio at another rate is resampled first and is not gathered
STEP = CHUNK  # the VAD's step at that rate (32 ms)


class AudioGatherer:
    """16 kHz microphone messages joined up to the end of the VAD's next step. Where that lies, the session's
    thread says (`vad_at`): after each item it handles, how many samples its VAD needs for the next step, which
    also covers a VAD that was reset (recording restarted) or fed audio at another rate. Not thread-safe:
    SessionActor holds its lock."""

    def __init__(self, step: int = STEP):
        self.step = step
        self.parts: list[np.ndarray] = []
        self.gathered = 0  # samples in parts
        self.arrived = 0.0  # when the newest part arrived
        self.posted = 0  # 16 kHz samples posted so far
        self.boundary = step  # the count of posted samples at which the VAD completes a step (then every `step`)

    def add(self, pcm: np.ndarray, rate: int, arrived: float) -> list[AudioIn]:
        """The audio now due to the VAD: none, the gathered audio as one message, or (another rate) what was
        gathered and then this message as it came."""
        if rate != GATHERED_RATE:
            return [*self.take(), AudioIn(pcm, rate, arrived)]
        self.parts.append(pcm)
        self.gathered += pcm.size
        self.arrived = arrived
        return self._due()

    def vad_at(self, handled: int, needed: int) -> list[AudioIn]:
        """After the first `handled` 16 kHz samples, the VAD needs `needed` more to complete a step: what is
        gathered, if that already reaches the step's end (the VAD was reset while this audio came)."""
        self.boundary = handled + needed
        return self._due()

    def _due(self) -> list[AudioIn]:
        """What is gathered, once it reaches the end of the VAD's next step after what was posted."""
        after = self.boundary if self.posted < self.boundary else \
            self.boundary + ((self.posted - self.boundary) // self.step + 1) * self.step
        return self.take() if after <= self.posted + self.gathered else []

    def take(self) -> list[AudioIn]:
        """What is gathered, as one message (none if nothing is)."""
        if not self.parts:
            return []
        pcm = self.parts[0] if len(self.parts) == 1 else np.concatenate(self.parts)
        message = AudioIn(pcm, GATHERED_RATE, self.arrived, parts=len(self.parts))
        self.posted += self.gathered
        self.parts, self.gathered = [], 0
        return [message]


class SessionActor:
    """The mailbox and its thread. `receive(item)` is the session's behaviour (the turn controller's); it may
    call `follow` and `after` while it runs, and nothing else of this class needs a lock."""

    def __init__(self, name: str, receive: Callable[[Mail], None], tick_s: float, max_audio: int = 2000,
                 vad_needs: Callable[[], int] | None = None):
        """vad_needs: on this thread, the 16 kHz samples the VAD needs to complete its next step (None: steps
        counted from the first sample)."""
        self.receive = receive
        self.vad_needs = vad_needs
        self._handled = 0  # 16 kHz samples of audio handled (this thread only)
        self.tick_s = tick_s
        self.max_audio = max_audio
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._audio_lock = threading.Lock()
        self._audio_queued = 0  # the client's audio messages waiting: bounded, the rest of the mail is not
        self._gathered = AudioGatherer()  # under _audio_lock
        self._followups: deque = deque()  # this thread only
        self._timers: list[tuple[float, int, Mail]] = []  # (due, order, item), a heap; this thread only
        self._order = itertools.count()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    # --- from any thread ---------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def post(self, item: Mail | Call) -> None:
        """Never blocks. Audio gathered before it is handled before it (a "recording stopped" after its speech)."""
        self._post_gathered()
        self.inbox.put(item)

    def post_audio(self, pcm: np.ndarray, rate: int) -> bool:
        """Never blocks; False when `max_audio` messages are already waiting (the audio is dropped)."""
        with self._audio_lock:
            if self._audio_queued + len(self._gathered.parts) >= self.max_audio:
                return False
            self._put_audio(self._gathered.add(pcm, rate, time.monotonic()))
        return True

    def _post_gathered(self) -> None:
        with self._audio_lock:
            self._put_audio(self._gathered.take())

    def _put_audio(self, due: list[AudioIn]) -> None:
        """(Under the lock: two posters' messages stay in the order they were gathered.)"""
        for message in due:
            self._audio_queued += message.parts
            self.inbox.put(message)

    def call(self, fn: Callable[[], None]) -> None:
        self.post(Call(fn))

    def call_and_wait(self, fn: Callable[[], None], timeout: float) -> bool:
        """Run fn on the session's thread and wait until it has run (False on timeout or if it has stopped)."""
        if self.on_thread():
            fn()
            return True
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        self.call(run)
        return done.wait(timeout)

    def stop(self) -> None:
        """The thread ends after handling everything posted before this call."""
        self.post(_STOP)

    def join(self, timeout: float) -> None:
        if not self.on_thread():
            self.thread.join(timeout)

    def on_thread(self) -> bool:
        return threading.current_thread() is self.thread

    # --- from the session's own thread (inside receive) -----------------------------------------------------
    def follow(self, item: Mail) -> None:
        """Handle `item` once the current item and the follow-ups before it are done: never from inside."""
        self._followups.append(item)

    def after(self, delay: float, item: Mail) -> None:
        """Post `item` to this mailbox after `delay` seconds (a timer without a thread)."""
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._order), item))

    # --- the loop ------------------------------------------------------------------------------------------
    def _run(self) -> None:
        name_os_thread("session")  # the session's VAD thread, for the CPU budget
        next_tick = time.monotonic() + self.tick_s
        while True:
            wake = min(next_tick, self._timers[0][0]) if self._timers else next_tick
            try:
                item = self.inbox.get(timeout=max(0.0, wake - time.monotonic()))
            except queue.Empty:
                item = _NOTHING
            now = time.monotonic()
            if now >= next_tick:  # whether or not mail keeps arriving (a microphone streaming room noise)
                next_tick = now + self.tick_s
                self._post_gathered()  # a client that stopped sending mid-step: its last few ms (after this tick)
                self._handle(ClockTick())
            while self._timers and self._timers[0][0] <= now:
                self._handle(heapq.heappop(self._timers)[2])
            if item is _NOTHING:
                self._tell_vad_steps()
                continue
            if item is _STOP:
                break
            if isinstance(item, AudioIn):
                with self._audio_lock:
                    self._audio_queued -= item.parts
                if item.rate == GATHERED_RATE:
                    self._handled += item.pcm.size
            self._handle(item)
            self._tell_vad_steps()

    def _tell_vad_steps(self) -> None:
        """Where the VAD's next step ends, for the audio gathered from now on (after anything handled: a reset of
        the VAD moves its steps)."""
        if self.vad_needs is None:
            return
        try:
            needed = self.vad_needs()
        except Exception:  # only the gathering's timing: the steps stay where they were
            log.exception("session %s: could not read the VAD's next step", self.thread.name)
            return
        with self._audio_lock:
            self._put_audio(self._gathered.vad_at(self._handled, needed))

    def _handle(self, item: Mail | Call) -> None:
        self._followups.append(item)
        while self._followups:
            current = self._followups.popleft()
            try:
                if isinstance(current, Call):
                    current.fn()
                else:
                    self.receive(current)
            except Exception:  # one bad item must not end the session's thread (its VAD, its turns)
                log.exception("session %s: could not handle %s", self.thread.name, type(current).__name__)
