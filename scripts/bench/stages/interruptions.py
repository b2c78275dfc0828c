"""Benchmark what a session's ears make of speech over the reply and of the room after a question, offline and in
seconds: the room benchmark's rooms (scripts/bench/rooms/sounds.py) and voices, through a segmenter built as the
server builds it (Silero VAD, the voice gate, the config's turn settings), with no server, no ASR and no reply.

confirm: the user asks two questions (their level and the room's are learnt), then, while the reply plays, says
"Wait, stop. <question>": how long after its onset the speech is confirmed (what interrupts the reply without waiting
for its words) and its first pause (where the words of a short command are checked), at several places in the room.
backchannels: the same, then short replies over the reply ("Mm-hmm.", "Okay, sure."): how many are confirmed, each
of them a reply stopped that the user did not mean to stop (the two-word ones are long enough to be, in quiet too).
ends: no reply; each question after the first is ended at its final pause, as the end-of-turn model ends a complete
one: how often the room then opens speech that goes on with it (each a turn withdrawn and answered later, with what
the room said in it), and when.
grace: each question after the first ended at its final pause, its reply's first audio 0.5 s later: how often
speech begun before the extension grace ran out (`turn.extend_grace_ms`) is kept or confirmed once the reply plays,
each a reply withdrawn and the request sent again with it (speech going on with it is ended at its pauses, as the
end-of-turn model ends a finished one: the question's own last sound, kept where a room hid it, ends before the reply),
and how many of those the turn machine now takes for other people's (TurnTaking's others_speech: other people
talking, more than ROOM_UNDER_REQUEST_DB under the request's voice); then the user going on with a request (the
turn-taking benchmark's paused ones) 0.3 s into its reply: how often that is taken for other people's.
paused: no reply; requests said with a pause (the turn-taking benchmark's), their first part ended at its final
pause: whether the second goes on with it (what a stricter bar for the room's speech going on must keep).

Usage: .venv/bin/python -m scripts.bench.stages.interruptions [confirm|backchannels|ends|grace|paused]
    [--rooms quiet,noise10,...] [--places 12]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scripts.bench.rooms.sounds import RATE, build_bed
from tests.harness.speech import silence, voiced_span
from vita.hearing.utterance import Heard, VadEvent

if TYPE_CHECKING:
    from vita.hearing.vad import VadSegmenter

BACKCHANNELS = ("Mm-hmm.", "Yeah.", "Uh-huh.", "Okay.", "Right.", "Okay, sure.", "Yeah, right.", "Mm-hmm, yeah.",
                "Uh-huh, okay.", "I see.")
VOICES = ("hibari", "piper")
PLACE_STEP_S = 3.1  # each place starts this much further into the room's (looped) bed
# A question's final pause is reported up to ~0.15 s before its last audible sample where a room hides its last soft
# sounds (people with a fan 10 dB under); the pauses inside a question, 0.35 s or more before it.
FINAL_PAUSE_EARLY_S = 0.2
REPLY_AFTER_S = 0.5  # (grace) a reply's first audio after its question's end (the room benchmark's v2v p50: 0.7-0.9
REPLY_S = 3.3  # s from the last word) and how long it plays on
THEN_AFTER_S = 0.3  # (grace) the user going on with the request, this long after the reply's first audio
PAUSES_S = (0.4, 0.8)  # a request's pause between its parts' voices (turn.incomplete_wait_ms is 1.5 s)


def first_after(events: list[tuple[float, Heard]], kind: Heard, onset_s: float) -> float | None:
    """Seconds from `onset_s` to the first event of `kind` (None: none)."""
    return next((round(at - onset_s, 3) for at, k in events if k == kind), None)


def spread(values: list[float | None]) -> str:
    """p50 / max of the values heard, and how many never came."""
    heard = [v for v in values if v is not None]
    if not heard:
        return f"none of {len(values)}"
    missing = len(values) - len(heard)
    return (f"p50 {statistics.median(heard):.3f} s, max {max(heard):.3f} s, over 1.0 s {sum(v > 1.0 for v in heard)}"
            f" of {len(values)}" + (f", never {missing}" if missing else ""))


class PlaceInRoom:
    """One session's segmenter at one place in a room's bed (None: quiet): what is said is mixed with the bed from
    there on."""

    def __init__(self, bed: np.ndarray | None, place: int, make_segmenter: Callable[[], VadSegmenter]):
        self.bed = bed
        self.at = int(place * PLACE_STEP_S * RATE) % (self.bed.size // 2) if self.bed is not None else 0
        self.segmenter = make_segmenter()

    @classmethod
    def opened(cls, bed: np.ndarray | None, place: int, make_segmenter: Callable[[], VadSegmenter]) -> PlaceInRoom:
        """A session whose microphone has heard the room for a while before the user says anything."""
        session = cls(bed, place, make_segmenter)
        session.hear(silence(1.5))
        return session

    def hear(self, speech: np.ndarray, on_event: Callable[[float, VadEvent], None] | None = None
             ) -> list[tuple[float, Heard]]:
        """`speech` (int16 at RATE) in the room: the segmenter's events, in seconds from its start (each also given
        to `on_event` as it is heard, which may act on the segmenter as the server would)."""
        audio = speech.astype(np.float32)
        if self.bed is not None:
            audio += self.bed[(self.at + np.arange(audio.size)) % self.bed.size]
        self.at += audio.size
        audio = np.clip(audio, -32768, 32767).astype(np.int16)
        events = []
        for i in range(0, audio.size, 128):  # (as VITA's page sends it: 8 ms at a time)
            for e in self.segmenter.feed(audio[i:i + 128]):
                events.append(((i + 128) / RATE, e.kind))
                if on_event is not None:
                    on_event(events[-1][0], e)
        return events


@dataclass
class AfterTheEnd:
    """What a room did after a question ended at its pause (seconds after its last word)."""

    ended: bool = False  # its final pause was reported (where the end-of-turn model ends it)
    going_on: float | None = None  # the room's speech opened as the question going on (the turn is withdrawn)
    new: float | None = None  # ...or as a request of its own, kept (not dropped as a click)


def after_the_end(session: PlaceInRoom, speech: np.ndarray) -> AfterTheEnd:
    """A complete question in the room, ended at its final pause as the end-of-turn model ends a complete question,
    and what the room opens in the 2 s of audio after the question's."""
    _, last = voiced_span(speech)
    seen, opened = AfterTheEnd(), []

    def as_the_server(at: float, event: VadEvent) -> None:
        if event.kind is Heard.PAUSE and not seen.ended and at >= last - FINAL_PAUSE_EARLY_S:
            session.segmenter.end_now(at_pause=True)
            seen.ended = True
        elif event.kind is Heard.START and seen.ended:
            opened.append((round(at - last, 3), session.segmenter.going_on))
        elif event.kind is Heard.DROPPED and opened and not opened[-1][1]:
            opened.pop()  # (a click: no turn)

    session.hear(np.concatenate([speech, silence(2.0)]), as_the_server)
    session.segmenter.end_now()
    seen.going_on = next((at for at, going_on in opened if going_on), None)
    seen.new = next((at for at, going_on in opened if not going_on), None)
    return seen


