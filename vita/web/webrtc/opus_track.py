"""The reply's WebRTC track: PCM from the TTS worker encoded to Opus and paced in real time by the track itself, a
little silence after each reply and nothing between replies; a barge-in empties its queue at once (`flush`)."""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import threading
import time
from typing import Any

import av
import numpy as np
import soxr
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

OPUS_RATE = 48000  # WebRTC's Opus clock
FRAME_SAMPLES = 960  # 20 ms at 48 kHz: one Opus packet of the reply (the microphone's may be longer: ptime)
TIME_BASE = fractions.Fraction(1, OPUS_RATE)
REPLY_BITRATE = 24000  # mono speech: Opus at 24 kbit/s is wideband and clear
SILENT_TAIL_FRAMES = 5  # a reply track sends 100 ms of silence after its audio, then nothing until the next audio


class OpusTrack(MediaStreamTrack):
    """An outgoing audio track fed with PCM from any thread: 20 ms Opus packets, paced by the clock, silence when
    nothing is queued; ``flush`` drops what is queued (barge-in: the listener hears silence within a packet).

    Encodes itself (mono, REPLY_BITRATE) instead of letting aiortc's sender do it (stereo, 96 kbit/s fixed).
    A reply track (``send_silence`` False) sends no packets while it has nothing to say, as DTX does: between
    replies the line costs nothing; a microphone track sends silence too.
    """

    kind = "audio"

    def __init__(self, bitrate: int = REPLY_BITRATE, send_silence: bool = True, frame_ms: int = 20):
        super().__init__()
        self.frame_samples = OPUS_RATE * frame_ms // 1000  # 20 ms: barge-in silence comes within one packet
        self.send_silence = send_silence
        self._silent_frames = 0
        self._loop = asyncio.get_running_loop()  # made on the loop that reads it (aiortc's)
        self._audio_queued = asyncio.Event()  # set (thread-safely) by push: an idle reply track sleeps on it
        self._lock = threading.Lock()
        self._queued = bytearray()  # 48 kHz int16 mono, waiting to be sent
        self._resampler: Any = None
        self._rate = 0
        self._started: float | None = None
        self._pts = 0
        self.bitrate = bitrate
        self._encoder = self._new_encoder()
        self.audio_s = 0.0  # seconds of queued (non-silent) audio sent so far

    def _new_encoder(self) -> Any:
        codec = av.CodecContext.create("libopus", "w")
        codec.bit_rate = self.bitrate
        codec.format = "s16"
        codec.layout = "mono"
        codec.sample_rate = OPUS_RATE
        codec.time_base = TIME_BASE
        codec.options = {"application": "voip", "frame_duration": str(self.frame_samples * 1000 // OPUS_RATE)}
        return codec

    # --- any thread ---------------------------------------------------------------------------------------
    def push(self, pcm: bytes, rate: int, last: bool = False) -> None:
        """Queue int16 mono PCM at `rate` (resampled to 48 kHz); `last` flushes the resampler's tail."""
        samples = np.frombuffer(pcm, dtype="<i2")
        with self._lock:
            if rate != OPUS_RATE:
                if self._resampler is None or self._rate != rate:
                    self._resampler = soxr.ResampleStream(rate, OPUS_RATE, 1, dtype="int16")
                    self._rate = rate
                samples = self._resampler.resample_chunk(samples, last=last)
                if last:
                    self._resampler = None
            self._queued += samples.astype("<i2").tobytes()
        with contextlib.suppress(RuntimeError):  # its loop has closed: the peer is gone
            self._loop.call_soon_threadsafe(self._audio_queued.set)

    def flush(self) -> float:
        """Drop everything queued; the seconds dropped."""
        with self._lock:
            dropped = len(self._queued) / 2 / OPUS_RATE
            self._queued.clear()
            self._resampler = None
        return dropped

    @property
    def queued_s(self) -> float:
        with self._lock:
            return len(self._queued) / 2 / OPUS_RATE

    # --- the loop thread ----------------------------------------------------------------------------------
    async def recv(self) -> Any:
        if self.readyState != "live":
            raise MediaStreamError
        while True:
            if self._started is None:
                self._started = time.monotonic()
            else:
                wait = self._started + (self._pts + self.frame_samples) / OPUS_RATE - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                self._pts += self.frame_samples
            frame = self._next_frame()
            if frame is None:  # nothing to say: no packet until there is (the receiver's clock runs on across the gap)
                self._audio_queued.clear()
                if not self.queued_s:
                    await self._audio_queued.wait()
                frames = int((time.monotonic() - self._started) * OPUS_RATE) // self.frame_samples
                self._pts = max(self._pts, (frames - 1) * self.frame_samples)
                continue
            packets = self._encode(frame)
            if packets:
                return packets[0]

    def _next_frame(self) -> Any | None:
        size = self.frame_samples * 2
        with self._lock:
            chunk = bytes(self._queued[:size])
            del self._queued[:size]
        if chunk:
            self.audio_s += len(chunk) / 2 / OPUS_RATE
            self._silent_frames = 0
        else:
            self._silent_frames += 1
            if not self.send_silence and self._silent_frames > SILENT_TAIL_FRAMES:
                return None
        frame = av.AudioFrame(format="s16", layout="mono", samples=self.frame_samples)
        frame.planes[0].update(chunk + bytes(size - len(chunk)))
        frame.pts = self._pts
        frame.sample_rate = OPUS_RATE
        frame.time_base = TIME_BASE
        return frame

    def _encode(self, frame: Any) -> list:
        packets = self._encoder.encode(frame)
        for packet in packets:  # libopus delays its output by its look-ahead: keep our own clock on them
            packet.pts = self._pts
            packet.time_base = TIME_BASE
        return packets[:1]
