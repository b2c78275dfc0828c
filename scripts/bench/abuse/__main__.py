"""Run the abuse benchmark (see the package's docstring): the victim's turns alone, then beside each abuser."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

from scripts.bench.abuse.abusers import ABUSERS, CAMERA_QUESTION, QUESTIONS, sign_picture
from scripts.bench.measure import ask
from scripts.eval.camera import Camera
from tests.harness.client import RecordingClient
from tests.harness.speech import Microphone


def health(url: str) -> dict:
    return requests.get(url + "/health", verify=False, timeout=5).json()


def front_usage(pid: int) -> dict[str, float]:
    process = psutil.Process(pid)
    cpu = process.cpu_times()
    return {"rss_mb": round(process.memory_info().rss / 2**20, 1), "threads": process.num_threads(),
            "cpu_s": cpu.user + cpu.system, "at": time.monotonic()}


def cpu_share(before: dict, after: dict) -> float:
    """The front's CPU between two samples, in cores."""
    return (after["cpu_s"] - before["cpu_s"]) / max(1e-6, after["at"] - before["at"])


def thread_cpu_s(native_id: int | None) -> float:
    """CPU time of one thread of this process (the abuser's client: it shares the machine with the server)."""
    for thread in psutil.Process().threads():
        if thread.id == native_id:
            return thread.user_time + thread.system_time
    return 0.0


@dataclass
class VictimTurns:
    v2v: list[float] = field(default_factory=list)  # the plain questions'
    camera_v2v: list[float] = field(default_factory=list)  # "What does the sign say?"
    camera_read: int = 0  # camera answers that read the sign
    camera_asked: int = 0


def victim_turns(client: RecordingClient, mic: Microphone, until: float) -> VictimTurns:
    """Spoken questions until `until`, every third about the sign its camera shows; their voice-to-voice at the
    client."""
    turns, i = VictimTurns(), 0
    while time.monotonic() < until:
        about_camera = i % 3 == 2
        row = ask(client, mic, "hibari", CAMERA_QUESTION if about_camera else QUESTIONS[i % len(QUESTIONS)])
        i += 1
        if not row or row.get("client_v2v_s") is None:
            continue
        if about_camera:
            turns.camera_asked += 1
            turns.camera_v2v.append(row["client_v2v_s"])
            turns.camera_read += "exit" in row.get("reply", "").lower() and "12" in row.get("reply", "")
        else:
            turns.v2v.append(row["client_v2v_s"])
    return turns


