"""Turn-taking benchmark: when does the server take the turn, and what interrupts its reply?

Plays four kinds of trials over the real Socket.IO protocol, as our page does (binary 16 kHz int16 PCM in 32 ms
frames at real-time pace; while the script waits it keeps the microphone open with silence), in a natural voice
(hibari) and robotic ones (piper; espeak-ng if installed), plus sounds it generates itself:

1. complete questions: end of turn = the server's `turn` event minus when the last voiced sample was sent;
   voice-to-voice = the first reply `audio` after that moment;
2. requests with a pause inside (two parts synthesised apart, each trimmed to its audible span, joined with 0.4,
   0.8, 1.2 or 1.5 s of silence): "one turn" if exactly one turn is answered (`state` speaking, and not withdrawn)
   and its `transcript` holds a content word of the second part (a turn withdrawn with `turn_cancelled`
   "extended" and sent again is one turn: its reply is stopped within a word and leaves no text on the page),
   otherwise "cut early" (two replies, or a reply to the first part only); no reply at all is counted apart;
3. sounds over a reply (a typed question with a long reply; 0.5 s after `state` speaking: a cough, knocks, claps,
   keyboard typing, or a spoken backchannel): a false stop is `stop_tts` or `turn_cancelled` "barge-in" from the
   sound's onset to 3 s after its end; `duck` / `unduck` are recorded too;
4. real interruptions, spoken 0.5, 1.7 or 3.1 s into a long reply (in different pieces of it): stop = `stop_tts`
   arrival minus when the first voiced sample of the interruption was sent; duck = `duck` arrival minus the same
   moment.

Each trial leaves its session as it found it: a reply still in flight is cut as the page does (`recording-stopped`
then `recording-started`: the turn is cancelled and the VAD starts afresh), then `reset_state` clears the history;
a session serves at most SESSION_TRIALS trials, one (kind, voice) group, and a trial that failed closes it.

Starts its own server (bundled models) unless --url is given; flags after `--` go to that server.
Usage: .venv/bin/python -m scripts.bench.turns [--quick] [--trials N] [--voices hibari,piper,espeak]
       [--kinds 1,2,3,4] [--json out.json] [--url URL] [-- --config FILE ...]
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from scripts.bench.common import cpu_description, percentile
from scripts.bench.measure import FRAME_MS, open_mic, send_speech
from scripts.eval.questions import E2E_LONG_QUESTIONS
from scripts.eval.scoring import digits, norm
from scripts.eval.voices import synthesize
from tests.harness.client import RecordingClient
from tests.harness.server import start_server, stop_server, wait_ready
from tests.harness.speech import RATE, silence, stream, voiced_span

# General questions, not chosen for (or tuned on) anything.
QUESTIONS = ["What is the capital of France?", "How many legs does a spider have?", "Who wrote Romeo and Juliet?",
             "What color is the sky on a clear day?", "How many days are in a week?",
             "What is the largest planet in our solar system?", "Can you recommend a good book?",
             "Where do penguins live?", "How do I boil an egg?", "Is a tomato a fruit?", "What is two plus three?",
             "What time zone is London in?"]
# (first part, second part): one request said with a pause inside.
PAUSED = [("My name is Anna.", "Please remember it."),
          ("What is the capital of Canada?", "Keep it short."),
          ("I was wondering", "what the biggest ocean is."),
          ("Tell me a fact about the moon.", "Something surprising."),
          ("Can you help me", "with a recipe for pancakes?"),
          ("I need to know", "how far away the sun is."),
          ("What's the weather like in spring?", "In Japan, I mean."),
          ("I have a cat named Max.", "What should I feed him?"),
          ("How long should I", "boil an egg for?")]
QUICK_PAUSED = PAUSED[1:3]  # one whose first part is a whole sentence, one whose first part is not
PAUSES_S = (0.4, 0.8, 1.2, 1.5)
MAX_ONE_REPLY_PAUSE_S = 1.2  # up to this inner pause, one reply that heard both halves
BACKCHANNELS = ["Mm-hmm.", "Yeah.", "Uh-huh.", "Okay.", "Right."]
NOISES = ("cough", "knock", "clap", "typing")
NOISE_VARIANTS = 5  # per category and --trials in a full run (1 with --quick)
INTERRUPTED_QUESTION = "Tell me about France: its capital, its food and its weather."
INTERRUPTIONS = ["Wait, stop. What about Germany instead?", "Hold on, stop. What about Spain?",
                 "Sorry, stop there. Tell me about Italy instead.", "No, wait. What about Japan?"]
COMMANDS = ["Stop.", "Wait.", "Hold on.", "No, stop."]  # voiced about as long as a backchannel: heard by the ASR
SOUND_LEAD_S = 0.5  # the sound (or interruption) starts this long after `state` speaking arrived
INTERRUPTION_LEADS_S = (0.5, 1.7, 3.1)  # interruptions start at different moments of the multi-piece reply
FALSE_STOP_WINDOW_S = 3.0  # after the sound's end
SESSION_TRIALS = 6
STOP_WORDS = {"the", "and", "for", "you", "are", "was", "what", "how", "who", "why", "when", "where", "which", "this",
              "that", "with", "about", "please", "can", "could", "would", "should", "does", "did", "have", "has",
              "had", "its", "it's", "i'm", "what's", "tell", "like", "there", "some", "any", "him", "her", "she"}
# Targets: the design's where it set one; the two marked * are references (see the table's footnotes):
# end of speech -> turn committed p50 <= 0.15 s, voice-to-voice p50 <= 0.5 s (on an AVX512-BF16
# machine), requests with an inner pause cut early <= 5 %, noises and backchannels stopping a reply <= 1 in 20.
# For interruptions: the first reaction (the duck) within
# 150 ms and the reply stopped (stop_tts) within 0.8 s of the speech's onset, every one; judged here at p90.
TARGETS = {"end_of_turn": 0.15, "voice_to_voice": 0.50, "cut_early_rate": 0.05, "false_stop_rate": 1 / 20,
           "first_reaction": 0.150, "stop_tts": 0.800}

Events = list[tuple[float, str, object]]


# --- sounds -----------------------------------------------------------------------------------------------------
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


# --- the microphone and the events --------------------------------------------------------------------------------
def since(client: RecordingClient, t0: float, name: str | None = None) -> Events:
    with client.changed:
        return [(t, n, d) for t, n, d in client.events if t >= t0 and (name is None or n == name)]


def wait_open_mic(client: RecordingClient, predicate: Callable[[Events], bool], timeout: float) -> bool:
    """Wait for predicate(events) while the microphone stays open, as a page's does."""
    with open_mic(client, timeout + 1):
        return client.wait_for(predicate, timeout)


