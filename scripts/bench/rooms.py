"""Room benchmark: the assistant asked everyday questions in the rooms people use it in, driven as a client drives it.

A real server (started here, or `--url` with `--server_pid`) is talked to in one long session per room, the
microphone never paused: VITA's page (`--door vita`: a JSON `audio` message every 8 ms, 16 kHz) or a Realtime client
(`--door realtime`: 24 kHz PCM appended every 40 ms, the server's VAD). The questions are the evaluation's
(scripts/eval/questions.json, stand-alone ones), spoken by hibari and the Piper voice in turn, every one at the same
level (-26 dBFS while voiced), and scored as the evaluation scores them. Each room is built here:

- quiet: digital silence between the words;
- noise10: steady noise 10 dB under the voice, synthesized (pink noise rolled off above 1.5 kHz with a 100 Hz
  blade hum: a fan or a car), not a recording;
- babble20 / babble10 / babble5: three other talkers 20 / 10 / 5 dB under (tests/harness/speech.py `babble()`);
- babble_noise10: the babble and the steady noise together 10 dB under (each 13 dB);
- tv10: a television 10 dB under: synthesized music (chords of harmonic tones) and one more talker, at equal level;
- speaker: a speakerphone with no echo cancellation: the reply audio the client receives is played (as VITA's page
  plays it: each chunk after the one before, from its arrival; dropped at `stop_tts`, or at a Realtime response
  cancelled) and comes back into its microphone in real time, 50-250 ms later (varied question by question),
  10 dB under the user's voice, through a synthetic room (exponentially decaying noise, RT60 0.3 s);
- doubletalk: the speakerphone, and each question asks for a long reply which the user interrupts over its echo,
  1.2 s into it ("Wait, stop." and a new question): the reply must stop and the new question be answered.

Every other room also has `--barges` interruptions (in its own conditions). Reported per room: right answers /
asked; replies nobody asked for (a turn that produced reply audio and was no question of the user's: started by
the room or by the reply's own echo); replies cut by their own echo (a stop while the user said nothing); turns
the server dropped as the reply's echo; barge-ins stopped / attempted and onset -> stop latency; voice-to-voice
p50 / p90 at the client (as measure.ask: last voiced sample sent -> first reply audio received); the server's
cores during the room (psutil over its whole process tree, one talking session at a time) and the client's.

Usage: .venv/bin/python -m scripts.bench.rooms [--rooms quiet,babble20,...] [--questions 12] [--barges 1]
       [--door vita|realtime] [--page_echo on|off] [--json out.json] [--url URL --server_pid PID] [-- server flags]
"""

from __future__ import annotations

import argparse
import base64
import collections
import functools
import json
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

RATE = 16000
REPLY_RATE = 24000  # the reply audio both doors send
CUT_MIN_S = 0.05  # a stop that drops less than this of the reply still to sound cuts nothing audible
USER_DB = -26.0  # the user's voice at the microphone while voiced (dBFS): every utterance is brought to it
ECHO_DB = 10.0  # the speaker's echo this much under the user's voice
RT60_S = 0.3
ECHO_DELAYS_S = (0.05, 0.15, 0.25, 0.10, 0.20)  # one per question, in turn
BARGE_AFTER_S = 1.2  # an interruption this long after the reply's first audio was received
STOPPED_WITHIN_S = 3.0  # a stop this soon after an interruption's onset is its doing...
EARLIEST_STOP_S = 0.25  # ...unless it came sooner than this (the echo's, or the room's)
QUESTION_CAP_S = 45.0  # the longest a question is waited on (an utterance the room holds open ends at 30 s)
SETTLE_CAP_S = 25.0  # the longest a question waits for the room to fall quiet (a reply answering its own echo)
SETTLE_S = 1.0  # quiet (nothing playing, no turn) before the next question


# --- building rooms (pure) -----------------------------------------------------------------------------------
def level_db(audio: np.ndarray) -> float:
    """dBFS of the audible part of `audio` (32 ms pieces over -50 dBFS): how loud a voice or a room is."""
    from tests.harness.speech import speech_level_db

    return speech_level_db(audio)


def at_level(audio: np.ndarray, db: float) -> np.ndarray:
    """`audio` scaled so that its audible level is `db` dBFS (int16)."""
    gain = 10 ** ((db - level_db(audio)) / 20)
    return np.clip(np.asarray(audio, np.float64) * gain, -32768, 32767).astype(np.int16)