def run_abuse(url: str, pid: int, name: str, seconds: float, victim: RecordingClient, mic: Microphone) -> dict:
    before = front_usage(pid)
    stop, abuser = threading.Event(), RecordingClient(url).connect()
    errors: list[str] = []

    def run() -> None:
        try:
            ABUSERS[name](stop, abuser)
        except Exception as exc:  # the server closing the abuser's connection ends its abuse
            errors.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=run, name=f"abuse-{name}", daemon=True)
    thread.start()
    turns = victim_turns(victim, mic, time.monotonic() + seconds)
    v2v = turns.v2v
    during = front_usage(pid)
    abuser_cpu = thread_cpu_s(thread.native_id) / max(1e-6, during["at"] - before["at"])
    stop.set()
    thread.join(10)
    codes = sorted({d.get("code") for _, n, d in abuser.events if n == "error" and isinstance(d, dict)})
    failed = [d.get("message") for _, n, d in abuser.events if n == "rtc_failed" and isinstance(d, dict)]
    try:
        abuser.close()
    except TimeoutError:  # a throttled abuser's goodbye waits behind all it queued: it just goes silent, and the
        abuser.loop.call_soon_threadsafe(abuser.loop.stop)  # server drops it at its ping timeout
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and health(url)["sessions"] > 1:
            time.sleep(0.5)
    time.sleep(5.0)  # the front's allocator and engine.io's timers settle after the abuser left
    after = front_usage(pid)
    return {"abuse": name, "before": before, "during": during, "after": after, "victim_v2v": v2v,
            "victim_v2v_p50": statistics.median(v2v) if v2v else None, "abuser_errors": codes,
            "victim_camera_v2v": turns.camera_v2v, "victim_camera_read": [turns.camera_read, turns.camera_asked],
            "victim_camera_v2v_p50": statistics.median(turns.camera_v2v) if turns.camera_v2v else None,
            "front_cores": round(cpu_share(before, during), 2), "abuser_client_cores": round(abuser_cpu, 2),
            "abuser_rtc_failed": failed[:1], "abuser_ended": errors[:1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (with --server_pid: its front's pid)")
    parser.add_argument("--server_pid", type=int)
    parser.add_argument("--seconds", type=float, default=60.0, help="each abuse (and the baseline) this long")
    parser.add_argument("--only", help="comma-separated abusers: " + ", ".join(ABUSERS))
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args()
    server, url, pid = None, args.url, args.server_pid
    if url is None:
        from tests.harness.server import start_server, wait_ready

        server = start_server(Path(tempfile.mkdtemp()), "--timeout", "3600", "--max_users", "3")
        wait_ready(server)
        url, pid = server.url, server.process.pid
    names = args.only.split(",") if args.only else list(ABUSERS)
    victim = RecordingClient(url).connect()
    mic = Microphone(victim, binary=True)
    camera = Camera(victim, sign_picture())
    rows = []
    try:
        camera.__enter__()  # the victim's camera shows the sign throughout
        ask(victim, mic, "hibari", "Hello there.")  # warm-up turn
        base = front_usage(pid)
        alone_turns = victim_turns(victim, mic, time.monotonic() + args.seconds)
        alone = alone_turns.v2v
        alone_p50 = statistics.median(alone)
        camera_p50 = statistics.median(alone_turns.camera_v2v) if alone_turns.camera_v2v else float("nan")
        cores = cpu_share(base, front_usage(pid))
        print(f"alone: victim v2v p50 {alone_p50:.3f} s ({len(alone)} turns), camera question {camera_p50:.3f} s"
              f" (read {alone_turns.camera_read}/{alone_turns.camera_asked}); front RSS {base['rss_mb']} MB,"
              f" {base['threads']} threads, {cores:.2f} cores", flush=True)
        for name in names:
            row = run_abuse(url, pid, name, args.seconds, victim, mic)
            rows.append(row)
            p50 = row["victim_v2v_p50"]
            grew = row["during"]["rss_mb"] - row["before"]["rss_mb"]
            threads = row["during"]["threads"] - row["before"]["threads"]
            left = row["after"]["rss_mb"] - base["rss_mb"]
            seen = row["victim_camera_v2v_p50"]
            ok = (grew <= 50 and threads <= 10 and p50 is not None and p50 <= 1.2 * alone_p50 and left <= 10
                  and (seen is None or not seen > camera_p50 + 1.0))
            print(f"{name:20} victim v2v p50 {p50 if p50 is None else round(p50, 3)} s ({len(row['victim_v2v'])}"
                  f" turns, {100 * (p50 / alone_p50 - 1) if p50 else 0:+.0f} %), camera question"
                  f" {seen if seen is None else round(seen, 3)} s (read {row['victim_camera_read'][0]}/"
                  f"{row['victim_camera_read'][1]}); front RSS +{grew:.1f} MB, threads"
                  f" {threads:+d}; after it left RSS {left:+.1f} MB vs baseline, threads {row['after']['threads']};"
                  f" front {row['front_cores']:.2f} cores, abuser's client {row['abuser_client_cores']:.2f} cores;"
                  f" the abuser got {row['abuser_errors'] or row['abuser_rtc_failed'] or '-'}"
                  f"  {'PASS' if ok else 'FAIL'}", flush=True)
    finally:
        camera.__exit__(None, None, None)
        mic.close()
        victim.close()
        if server is not None:
            from tests.harness.server import stop_server

            stop_server(server)
    if args.json:
        Path(args.json).write_text(json.dumps({"alone": alone, "alone_camera": alone_turns.camera_v2v,
                                               "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