def play(client: RecordingClient, audio: np.ndarray, marks: dict[str, int]) -> dict[str, float]:
    """Stream `audio` like send_speech (tests.harness.speech.stream, 32 ms binary frames, real time); returns when the
    frame holding each marked sample index was sent."""
    step = RATE * FRAME_MS // 1000
    sent: dict[str, float] = {}

    def between(t: float) -> None:
        now, first = time.monotonic(), round(t * RATE)
        for name, k in marks.items():
            if name not in sent and k < first + step:
                sent[name] = now

    stream(client.sio, audio, chunk_ms=FRAME_MS, binary=True, between=between)
    return sent


def state_of(events: Events) -> str:
    states = [d.get("state") for _, n, d in events if n == "state" and isinstance(d, dict)]
    return states[-1] if states else "listening"


def turns(events: Events) -> list[int]:
    return [d["turn_id"] for _, n, d in events if n == "turn"]


def answered(events: Events) -> list[int]:
    """Turns that got reply audio (`state` speaking) and kept it, in order: a reply withdrawn because the user went
    on with the request (`turn_cancelled` "extended", within turn.extend_grace_ms of its first audio) is stopped
    and leaves no text on the page; the whole request is answered by a later turn."""
    withdrawn = {d.get("turn_id") for _, n, d in events if n == "turn_cancelled" and d.get("reason") == "extended"}
    ids: list[int] = []
    for _, n, d in events:
        if n == "state" and d.get("state") == "speaking" and d.get("turn_id") not in {*ids, *withdrawn}:
            ids.append(d.get("turn_id"))
    return ids


def over(events: Events, turn_id: int) -> bool:
    """The turn got reply audio, or ended without (other than withdrawn to be extended)."""
    return any(n == "state" and d.get("turn_id") == turn_id and (d.get("state") == "speaking" or (
        d.get("state") == "listening" and d.get("reason") != "extended")) for _, n, d in events)


def gave_up(name: str, data: object) -> bool:
    """The server ended a turn with no reply to come (unanswered, or cancelled by its watchdog)."""
    return name == "state" and isinstance(data, dict) and data.get("state") == "listening" and bool(
        data.get("reason")) and data.get("reason") != "extended"


def settled(events: Events) -> bool:
    """The user's speech has ended (the last `vad` says so) and the last turn it made was answered or ended."""
    vad = [d.get("speaking") for _, n, d in events if n == "vad"]
    ids = turns(events)
    return bool(vad) and not vad[-1] and bool(ids) and over(events, ids[-1])