@dataclass
class AsTheReplyBegins:
    """What the room did with a question ended at its pause once its reply began (see the module's doc: grace)."""

    ended: bool = False  # its final pause was reported (where the end-of-turn model ends it)
    held: bool = False  # speech begun before the reply's first audio was kept (the server holds the reply for it
    # and sends the request again with it, whatever its level)
    held_under: bool = False  # ...and it stood under the request's voice as the turn machine judges that
    went_on: bool = False  # speech begun from the first audio to the grace's end was kept or confirmed
    rooms: bool = False  # ...and the turn machine takes it for other people's (TurnTaking: others_speech)


def as_the_reply_begins(session: PlaceInRoom, speech: np.ndarray, grace_s: float,
                        then: np.ndarray | None = None) -> AsTheReplyBegins:
    """A complete question in the room, ended at its final pause; the reply's first audio REPLY_AFTER_S later, then
    REPLY_S of it playing (the gate guarded): what speech begun before first audio + `grace_s` made. `then`: the user
    goes on with the request, its voice THEN_AFTER_S after the first audio (only speech begun with it counts)."""
    from vita.turns.turn_events import Speech
    from vita.turns.turn_taking import others_speech

    def under_the_request(event: VadEvent) -> bool:
        heard, asked = (Speech(u.pcm, 0.0, 0.0) for u in (event.utterance, request[0]))
        return others_speech(heard, asked, segmenter.gate.others_talk)

    _, last = voiced_span(speech)
    seen, segmenter = AsTheReplyBegins(), session.segmenter
    request, first_audio, began, counted_from = [], [], [], [0]

    def as_the_server(at: float, event: VadEvent) -> None:
        if event.kind is Heard.PAUSE and not seen.ended and at >= last - FINAL_PAUSE_EARLY_S:
            request.extend(e.utterance for e in segmenter.end_now(at_pause=True) if e.kind is Heard.END)
            seen.ended = bool(request)
        elif event.kind is Heard.START and request:
            began.append(segmenter.position)
        elif event.kind is Heard.DROPPED and began:
            began.pop()
        elif event.kind is Heard.PAUSE and began and event.kept and segmenter.speaking:
            # (speech going on with the request is judged at its pause too: taken as finished there, it ends)
            for ended in segmenter.end_now(at_pause=True):
                as_the_server(at, ended)
        elif event.kind in (Heard.CONFIRM, Heard.END) and began:
            if not first_audio or began[-1] < first_audio[0]:
                if then is None and not seen.held:
                    seen.held, seen.held_under = True, under_the_request(event)
            elif not seen.went_on and counted_from[0] <= began[-1] <= first_audio[0] + grace_s * RATE:
                seen.went_on, seen.rooms = True, under_the_request(event)
            if event.kind is Heard.END:
                began.clear()

    session.hear(speech, as_the_server)
    if not seen.ended:
        segmenter.end_now()
        return seen
    session.hear(silence(REPLY_AFTER_S), as_the_server)
    first_audio.append(segmenter.position)
    segmenter.guarded = True
    if then is None:
        session.hear(silence(REPLY_S), as_the_server)
    else:
        onset, _ = voiced_span(then)
        lead = max(0.0, THEN_AFTER_S - onset)
        session.hear(silence(lead), as_the_server)
        counted_from[0] = segmenter.position + int((onset - 0.1) * RATE)  # (what the room opened before is not theirs)
        session.hear(np.concatenate([then, silence(max(0.0, REPLY_S - lead - then.size / RATE))]), as_the_server)
    segmenter.guarded = False
    segmenter.end_now()
    session.hear(silence(1.0))
    return seen


