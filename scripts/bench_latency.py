"""Benchmark: one long spoken session driven as a page drives the server, measured at the client and
from the server's own timings.

VITA's page (`--transport vita`, the default) sends JSON audio every 8 ms and plays each binary reply chunk
after the previous one; ours over Socket.IO (`--transport binary`) sends 32 ms binary frames and ducks on `duck`.
The microphone stays open throughout (silence between questions), questions are spoken by a natural voice
(hibari) or Piper, and the history grows turn after turn. For every answered question it reports:
- voice-to-voice at the client (last voiced sample sent → first reply audio received) and as the server timed it;
- the stages (end of speech → turn, ASR, first token, first piece, TTS first chunk) and the engine's decode speed
  inside the server (tokens after the first / time after the first token), to compare with bench_decode.py;
- gaps inside a reply: a chunk that arrives after the previous ones have finished playing, as the page plays them;
- interruptions (`--barge N`): a question spoken over a long reply, onset of speech sent → the reply's sound
  ducked or stopped at the client (the last full-volume audio played out, `duck` for our page, or `stop_tts`).

Several users (`--users N`): N sessions, each its own connection and open microphone, ask the same question at the
same moment, question after question (the first round is the first turns of a fresh server); the rows say which
user, and the summary gives p50, p90 and max over all of them. The server it starts gets `--max_users` N (at
least 2); a server of your own (`--url`) needs the seats.

Usage: .venv/bin/python scripts/bench_latency.py [--url URL] [--transport vita|binary] [--voice hibari|piper]
       [--users 1] [--rounds 1] [--questions 20] [--barge 4] [--json out.json] [-- server flags]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _bench import cpu_description, percentile
from eval_answers import answered_turn, synthesize

from vita.harness.client import RecordingClient
from vita.harness.speech import Microphone

SHORT = ["What is the capital of France?", "How many legs does a spider have?", "What color is the sky?",
         "Is a whale a mammal?", "What is two plus three?", "Who wrote Romeo and Juliet?",
         "What is the largest planet?", "How many days are in a week?", "What do bees make?",
         "What is the opposite of hot?", "Which ocean is the largest?", "What is frozen water called?"]
LONG = ["Tell me three things about the planet Mars.", "Describe a rainbow in two sentences.",
        "Give me three tips for sleeping better.", "Tell me a short story about a brave little dog.",
        "Explain in two sentences how a bicycle works.", "Describe a summer day at the beach in three sentences.",
        "What are three good habits for a healthy life?", "Tell me about cats, dogs and birds."]
BARGE_OVER = "Tell me a short story about a brave little dog."
BARGE_WITH = "Wait, stop. What is the capital of Spain?"
GAP_S = 0.150  # no gap longer than this inside a reply
LOUD = 0.5  # a chunk at least this fraction of the reply's typical peak is full volume (ducked is 0.2)


def events_between(client: RecordingClient, start: float, end: float) -> list[tuple[float, str, object]]:
    with client.changed:
        return [e for e in client.events if start <= e[0] <= end]


def wait_turn_over(client: RecordingClient, after: float) -> tuple[int, float] | None:
    """The answered turn asked after `after` (eval_answers.answered_turn) and when it went back to listening."""
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
    return {"question": text, "turn_id": tid, "reply": texts[-1] if texts else "",
            "client_v2v_s": audio[0][0] - said.end_sent if audio else None,
            "server_v2v_s": front.get("voice_to_voice_s"),
            # where the server's VAD put the end of speech, after the last voiced sample the client sent: what the
            # server's own voice-to-voice leaves out (the reply reaches the client in ~2 ms)
            "speech_end_late_s": audio[0][0] - said.end_sent - front["voice_to_voice_s"]
            if audio and "voice_to_voice_s" in front else None,
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
    stop = next((t for t, n, _ in evs if n == "stop_tts" and t > over.onset_sent), None)
    duck = next((t for t, n, _ in evs if n == "duck" and t > over.onset_sent), None)
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


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of every thread of the server's processes, keyed 'process/thread' (names from
    /proc: the workers set their process titles, threads are grouped by name with their numbers dropped)."""
    import psutil

    totals: dict[str, float] = collections.defaultdict(float)
    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    tick = 100.0  # USER_HZ
    for proc in family:
        try:
            pname = proc.name()
            for task in Path(f"/proc/{proc.pid}/task").iterdir():
                comm = (task / "comm").read_text().strip()
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                name = comm.rstrip("0123456789-_:") or comm
                totals[f"{pname}/{name}"] += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, psutil.Error):
            continue
    return dict(totals)