def transcript(events: Events, turn_id: int) -> str | None:
    texts = [d.get("text", "") for _, n, d in events if n == "transcript" and d.get("turn_id") == turn_id]
    return texts[-1] if texts else None


def content_words(text: str, leave_out: str = "") -> list[str]:
    left = set(digits(norm(leave_out)).split())
    return [w for w in digits(norm(text)).split() if len(w) >= 3 and w not in STOP_WORDS and w not in left]


def mentions(text: str, words: list[str]) -> bool:
    heard = digits(norm(text))
    return any(f" {w.rstrip('s')}" in heard for w in words)


def ended_naturally_at(events: Events, turn_id: int) -> float | None:
    """When the reply's turn ended by itself (played out), if it did."""
    return next((t for t, n, d in events if n == "state" and d.get("turn_id") == turn_id
                 and d.get("state") == "listening" and not d.get("reason")), None)


class Sessions:
    """One session per (kind, voice) group, renewed every SESSION_TRIALS trials and after a failed trial."""

    def __init__(self, url: str):
        self.url = url
        self.client: RecordingClient | None = None
        self.used = 0

    def get(self) -> RecordingClient:
        if self.client is None or self.used >= SESSION_TRIALS or not self.client.sio.connected:
            self.close()
            self.client = RecordingClient(self.url).connect()
            self.used = 0
        self.used += 1
        return self.client

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
            time.sleep(0.3)  # let the server end the session before the next one connects (max_users)

    def settle(self) -> None:
        """Back to listening, nothing in flight, no history, before the next trial."""
        client = self.client
        if client is None:
            return
        mark = time.monotonic()
        if state_of(since(client, 0)) != "listening":  # a reply still playing (or being prepared): cut it
            client.sio.emit("recording-stopped")
            client.sio.emit("recording-started")
            if not client.wait_for(lambda evs: len([1 for t, n, _ in evs if n == "stop_tts" and t >= mark]) >= 2, 5):
                print("  (the session did not stop its reply on recording-stopped/-started: renewing it)", flush=True)
                self.close()
                return
        mark = time.monotonic()
        client.sio.emit("reset_state")
        if not client.wait_for(lambda evs: any(n == "history_cleared" and t >= mark for t, n, _ in evs), 5):
            print("  (no history_cleared after reset_state: renewing the session)", flush=True)
            self.close()
            return
        time.sleep(0.2)
        if state_of(since(client, 0)) != "listening":
            print(f"  (the session is '{state_of(since(client, 0))}' after settling: renewing it)", flush=True)
            self.close()


# --- the trials ---------------------------------------------------------------------------------------------------
def complete_question(client: RecordingClient, voice: str, text: str) -> dict:
    row: dict = {"voice": voice, "text": text}
    mark = time.monotonic()
    voiced_at = send_speech(client, say(voice, text), lead_s=0.5, tail_s=2.0)
    if not wait_open_mic(client, lambda evs: any(t >= voiced_at and (n == "audio" or gave_up(n, d))
                                                 for t, n, d in evs), 30):
        row["error"] = "no reply audio within 30 s"
    elif not any(n == "audio" for _, n, _ in since(client, voiced_at)):
        row["error"] = "the turn ended unanswered"
    events = since(client, mark)
    ends = [t for t, n, _ in events if n == "turn" and t >= voiced_at]
    row["end_of_turn_s"] = ends[0] - voiced_at if ends else None
    audio = [t for t, n, _ in events if n == "audio" and t >= voiced_at]
    row["voice_to_voice_s"] = audio[0] - voiced_at if audio else None
    row["turns"] = turns(events)
    row["turns_before_end"] = len([1 for t, n, _ in events if n == "turn" and t < voiced_at])  # cut mid-question
    row["transcript"] = transcript(events, row["turns"][-1]) if row["turns"] else None
    return row