def said_with_a_pause(session: PlaceInRoom, first: np.ndarray, pause_s: float, second: np.ndarray) -> str:
    """One request said in two parts, the first ended at each pause after its words as the end-of-turn model ends a
    complete one: how the second was heard: "went on" with it (the server answers the whole request once), "split"
    (a request of its own), "lost" (not heard), or "one utterance" (no pause ended the first part before it)."""
    _, last = voiced_span(first)
    onset, end = voiced_span(second)
    gap_s = max(0.0, pause_s - (first.size / RATE - last) - onset)  # (the silence between the voices is pause_s)
    onset, end = onset + first.size / RATE + gap_s, end + first.size / RATE + gap_s  # (in the stream)
    after = last - FINAL_PAUSE_EARLY_S  # (from the first part's final pause on)
    opened: list[tuple[float, bool | None]] = []  # (when, going on) speech opened or (when, None) it closed

    def as_the_server(at: float, event: VadEvent) -> None:
        if event.kind is Heard.PAUSE and after <= at < onset:
            session.segmenter.end_now(at_pause=True)
            opened.append((at, None))
        elif event.kind is Heard.START:
            opened.append((at, session.segmenter.going_on))
        elif event.kind in (Heard.END, Heard.DROPPED):
            opened.append((at, None))

    session.hear(np.concatenate([first, silence(gap_s), second, silence(2.0)]), as_the_server)
    session.segmenter.end_now()
    before = [going_on for at, going_on in opened if after <= at < onset]
    if not any(going_on is None for going_on in before):
        return "one utterance"  # (no pause ended the first part before the second: heard as one anyway)
    if before[-1] is not None:  # (the room, or the first part's last sound, opened speech again, still open)
        return "went on" if before[-1] else "split"
    going_on = next((going_on for at, going_on in opened if onset <= at <= end and going_on is not None), None)
    return "lost" if going_on is None else "went on" if going_on else "split"