def steady_noise(seconds: float, seed: int = 1, rate: int = RATE) -> np.ndarray:
    """A fan or a car, synthesized: pink noise (1/f power) rolled off above 1.5 kHz, with a 100 Hz blade hum and its
    harmonics. float32, unscaled."""
    n = int(seconds * rate)
    spectrum = np.fft.rfft(np.random.default_rng(seed).normal(0, 1, n))
    f = np.fft.rfftfreq(n, 1 / rate)
    spectrum *= 1 / np.sqrt(np.maximum(f, 20.0)) / (1 + (f / 1500) ** 2)
    bed = np.fft.irfft(spectrum, n)
    bed /= np.sqrt(np.mean(bed ** 2))
    t = np.arange(n) / rate
    hum = sum(0.3 / k * np.sin(2 * np.pi * 100 * k * t + k) for k in (1, 2, 3))
    return (bed + hum).astype(np.float32)


def music(seconds: float, rate: int = RATE) -> np.ndarray:
    """Synthesized music: a chord every 0.8 s (C, A minor, F, G), each note three harmonics with a decaying
    envelope, over a bass note. float32, unscaled."""
    chords = ((261.6, 329.6, 392.0), (220.0, 261.6, 329.6), (174.6, 220.0, 261.6), (196.0, 246.9, 293.7))
    beat = int(0.8 * rate)
    t = np.arange(beat) / rate
    envelope = np.exp(-t / 0.5) * np.minimum(1, t / 0.01)
    bars = []
    for notes in chords:
        bar = sum(np.sin(2 * np.pi * f * k * t) / k for f in notes for k in (1, 2, 3))
        bar = bar + 1.5 * np.sin(2 * np.pi * notes[0] / 2 * t)
        bars.append(bar * envelope)
    return np.resize(np.concatenate(bars), int(seconds * rate)).astype(np.float32)


def under_user(bed: np.ndarray, db: float) -> np.ndarray:
    """`bed` scaled so that its level is `db` under the user's voice (float64, to be mixed)."""
    bed = np.asarray(bed, np.float64)
    bed = bed * 3000 / max(1e-9, float(np.sqrt(np.mean(bed ** 2))))  # audible to level_db first, whatever its scale
    for _ in range(4):  # pieces that fall under level_db's floor once scaled down stop counting: again until stable
        bed = bed * 10 ** ((USER_DB - db - level_db(bed)) / 20)
    return bed


def room_impulse_response(rt60_s: float = RT60_S, seed: int = 2, rate: int = RATE) -> np.ndarray:
    """A synthetic room: exponentially decaying noise (60 dB down at `rt60_s`) after a direct path, scaled to unit
    energy, so that what goes through it comes out about as loud as it went in."""
    n = int(rt60_s * rate)
    t = np.arange(n) / rate
    h = np.random.default_rng(seed).normal(0, 1, n) * np.exp(-6.908 * t / rt60_s)
    h[0] = 4 * np.abs(h[:64]).max()  # the speaker's direct path, ahead of the reflections
    return (h / np.sqrt(np.sum(h ** 2))).astype(np.float32)


def echo_delay(i: int) -> float:
    return ECHO_DELAYS_S[i % len(ECHO_DELAYS_S)]


def build_bed(room: str, seconds: float = 40.0) -> np.ndarray | None:
    """The room's sound without the user and without the echo (int16 at RATE, looped by the microphone)."""
    from tests.harness.speech import babble

    if room in ("quiet", "speaker", "doubletalk"):
        return None
    if room == "noise10":
        bed = under_user(steady_noise(seconds), 10)
    elif room.startswith("babble") and room[6:].isdigit():
        bed = under_user(babble(seconds), int(room[6:]))
    elif room == "babble_noise10":
        bed = under_user(babble(seconds), 13) + under_user(steady_noise(seconds), 13)
    elif room == "tv10":
        talker = babble(seconds, talkers=1)
        both = music(seconds) * 10 ** ((level_db(talker) - level_db(music(seconds))) / 20) + talker
        bed = under_user(both, 10)
    else:
        raise SystemExit(f"unknown room {room!r}: {', '.join(ROOMS)}")
    return np.clip(bed, -32768, 32767).astype(np.int16)


ROOMS = ("quiet", "noise10", "babble20", "babble10", "babble5", "babble_noise10", "tv10", "speaker", "doubletalk")
ECHO_ROOMS = ("speaker", "doubletalk")