def paused_request(client: RecordingClient, voice: str, first: str, second: str, pause_s: float) -> dict:
    row: dict = {"voice": voice, "first": first, "second": second, "pause_s": pause_s}
    audio = np.concatenate([say(voice, first, trim=True), silence(pause_s), say(voice, second, trim=True)])
    mark = time.monotonic()
    voiced_at = send_speech(client, audio, lead_s=0.5, tail_s=2.0)

    if not wait_open_mic(client, lambda evs: settled([e for e in evs if e[0] >= mark]), 30):
        row["error"] = "no turn answered within 30 s"
    # Transcripts of the answered turns (ASR comes first, so they are normally here already), and a moment for a
    # late second turn.
    wait_open_mic(client, lambda evs: all(transcript(evs, i) is not None for i in answered(
        [e for e in evs if e[0] >= mark])), 3)
    wait_open_mic(client, lambda evs: False, 0.5)
    events = since(client, mark)
    replied = answered(events)
    row["turns"] = turns(events)
    row["answered"] = replied
    row["extended"] = len([1 for _, n, d in events if n == "turn_cancelled" and d.get("reason") == "extended"])
    row["barge_in"] = len([1 for _, n, d in events if n == "turn_cancelled" and d.get("reason") == "barge-in"])
    row["transcripts"] = {i: transcript(events, i) for i in row["turns"]}
    commits = [t for t, n, _ in events if n == "turn"]
    row["last_turn_after_voice_s"] = commits[-1] - voiced_at if commits else None
    words = content_words(second, leave_out=first)
    row["second_part_words"] = words
    if not replied:
        row["outcome"] = "no reply"
    elif len(replied) > 1:
        row["outcome"] = "cut early"
        row["why"] = "two replies"
    else:
        heard = row["transcripts"].get(replied[0])
        if heard is None:  # no transcript for the answered turn: what it covered is not known
            row["outcome"] = "unknown"
        else:
            row["outcome"] = "one turn" if mentions(heard, words) else "cut early"
        if row["outcome"] == "cut early":
            row["why"] = "the reply was for the first part only"
    return row


def _speaking_after(client: RecordingClient, mark: float, question: str) -> tuple[float, int] | None:
    """Ask `question` by text; when its reply starts (`state` speaking) and its turn id."""
    client.sio.emit("text_input", {"text": question})
    wait_open_mic(client, lambda evs: any(t >= mark and ((n == "state" and d.get("state") == "speaking")
                                                         or gave_up(n, d)) for t, n, d in evs), 60)
    return next(((t, d["turn_id"]) for t, n, d in since(client, mark, "state") if d.get("state") == "speaking"),
                None)


def sound_over_reply(client: RecordingClient, category: str, label: str, sound: np.ndarray, question: str) -> dict:
    row: dict = {"category": category, "sound": label, "question": question}
    mark = time.monotonic()
    speaking = _speaking_after(client, mark, question)
    if speaking is None:
        return {**row, "error": "no reply (unanswered, stalled, or not within 60 s)", "valid": False}
    speaking_at, turn_id = speaking
    lead = max(0.0, SOUND_LEAD_S - (time.monotonic() - speaking_at))
    first, last = voiced_span(sound)
    marks = {"onset": int((lead + first) * RATE), "end": int((lead + last) * RATE)}
    sent = play(client, np.concatenate([silence(lead), sound, silence(FALSE_STOP_WINDOW_S)]), marks)
    onset, end = sent["onset"], sent["end"]
    wait_open_mic(client, lambda evs: False, max(0.0, end + FALSE_STOP_WINDOW_S - time.monotonic()))
    events = [e for e in since(client, onset) if e[0] <= end + FALSE_STOP_WINDOW_S]
    stops = [t for t, n, d in events if n == "stop_tts" or (n == "turn_cancelled" and d.get("reason") == "barge-in")]
    ducks = [t for t, n, _ in events if n == "duck"]
    unducks = [t for t, n, _ in events if n == "unduck" and ducks and t >= ducks[0]]
    natural_end = ended_naturally_at(since(client, mark), turn_id)
    row.update({
        "sound_s": round(last - first, 3), "heard_as_speech": any(n == "vad" and d.get("speaking")
                                                                  for _, n, d in events),
        "false_stop": bool(stops), "stop_after_onset_s": stops[0] - onset if stops else None,
        "ducked": bool(ducks), "duck_after_onset_s": ducks[0] - onset if ducks else None,
        "unducked": bool(unducks), "duck_held_s": unducks[0] - ducks[0] if unducks else None,
        "reply_ended_after_sound_s": natural_end - end if natural_end else None,
        # the reply played out while the page was ducked, and nothing (unduck, stop_tts) gave its volume back
        "left_ducked": bool(ducks) and not unducks and not stops and natural_end is not None,
        "became_turn": [(d.get("turn_id"), transcript(since(client, onset), d.get("turn_id")))
                        for _, n, d in events if n == "turn"]})
    # The sound was over a reply only if the reply had not played out by then (0.5 s: enough to be confirmed).
    row["valid"] = natural_end is None or natural_end > end + 0.5 or bool(stops)
    return row


