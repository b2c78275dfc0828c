"""Fault soak: two sessions talk, with barge-ins, while worker faults are injected.

For --minutes, one fault every --fault_every seconds; checks that no turn gets stuck, that every session is
answered again within 60 s of each fault, and that the front's thread count and RSS stay flat.

Each session is a RecordingClient over the real Socket.IO protocol with a microphone that never stops: 32 ms binary
frames of quiet room noise at real-time pace, with Piper-spoken questions mixed in. It asks, waits for the turn to
end (`state` listening for that turn; one withdrawn as "extended" is not an end: the continued request is a new
turn), pauses 1-3 s and asks again; about one turn in four it barges in, speaking the next question while the reply
audio arrives. Each fault, rotated, is injected from outside with the worker's pid from GET /health once that
worker is ready, and /health is then watched until it is ready again:

  kill_llm      SIGKILL the LLM worker just after a question was sent (a turn in flight)
  freeze_llm    SIGSTOP the LLM worker just after a question was sent; SIGCONT after --freeze_s if it still exists
  engine_raise  SIGUSR1 to the LLM worker just after a question was sent: its vLLM engine thread raises
  freeze_tts    SIGSTOP the TTS worker while a reply is playing; SIGCONT after --freeze_s if it still exists
  lose_end      SIGUSR1 to the TTS worker: the next turn it finishes never sends its end (the watchdog must end it)

The SIGUSR1 faults need the workers started with VITA_FAULT_SIGNALS=1 (this script starts its own server so;
with --url that is the operator's job, and a worker whose SIGUSR1 is not handled is not signalled: the fault is
reported as skipped, which fails the run). --url must name a server on this machine (the pids are local).
--faults none soaks without faults.

Prints each fault and each turn not answered as it happens, then a table: turns by outcome (answered, error code,
barge-in, stuck), per fault its recovery time per session, front threads and RSS at the start, end and max, the
anomalies seen (state order, audio outside a speaking turn, barge-ins nobody made, disconnects) and the server
log's ERROR lines; --json writes every turn, fault, /health sample and the sessions' turn-taking events.

Targets: 0 turns stuck (a turn is stuck when it has not ended --stall_s + --margin_s after the end of its
question or its latest reply audio); for every fault and session, reply audio to a question asked after the fault
within 60 s of it; front threads at the end <= at the start (both taken with the sessions idle, after two warm-up
turns each) and RSS at most 20 MB above the start. No fault is injected in the last 60 s. Exit code 0 when every
target holds.

Usage: .venv/bin/python -m scripts.bench.soak.faults [--minutes 20] [--fault_every 60] [--freeze_s 20]
       [--faults kill_llm,freeze_llm,engine_raise,freeze_tts,lose_end|none] [--url URL] [--json FILE] [--seed 1]
       [--verbose]
e.g.   .venv/bin/python -m scripts.bench.soak.faults --minutes 4 --fault_every 45 \
           --faults kill_llm,freeze_llm,freeze_tts
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

import tests.harness.server as harness
from scripts.bench.common import percentile
from scripts.bench.soak.control import FAULTS, HEALTH_EVERY_S, RECOVERY_S, Soak
from scripts.bench.soak.session import EXTRA_QUESTIONS, WARMUP_TURNS, Session
from scripts.bench.soak.turn import HARD_CAP_S, Turn, now
from scripts.eval.questions import E2E_LONG_QUESTIONS as LONG_QUESTIONS
from scripts.eval.questions import E2E_QUESTIONS as QUESTIONS
from tests.harness.speech import spoken
from vita.config import load_config

RSS_LIMIT_MB = 20.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="soak length after the warm-up")
    parser.add_argument("--fault_every", type=float, default=60.0, help="seconds between faults")
    parser.add_argument("--freeze_s", type=float, default=20.0, help="how long a frozen worker stays stopped")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help="comma list, rotated: " + ", ".join(FAULTS) + "; or none")
    parser.add_argument("--url", help="a running server on this machine (started with VITA_FAULT_SIGNALS=1)")
    parser.add_argument("--json", help="write every turn, fault and /health sample here")
    parser.add_argument("--barge_p", type=float, default=0.25, help="share of turns barged into")
    parser.add_argument("--stall_s", type=float, help="the server's limits.turn_stall_s (default: from the config)")
    parser.add_argument("--margin_s", type=float, default=20.0, help="a turn not ended stall_s + this after the "
                                                                     "end of its question or its latest audio is stuck")
    parser.add_argument("--noise_level", type=float, default=100.0, help="room noise between questions (0: silence)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--verbose", action="store_true", help="print every turn, not only the unusual ones")
    args = parser.parse_args()
    if args.faults == "none":
        args.faults = ""
    unknown = [k for k in args.faults.split(",") if k and k not in FAULTS]
    if unknown:
        parser.error(f"--faults: unknown {unknown}; choose from {', '.join(FAULTS)} (or none)")
    stall_s = args.stall_s or load_config().limits.turn_stall_s
    command = " ".join([".venv/bin/python", "-m", "scripts.bench.soak.faults", *map(shlex.quote, sys.argv[1:])])

    print("speaking the questions ...", flush=True)
    for question in set(QUESTIONS + EXTRA_QUESTIONS + LONG_QUESTIONS):
        spoken(question)
    server, log_path = None, None
    if args.url:
        url = args.url.rstrip("/")
    else:
        tmp = Path(tempfile.mkdtemp(prefix="vita-soak-"))
        # start_server passes tests.harness.server.BASE_ENV, the environment as it was when that module was imported:
        # setting os.environ now would be too late.
        harness.BASE_ENV["VITA_FAULT_SIGNALS"] = "1"
        server = harness.start_server(tmp, "--max_users", "4")
        log_path = server.log_path
        print(f"starting a server ({log_path}) ...", flush=True)
        harness.wait_ready(server)
        url = server.url
        print(f"ready after {server.ready_after_s:.1f} s", flush=True)

    soak = Soak(args, url, stall_s)
    if server is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            soak.code = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=harness.ROOT, text=True,
                                       capture_output=True, timeout=10).stdout.strip()
    sessions = [Session(soak, f"s{i + 1}", seed=args.seed * 100 + i) for i in range(2)]
    threads: list[threading.Thread] = []
    result = 1
    try:
        for session in sessions:
            session.connect()
        sampler = threading.Thread(target=soak.sample_health, name="health", daemon=True)
        sampler.start()
        for i, session in enumerate(sessions):
            threads.append(threading.Thread(target=session.run, name=f"session-{session.name}", daemon=True))
            threads[-1].start()
            time.sleep(1.5 * (i + 1))  # the sessions' turns do not start in step
        soak.say(f"warm-up: {WARMUP_TURNS} turns per session")
        with contextlib.suppress(threading.BrokenBarrierError):
            soak.warm.wait(timeout=600)
        time.sleep(2)
        soak.start_figures = soak.quiet_figures()
        soak.t0 = now()
        soak.go.set()
        soak.say(f"soak started: {args.minutes:g} min, a fault every {args.fault_every:g} s "
                 f"({args.faults}); start: front threads {soak.start_figures.get('threads')}, "
                 f"RSS {soak.start_figures.get('rss_mb')} MB")
        injector = threading.Thread(target=soak.inject_faults, name="faults", daemon=True)
        injector.start()
        planned_end = soak.t0 + args.minutes * 60

        def end_at() -> float:  # a fault injected late (its worker was not ready) still gets its recovery window
            return max([planned_end] + [f["at_mono"] + RECOVERY_S for f in soak.faults if "at_mono" in f])

        while (now() < end_at() or injector.is_alive()) and any(t.is_alive() for t in threads):
            time.sleep(1.0)
        soak.stopped_at = now()
        soak.stopping.set()
        soak.say("stopping: the sessions finish their turns")
        for thread in threads:
            thread.join(HARD_CAP_S + 30)
        soak.done.set()
        injector.join(10)
        soak.resume_all()
        time.sleep(2)
        soak.end_figures = soak.quiet_figures()
        result = report(soak, sessions, command, log_path)
    finally:
        soak.stopping.set()
        soak.done.set()
        soak.go.set()
        soak.resume_all()
        for session in sessions:
            session.close()
        if server is not None:
            try:
                harness.stop_server(server)
            except AssertionError as exc:
                print(f"FINDING: the server did not stop cleanly: {exc}", flush=True)
                result = 1
    return result


def report(soak: Soak, sessions: list[Session], command: str, log_path: Path | None) -> int:
    names = [s.name for s in sessions]
    for row in soak.health + soak.anomalies + soak.session_errors + [soak.start_figures, soak.end_figures]:
        if "at" in row:
            row["t"] = soak.t(row["at"])
    turns = [t for t in soak.turns if not t.warmup]
    outcomes = collections.Counter(t.outcome() for t in turns)
    answered = [t for t in turns if t.outcome() == "answered"]
    stuck = [t for t in soak.turns if t.outcome() in ("stuck", "open")]
    errors = collections.Counter(t.outcome().removeprefix("error:") for t in turns if t.outcome().startswith("error:"))
    print("\n=== fault soak ===")
    print(f"command: {command}")
    if soak.code:
        print(f"server code: {soak.code}")
    if log_path is not None:
        print(f"server log: {log_path}")
    print(f"soak: {(soak.stopped_at - soak.t0) / 60:.1f} min of faults and turns after {WARMUP_TURNS} warm-up turns "
          f"per session; turn watchdog {soak.stall_s:g} s; a turn is stuck {soak.stall_s + soak.args.margin_s:g} s "
          f"after its question or latest reply audio")
    print(f"\nturns: {len(turns)} total, {outcomes['answered']} answered, {sum(errors.values())} errors "
          f"({', '.join(f'{c} {n}' for c, n in errors.most_common()) or 'none'}), {outcomes['barge_in']} barge-ins "
          f"({sum(t.barge_planned for t in turns)} planned), {len(stuck)} stuck (+{len(soak.turns) - len(turns)} "
          f"warm-up turns)")
    for outcome, n in sorted(outcomes.items()):
        print(f"  {outcome:<32} {n}")
    if answered:
        first = [t.first_audio_at - t.speech_end for t in answered]
        ends = [t.ended_at - t.speech_end for t in answered]
        print(f"answered: end of question → first reply audio p50 {statistics.median(first):.2f} s, "
              f"p90 {percentile(first, 0.9):.2f} s, max {max(first):.2f} s; → turn end p50 "
              f"{statistics.median(ends):.1f} s, max {max(ends):.1f} s")
    unusual = [t for t in soak.turns if t.outcome() not in ("answered", "barge_in")]
    if unusual:
        print("turns not answered (time from the end of the question):")
        for t in unusual:
            ended = f"ended after {t.ended_at - t.speech_end:5.1f} s" if t.ended_at else "never ended"
            print(f"  {t.session} turn {t.turn_id} at {soak.t(t.speech_end):7.1f} s: {t.outcome():<24} {ended}, "
                  f"{'with' if t.first_audio_at else 'no'} reply audio, errors {[e[1] for e in t.errors]}, "
                  f"states {[s for _, s, _ in t.states]}")
    if soak.session_errors:
        print(f"errors outside any turn: {dict(collections.Counter(e.get('code') for e in soak.session_errors))}")

    print(f"\nfaults ({len(soak.faults)}), recovery = fault → first reply audio to a question asked after it:")
    print(f"  {'kind':<13} {'at s':>7} {'pid':>8}  " + " ".join(f"{'recovery ' + n:>12}" for n in names) + "  notes")
    fault_ok = bool(soak.faults) or not soak.args.faults  # --faults none: a soak without faults
    for fault in soak.faults:
        if "skipped" in fault:
            fault_ok = False
            print(f"  {fault['kind']:<13} {'-':>7} {'-':>8}  SKIPPED: {fault['skipped']}")
            continue
        fault["recovery_s"] = soak.recovery(fault, names)
        cells = []
        for n in names:
            r = fault["recovery_s"][n]
            fault_ok &= r is not None and r <= RECOVERY_S
            cells.append(f"{'none' if r is None else f'{r:.1f} s':>12}")
        following = next((f for f in soak.faults if "at_mono" in f and f["at_mono"] > fault["at_mono"]), None)
        if following is not None and any(r is None or r > following["at_mono"] - fault["at_mono"]
                                         for r in fault["recovery_s"].values()):
            fault["overlap"] = (f"the next fault ({following['kind']}, "
                                f"+{following['at_mono'] - fault['at_mono']:.0f} s) came before every session was "
                                f"answered again")
        notes = "; ".join(x for x in (fault.get("moment"), fault.get("thaw"), fault.get("note"),
                                      fault.get("afterwards"), fault.get("overlap"),
                                      f"waited {fault['waited_for_ready_s']:g} s for the worker to be ready"
                                      if fault["waited_for_ready_s"] >= 2 else "") if x)
        print(f"  {fault['kind']:<13} {fault['at']:>7.1f} {fault['pid']:>8}  " + " ".join(cells) + f"  {notes}")

    start, end = soak.start_figures, soak.end_figures
    during = [h for h in soak.health if h["ok"] and h["at"] >= soak.t0]
    max_threads = max((h["threads"] for h in during), default=None)
    max_rss = max((h["rss_mb"] for h in during), default=None)
    print(f"\nfront process: start and end with both sessions idle (least threads of 3 samples); max of GET /health "
          f"every {HEALTH_EVERY_S:g} s ({len(during)} samples in the soak, "
          f"{sum(not h['ok'] for h in soak.health)} unanswered)")
    print(f"  {'':<12} {'start':>8} {'end':>8} {'max':>8}")
    for key, top in (("threads", max_threads), ("ping_timers", max((h["ping_timers"] or 0 for h in during),
                                                                   default=None)), ("rss_mb", max_rss)):
        print(f"  {key:<12} {start.get(key, '?'):>8} {end.get(key, '?'):>8} {'?' if top is None else top:>8}")
    last = next((h for h in reversed(soak.health) if h["ok"]), {})
    print("  workers at the end: " + ", ".join(f"{n} {w['state']} (restarts {w['restarts']})"
                                               for n, w in (last.get("workers") or {}).items()))
    print(f"  microphones' worst lateness: {({s.name: round(s.mic.late_max_s, 3) for s in sessions if s.mic})}; "
          f"reconnects: {({s.name: s.reconnects for s in sessions})}; reply audio with no turn speaking: "
          f"{({s.name: s.stray_audio for s in sessions})}; questions heard as two turns (first part cancelled "
          f"as extended): {({s.name: s.extended for s in sessions})}")

    if soak.anomalies:
        print(f"\nanomalies ({len(soak.anomalies)}):")
        for a in soak.anomalies[:40]:
            extra = {k: v for k, v in a.items() if k not in ("at", "t", "session", "what")}
            print(f"  {a['t']:>7.1f} {a['session']}: {a['what']}"
                  + (f" {json.dumps(extra, default=str)}" if extra else ""))
    if log_path is not None:
        lines = [line for line in log_path.read_text(errors="replace").splitlines()
                 if " ERROR " in line or "Traceback" in line or "CRITICAL" in line]
        print(f"\nserver log: {len(lines)} ERROR/Traceback lines" + (", the first ones:" if lines else ""))
        for line in lines[:30]:
            print(f"  {line[:240]}")

    threads_ok = bool(start) and bool(end) and end["threads"] <= start["threads"]
    rss_ok = bool(start) and bool(end) and end["rss_mb"] - start["rss_mb"] <= RSS_LIMIT_MB
    targets = [("0 turns stuck", not stuck, f"{len(stuck)} stuck of {len(soak.turns)}"),
               (f"every session answered again within {RECOVERY_S:g} s of each fault", fault_ok,
                f"{len(soak.faults)} faults, worst "
                + str(max((r for f in soak.faults for r in (f.get("recovery_s") or {}).values() if r is not None),
                          default=None)) + " s"),
               ("sessions stayed connected", not any(s.reconnects for s in sessions),
                f"{sum(s.reconnects for s in sessions)} reconnects"),
               ("front threads flat (end <= start)", threads_ok,
                f"{start.get('threads')} -> {end.get('threads')}, max {max_threads}"),
               (f"front RSS flat (<= +{RSS_LIMIT_MB:g} MB)", rss_ok,
                f"{start.get('rss_mb')} -> {end.get('rss_mb')} MB "
                f"({(end.get('rss_mb') or 0) - (start.get('rss_mb') or 0):+.1f}), max {max_rss}")]
    print("\ntargets:")
    for what, ok, figure in targets:
        print(f"  {'PASS' if ok else 'FAIL'}  {what}: {figure}")
    passed = all(ok for _, ok, _ in targets)
    print(f"\n{'PASS' if passed else 'FAIL'}", flush=True)

    if soak.args.json:
        def turn_row(t: Turn) -> dict:
            row = asdict(t)
            for key in ("speech_start", "speech_end", "committed_at", "first_audio_at", "last_audio_at", "ended_at",
                        "stuck_at", "barged_at"):
                row[key] = soak.t(row[key]) if row[key] else None
            row["states"] = [(soak.t(x), s, r) for x, s, r in t.states]
            row["errors"] = [(soak.t(x), c, m) for x, c, m in t.errors]
            row["cancelled"] = (soak.t(t.cancelled[0]), t.cancelled[1]) if t.cancelled else None
            row["outcome"] = t.outcome()
            row["time_to_end_s"] = round(t.ended_at - t.speech_end, 2) if t.ended_at else None
            return row

        Path(soak.args.json).write_text(json.dumps({
            "command": command, "server_log": str(log_path) if log_path else None, "stall_s": soak.stall_s,
            "turns": [turn_row(t) for t in soak.turns],
            "faults": [{k: v for k, v in f.items() if k != "at_mono"} for f in soak.faults],
            "health": soak.health, "start": start, "end": end, "anomalies": soak.anomalies,
            "session_errors": soak.session_errors,
            "events": {s.name: [(soak.t(t), name, data) for t, name, data in s.log] for s in sessions},
            "questions": [(t.session, soak.t(t.speech_start), soak.t(t.speech_end), t.question) for t in soak.turns],
            "targets": {what: {"pass": ok, "figure": figure} for what, ok, figure in targets}, "pass": passed,
        }, indent=2, default=str))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