class Speaker:
    """The client's loudspeaker and the room between it and its microphone. `play` a reply chunk when it arrives
    (it sounds after the one before, as VITA's page plays them), `stop` drops what is still to sound; `echo(a, b)`
    is what the microphone hears of it at its samples a..b, on the microphone's clock (sample 0 at `t0`)."""

    def __init__(self, t0: float, gain: float, rir: np.ndarray, delay_s: float = 0.1):
        self.t0, self.gain, self.rir, self.delay_s = t0, gain, rir, delay_s
        self.segments: list[tuple[int, np.ndarray]] = []  # (first sample, 16 kHz float32), in order
        self.end_t = 0.0  # when what is queued has sounded
        self.lock = threading.Lock()
        self.energy, self.voiced = 0.0, 0  # what came out of it, for the level report
        self.cuts: list[float] = []  # when a stop dropped reply audio still to sound (a stop with none cuts nothing)

    def play(self, pcm24: bytes, at: float) -> None:
        import soxr

        samples = np.frombuffer(pcm24, np.int16).astype(np.float32)
        if not samples.size:
            return
        with self.lock:
            start = max(at, self.end_t)
            self.end_t = start + samples.size / REPLY_RATE
            self.segments.append((round((start - self.t0) * RATE), soxr.resample(samples, REPLY_RATE, RATE)))

    def stop(self, at: float) -> None:
        cut = round((at - self.t0) * RATE)
        with self.lock:
            if self.end_t > at + CUT_MIN_S:
                self.cuts.append(at)
            self.end_t = min(self.end_t, at)
            kept = []
            for first, samples in self.segments:
                if first < cut:
                    kept.append((first, samples[:cut - first]))
            self.segments = kept

    def playing(self, now: float) -> bool:
        return now < self.end_t + self.delay_s + len(self.rir) / RATE

    def echo(self, a: int, b: int) -> np.ndarray:
        """The echo at microphone samples a..b: what sounded delay_s earlier, through the room, at `gain`."""
        from scipy.signal import fftconvolve

        d, taps = round(self.delay_s * RATE), len(self.rir)
        lo, hi = a - d - taps + 1, b - d  # the dry samples that reach a..b
        dry = np.zeros(hi - lo, np.float32)
        with self.lock:
            self.segments = [(f, s) for f, s in self.segments if f + len(s) > lo - RATE]
            for first, samples in self.segments:
                s, e = max(first, lo), min(first + len(samples), hi)
                if s < e:
                    dry[s - lo:e - lo] += samples[s - first:e - first]
        if not dry.any():
            return np.zeros(b - a, np.float32)
        wet = fftconvolve(dry, self.rir)[taps - 1:taps - 1 + b - a] * self.gain
        power = float(np.mean(wet ** 2))
        if power > (32768 * 10 ** (-50 / 20)) ** 2:
            self.energy += power * (b - a)
            self.voiced += b - a
        return wet.astype(np.float32)

    def level_db(self) -> float | None:
        return round(10 * np.log10(self.energy / self.voiced / 32768 ** 2), 1) if self.voiced else None


def speaker_gain(reply_db: float) -> float:
    """The gain that brings a reply of `reply_db` to ECHO_DB under the user (the room keeps its energy)."""
    return 10 ** ((USER_DB - ECHO_DB - reply_db) / 20)


# --- the microphone ----------------------------------------------------------------------------------------------
class RoomMicrophone:
    """Always open: the room's bed (looped), the speaker's echo and what `say` is given, mixed at the microphone and
    sent at real-time pace through `send` in `chunk_ms` pieces."""

    def __init__(self, send, chunk_ms: int, bed: np.ndarray | None, speaker: Speaker | None):
        from tests.harness.speech import RealTime

        self.send, self.step = send, RATE * chunk_ms // 1000
        self.bed, self.speaker = bed, speaker
        self.queue: collections.deque = collections.deque()
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.clock = RealTime()
        if speaker is not None:
            speaker.t0 = self.clock.started
        self.thread = threading.Thread(target=self._run, name="room-mic", daemon=True)
        self.thread.start()

    def say(self, speech: np.ndarray):
        from tests.harness.speech import Said

        loud = np.flatnonzero(np.abs(speech.astype(np.int32)) > 800)
        said = Said(speech, int(loud[0]), int(loud[-1]))
        with self.lock:
            self.queue.append(said)
        return said

    def _run(self) -> None:
        k, current, pos = 0, None, 0
        while not self.stop.is_set():
            a = k * self.step
            chunk = np.zeros(self.step, np.float32)
            if self.bed is not None:
                offset = a % (len(self.bed) - self.step)
                chunk += self.bed[offset:offset + self.step]
            if self.speaker is not None:
                chunk += self.speaker.echo(a, a + self.step)
            if current is None:
                with self.lock:
                    current, pos = (self.queue.popleft(), 0) if self.queue else (None, 0)
            if current is not None:
                piece = current.speech[pos:pos + self.step]
                chunk[:len(piece)] += piece
            try:
                self.send(np.clip(chunk, -32768, 32767).astype(np.int16))
            except Exception:  # the connection is gone: what was to be said fails
                if current is not None:
                    current.failed = True
                    current.done.set()
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
                    current.done.set()
                    current = None
            k += 1
            self.clock.wait(k * self.step)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)