def _said_over_reply(client: RecordingClient, voice: str, text: str, lead_s: float = SOUND_LEAD_S
                     ) -> tuple[float, int, dict[str, float], float] | None:
    """Ask the long question; `lead_s` into its reply, say `text` (then 2 s of open microphone). When it was
    asked, its turn id, when the first and last voiced samples of `text` were sent, and how long it is voiced;
    None if no reply came."""
    mark = time.monotonic()
    speaking = _speaking_after(client, mark, INTERRUPTED_QUESTION)
    if speaking is None:
        return None
    speaking_at, turn_id = speaking
    speech = say(voice, text)
    first, last = voiced_span(speech)
    lead = max(0.0, lead_s - (time.monotonic() - speaking_at))
    sent = play(client, np.concatenate([silence(lead), speech, silence(2.0)]),
                {"onset": int((lead + first) * RATE), "end": int((lead + last) * RATE)})
    return mark, turn_id, sent, last - first


NO_REPLY = "no reply (unanswered, stalled, or not within 60 s)"


def interruption(client: RecordingClient, voice: str, text: str, lead_s: float = SOUND_LEAD_S) -> dict:
    row: dict = {"voice": voice, "text": text, "lead_s": lead_s}
    said = _said_over_reply(client, voice, text, lead_s)
    if said is None:
        return {**row, "error": NO_REPLY}
    mark, turn_id, sent, _ = said
    onset = sent["onset"]
    natural_end = ended_naturally_at(since(client, mark), turn_id)
    if natural_end is not None and natural_end < onset:
        return {**row, "error": "the reply ended before the interruption"}
    # The interruption is the user's next request: wait for its turn to be answered (or to end).
    wait_open_mic(client, lambda evs: settled([e for e in evs if e[0] >= onset]), 15)
    events = since(client, onset)
    stops = [t for t, n, _ in events if n == "stop_tts"]
    ducks = [t for t, n, _ in events if n == "duck"]
    cancelled = [(t, d.get("reason")) for t, n, d in events if n == "turn_cancelled" and d.get("turn_id") == turn_id]
    after = turns(events)
    row.update({"stop_s": stops[0] - onset if stops else None, "duck_s": ducks[0] - onset if ducks else None,
                "cancel_reason": cancelled[0][1] if cancelled else None,
                "cancel_s": cancelled[0][0] - onset if cancelled else None,
                "unducked": any(n == "unduck" for _, n, _ in events),
                "next_turns": after, "next_answered": answered(events),
                "next_transcript": transcript(events, after[-1]) if after else None,
                "extended": len([1 for _, n, d in events if n == "turn_cancelled" and d.get("reason") == "extended"]),
                "barge_ins": len([1 for _, n, d in events if n == "turn_cancelled" and d.get("reason") == "barge-in"])})
    if row["stop_s"] is None:
        row["error"] = "no stop_tts"
    return row


def command_over_reply(client: RecordingClient, voice: str, text: str) -> dict:
    """A one-word command ("Stop.") 0.5 s into a long reply: does it stop it, how soon after the word ends, and is
    it (wrongly) answered as a request of its own?"""
    row: dict = {"voice": voice, "text": text, "command": True}
    said = _said_over_reply(client, voice, text)
    if said is None:
        return {**row, "error": NO_REPLY}
    mark, turn_id, sent, voiced_s = said
    natural_end = ended_naturally_at(since(client, mark), turn_id)
    if natural_end is not None and natural_end < sent["end"] + 1.0:
        return {**row, "error": "the reply ended too soon after the command"}
    made = turns(since(client, sent["onset"]))
    if made:  # a turn of the command's words: is it answered? (the LLM worker drops one that is only a command)
        wait_open_mic(client, lambda evs: over(evs, made[-1]), 20)
    events = since(client, sent["onset"])
    stops = [t for t, n, _ in events if n == "stop_tts"]
    row.update({"voiced_s": round(voiced_s, 3), "stopped": bool(stops),
                "stop_s": stops[0] - sent["onset"] if stops else None,
                "stop_after_end_s": stops[0] - sent["end"] if stops else None,
                "became_turn": made, "answered": [i for i in answered(events) if i != turn_id]})
    return row


# --- running and reporting ------------------------------------------------------------------------------------
def run_group(sessions: Sessions, title: str, jobs: list[tuple[str, Callable[[RecordingClient], dict]]]
              ) -> list[dict]:
    rows = []
    for label, job in jobs:
        client = sessions.get()
        try:
            row = job(client)
        except Exception as e:  # a trial that failed is reported as such; the next gets a fresh session
            given = {k: v for k, v in getattr(job, "keywords", {}).items() if k != "sound"}
            row = {**given, "error": f"{type(e).__name__}: {e}"}
            sessions.close()
        else:
            sessions.settle()
        rows.append(row)
        print(f"  {title} | {label} | {brief(row)}", flush=True)
    sessions.close()
    return rows