def over_the_reply(bed: np.ndarray | None, voice: str, place: int, make_segmenter: Callable[[], VadSegmenter],
                   questions: list[dict]) -> PlaceInRoom:
    """A session in a room (its bed) whose user asked two questions, now hearing the reply."""
    from scripts.bench.rooms.__main__ import user_speech

    session = PlaceInRoom.opened(bed, place, make_segmenter)
    for q in questions[place % 10:place % 10 + 2]:
        session.hear(np.concatenate([user_speech(voice, q["q"]), silence(1.2)]))
    session.segmenter.end_now()  # (the questions were answered: the turn ended what 1.2 s of silence alone does not)
    session.segmenter.guarded = True  # (the reply plays from here on)
    session.hear(silence(1.0))
    return session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("confirm", "backchannels", "ends", "grace", "paused"))
    parser.add_argument("--rooms", default="quiet,noise10,babble20,babble_noise10")
    parser.add_argument("--places", type=int, default=12)
    args = parser.parse_args()
    from scripts.bench.rooms.__main__ import user_speech
    from scripts.bench.turns.scenarios import PAUSED
    from scripts.eval.questions import plain_questions
    from vita.config import Config
    from vita.hearing.silero import SileroModel
    from vita.hearing.vad import VadSegmenter

    config = Config()
    model = SileroModel(config.vad_model_path())
    questions = plain_questions()
    follow_ups = questions[12:18]

    def make_segmenter() -> VadSegmenter:
        return VadSegmenter.from_config(config.vad, model, config.turn)

    for room in args.rooms.split(","):
        bed = build_bed(room)  # (the room benchmark's: 40 s, looped)
        for voice in VOICES:
            confirmed, paused, stopped, afters, hows, graces, goes_on = [], [], [], [], [], [], []
            for place in range(args.places):
                if args.mode == "grace":
                    session = PlaceInRoom.opened(bed, place, make_segmenter)
                    asked = questions[place % 10:place % 10 + 4]
                    grace_s = config.turn.extend_grace_ms / 1000
                    graces += [as_the_reply_begins(session, user_speech(voice, q["q"]), grace_s) for q in asked][1:]
                    first, second = PAUSED[place % len(PAUSED)]
                    goes_on.append(as_the_reply_begins(session, user_speech(voice, first), grace_s,
                                                       then=user_speech(voice, second)))
                    continue
                if args.mode == "ends":
                    session = PlaceInRoom.opened(bed, place, make_segmenter)
                    asked = questions[place % 10:place % 10 + 4]
                    afters += [after_the_end(session, user_speech(voice, q["q"])) for q in asked][1:]
                    continue
                if args.mode == "paused":
                    session = PlaceInRoom.opened(bed, place, make_segmenter)
                    for a, b in PAUSED:
                        for pause_s in PAUSES_S:
                            hows.append(said_with_a_pause(session, user_speech(voice, a), pause_s,
                                                          user_speech(voice, b)))
                            session.hear(silence(1.0))
                    continue
                session = over_the_reply(bed, voice, place, make_segmenter, questions)
                if args.mode == "confirm":
                    speech = user_speech(voice, f"Wait, stop. {follow_ups[place % len(follow_ups)]['q']}")
                    onset, _ = voiced_span(speech)
                    events = session.hear(np.concatenate([speech, silence(1.0)]))
                    confirmed.append(first_after(events, Heard.CONFIRM, onset))
                    paused.append(first_after(events, Heard.PAUSE, onset))
                    continue
                for text in BACKCHANNELS:
                    session.hear(silence(1.0))
                    events = session.hear(np.concatenate([user_speech(voice, text), silence(2.0)]))
                    if any(k is Heard.CONFIRM for _, k in events):
                        stopped.append(text)
            if args.mode == "paused":
                print(f"{room:15s} {voice:7s} the second part of {len(hows)}: "
                      + ", ".join(f"{how} {hows.count(how)}" for how in ("went on", "one utterance", "split", "lost")),
                      flush=True)
            elif args.mode == "grace":
                ended = [g for g in graces if g.ended]
                print(f"{room:15s} {voice:7s} ended at its pause {len(ended)} of {len(graces)}; speech begun before "
                      f"the reply and kept: {sum(g.held for g in ended)} ({sum(g.held_under for g in ended)} under "
                      f"the request's level); begun as it began: {sum(g.went_on for g in ended)}, taken for other "
                      f"people's: {sum(g.rooms for g in ended)}; the user going on with a request {THEN_AFTER_S} s "
                      f"into its reply: went on {sum(g.went_on for g in goes_on if g.ended)} of "
                      f"{sum(g.ended for g in goes_on)}, taken for other people's {sum(g.rooms for g in goes_on)}",
                      flush=True)
            elif args.mode == "ends":
                ended = [a for a in afters if a.ended]
                print(f"{room:15s} {voice:7s} ended at its pause {len(ended)} of {len(afters)}; then the room going on "
                      f"with it: {spread([a.going_on for a in ended])}; a request of the room's own: "
                      f"{spread([a.new for a in ended])}", flush=True)
            elif args.mode == "confirm":
                print(f"{room:15s} {voice:7s} onset -> confirmed: {spread(confirmed)}; -> first pause: "
                      f"{spread(paused)}", flush=True)
            else:
                heard = args.places * len(BACKCHANNELS)
                print(f"{room:15s} {voice:7s} confirmed {len(stopped)} of {heard}: "
                      + ", ".join(f"{t} x{stopped.count(t)}" for t in dict.fromkeys(stopped)), flush=True)


if __name__ == "__main__":
    main()
