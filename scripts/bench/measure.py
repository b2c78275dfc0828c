"""How a client measures a turn, shared by the benchmarks and evaluations: speech sent at real time with the
microphone left open, the turn that answered it, voice-to-voice (last voiced sample sent -> first reply audio
received), the reply played as VITA's page plays it (gaps, loudness), and barge-in (speech over a reply -> its
sound ducked or stopped)."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Iterator

import numpy as np

from scripts.eval.questions import BARGE_OVER, BARGE_WITH
from scripts.eval.voices import synthesize
from tests.harness.client import RecordingClient
from tests.harness.speech import RATE, Microphone, RealTime, silence, stream, voiced_span

FRAME_MS = 32  # our page's binary frames


def send_speech(client: RecordingClient, speech: np.ndarray, lead_s: float = 0.5, tail_s: float = 1.5) -> float:
    """Stream lead silence + speech + tail silence at real time; returns when the last voiced sample was sent."""
    audio = np.concatenate([silence(lead_s), speech, silence(tail_s)])
    last_voiced = int((lead_s + voiced_span(speech)[1]) * RATE)
    step = RATE * FRAME_MS // 1000
    clock = RealTime()
    sent_last_voiced = 0.0
    for i in range(0, len(audio), step):
        client.sio.emit("audio", audio[i:i + step].astype("<i2").tobytes())
        if i <= last_voiced < i + step:
            sent_last_voiced = time.monotonic()
        clock.wait(i + step)
    return sent_last_voiced


@contextlib.contextmanager
def open_mic(client: RecordingClient, seconds: float = 120.0) -> Iterator[None]:
    """Meanwhile the microphone stays open (32 ms frames of silence at real-time pace), as a page's does: the
    server's VAD hears the silence that ends an utterance (the end-of-turn model may ask for 1.2 s of it)."""
    stop = threading.Event()
    mic = threading.Thread(target=stream, args=(client.sio, silence(seconds)), daemon=True,
                           kwargs={"chunk_ms": FRAME_MS, "binary": True, "stop": stop})
    mic.start()
    try:
        yield
    finally:
        stop.set()
        mic.join(2)


def first_after(client: RecordingClient, name: str, after: float, timeout: float = 60) -> tuple[float, object]:
    def found(events):
        return any(n == name and t >= after for t, n, _ in events)

    if not client.wait_for(found, timeout):
        raise TimeoutError(f"no {name} within {timeout} s")
    return next((t, d) for t, n, d in client.events if n == name and t >= after)



def answered_turn(client: RecordingClient, after: float) -> int:
    """The turn that answered the question asked after `after`, once it is over: a turn withdrawn because the
    question went on ("...Canada? Keep it short.": `extended`) is followed by the one that carries it."""
    while True:
        turn_at, turn = first_after(client, "turn", after, timeout=30)
        tid = turn["turn_id"]
        if not client.wait_for(lambda evs, t=tid: any(n == "state" and d.get("state") == "listening"
                                                      and d.get("turn_id") == t for _, n, d in evs), 60):
            raise TimeoutError(f"turn {tid} did not end within 60 s")
        ends = [d for _, n, d in client.events if n == "state" and d.get("turn_id") == tid
                and d.get("state") == "listening"]
        if ends[-1].get("reason") != "extended":
            return tid
        after = turn_at + 1e-6


GAP_S = 0.150  # no gap longer than this inside a reply


LOUD = 0.5  # a chunk at least this fraction of the reply's typical peak is full volume (ducked is 0.2)


def events_between(client: RecordingClient, start: float, end: float) -> list[tuple[float, str, object]]:
    with client.changed:
        return [e for e in client.events if start <= e[0] <= end]


def wait_turn_over(client: RecordingClient, after: float) -> tuple[int, float] | None:
    """The answered turn asked after `after` (answered_turn) and when it went back to listening."""
    try:
        tid = answered_turn(client, after)
    except TimeoutError:
        return None
    return tid, next(t for t, n, d in client.events if n == "state" and d.get("turn_id") == tid
                     and d.get("state") == "listening")


def playback(chunks: list[tuple[float, bytes]], stop_at: float | None = None) -> tuple[list[float], list[tuple]]:
    """Play chunks as VITA's page does (each after the previous, from its arrival): the gaps (a chunk arriving
    after the queue ran dry) and each chunk's (start, end, peak)."""
    gaps, played, end = [], [], None
    for arrived, pcm in chunks:
        if stop_at is not None and arrived >= stop_at:
            break
        samples = np.frombuffer(pcm, np.int16)
        duration = len(samples) / 24000
        if end is not None and arrived > end:
            gaps.append(arrived - end)
        start = arrived if end is None else max(arrived, end)
        end = start + duration
        played.append((start, end, int(np.abs(samples.astype(np.int32)).max()) if len(samples) else 0))
    return gaps, played


def voice_to_voice(events: list[tuple[float, str, object]], voiced_at: float) -> float | None:
    """A turn's voice-to-voice as its user meets it: from the last voiced sample sent to the reply's first audio
    received (None: no reply audio came). The one definition every benchmark reports."""
    audio = [t for t, n, _ in events if n == "audio" and t >= voiced_at]
    return audio[0] - voiced_at if audio else None