def brief(row: dict) -> str:
    keys = ("end_of_turn_s", "voice_to_voice_s", "outcome", "why", "answered", "extended", "false_stop", "ducked",
            "duck_held_s", "left_ducked", "became_turn", "valid", "stopped", "stop_s", "stop_after_end_s", "duck_s",
            "cancel_reason", "next_transcript", "transcripts", "error")
    parts = []
    for k in keys:
        if k in row and row[k] not in (None, [], {}):
            v = row[k]
            parts.append(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}")
    return ", ".join(parts)


def p50_p90(values: list[float]) -> tuple[float | None, float | None]:
    return (statistics.median(values), percentile(values, 0.9)) if values else (None, None)


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else "PASS" if ok else "FAIL"


def summarise(results: dict[str, list[dict]], voices: list[str]) -> list[dict]:
    table = []

    def add(kind: str, who: str, n: int, metric: str, p50=None, p90=None, rate: str = "", target: str = "",
            ok: bool | None = None, notes: str = "", unit: float = 1.0, digits: int = 2) -> None:
        def fmt(v: float | None) -> str:
            return "" if v is None else f"{v * unit:.{digits}f}"

        table.append({"kind": kind, "voice": who, "n": n, "metric": metric, "p50": fmt(p50), "p90": fmt(p90),
                      "rate": rate, "target": target, "result": verdict(ok) if target else "", "notes": notes})

    for voice in voices:
        rows = [r for r in results.get("complete", []) if r.get("voice") == voice]
        if not rows:
            continue
        eot = [r["end_of_turn_s"] for r in rows if r.get("end_of_turn_s") is not None]
        v2v = [r["voice_to_voice_s"] for r in rows if r.get("voice_to_voice_s") is not None]
        slow = len([v for v in eot if v > 1.0])
        split = len([r for r in rows if r.get("turns_before_end") or len(r.get("turns") or []) > 1])
        p50, p90 = p50_p90(eot)
        add("1 complete questions", voice, len(eot), "end of turn (s)", p50, p90,
            target=f"<= {TARGETS['end_of_turn']:.2f} s p50",
            ok=None if p50 is None else p50 <= TARGETS["end_of_turn"],
            notes=f"{slow} waited > 1 s (judged unfinished); {split} split; "
                  f"{len(rows) - len(eot)} no turn")
        p50, p90 = p50_p90(v2v)
        add("1 complete questions", voice, len(v2v), "voice-to-voice (s)", p50, p90,
            target=f"<= {TARGETS['voice_to_voice']:.2f} s p50",
            ok=None if p50 is None else p50 <= TARGETS["voice_to_voice"])
    for voice in voices:
        for pause in PAUSES_S:
            rows = [r for r in results.get("paused", []) if r.get("voice") == voice and r.get("pause_s") == pause]
            if not rows:
                continue
            outcomes = [r.get("outcome") for r in rows]
            cut, one, none = outcomes.count("cut early"), outcomes.count("one turn"), outcomes.count("no reply")
            judged = [r for r in rows if r.get("outcome") and r.get("outcome") != "unknown"]
            unknown = outcomes.count("unknown")
            two = len([r for r in rows if r.get("why") == "two replies"])
            ext = len([r for r in rows if r.get("extended")])
            rate = f"{cut}/{len(judged)} = {cut / len(judged):.0%}" if judged else ""
            # Past ~1.2 s the first half's reply has been heard: the second half is a new request (by design).
            held_to_one = pause <= MAX_ONE_REPLY_PAUSE_S
            add("2 paused requests", voice, len(judged), f"cut early, pause {pause:.1f} s", rate=rate,
                target=f"<= {TARGETS['cut_early_rate']:.0%}" if held_to_one else "",
                ok=(cut / len(judged) <= TARGETS["cut_early_rate"]) if judged and held_to_one else None,
                notes=f"one turn {one}, cut {cut} ({two} two replies, {cut - two} first part only), no reply {none}; "
                      f"extended in {ext}; unknown (no transcript) {unknown}; "
                      f"errors {len(rows) - len(judged) - unknown}")
    sounds = results.get("sounds", [])
    for category in [*NOISES, *[f"backchannel {v}" for v in voices]]:
        rows = [r for r in sounds if r.get("category") == category]
        if not rows:
            continue
        valid = [r for r in rows if r.get("valid") and "error" not in r]
        stops = len([r for r in valid if r["false_stop"]])
        ducked = [r for r in valid if r["ducked"]]
        unducked = [r for r in ducked if r["unducked"]]
        held = [r["duck_held_s"] for r in unducked]
        turned = len([r for r in valid if r.get("became_turn")])
        left = len([r for r in valid if r.get("left_ducked")])
        rate = f"{stops}/{len(valid)} = {stops / len(valid):.0%}" if valid else ""
        add("3 sound over a reply", category, len(valid), "false stop", rate=rate,
            target="<= 1 in 20", ok=(stops / len(valid) <= TARGETS["false_stop_rate"]) if valid else None,
            notes=f"ducked {len(ducked)}, then unducked {len(unducked)}"
                  + (f" (ducked for p50 {statistics.median(held):.2f} s)" if held else "")
                  + (f"; left ducked at the reply's end {left}" if left else "")
                  + f"; became a turn {turned}; {len(rows) - len(valid)} not over a reply or failed")
    for voice in voices:
        rows = [r for r in results.get("interruptions", []) if r.get("voice") == voice]
        if not rows:
            continue
        stop = [r["stop_s"] for r in rows if r.get("stop_s") is not None]
        missed = len([r for r in rows if r.get("error") == "no stop_tts"])
        duck = [r["duck_s"] for r in rows if r.get("duck_s") is not None]
        heard = len([r for r in rows if r.get("next_answered")])
        twice = len([r for r in rows if (r.get("barge_ins") or 0) > 1])
        p50, p90 = p50_p90(stop)
        add("4 interruptions", voice, len(stop), "stop_tts after onset (ms)", p50, p90,
            target=f"<= {TARGETS['stop_tts'] * 1000:.0f} ms p90",
            ok=False if missed else None if p90 is None else p90 <= TARGETS["stop_tts"], unit=1000, digits=0,
            rate=f"stopped {len(stop)}/{len(stop) + missed}",
            notes=f"interruption answered as the next turn in {heard}/{len(rows)}; its first part answered, "
                  f"then cut by its second, in {twice}; started {', '.join(f'{x:.1f}' for x in INTERRUPTION_LEADS_S)}"
                  " s into the reply")
        p50, p90 = p50_p90(duck)
        add("4 interruptions", voice, len(duck), "duck after onset (ms)", p50, p90,
            target=f"<= {TARGETS['first_reaction'] * 1000:.0f} ms p90",
            ok=None if p90 is None else p90 <= TARGETS["first_reaction"], unit=1000, digits=0)
    for voice in voices:
        rows = [r for r in results.get("commands", []) if r.get("voice") == voice and "error" not in r]
        if not rows:
            continue
        stopped = [r for r in rows if r["stopped"]]
        p50, p90 = p50_p90([r["stop_after_end_s"] for r in stopped])
        add("4 one-word commands", voice, len(rows), "stop_tts after the word's end (ms)", p50, p90,
            rate=f"stopped {len(stopped)}/{len(rows)}", target="", ok=None, unit=1000, digits=0,
            notes=f"voiced p50 {statistics.median(r['voiced_s'] for r in rows):.2f} s; a turn of its own "
                  f"{len([r for r in rows if r['became_turn']])}, answered {len([r for r in rows if r['answered']])}")
    return table


