"""A speakerphone with no echo canceller, simulated: the reply a client plays comes back into its microphone later,
quieter and smeared by the room, under what the user says. For the server's echo canceller's tests and benchmarks.

Times are on one clock (the server's ``time.monotonic``, made up): the reply's pieces start playing where the
server's pacer says; the microphone captures the room, and each of its messages arrives at the server some
network delay after its last sample was captured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import soxr

RATE = 16000


def room_response(rt60_s: float = 0.3, rate: int = RATE, seed: int = 0) -> np.ndarray:
    """A simple room's impulse response: a direct path, then exponentially decaying diffuse reflections (60 dB
    down after `rt60_s`), with unit energy."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(rt60_s * rate)) / rate
    response = rng.normal(0, 1, t.size) * np.exp(-6.9 * t / rt60_s) * 0.3
    response[0] = 1.0
    early = int(0.004 * rate)  # a first reflection off the desk
    response[early] += 0.5
    return response / np.sqrt(np.sum(response ** 2))


@dataclass
class Speakerphone:
    """The room between a client's speaker and its microphone: `delay_s` from the server's play time to the echo
    at the microphone (the client's buffers and the air), `echo_db` its level against what was played."""

    delay_s: float = 0.15
    echo_db: float = -10.0
    rt60_s: float = 0.3
    moved: tuple[float, float] | None = None  # (from this second of the play clock, the delay from then on)

    def echo(self, played: np.ndarray) -> np.ndarray:
        """What the microphone hears of `played` (float, 16 kHz, on the play clock), on the same clock."""
        split = played.size if self.moved is None else int(self.moved[0] * RATE)
        parts = [(played[:split], 0, self.delay_s)]
        if self.moved is not None:
            parts.append((played[split:], split, self.moved[1]))
        out = np.zeros(played.size)
        for part, start, delay_s in parts:
            heard = np.convolve(part.astype(np.float64), room_response(self.rt60_s)) * 10 ** (self.echo_db / 20)
            at = start + int(delay_s * RATE)
            heard = heard[:max(0, played.size - at)]
            out[at:at + heard.size] += heard
        return out


def pieces(audio: np.ndarray, rate: int, seconds: float = 0.2) -> list[np.ndarray]:
    """`audio` cut as the TTS worker sends it (200 ms pieces)."""
    step = int(seconds * rate)
    return [audio[i:i + step] for i in range(0, audio.size, step)]


def at_rate(audio: np.ndarray, rate: int) -> np.ndarray:
    """int16 16 kHz audio resampled to `rate` (a reply comes from the TTS at 24 kHz)."""
    return audio if rate == RATE else soxr.resample(audio, RATE, rate).astype(np.int16)


def level_db(audio: np.ndarray) -> float:
    x = audio.astype(np.float64) / 32768
    return 10 * float(np.log10(np.mean(x * x) + 1e-12))


@dataclass
class Call:
    """One simulated call: the reply (int16 16 kHz) starts playing at `reply_at` seconds into the call; `near` is
    what the user says (int16 16 kHz, on the call's timeline, same length as the call or shorter); the microphone
    sends `message_s` messages, each arriving `uplink_s` plus up to `jitter_s` after its last sample."""

    reply: np.ndarray
    near: np.ndarray
    seconds: float
    phone: Speakerphone
    reply_at: float = 0.5
    reply_rate: int = 24000
    message_s: float = 0.02
    uplink_s: float = 0.02
    jitter_s: float = 0.02
    lead_s: float = 0.25  # the pacer sends each piece this long before it plays
    t0: float = 1000.0  # the call's start on the server's clock

    def timeline(self) -> tuple[np.ndarray, np.ndarray]:
        """(played, microphone) on the call's timeline, both int16 16 kHz: what the speaker played, and what the
        microphone captured (its echo plus the user, plus a little hiss)."""
        n = int(self.seconds * RATE)
        played = np.zeros(n)
        start = int(self.reply_at * RATE)
        reply = self.reply[:max(0, n - start)]
        played[start:start + reply.size] = reply
        mic = self.phone.echo(played) + np.random.default_rng(1).normal(0, 20, n)
        mic[:self.near.size] += self.near[:n]
        return played.astype(np.int16), np.clip(mic, -32768, 32767).astype(np.int16)

    def run(self, played_to, heard_from) -> np.ndarray:
        """Drive the call in the order the server would see it: `played_to(pcm, rate, at)` for each reply piece as
        the pacer sends it, `heard_from(pcm16k, arrived)` for each microphone message, which returns the audio
        it passed on; all that audio, on the call's timeline."""
        _, mic = self.timeline()
        reply = pieces(at_rate(self.reply, self.reply_rate), self.reply_rate)
        starts = [self.t0 + self.reply_at + sum(p.size for p in reply[:k]) / self.reply_rate
                  for k in range(len(reply))]
        rng = np.random.default_rng(2)
        step = int(self.message_s * RATE)
        out = []
        sent = 0
        for i in range(0, mic.size - step + 1, step):
            arrived = self.t0 + (i + step) / RATE + self.uplink_s + rng.uniform(0, self.jitter_s)
            while sent < len(reply) and starts[sent] - self.lead_s <= arrived:
                played_to(reply[sent].tobytes(), self.reply_rate, starts[sent])
                sent += 1
            out.append(heard_from(mic[i:i + step], arrived))
        return np.concatenate(out)


def replied_twice(reply: np.ndarray, first_s: float, then_s: float, after_s: float) -> tuple[Call, float]:
    """A call where `reply` plays twice, a second apart, its echo `first_s` late the first time and `then_s` the
    second (the client's playback moved between them), the call going on `after_s` past the second's start; and
    where on the call's timeline the second starts."""
    second_at = 0.5 + (reply.size + RATE) / RATE  # (the call's reply starts 0.5 s in)
    call = Call(np.concatenate([reply, np.zeros(RATE, np.int16), reply]), np.zeros(0, np.int16), second_at + after_s,
                Speakerphone(delay_s=first_s, echo_db=-10.0, moved=(second_at, then_s)))
    return call, second_at
