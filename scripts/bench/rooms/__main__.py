"""Run the room benchmark (see the package's docstring): one long session a room, scored."""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from scripts.bench.rooms.doors import DOORS, Door, PhoneDoor, Turn
from scripts.bench.rooms.sounds import (
    BARGE_AFTER_S,
    EARLIEST_STOP_S,
    ECHO_ROOMS,
    QUESTION_CAP_S,
    RATE,
    ROOMS,
    SETTLE_CAP_S,
    SETTLE_S,
    STOPPED_WITHIN_S,
    USER_DB,
    RoomMicrophone,
    Speaker,
    at_level,
    build_bed,
    echo_delay,
    level_db,
    room_impulse_response,
    speaker_gain,
)


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
    silent_s: float | None = None  # barge: onset -> the reply stopped sounding at the client (held or stopped)
    stop_at: float | None = None
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
    turns: list[dict] = field(default_factory=list)  # every turn the door saw, for --json

    def summary(self) -> dict:
        questions = [a for a in self.asked if a.kind in ("question", "barge")]
        barges = [a for a in self.asked if a.kind == "barge"]
        v2v = [a.v2v_s for a in questions if a.v2v_s is not None]
        stops = [a.stop_s for a in barges if a.stop_s is not None]
        silent = [a.silent_s for a in barges if a.silent_s is not None]
        from scripts.bench.common import percentile

        return {"room": self.room, "door": self.door, "right": sum(a.right for a in questions),
                "asked": len(questions), "unanswered": sum(a.answer is None for a in questions),
                "unasked_replies": len(self.unasked), "echo_cuts": len(self.echo_cuts),
                "echo_dropped": self.echo_dropped, "idle_stops": self.idle_stops,
                "barges_stopped": len(stops), "barges": len(barges),
                "barges_not_over_a_reply": sum(not a.over_reply for a in barges),
                "barges_stopped_by_else": sum(a.stopped_before for a in barges),
                "stop_p50_s": round(statistics.median(stops), 3) if stops else None,
                "silent_p50_s": round(statistics.median(silent), 3) if silent else None,
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


def score(plan: list[Asked], turns: list[Turn], stops: list[float], by_id: dict[str, dict]) -> list[dict]:
    """Each thing said gets its turns, its answer (right or not, voice-to-voice) and its stop; the replies to nothing
    the user said are returned."""
    from scripts.eval.scoring import MAX_WORDS, heard_ok, is_right
    from vita.words import asks_again

    claimed: set[str] = set()
    for i, a in enumerate(plan):
        if not a.onset:
            continue
        until = next((b.onset for b in plan[i + 1:] if b.onset), float("inf"))
        mine = [t for t in turns if a.onset + 0.1 <= t.at < until]
        said = by_id[a.qid]["q"] if a.qid else a.text
        # its answer: the first reply to a turn that heard it (a room can hold an utterance open past its end),
        # else to the turn its end made; a turn withdrawn because the request went on is not an answer, nor one begun
        # once a reply to a turn of its end was playing (its echo, even one that repeats the question's words), nor
        # one with no reply ("Wait, stop." heard as a turn of its own); a turn of its end asked again ("Wave stop.")
        # does not hide one after it that answered
        answers = [t for t in mine if t.reason != "extended"]
        of_its_end = [t for t in answers if t.at <= a.end + 2.0 and t.first_audio is not None]
        first = min([t.first_audio for t in of_its_end if not asks_again(t.reply)]
                    or [t.first_audio for t in of_its_end], default=float("inf"))
        candidates = [t for t in answers if t.at <= first]
        answer = None
        if a.kind != "request":
            replies = sorted((t for t in candidates if t.first_audio is not None), key=lambda t: asks_again(t.reply))
            answer = next((t for t in replies if heard_ok(said, t.heard)), None) or next(
                (t for t in replies if t.at <= a.end + 2.0), None)
        # the user's turns (begun by 2 s after their last word), or those holding their words begun before the reply
        # played (not its echo, even one that repeats the question's words)
        playing = [t.first_audio for t in ([answer] if answer is not None else answers) if t.first_audio is not None]
        replied = min(playing, default=float("inf"))
        own = [t for t in mine if t.at <= a.end + 2.0 or (t.at <= replied and heard_ok(said, t.heard))]
        claimed |= {t.key for t in own}
        if a.kind == "request":
            if a.over_reply and plan[i + 1].onset:
                nxt = plan[i + 1]
                nxt.over_reply = any(t.first_audio is not None and t.first_audio < nxt.onset
                                     and (t.end is None or t.end > nxt.onset) for t in mine)
            continue
        q = by_id[a.qid]
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
            a.stop_s, a.stop_at = (None, None) if stop is None else (round(stop - a.onset, 3), stop)
            a.stopped_before = any(a.onset - 1.0 <= s < a.onset + EARLIEST_STOP_S for s in stops)
    return [asdict(t) for t in turns if t.first_audio is not None and t.key not in claimed]


def run_room(url: str, pid: int | None, door_name: str, room: str, questions: list[dict], follow_ups: list[dict],
             barges: int, reply_db: float, files: tuple[Path, Path] | None = None) -> RoomResult:
    """`files`: the server's state folder and log, when the benchmark started it (the phone door reads them)."""
    from scripts.eval.questions import LONG

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
    door = (PhoneDoor(url, speaker, files) if door_name == "phone" else DOORS[door_name](url, speaker)).connect()
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
    spans = [(a.onset, a.end) for a in plan if a.onset]
    result.asked = plan
    result.turns = [asdict(t) for t in turns]
    result.unasked = score(plan, turns, stops, {q["id"]: q for q in questions + follow_ups})
    for a in plan:
        if a.stop_at is not None and speaker is not None:
            a.silent_s = round(max(0.0, speaker.silent_at.get(a.stop_at, a.stop_at) - a.onset), 3)
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
    head = ("room", "door", "right/asked", "unasked replies", "cut, user silent", "echo dropped", "barge stopped",
            "stop p50 (silent)", "v2v p50/p90", "server cores", "front")
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print(f"| {r['room']} | {r['door']} | {r['right']}/{r['asked']} | {r['unasked_replies']} | {r['echo_cuts']} | "
              f"{r['echo_dropped']} | {r['barges_stopped']}/{r['barges']} | "
              f"{'-' if r['stop_p50_s'] is None else str(r['stop_p50_s']) + ' s'}"
              f"{'' if r.get('silent_p50_s') is None else ' (' + str(r['silent_p50_s']) + ' s)'} | "
              f"{r['v2v_p50_s']} / {r['v2v_p90_s']} s | {r['server_cores']} | {r['front_cores']} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rooms", default=",".join(ROOMS), help="comma-separated: " + ", ".join(ROOMS))
    parser.add_argument("--questions", type=int, default=12, help="questions per room (doubletalk: interruptions)")
    parser.add_argument("--barges", type=int, default=1, help="interruptions in each room but doubletalk")
    parser.add_argument("--door", default="vita", help="comma-separated, each room through each on the same server: "
                        + ", ".join(DOORS))
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
    doors = [d for d in args.door.split(",") if d]
    for door in doors:
        if door not in DOORS:
            raise SystemExit(f"unknown door {door!r}: {', '.join(DOORS)}")
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
        files = (server.state_dir, server.log_path) if server is not None else None
        for door in doors:
            warm = run_room(url, pid, door, "quiet", asked[:1], asked[12:13], 0, reply_db, files)  # not counted
            print(f"warm-up ({door}): {warm.summary()['right']}/1 right", flush=True)
        for room, door in [(room, door) for room in rooms for door in doors]:
            result = run_room(url, pid, door, room, questions, follow_ups, args.barges, reply_db, files)
            results.append(result)
            s = result.summary()
            print(f"{room} ({door}): {json.dumps(s)}", flush=True)
            for a in result.asked:
                if a.kind == "request":
                    continue
                got = a.answer or {}
                print(f"   {'ok ' if a.right else 'NO '} [{a.voice}] {a.text!r} heard {got.get('heard')!r} -> "
                      f"{got.get('reply')!r}" + (f" ({got.get('reason')})" if got.get("reason") else "")
                      + (f" stop {a.stop_s}" if a.kind == "barge" else "")
                      + (f" silent {a.silent_s}" if a.silent_s is not None else ""), flush=True)
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
    print(f"\n{args.door} door(s), {args.questions} questions a room, {time.monotonic() - started:.0f} s in all; "
          f"CPU {cpu_description()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"door": args.door, "questions": args.questions,
                                               "page_echo": args.page_echo, "cpu": cpu_description(),
                                               "rows": rows, "rooms": [asdict(r) for r in results]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