def print_table(table: list[dict]) -> None:
    heads = ["kind", "voice", "n", "metric", "p50", "p90", "rate", "target", "result", "notes"]
    widths = {h: max(len(h), *(len(str(r[h])) for r in table)) for h in heads[:-1]}
    print("  ".join(h.ljust(widths.get(h, 0)) for h in heads))
    for r in table:
        print("  ".join(str(r[h]).ljust(widths.get(h, 0)) for h in heads[:-1]) + "  " + r["notes"])
    print("Targets: the turn-taking design's (the silence-only end of turn this replaced took 0.39 s p50: "
          "docs/history.md).")


def plan(args: argparse.Namespace, voices: list[str]) -> dict[str, list[tuple[str, str, Callable]]]:
    """(group title, trial label, job) per kind; each job takes a client and returns its row."""
    n = max(1, args.trials)
    kinds = set(args.kinds.split(","))
    questions = QUESTIONS[:4] if args.quick else QUESTIONS
    paused = QUICK_PAUSED if args.quick else PAUSED
    variants = 1 if args.quick else NOISE_VARIANTS
    backchannels = BACKCHANNELS[::2] if args.quick else BACKCHANNELS
    interruptions = INTERRUPTIONS[:2] if args.quick else INTERRUPTIONS
    partial = functools.partial
    jobs: dict[str, list] = {"complete": [], "paused": [], "sounds": [], "interruptions": [], "commands": []}
    for voice in voices:
        for rep in range(n):
            if "1" in kinds:
                jobs["complete"] += [(f"complete questions, {voice}", f"{q} (#{rep + 1})",
                                      partial(complete_question, voice=voice, text=q)) for q in questions]
            if "2" in kinds:
                jobs["paused"] += [(f"paused requests, {voice}", f"{a} / {pause:.1f} s / {b}",
                                    partial(paused_request, voice=voice, first=a, second=b, pause_s=pause))
                                   for a, b in paused for pause in PAUSES_S]
            if "4" in kinds:
                leads = INTERRUPTION_LEADS_S[:1] if args.quick else INTERRUPTION_LEADS_S
                jobs["interruptions"] += [(f"interruptions, {voice}", f"{text} ({lead:.1f} s in)",
                                           partial(interruption, voice=voice, text=text, lead_s=lead))
                                          for text in interruptions for lead in leads]
                jobs["commands"] += [(f"one-word commands, {voice}", text,
                                      partial(command_over_reply, voice=voice, text=text))
                                     for text in (COMMANDS[:2] if args.quick else COMMANDS)]
    if "3" in kinds:
        asked = 0  # the long questions are taken in turn
        for seed in range(n * variants):
            for name in NOISES:
                jobs["sounds"].append(("sounds over a reply, noises", f"{name} #{seed + 1}", partial(
                    sound_over_reply, category=name, label=f"{name} seed {seed}", sound=SOUNDS[name](seed),
                    question=E2E_LONG_QUESTIONS[asked % len(E2E_LONG_QUESTIONS)])))
                asked += 1
        for voice in voices:
            for rep in range(n):
                for text in backchannels:
                    jobs["sounds"].append((f"sounds over a reply, backchannels, {voice}", f"{text} #{rep + 1}", partial(
                        sound_over_reply, category=f"backchannel {voice}", label=text, sound=say(voice, text),
                        question=E2E_LONG_QUESTIONS[asked % len(E2E_LONG_QUESTIONS)])))
                    asked += 1
    return jobs