def stats(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return "-"
    return (f"p50 {statistics.median(values):.3f}, p90 {percentile(values, 0.9):.3f}, max {max(values):.3f} "
            f"(n={len(values)})")


def ask_together(clients: list[RecordingClient], mics: list[Microphone], voice: str, text: str,
                 speech: np.ndarray) -> list[dict | None]:
    """Every user says the same question at the same moment; each one's row (None: not answered)."""
    rows: list[dict | None] = [None] * len(clients)

    def one(user: int) -> None:
        rows[user] = ask(clients[user], mics[user], voice, text, speech)
        if rows[user] is not None:
            rows[user]["user"] = user

    threads = [threading.Thread(target=one, args=(user,), name=f"user-{user}") for user in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start one with the default config)")
    parser.add_argument("--transport", choices=("vita", "binary"), default="vita")
    parser.add_argument("--voice", choices=("hibari", "piper"), default="hibari")
    parser.add_argument("--users", type=int, default=1, help="sessions asking each question at the same moment")
    parser.add_argument("--rounds", type=int, default=1, help="times through the questions, in one session")
    parser.add_argument("--questions", type=int, default=20,
                        help="the first this many of the 20 questions (3: a fresh server's first turns)")
    parser.add_argument("--barge", type=int, default=4, help="interruption trials (after the questions)")
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--server_pid", type=int, help="with --url: the server's pid, for the CPU budget")
    parser.add_argument("--client_nice", type=int, default=0,
                        help="run this client this much nicer (19: as if it ran on another machine)")
    parser.add_argument("server_args", nargs="*", help="after --: flags for the server it starts")
    args = parser.parse_args()
    server, url = None, args.url
    if url is None:
        from vita.harness.server import has_flag, start_server, wait_ready

        seats = () if has_flag(args.server_args, "--max_users") else ("--max_users", str(max(2, args.users)))
        server = start_server(Path(tempfile.mkdtemp()), "--timeout", "3600", *seats, *args.server_args)
        wait_ready(server)
        url = server.url
    if args.client_nice:
        os.nice(args.client_nice)  # after the server started, so its processes keep their priority
    clients = [RecordingClient(url).connect() for _ in range(args.users)]
    mics = [Microphone(c, binary=args.transport == "binary", name=f"mic-{i}") for i, c in enumerate(clients)]
    client, mic = clients[0], mics[0]
    questions = [q for pair in zip(SHORT, LONG + LONG, strict=False) for q in pair][:min(args.questions, 20)]
    speech = {q: synthesize(args.voice, q) for q in [*questions, BARGE_OVER, BARGE_WITH]}  # not while measuring
    rows, barges = [], []
    pid = server.process.pid if server is not None else args.server_pid
    cpu_before, wall_before = (thread_cpu(pid) if pid else {}), time.monotonic()
    client_before = sum(os.times()[:2])
    try:
        for _ in range(args.rounds):
            for text in questions:
                for row in ask_together(clients, mics, args.voice, text, speech[text]):
                    print(json.dumps(row), flush=True)
                    if row:
                        rows.append(row)
        cpu_after, wall = (thread_cpu(pid) if pid else {}), time.monotonic() - wall_before
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
            from vita.harness.server import stop_server

            stop_server(server)
    machine = cpu_description()
    print(f"\nCPU: {machine['model']} (family {machine['family']}, model {machine['model_number']}), "
          f"{machine['isa']}, {machine['cores']} cores")
    print(f"{args.transport} client, voice {args.voice}, {args.users} user(s) at once, {len(rows)} answered of "
          f"{len(questions) * args.rounds * args.users}; seconds:")
    for key in ("client_v2v_s", "server_v2v_s", "speech_end_late_s", "end_of_speech_s", "asr_s", "first_token_s",
                "first_piece_s", "tts_first_chunk_s", "prompt_tokens", "cached_tokens", "decode_tok_s", "max_gap_s"):
        print(f"  {key:18} {stats(rows, key)}")
    print(f"  replies with a gap > {GAP_S * 1000:.0f} ms: {sum(r['gaps_over'] > 0 for r in rows)} of {len(rows)}")
    for key in ("onset_to_quiet_s", "onset_to_duck_event_s", "onset_to_stop_tts_s"):
        print(f"  {key:22} {stats(barges, key)}")
    budget = sorted(((k, v - cpu_before.get(k, 0.0)) for k, v in cpu_after.items()), key=lambda kv: -kv[1])
    if budget:
        cores = len(os.sched_getaffinity(0))
        print(f"CPU during the questions ({wall:.0f} s wall, {cores} cores = {cores * wall:.0f} core-seconds), "
              "by thread:")
        for name, seconds in budget[:16]:
            print(f"  {name:40} {seconds:7.1f} s  {100 * seconds / wall:5.1f} % of a core")
    if args.json:
        Path(args.json).write_text(json.dumps({"transport": args.transport, "voice": args.voice, "users": args.users,
                                               "cpu_model": machine, "turns": rows,
                                               "barge": barges, "cpu": dict(budget), "wall_s": wall}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