# --- the doors: a client, and what it was told as one list of turns ------------------------------------------
@dataclass
class Turn:
    key: str
    at: float  # committed (Socket.IO `turn`, Realtime `response.created`)
    heard: str = ""
    reply: str = ""
    first_audio: float | None = None
    end: float | None = None
    reason: str | None = None  # why it ended without its whole reply (None: it did not)
    stages: dict = field(default_factory=dict)  # the server's own timings of it (Socket.IO `timings`), by stage


class Door:
    """One session through one door: `connect`, a `send` for the microphone, `turns()` and `stops()` so far."""

    chunk_ms = 8

    def __init__(self, url: str, speaker: Speaker | None):
        self.url, self.speaker = url, speaker


class VitaDoor(Door):
    """VITA's page: JSON audio every 8 ms; the reply's `audio` played as it comes, dropped at `stop_tts`."""

    chunk_ms = 8

    def connect(self) -> VitaDoor:
        from tests.harness.client import RecordingClient

        speaker = self.speaker

        class Client(RecordingClient):
            async def _record(self, event: str, data: object = None) -> None:
                await super()._record(event, data)
                if speaker is not None and event == "audio" and isinstance(data, bytes | bytearray):
                    speaker.play(bytes(data), self.events[-1][0])
                elif speaker is not None and event == "stop_tts":
                    speaker.stop(self.events[-1][0])

        self.client = Client(self.url).connect()
        return self

    def send(self, pcm: np.ndarray) -> None:
        from tests.harness.speech import vita_message

        self.client.sio.emit("audio", vita_message(pcm))

    def events(self) -> list:
        with self.client.changed:
            return list(self.client.events)

    def turns(self) -> list[Turn]:
        turns: dict[int, Turn] = {}
        speaking = None
        for t, name, d in self.events():
            if name == "turn":
                turns[d["turn_id"]] = Turn(str(d["turn_id"]), t)
            elif not isinstance(d, dict) and name != "audio":
                continue
            elif name == "transcript" and d["turn_id"] in turns:
                turns[d["turn_id"]].heard = d["text"]
            elif name == "response_text" and d["turn_id"] in turns:
                turns[d["turn_id"]].reply = d["text"]
            elif name == "state" and d.get("turn_id") in turns:
                if d["state"] == "speaking":
                    speaking = d["turn_id"]
                elif d["state"] == "listening":
                    turn = turns[d["turn_id"]]
                    turn.end, turn.reason = t, d.get("reason")
            elif name == "timings" and d.get("turn_id") in turns:
                turns[d["turn_id"]].stages[d.get("stage")] = {k: v for k, v in d.items() if isinstance(v, float)}
            elif name == "turn_cancelled" and d.get("turn_id") in turns:
                turns[d["turn_id"]].reason = d.get("reason")
            elif name == "audio" and speaking in turns and turns[speaking].first_audio is None:
                turns[speaking].first_audio = t
        return list(turns.values())

    def stops(self) -> list[float]:
        return [t for t, name, _ in self.events() if name == "stop_tts"]

    def close(self) -> None:
        self.client.close()


