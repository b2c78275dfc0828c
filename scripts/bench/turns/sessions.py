"""The sessions the turn-taking trials run in, and running a group of trials: each trial gets a settled session (one
per group, renewed every SESSION_TRIALS trials and after a failed trial) and prints one line."""

from __future__ import annotations

import time
from collections.abc import Callable

from scripts.bench.turns.events import since, state_of
from tests.harness.client import RecordingClient

SESSION_TRIALS = 6


class Sessions:
    """One session per (kind, voice) group, renewed every SESSION_TRIALS trials and after a failed trial."""

    def __init__(self, url: str):
        self.url = url
        self.client: RecordingClient | None = None
        self.used = 0

    def get(self) -> RecordingClient:
        if self.client is None or self.used >= SESSION_TRIALS or not self.client.sio.connected:
            self.close()
            self.client = RecordingClient(self.url).connect()
            self.used = 0
        self.used += 1
        return self.client

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
            time.sleep(0.3)  # let the server end the session before the next one connects (max_users)

    def settle(self) -> None:
        """Back to listening, nothing in flight, no history, before the next trial."""
        client = self.client
        if client is None:
            return
        mark = time.monotonic()
        if state_of(since(client, 0)) != "listening":  # a reply still playing (or being prepared): cut it
            client.sio.emit("recording-stopped")
            client.sio.emit("recording-started")
            if not client.wait_for(lambda evs: len([1 for t, n, _ in evs if n == "stop_tts" and t >= mark]) >= 2, 5):
                print("  (the session did not stop its reply on recording-stopped/-started: renewing it)", flush=True)
                self.close()
                return
        mark = time.monotonic()
        client.sio.emit("reset_state")
        if not client.wait_for(lambda evs: any(n == "history_cleared" and t >= mark for t, n, _ in evs), 5):
            print("  (no history_cleared after reset_state: renewing the session)", flush=True)
            self.close()
            return
        time.sleep(0.2)
        if state_of(since(client, 0)) != "listening":
            print(f"  (the session is '{state_of(since(client, 0))}' after settling: renewing it)", flush=True)
            self.close()


def run_group(sessions: Sessions, title: str, jobs: list[tuple[str, Callable[[RecordingClient], dict]]]
              ) -> list[dict]:
    rows = []
    for label, job in jobs:
        client = sessions.get()
        try:
            row = job(client)
        except Exception as e:  # a trial that failed is reported as such; the next gets a fresh session
            given = {k: v for k, v in getattr(job, "keywords", {}).items() if k != "sound"}
            row = {**given, "error": f"{type(e).__name__}: {e}"}
            sessions.close()
        else:
            sessions.settle()
        rows.append(row)
        print(f"  {title} | {label} | {brief(row)}", flush=True)
    sessions.close()
    return rows


def brief(row: dict) -> str:
    keys = ("end_of_turn_s", "voice_to_voice_s", "outcome", "why", "answered", "extended", "false_stop", "ducked",
            "duck_held_s", "left_ducked", "became_turn", "valid", "stopped", "stop_s", "stop_after_end_s", "duck_s",
            "cancel_reason", "next_transcript", "transcripts", "error")
    parts = []
    for k in keys:
        if k in row and row[k] not in (None, [], {}):
            v = row[k]
            parts.append(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}")
    return ", ".join(parts)
