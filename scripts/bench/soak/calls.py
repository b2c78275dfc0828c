"""Phone calls set up and hung up: what a busy phone line leaves behind in the front.

--calls calls, --at_once at a time, each as a provider makes one (tests/harness/phone_client.py, Twilio's dialect
unless --provider says otherwise): the webhook, the media stream, `start`, a second of a caller's voice, a keypad
digit, then the caller hangs up (`stop`, the stream closed) — and every --every-th call is instead left for the
server to close (a stream that never starts: its seat must never be taken). Before and after, with no call on the
line, /health is read: sessions, the front's threads and its RSS.

Targets: 0 sessions and the same threads after as before (taken once the front is idle again), RSS at most 10 MB
above the start after a warm-up of --at_once calls; every call that started was seated (none refused while seats
were free).

Usage: .venv/bin/python -m scripts.bench.soak.calls [--calls 100] [--at_once 2] [--provider twilio] [--url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


def health(url: str) -> dict:
    import requests

    return requests.get(url + "/health", verify=False, timeout=10).json()


def idle_health(url: str, timeout: float = 30.0) -> dict:
    """/health once no session is left and the thread count has held still for a second."""
    deadline, last = time.monotonic() + timeout, None
    while True:
        now = health(url)
        if not now["sessions"] and last is not None and now["threads"] == last["threads"]:
            return now
        if time.monotonic() > deadline:
            return now
        last = now
        time.sleep(1.0)


def one_call(url: str, provider: str, voice: np.ndarray, n: int, never_start: bool) -> str:
    from tests.harness.phone_client import PhoneCall

    call = PhoneCall(url, provider, answer_marks=True)
    try:
        if never_start:  # the provider opens the stream and says nothing: closed by the server within 10 s
            return "closed by the server" if call.closed.wait(20) else "left open"
        call.start()
        call.say(voice)
        call.dtmf(str(n % 10))
        return "hung up"
    finally:
        with contextlib.suppress(Exception):
            call.hang_up()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--at_once", type=int, default=2)
    parser.add_argument("--every", type=int, default=10, help="every N-th call's stream never starts (0: none)")
    parser.add_argument("--provider", default="twilio", choices=("twilio", "telnyx", "plivo"))
    parser.add_argument("--url", help="a running server (default: start one)")
    args = parser.parse_args()
    from scripts.bench.common import cpu_description
    from tests.harness.speech import silence, spoken

    voice = np.concatenate([silence(0.2), spoken("Hello there."), silence(0.3)])
    server, url = None, args.url
    if url is None:
        from tests.harness.server import start_server, wait_ready

        server = start_server(Path(tempfile.mkdtemp()), "--timeout", "600", "--max_users", str(max(args.at_once, 2)))
        wait_ready(server)
        url = server.url
    try:
        with ThreadPoolExecutor(args.at_once) as pool:  # warm-up: the first calls' one-time costs
            list(pool.map(lambda n: one_call(url, args.provider, voice, n, False), range(args.at_once)))
        before = idle_health(url)
        started = time.monotonic()
        with ThreadPoolExecutor(args.at_once) as pool:
            outcomes = list(pool.map(lambda n: one_call(url, args.provider, voice, n,
                                                        bool(args.every) and n % args.every == args.every - 1),
                                     range(args.calls)))
        took = time.monotonic() - started
        after = idle_health(url)
    finally:
        if server is not None:
            from tests.harness.server import stop_server

            stop_server(server)
    counts = {o: outcomes.count(o) for o in sorted(set(outcomes))}
    rss = after["rss_mb"] - before["rss_mb"]
    ok = (not after["sessions"] and after["threads"] <= before["threads"] and rss <= 10
          and "left open" not in counts)
    print(f"{args.calls} {args.provider} calls, {args.at_once} at a time, in {took:.0f} s: {counts}")
    print(f"sessions {before['sessions']} -> {after['sessions']}, threads {before['threads']} -> {after['threads']}, "
          f"RSS {before['rss_mb']} -> {after['rss_mb']} MB ({rss:+.1f} MB)")
    print(f"{'PASS' if ok else 'FAIL'}; CPU {cpu_description()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