class RealtimeDoor(Door):
    """A Realtime client: 24 kHz PCM appended every 40 ms, the server's VAD; the reply's deltas played as they
    come, dropped when its response is cancelled."""

    chunk_ms = 40

    def connect(self) -> RealtimeDoor:
        import soxr

        from tests.harness.realtime_client import RealtimeClient

        speaker = self.speaker
        voiced: set[str] = set()  # the responses whose audio it was given (a client drops only those when cancelled)

        class Client(RealtimeClient):
            def _heard(self, at: float, record: dict) -> None:
                kind = record.get("type")
                if speaker is not None and kind == "response.output_audio.delta":
                    voiced.add(record.get("response_id"))
                    speaker.play(base64.b64decode(record["delta"]), at)
                elif (speaker is not None and kind == "response.done" and record["response"]["status"] == "cancelled"
                      and record["response"].get("id") in voiced):
                    speaker.stop(at)

        self.client = Client(self.url)
        self.client.wait_type("session.created")
        self.resampler = soxr.ResampleStream(RATE, REPLY_RATE, 1, dtype="int16")
        return self

    def send(self, pcm: np.ndarray) -> None:
        self.client.append(self.resampler.resample_chunk(pcm))

    def events(self) -> list:
        with self.client.changed:
            return list(self.client.events)

    def turns(self) -> list[Turn]:
        turns: dict[str, Turn] = {}
        heard: dict[str, str] = {}
        item_of: dict[str, str] = {}
        last_item = None
        for t, e in self.events():
            kind = e.get("type")
            if kind == "input_audio_buffer.committed":
                last_item = e["item_id"]
            elif kind == "conversation.item.input_audio_transcription.completed":
                heard[e["item_id"]] = e["transcript"]
            elif kind == "response.created":
                rid = e["response"]["id"]
                turns[rid], item_of[rid] = Turn(rid, t), last_item
            elif kind == "response.output_audio.delta" and e["response_id"] in turns:
                turn = turns[e["response_id"]]
                turn.first_audio = turn.first_audio or t
            elif kind == "response.output_audio_transcript.done" and e["response_id"] in turns:
                turns[e["response_id"]].reply = e["transcript"]
            elif kind == "response.done" and e["response"]["id"] in turns:
                turn, details = turns[e["response"]["id"]], e["response"].get("status_details") or {}
                turn.end = t
                status = e["response"]["status"]
                turn.reason = None if status == "completed" else (
                    details.get("reason") or (details.get("error") or {}).get("code") or status)
        for rid, turn in turns.items():
            turn.heard = heard.get(item_of[rid] or "", "")
        return list(turns.values())

    def stops(self) -> list[float]:
        return [t for t, e in self.events() if e.get("type") == "response.done"
                and e["response"]["status"] == "cancelled"]

    def close(self) -> None:
        self.client.close()


DOORS = {"vita": VitaDoor, "realtime": RealtimeDoor}


# --- one room ----------------------------------------------------------------------------------------------------
@dataclass
class Asked:
    """One thing the user said and what came of it."""

    kind: str  # "question", "barge" (a long request, then an interruption asking `text`), "request" (the long one)
    text: str
    voice: str
    onset: float = 0.0
    end: float = 0.0
    qid: str | None = None
    answer: dict | None = None
    right: bool = False
    v2v_s: float | None = None
    stop_s: float | None = None  # barge: onset -> stop
    over_reply: bool = True  # barge: a reply was sounding at its onset
    stopped_before: bool = False  # barge: the reply was stopped by something else just before it could be
    echo_delay_s: float | None = None


@dataclass
class RoomResult:
    room: str
    door: str
    asked: list[Asked] = field(default_factory=list)
    unasked: list[dict] = field(default_factory=list)  # replies to no question of the user's
    echo_cuts: list[dict] = field(default_factory=list)  # stops while the user said nothing
    echo_dropped: int = 0  # turns the server dropped as the reply's echo
    idle_stops: int = 0  # stops while the user said nothing that found no reply audio still to sound
    server_cores: float = 0.0
    front_cores: float = 0.0
    client_cores: float = 0.0
    seconds: float = 0.0
    echo_level_db: float | None = None

    def summary(self) -> dict:
        questions = [a for a in self.asked if a.kind in ("question", "barge")]
        barges = [a for a in self.asked if a.kind == "barge"]
        v2v = [a.v2v_s for a in questions if a.v2v_s is not None]
        stops = [a.stop_s for a in barges if a.stop_s is not None]
        from scripts.bench.common import percentile

        return {"room": self.room, "door": self.door, "right": sum(a.right for a in questions),
                "asked": len(questions), "unanswered": sum(a.answer is None for a in questions),
                "unasked_replies": len(self.unasked), "echo_cuts": len(self.echo_cuts),
                "echo_dropped": self.echo_dropped, "idle_stops": self.idle_stops,
                "barges_stopped": len(stops), "barges": len(barges),
                "barges_not_over_a_reply": sum(not a.over_reply for a in barges),
                "barges_stopped_by_else": sum(a.stopped_before for a in barges),
                "stop_p50_s": round(statistics.median(stops), 3) if stops else None,
                "v2v_p50_s": round(statistics.median(v2v), 3) if v2v else None,
                "v2v_p90_s": round(percentile(v2v, 0.9), 3) if v2v else None,
                "server_cores": round(self.server_cores, 2), "front_cores": round(self.front_cores, 2),
                "client_cores": round(self.client_cores, 2), "seconds": round(self.seconds),
                "echo_level_db": self.echo_level_db}


