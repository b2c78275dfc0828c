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
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.common import cpu_description, percentile
from scripts.bench.turns.scenarios import INTERRUPTION_LEADS_S, NOISES, PAUSES_S, plan, synthesize_all
from scripts.bench.turns.sessions import Sessions, run_group
from tests.harness.server import start_server, stop_server, wait_ready

MAX_ONE_REPLY_PAUSE_S = 1.2  # up to this inner pause, one reply that heard both halves
# Targets: the design's where it set one; the two marked * are references (see the table's footnotes):
# end of speech -> turn committed p50 <= 0.15 s, voice-to-voice p50 <= 0.5 s (on an AVX512-BF16
# machine), requests with an inner pause cut early <= 5 %, noises and backchannels stopping a reply <= 1 in 20.
# For interruptions: the first reaction (the duck) within
# 150 ms and the reply stopped (stop_tts) within 0.8 s of the speech's onset, every one; judged here at p90.
TARGETS = {"end_of_turn": 0.15, "voice_to_voice": 0.50, "cut_early_rate": 0.05, "false_stop_rate": 1 / 20,
           "first_reaction": 0.150, "stop_tts": 0.800}


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
