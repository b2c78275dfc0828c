"""Benchmark: one long spoken session driven as a page drives the server, measured at the client and
from the server's own timings.

VITA's page (`--transport vita`, the default) sends JSON audio every 8 ms and plays each binary reply chunk
after the previous one; ours over Socket.IO (`--transport binary`) sends 32 ms binary frames and ducks on `duck`.
The microphone stays open throughout (silence between questions), questions are spoken by a natural voice
(hibari) or Piper, and the history grows turn after turn. For every answered question it reports:
- voice-to-voice at the client (last voiced sample sent → first reply audio received) and as the server timed it;
- the stages (end of speech → turn, ASR, first token, first piece, TTS first chunk) and the engine's decode speed
  inside the server (tokens after the first / time after the first token), to compare with
  scripts/bench/stages/decode.py;
- gaps inside a reply: a chunk that arrives after the previous ones have finished playing, as the page plays them;
- with `--memory`, each user has the memory cookie and told a few facts first, so what is remembered goes beside
  every question: what memory costs;
- with `--trace on`, the server exports OpenTelemetry traces to a local collector: what tracing costs;
- interruptions (`--barge N`): a question spoken over a long reply, onset of speech sent → the reply's sound
  ducked or stopped at the client (the last full-volume audio played out, `duck` for our page, or `stop_tts`).

Several users (`--users N`): N sessions, each its own connection and open microphone, ask the same question at the
same moment, question after question (the first round is the first turns of a fresh server); the rows say which
user, and the summary gives p50, p90 and max over all of them. `--stagger S` has user i start S × i seconds after
the first instead (a question that lands while another user's reply is spoken). The server it starts gets
`--max_users` N (at least 2); a server of your own (`--url`) needs the seats.

Usage: .venv/bin/python -m scripts.bench.latency [--url URL] [--transport vita|binary] [--voice hibari|piper]
       [--users 1] [--stagger 0] [--rounds 1] [--questions 20] [--barge 4] [--trace off|on] [--memory] [--json out.json]
       [-- server flags]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from scripts.bench.common import cpu_description, percentile
from scripts.bench.measure import GAP_S, answered_turn, ask, barge
from scripts.eval.questions import BARGE_OVER, BARGE_WITH, LONG, SHORT
from scripts.eval.voices import synthesize
from tests.harness.client import RecordingClient
from tests.harness.speech import Microphone
from vita.memory.user_keys import COOKIE, new_user_id


def thread_cpu(pid: int) -> tuple[dict[str, float], dict[str, float]]:
    """CPU seconds so far of every thread of the server's processes, and seconds each waited runnable for a core
    (another thread had it: /proc/.../schedstat), keyed 'process/thread' (names from /proc: the workers set their
    process titles, threads are grouped by name with their numbers dropped). A stage that waits long for as much
    CPU as it used is one the others hold back."""
    import psutil

    cpu: dict[str, float] = collections.defaultdict(float)
    waited: dict[str, float] = collections.defaultdict(float)
    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}, {}
    tick = 100.0  # USER_HZ
    for proc in family:
        try:
            pname = proc.name()
            tasks = list(Path(f"/proc/{proc.pid}/task").iterdir())
        except (OSError, psutil.Error):
            continue  # (the process ended)
        for task in tasks:
            try:  # (a thread that ends meanwhile is left out; the others still count)
                comm = (task / "comm").read_text().strip()
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            name = f"{pname}/{comm.rstrip('0123456789-_:') or comm}"
            cpu[name] += (int(fields[11]) + int(fields[12])) / tick
            with contextlib.suppress(OSError, ValueError, IndexError):  # (a kernel without schedstat: no waits)
                wait_ns = int((task / "schedstat").read_text().split()[1])
                waited[name] += wait_ns / 1e9
    return dict(cpu), dict(waited)


def stats(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return "-"
    return (f"p50 {statistics.median(values):.3f}, p90 {percentile(values, 0.9):.3f}, max {max(values):.3f} "
            f"(n={len(values)})")


def ask_together(clients: list[RecordingClient], mics: list[Microphone], voice: str, text: str,
                 speech: np.ndarray, stagger_s: float = 0.0) -> list[dict | None]:
    """Every user says the same question at the same moment (or user i `stagger_s` × i later: one person's
    question lands while another's reply is being spoken); each one's row (None: not answered)."""
    rows: list[dict | None] = [None] * len(clients)

    def one(user: int) -> None:
        time.sleep(user * stagger_s)  # the scenario's offset, not a wait for anything
        rows[user] = ask(clients[user], mics[user], voice, text, speech)
        if rows[user] is not None:
            rows[user]["user"] = user

    threads = [threading.Thread(target=one, args=(user,), name=f"user-{user}") for user in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return rows


FACTS = ("My name is Sam.", "I live in Boston.", "I'm allergic to cats.")


def tell_facts(client: RecordingClient) -> None:
    """A user's first words, typed (not measured): what memory will recall beside their questions."""
    for text in FACTS:
        asked = time.monotonic()
        client.sio.emit("text_input", {"text": text})
        answered_turn(client, asked)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start one with the default config)")
    parser.add_argument("--transport", choices=("vita", "binary"), default="vita")
    parser.add_argument("--voice", choices=("hibari", "piper"), default="hibari")
    parser.add_argument("--users", type=int, default=1, help="sessions asking each question at the same moment")
    parser.add_argument("--stagger", type=float, default=0.0,
                        help="seconds between one user's question and the next user's (0: all at once)")
    parser.add_argument("--rounds", type=int, default=1, help="times through the questions, in one session")
    parser.add_argument("--questions", type=int, default=20,
                        help="the first this many of the 20 questions (3: a fresh server's first turns)")
    parser.add_argument("--barge", type=int, default=4, help="interruption trials (after the questions)")
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--server_pid", type=int, help="with --url: the server's pid, for the CPU budget")
    parser.add_argument("--client_nice", type=int, default=0,
                        help="run this client this much nicer (19: as if it ran on another machine)")
    parser.add_argument("--trace", choices=("on", "off"), default="off",
                        help="on: the server it starts exports OpenTelemetry traces (OTLP/HTTP, the SDK batching) "
                             "to a local collector, as it would to Jaeger: what tracing costs")
    parser.add_argument("--memory", action="store_true",
                        help="each user is a page's user (the memory cookie) who told a few facts first: every "
                             "question then has what is remembered beside it (what memory costs)")
    parser.add_argument("server_args", nargs="*", help="after --: flags for the server it starts")
    args = parser.parse_args()
    server, url, collector = None, args.url, None
    if url is None:
        from tests.harness.server import has_flag, start_server, wait_ready

        seats = () if has_flag(args.server_args, "--max_users") else ("--max_users", str(max(2, args.users)))
        env = {}
        if args.trace == "on":
            from tests.harness.otlp_collector import OtlpCollector

            collector = OtlpCollector()
            env = collector.environment(flush_ms=5000)  # (the SDK's default delay, as an operator runs it)
        server = start_server(Path(tempfile.mkdtemp()), "--timeout", "3600", *seats, *args.server_args, env=env)
        wait_ready(server)
        url = server.url
    if args.client_nice:
        os.nice(args.client_nice)  # after the server started, so its processes keep their priority
    headers = (lambda: {"Cookie": f"{COOKIE}={new_user_id()}"}) if args.memory else (lambda: None)
    clients = [RecordingClient(url).connect(headers=headers()) for _ in range(args.users)]
    if args.memory:
        for each in clients:
            tell_facts(each)
    mics = [Microphone(c, binary=args.transport == "binary", name=f"mic-{i}") for i, c in enumerate(clients)]
    client, mic = clients[0], mics[0]
    questions = [q for pair in zip(SHORT, LONG + LONG, strict=False) for q in pair][:min(args.questions, 20)]
    speech = {q: synthesize(args.voice, q) for q in [*questions, BARGE_OVER, BARGE_WITH]}  # not while measuring
    rows, barges = [], []
    pid = server.process.pid if server is not None else args.server_pid
    (cpu_before, waited_before), wall_before = (thread_cpu(pid) if pid else ({}, {})), time.monotonic()
    client_before = sum(os.times()[:2])
    try:
        for _ in range(args.rounds):
            for text in questions:
                for row in ask_together(clients, mics, args.voice, text, speech[text], args.stagger):
                    print(json.dumps(row), flush=True)
                    if row:
                        rows.append(row)
        (cpu_after, waited_after), wall = (thread_cpu(pid) if pid else ({}, {})), time.monotonic() - wall_before
        cpu_after["this client"] = cpu_before["this client"] = 0.0
        cpu_after["this client"] = sum(os.times()[:2]) - client_before
        for _ in range(args.barge):
            row = barge(client, mic, args.voice, speech)
            print(json.dumps(row), flush=True)
            if row:
                barges.append(row)
    finally:
        for each in mics:
            each.close()
        for each in clients:
            each.close()
        if server is not None:
            from tests.harness.server import stop_server

            stop_server(server)
    traced = ""
    if collector is not None:
        spans = collector.snapshot()
        collector.close()
        turns = sum(span.name == "turn" for span in spans)
        traced = (f"; traces on: {len(spans)} spans in {collector.requests} exports, {turns} turns, "
                  f"{len({span.trace_id for span in spans})} traces")
    machine = cpu_description()
    print(f"\nCPU: {machine['model']} (family {machine['family']}, model {machine['model_number']}), "
          f"{machine['isa']}, {machine['cores']} cores")
    print(f"{args.transport} client, voice {args.voice}, {args.users} user(s) at once, {len(rows)} answered of "
          f"{len(questions) * args.rounds * args.users}{traced}; seconds:")
    for key in ("client_v2v_s", "server_v2v_s", "speech_end_late_s", "end_of_speech_s", "asr_s", "first_token_s",
                "first_piece_s", "tts_first_chunk_s", "prompt_tokens", "cached_tokens", "decode_tok_s", "max_gap_s"):
        print(f"  {key:18} {stats(rows, key)}")
    print(f"  replies with a gap > {GAP_S * 1000:.0f} ms: {sum(r['gaps_over'] > 0 for r in rows)} of {len(rows)}")
    for key in ("onset_to_quiet_s", "onset_to_duck_event_s", "onset_to_stop_tts_s"):
        print(f"  {key:22} {stats(barges, key)}")
    budget = sorted(((k, v - cpu_before.get(k, 0.0)) for k, v in cpu_after.items()), key=lambda kv: -kv[1])
    waited = {k: v - waited_before.get(k, 0.0) for k, v in waited_after.items()}
    if budget:
        cores = len(os.sched_getaffinity(0))
        server_s = sum(v for k, v in budget if k != "this client")
        print(f"CPU during the questions ({wall:.0f} s wall, {cores} cores = {cores * wall:.0f} core-seconds): "
              f"the server {server_s:.1f} s in all, {server_s / max(1, len(rows)):.2f} s a turn; by thread, and how "
              "long it waited runnable for a core:")
        for name, seconds in budget[:16]:
            line = f"  {name:40} {seconds:7.1f} s  {100 * seconds / wall:5.1f} % of a core"
            if name in waited:
                line += f"   waited {waited[name]:6.1f} s"
            print(line)
    if args.json:
        Path(args.json).write_text(json.dumps({"transport": args.transport, "voice": args.voice, "users": args.users,
                                               "cpu_model": machine, "turns": rows,
                                               "barge": barges, "cpu": dict(budget), "wall_s": wall,
                                               "waited": waited}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