def tree_cpu(pid: int | None) -> tuple[float, float]:
    """CPU seconds so far of the server's whole process tree, and of its front process alone."""
    import psutil

    if pid is None:
        return 0.0, 0.0
    total = front = 0.0
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0, 0.0
    for p in processes:
        try:
            times = p.cpu_times()
        except psutil.Error:
            continue
        used = times.user + times.system
        total += used
        front += used if p.pid == pid else 0.0
    return total, front


def own_cpu() -> float:
    import psutil

    times = psutil.Process().cpu_times()
    return times.user + times.system


@functools.cache
def user_speech(voice: str, text: str) -> np.ndarray:
    from scripts.eval.voices import synthesize

    return at_level(synthesize(voice, text), USER_DB)


def settle(door: Door, speaker: Speaker | None, cap_s: float) -> None:
    """Until no turn is open, nothing of a reply is still sounding (or echoing) and SETTLE_S has passed so."""
    deadline = time.monotonic() + cap_s
    quiet_since = None
    while time.monotonic() < deadline:
        now = time.monotonic()
        busy = any(t.end is None for t in door.turns()) or (speaker is not None and speaker.playing(now))
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= SETTLE_S:
            return
        time.sleep(0.05)


def wait_answer(door: Door, after: float, cap_s: float) -> None:
    """Until a turn committed after `after` has ended, not withdrawn because the request went on."""
    deadline = time.monotonic() + cap_s
    while time.monotonic() < deadline:
        if any(t.at >= after and t.end is not None and t.reason != "extended" for t in door.turns()):
            return
        time.sleep(0.05)


def first_reply_audio(door: Door, after: float, cap_s: float) -> float | None:
    deadline = time.monotonic() + cap_s
    while time.monotonic() < deadline:
        audio = [t.first_audio for t in door.turns() if t.first_audio is not None and t.first_audio > after]
        if audio:
            return min(audio)
        time.sleep(0.02)
    return None