def barge_in_reaction(events: list[tuple[float, str, object]], onset: float) -> tuple[float | None, float | None]:
    """A barge-in as its user meets it: from the onset of their speech over a reply to the first `stop_tts` and the
    first `duck` (None: none came). The one definition every benchmark reports."""
    stop = next((t - onset for t, n, _ in events if n == "stop_tts" and t > onset), None)
    duck = next((t - onset for t, n, _ in events if n == "duck" and t > onset), None)
    return stop, duck


def ask(client: RecordingClient, mic: Microphone, voice: str, text: str, speech: np.ndarray | None = None
        ) -> dict | None:
    """Say `text` (in `voice`, or the `speech` given) and read the turn that answered it."""
    said = mic.say(synthesize(voice, text) if speech is None else speech)
    said.done.wait(30)
    over = wait_turn_over(client, said.onset_sent)
    if over is None:
        return None
    tid, end_at = over
    client.wait_for(lambda evs: any(n == "timings" and d.get("turn_id") == tid and d.get("stage") == "tts"
                                    for _, n, d in evs), 5)
    evs = events_between(client, said.onset_sent, end_at)
    audio = [(t, d) for t, n, d in evs if n == "audio" and isinstance(d, bytes | bytearray)]
    stages = {d["stage"]: d for _, n, d in client.events if n == "timings" and d.get("turn_id") == tid}
    llm, front, tts = stages.get("llm", {}), stages.get("front", {}), stages.get("tts", {})
    texts = [d["text"] for _, n, d in client.events if n == "response_text" and d.get("turn_id") == tid]
    gaps, _ = playback(audio)
    tokens, gen, first = llm.get("tokens", 0), llm.get("generate_s", 0), llm.get("first_token_s", 0)
    v2v = voice_to_voice(evs, said.end_sent)
    return {"question": text, "turn_id": tid, "reply": texts[-1] if texts else "",
            "client_v2v_s": v2v,
            "server_v2v_s": front.get("voice_to_voice_s"),
            # where the server's VAD put the end of speech, after the last voiced sample the client sent: what the
            # server's own voice-to-voice leaves out (the reply reaches the client in ~2 ms)
            "speech_end_late_s": v2v - front["voice_to_voice_s"] if v2v is not None and "voice_to_voice_s" in front
            else None,
            "end_of_speech_s": stages.get("vad", {}).get("end_of_speech_s"), "asr_s": llm.get("asr_s"),
            "first_token_s": first, "first_piece_s": llm.get("first_piece_s"),
            "tts_first_chunk_s": tts.get("first_chunk_s"), "prompt_tokens": llm.get("prompt_tokens"),
            "cached_tokens": llm.get("cached_tokens"),
            "tokens": tokens, "decode_tok_s": (tokens - 1) / (gen - first) if tokens > 2 and gen > first else None,
            "max_gap_s": max(gaps, default=0.0), "gaps_over": sum(g > GAP_S for g in gaps),
            "chunks": len(audio)}


def barge(client: RecordingClient, mic: Microphone, voice: str, speech: dict[str, np.ndarray] | None = None
          ) -> dict | None:
    """Ask for a long reply; ~1 s into its sound, speak over it: onset → the reply's sound quiet at the client."""
    speech = speech or {text: synthesize(voice, text) for text in (BARGE_OVER, BARGE_WITH)}
    said = mic.say(speech[BARGE_OVER])
    said.done.wait(30)
    if not client.wait_for(lambda evs: any(n == "audio" and t > said.end_sent for t, n, _ in evs), 30):
        return None
    first_audio = next(t for t, n, _ in client.events if n == "audio" and t > said.end_sent)
    time.sleep(max(0.0, first_audio + 1.0 - time.monotonic()))
    over = mic.say(speech[BARGE_WITH])
    over.done.wait(30)
    client.wait_for(lambda evs: any(n == "stop_tts" and t > over.onset_sent for t, n, _ in evs), 5)
    wait_turn_over(client, over.onset_sent)
    evs = events_between(client, said.end_sent, time.monotonic())
    stop_s, duck_s = barge_in_reaction(evs, over.onset_sent)
    stop = None if stop_s is None else over.onset_sent + stop_s
    duck = None if duck_s is None else over.onset_sent + duck_s
    audio = [(t, d) for t, n, d in evs if n == "audio" and isinstance(d, bytes | bytearray)
             and t < (stop or float("inf"))]
    _, played = playback(audio, stop)
    before = [peak for start, _, peak in played if start < over.onset_sent and peak > 0]
    typical = statistics.median(before) if before else 1
    loud_end = max((end for _, end, peak in played if peak >= LOUD * typical), default=over.onset_sent)
    # our page ducks what it holds at `duck` (the server what it has not sent); VITA's page cannot
    quiet_at = min(x for x in (stop, max(loud_end, over.onset_sent), duck if mic.binary else None) if x is not None)
    return {"onset_to_quiet_s": quiet_at - over.onset_sent,
            "onset_to_stop_tts_s": stop - over.onset_sent if stop else None,
            "onset_to_duck_event_s": duck - over.onset_sent if duck else None}