def synthesize_all(voices: list[str], quick: bool) -> None:
    """Everything the voices will say, made before the trials (while the server loads)."""
    texts = [*(QUESTIONS[:4] if quick else QUESTIONS), *(BACKCHANNELS[::2] if quick else BACKCHANNELS),
             *(INTERRUPTIONS[:2] if quick else INTERRUPTIONS)]
    for voice in voices:
        for text in texts:
            say(voice, text)
        for a, b in QUICK_PAUSED if quick else PAUSED:
            say(voice, a, trim=True)
            say(voice, b, trim=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="use this running server instead of starting one")
    parser.add_argument("--voices", default="hibari,piper,espeak",
                        help="hibari (natural), piper, espeak[:VARIANT] (robotic; skipped if espeak-ng is missing)")
    parser.add_argument("--trials", type=int, default=1, help="repeat every trial N times (scales the counts)")
    parser.add_argument("--quick", action="store_true", help="a subset of each kind: about 5 minutes")
    parser.add_argument("--kinds", default="1,2,3,4", help="1 complete questions, 2 paused requests, "
                                                           "3 sounds over a reply, 4 interruptions")
    parser.add_argument("--json", help="write every trial and the table here")
    parser.add_argument("server_args", nargs="*", help="after --: flags for the server it starts")
    args = parser.parse_args()
    voices = []
    for voice in args.voices.split(","):
        if voice.startswith("espeak") and shutil.which("espeak-ng") is None:
            print(f"voice {voice}: espeak-ng is not installed, skipped", flush=True)
        elif voice:
            voices.append(voice)
    started = time.monotonic()
    machine = cpu_description()
    server = None
    url = args.url
    try:
        if url is None:
            tmp = Path(tempfile.mkdtemp(prefix="vita-bench-turns-"))
            server = start_server(tmp, "--max_users", "4", "--timeout", "3600", *args.server_args)
            print(f"starting a server ({tmp / 'server.log'}) ...", flush=True)
        synthesize_all(voices, args.quick)
        if server is not None:
            wait_ready(server)
            url = server.url
        import requests

        llm = requests.get(url + "/health", verify=False, timeout=10).json().get("llm") or {}
        results: dict[str, list[dict]] = {}
        sessions = Sessions(url)
        for kind, jobs in plan(args, voices).items():
            results[kind] = []
            for title in dict.fromkeys(title for title, _, _ in jobs):
                print(f"{title}:", flush=True)
                results[kind] += run_group(sessions, title, [(label, job) for t, label, job in jobs if t == title])
    finally:
        if server is not None:
            stop_server(server)
    table = summarise(results, voices)
    print(f"\nturn-taking benchmark, {time.monotonic() - started:.0f} s; voices {', '.join(voices)}"
          f"{'; --quick' if args.quick else ''}; --trials {args.trials}")
    print_table(table)
    print(f"CPU: {machine['model']}, {machine['cores']} cores, {machine['isa']}; load average at start "
          f"{machine['load_average'][0]:.2f}; LLM: {llm.get('summary', '?')}")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": machine, "llm": llm, "args": vars(args), "table": table,
                                               "trials": results}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