def run_room(url: str, pid: int | None, door_name: str, room: str, questions: list[dict], follow_ups: list[dict],
             barges: int, reply_db: float) -> RoomResult:
    from scripts.eval.questions import LONG
    from scripts.eval.scoring import MAX_WORDS, heard_ok, is_right

    voices = ("hibari", "piper")
    echo = room in ECHO_ROOMS
    speaker = Speaker(0.0, speaker_gain(reply_db), room_impulse_response()) if echo else None
    bed = build_bed(room)
    plan: list[Asked] = []  # what will be said, in order
    if room == "doubletalk":
        for i, q in enumerate(follow_ups):
            plan.append(Asked("request", LONG[i % len(LONG)], voices[i % 2]))
            plan.append(Asked("barge", f"Wait, stop. {q['q']}", voices[i % 2], qid=q["id"]))
    else:
        plan += [Asked("question", q["q"], voices[i % 2], qid=q["id"]) for i, q in enumerate(questions)]
        for i in range(barges):
            q = follow_ups[i % len(follow_ups)]
            plan.append(Asked("request", LONG[i % len(LONG)], voices[i % 2]))
            plan.append(Asked("barge", f"Wait, stop. {q['q']}", voices[i % 2], qid=q["id"]))
    speech = {(a.voice, a.text): user_speech(a.voice, a.text) for a in plan}
    door = DOORS[door_name](url, speaker).connect()
    mic = RoomMicrophone(door.send, door.chunk_ms, bed, speaker)
    cpu0, front0, mine0, t0 = *tree_cpu(pid), own_cpu(), time.monotonic()
    result = RoomResult(room, door_name)
    try:
        time.sleep(1.5)  # the room is heard before the user says anything
        for n, a in enumerate(plan):
            if speaker is not None and a.kind != "barge":
                a.echo_delay_s = speaker.delay_s = echo_delay(n)
            said = mic.say(speech[(a.voice, a.text)])
            if a.kind == "request":  # the long reply to interrupt
                said.done.wait(30)
                a.onset, a.end = said.onset_sent, said.end_sent
                nxt = plan[n + 1]
                first = first_reply_audio(door, a.end, 30)
                if first is None:
                    nxt.over_reply = False
                else:
                    lead = speech[(nxt.voice, nxt.text)]
                    lead_s = int(np.flatnonzero(np.abs(lead.astype(np.int32)) > 800)[0]) / RATE
                    time.sleep(max(0.0, first + BARGE_AFTER_S - lead_s - time.monotonic()))
                continue
            said.done.wait(60)
            a.onset, a.end = said.onset_sent, said.end_sent
            wait_answer(door, a.onset, QUESTION_CAP_S)
            settle(door, speaker, SETTLE_CAP_S)
        settle(door, speaker, 10)
    finally:
        cpu1, front1 = tree_cpu(pid)
        result.seconds = time.monotonic() - t0
        result.server_cores = (cpu1 - cpu0) / result.seconds
        result.front_cores = (front1 - front0) / result.seconds
        result.client_cores = (own_cpu() - mine0) / result.seconds
        mic.close()
        turns, stops = door.turns(), door.stops()
        door.close()
    by_id = {q["id"]: q for q in questions + follow_ups}
    spans = [(a.onset, a.end) for a in plan if a.onset]
    claimed: set[str] = set()
    for i, a in enumerate(plan):
        if not a.onset:
            continue
        until = next((b.onset for b in plan[i + 1:] if b.onset), float("inf"))
        mine = [t for t in turns if a.onset + 0.1 <= t.at < until]
        said = by_id[a.qid]["q"] if a.qid else a.text
        own = [t for t in mine if t.at <= a.end + 2.0 or heard_ok(said, t.heard)]  # the user's, or holding it
        claimed |= {t.key for t in own}
        if a.kind == "request":
            if a.over_reply and plan[i + 1].onset:
                nxt = plan[i + 1]
                nxt.over_reply = any(t.first_audio is not None and t.first_audio < nxt.onset
                                     and (t.end is None or t.end > nxt.onset) for t in mine)
            continue
        q = by_id[a.qid]
        # its answer: the first reply to a turn that heard it (a room can hold an utterance open past its end),
        # else to the turn its end made; a turn withdrawn because the request went on is not an answer
        answers = [t for t in mine if t.reason != "extended"]
        answer = next((t for t in answers if heard_ok(q["q"], t.heard)), None) or next(
            (t for t in answers if t.at <= a.end + 2.0 and t.first_audio is not None), None)
        if answer is not None:
            claimed.add(answer.key)
            a.answer = asdict(answer)
            a.right = is_right(q, answer.reply) and len(answer.reply.split()) <= q.get("max_words", MAX_WORDS)
            # as measure.ask: the first reply audio after the last voiced sample, a withdrawn reply's included
            heard = [t.first_audio for t in [*own, answer] if t.first_audio is not None and t.first_audio >= a.end]
            a.v2v_s = round(min(heard) - a.end, 3) if heard else None
        if a.kind == "barge":
            # a stop sooner than the user could have caused one (64 ms voiced, then confirmed) was something else's
            stop = next((s for s in stops if a.onset + EARLIEST_STOP_S <= s <= a.onset + STOPPED_WITHIN_S), None)
            a.stop_s = None if stop is None else round(stop - a.onset, 3)
            a.stopped_before = any(a.onset - 1.0 <= s < a.onset + EARLIEST_STOP_S for s in stops)
    result.asked = plan
    result.unasked = [asdict(t) for t in turns if t.first_audio is not None and t.key not in claimed]
    result.echo_dropped = sum(t.reason == "echo" for t in turns)
    for s in stops:
        if not any(on - 0.2 <= s <= off + 1.5 for on, off in spans):
            if speaker is not None and s not in speaker.cuts:  # (the client was playing nothing: nothing was cut)
                result.idle_stops += 1
                continue
            cut = next((t for t in turns if t.first_audio is not None and t.first_audio <= s
                        and (t.end is None or t.end >= s - 0.05)), None)
            result.echo_cuts.append({"at_s": round(s - t0, 2), "turn": asdict(cut) if cut else None})
    result.echo_level_db = speaker.level_db() if speaker else None
    return result


