"""The turn-taking trials, each played on a session's client and returning its row: a complete question, a request
with a pause inside, a sound over a reply, an interruption over a reply and a one-word command over a reply."""

from __future__ import annotations

import time

import numpy as np

from scripts.bench.measure import barge_in_reaction, send_speech, voice_to_voice
from scripts.bench.turns.events import (
    answered,
    content_words,
    ended_naturally_at,
    gave_up,
    mentions,
    over,
    play,
    settled,
    since,
    transcript,
    turns,
    wait_open_mic,
)
from scripts.bench.turns.sounds import say
from tests.harness.client import RecordingClient
from tests.harness.speech import RATE, silence, voiced_span

INTERRUPTED_QUESTION = "Tell me about France: its capital, its food and its weather."
SOUND_LEAD_S = 0.5  # the sound (or interruption) starts this long after `state` speaking arrived
FALSE_STOP_WINDOW_S = 3.0  # after the sound's end


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
    row["voice_to_voice_s"] = voice_to_voice(events, voiced_at)
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
    stop_s, duck_s = barge_in_reaction(events, onset)
    cancelled = [(t, d.get("reason")) for t, n, d in events if n == "turn_cancelled" and d.get("turn_id") == turn_id]
    after = turns(events)
    row.update({"stop_s": stop_s, "duck_s": duck_s,
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