# --- the run -----------------------------------------------------------------------------------------------------
def print_table(rows: list[dict]) -> None:
    head = ("room", "right/asked", "unasked replies", "cut, user silent", "echo dropped", "barge stopped", "stop p50",
            "v2v p50/p90", "server cores", "front")
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print(f"| {r['room']} | {r['right']}/{r['asked']} | {r['unasked_replies']} | {r['echo_cuts']} | "
              f"{r['echo_dropped']} | {r['barges_stopped']}/{r['barges']} | "
              f"{'-' if r['stop_p50_s'] is None else str(r['stop_p50_s']) + ' s'} | "
              f"{r['v2v_p50_s']} / {r['v2v_p90_s']} s | {r['server_cores']} | {r['front_cores']} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rooms", default=",".join(ROOMS), help="comma-separated: " + ", ".join(ROOMS))
    parser.add_argument("--questions", type=int, default=12, help="questions per room (doubletalk: interruptions)")
    parser.add_argument("--barges", type=int, default=1, help="interruptions in each room but doubletalk")
    parser.add_argument("--door", choices=tuple(DOORS), default="vita")
    parser.add_argument("--page_echo", choices=("on", "off", "default"), default="default",
                        help="the server started here: turn.speaker_echo_page on or off (default: its config's)")
    parser.add_argument("--url", help="a running server (with --server_pid: its front's pid, for the CPU)")
    parser.add_argument("--server_pid", type=int)
    parser.add_argument("--json", help="write every room's rows and details here")
    argv = sys.argv[1:]
    server_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    rooms = [r for r in args.rooms.split(",") if r]
    for room in rooms:
        if room not in ROOMS:
            raise SystemExit(f"unknown room {room!r}: {', '.join(ROOMS)}")
    from scripts.bench.common import cpu_description
    from scripts.eval.questions import plain_questions
    from tests.harness.speech import spoken

    asked = plain_questions()
    questions, follow_ups = asked[:args.questions], asked[12:12 + max(args.questions, args.barges, 1)]
    reply_db = level_db(np.asarray(spoken("The capital of France is Paris, a city on the river Seine.")))
    server, url, pid = None, args.url, args.server_pid
    started = time.monotonic()
    if url is None:
        from tests.harness.server import start_server, wait_ready

        tmp = Path(tempfile.mkdtemp())
        extra = []
        if args.page_echo != "default":
            config = tmp / "rooms.yaml"
            config.write_text(f"turn:\n  speaker_echo_page: {'true' if args.page_echo == 'on' else 'false'}\n")
            extra = ["--config", str(config)]
        server = start_server(tmp, "--timeout", "3600", *extra, *server_args)
        wait_ready(server)
        url, pid = server.url, server.process.pid
        print(f"server ready in {server.ready_after_s:.1f} s; log {server.log_path}", flush=True)
    results: list[RoomResult] = []
    try:
        warm = run_room(url, pid, args.door, "quiet", asked[:1], asked[12:13], 0, reply_db)  # warm-up, not counted
        print(f"warm-up: {warm.summary()['right']}/1 right", flush=True)
        for room in rooms:
            result = run_room(url, pid, args.door, room, questions, follow_ups, args.barges, reply_db)
            results.append(result)
            s = result.summary()
            print(f"{room}: {json.dumps(s)}", flush=True)
            for a in result.asked:
                if a.kind == "request":
                    continue
                got = a.answer or {}
                print(f"   {'ok ' if a.right else 'NO '} [{a.voice}] {a.text!r} heard {got.get('heard')!r} -> "
                      f"{got.get('reply')!r}" + (f" ({got.get('reason')})" if got.get("reason") else "")
                      + (f" stop {a.stop_s}" if a.kind == "barge" else ""), flush=True)
            for u in result.unasked:
                print(f"   UNASKED heard {u['heard']!r} -> {u['reply']!r} ({u['reason']})", flush=True)
            for c in result.echo_cuts:
                print(f"   CUT at {c['at_s']} s: {c['turn']}", flush=True)
    finally:
        if server is not None:
            from tests.harness.server import stop_server

            stop_server(server)
    rows = [r.summary() for r in results]
    print_table(rows)
    print(f"\n{args.door} door, {args.questions} questions a room, {time.monotonic() - started:.0f} s in all; "
          f"CPU {cpu_description()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"door": args.door, "questions": args.questions,
                                               "page_echo": args.page_echo, "cpu": cpu_description(),
                                               "rows": rows, "rooms": [asdict(r) for r in results]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
