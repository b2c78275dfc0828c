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

Usage: .venv/bin/python -m scripts.bench.soak_faults [--minutes 20] [--fault_every 60] [--freeze_s 20]
       [--faults kill_llm,freeze_llm,engine_raise,freeze_tts,lose_end|none] [--url URL] [--json FILE] [--seed 1]
       [--verbose]
e.g.   .venv/bin/python -m scripts.bench.soak_faults --minutes 4 --fault_every 45 \
           --faults kill_llm,freeze_llm,freeze_tts
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import json
import random
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import requests

import tests.harness.server as harness
from scripts.bench.common import percentile
from scripts.eval.questions import E2E_LONG_QUESTIONS as LONG_QUESTIONS
from scripts.eval.questions import E2E_QUESTIONS as QUESTIONS
from tests.harness.client import RecordingClient
from tests.harness.speech import Microphone, noise, spoken
from vita.config import load_config

FAULTS = ("kill_llm", "freeze_llm", "engine_raise", "freeze_tts", "lose_end")
WORKER_OF = {"kill_llm": "llm", "freeze_llm": "llm", "engine_raise": "llm", "freeze_tts": "tts", "lose_end": "tts"}
RECOVERY_S = 60.0  # every session must be answered again within this long after each fault
RSS_LIMIT_MB = 20.0
WARMUP_TURNS = 2  # per session, before the start figures are taken and the first fault's clock starts
HEALTH_EVERY_S = 10.0
INJECT_AFTER_SENT_S = 0.4  # "mid-turn": this long after a question's last voiced sample (the turn is committed)
TRIGGER_WAIT_S = 30.0  # how long a fault waits for its moment (a question sent, a reply playing)
ERROR_AFTER_END_S = 1.0  # an error without turn_id this soon after a turn ended is that turn's (worker_failed)
HARD_CAP_S = 180.0  # no turn may take longer than this from the end of its question, audio or not
LOGGED_EVENTS = {"vad", "turn", "state", "turn_cancelled", "error", "stop_tts", "duck", "transcript", "response_text",
                 "server_status", "disconnect", "out_time"}
EXTRA_QUESTIONS = ["How many legs does a spider have?", "What color is the sky on a clear day?",
                   "Who wrote Romeo and Juliet?", "What is two plus three?"]


def now() -> float:
    return time.monotonic()


class SoakClient(RecordingClient):
    """A RecordingClient that keeps only the length of each reply audio message (20 minutes of it is ~100 MB)."""

    async def _record(self, event: str, data: object = None) -> None:
        if event == "audio" and isinstance(data, (bytes, bytearray)):
            data = len(data)
        await super()._record(event, data)


# --- what happened to each question -------------------------------------------------------------------------------
@dataclass
class Turn:
    session: str
    index: int
    question: str
    warmup: bool
    barge_planned: bool
    speech_start: float = 0.0
    speech_end: float = 0.0
    turn_id: int | None = None
    committed_at: float | None = None
    states: list = field(default_factory=list)  # (t, state, reason)
    first_audio_at: float | None = None
    last_audio_at: float | None = None
    audio_s: float = 0.0
    errors: list = field(default_factory=list)  # (t, code, message)
    cancelled: tuple | None = None  # (t, reason)
    ended_at: float | None = None
    end_reason: str | None = None
    stuck_at: float | None = None
    barged_at: float | None = None  # when this session started speaking over this turn's reply
    withdrawn_at: float | None = None  # the server withdrew its turn as "extended"; a new turn should follow
    carried: bool = False  # ...and one did: the request went on in it (check_stuck)
    transcript: str = ""
    reply: str = ""

    def deadline(self, stall_s: float, margin_s: float) -> float:
        progress = max(self.speech_end, self.last_audio_at or 0.0)
        return min(progress + stall_s + margin_s, self.speech_end + HARD_CAP_S)

    def outcome(self) -> str:
        if self.stuck_at is not None:
            return "stuck"
        if self.ended_at is None:
            return "carried" if self.carried else "open"
        if self.errors:
            return f"error:{self.errors[0][1]}"
        if self.end_reason == "barge-in":
            return "barge_in"
        if self.end_reason is None:
            return "answered" if self.first_audio_at is not None else "no_audio"
        return f"ended:{self.end_reason}"  # cancelled or unanswered for another reason (e.g. no speech recognised)


class Soak:
    def __init__(self, args: argparse.Namespace, url: str, stall_s: float):
        self.args = args
        self.url = url
        self.stall_s = stall_s
        self.lock = threading.Lock()
        self.turns: list[Turn] = []
        self.anomalies: list[dict] = []
        self.session_errors: list[dict] = []
        self.faults: list[dict] = []
        self.health: list[dict] = []
        self.moments = threading.Condition()  # drivers announce "sent" (a question) and "playing" (first audio)
        self.moment_log: list[tuple[float, str, str]] = []
        self.stopping = threading.Event()  # sessions finish their turn and stop asking
        self.done = threading.Event()  # the injector and the health sampler stop
        self.warm = threading.Barrier(3)  # two sessions + main, after the warm-up turns
        self.go = threading.Event()
        self.t0 = now()  # reset when the soak proper starts
        self.frozen: list[psutil.Process] = []
        self.stopped_at = 0.0
        self.code = ""  # the commit the server runs (when this script started it)
        self.start_figures: dict = {}
        self.end_figures: dict = {}

    def t(self, when: float | None) -> float | None:
        return None if when is None else round(when - self.t0, 2)

    def say(self, text: str) -> None:
        print(f"[{now() - self.t0:7.1f} s] {text}", flush=True)

    def anomaly(self, session: str, what: str, **details) -> None:
        with self.lock:
            self.anomalies.append({"at": now(), "session": session, "what": what, **details})
        self.say(f"{session}: ANOMALY {what} {details if details else ''}")

    def announce(self, kind: str, session: str) -> None:
        with self.moments:
            self.moment_log.append((now(), kind, session))
            self.moments.notify_all()

    def wait_moment(self, kind: str, after: float, timeout: float) -> tuple[float, str] | None:
        deadline = now() + timeout
        with self.moments:
            while True:
                hit = next(((t, s) for t, k, s in self.moment_log if k == kind and t >= after), None)
                if hit is not None or self.done.is_set():
                    return hit
                remaining = deadline - now()
                if remaining <= 0:
                    return None
                self.moments.wait(min(remaining, 1.0))

    # --- /health --------------------------------------------------------------------------------------------------
    def get_health(self) -> dict | None:
        try:
            return requests.get(self.url + "/health", verify=False, timeout=5).json()
        except (requests.RequestException, ValueError):
            return None

    def sample_health(self) -> None:
        while not self.done.is_set():
            started = now()
            health = self.get_health()
            row = {"at": started, "ok": health is not None, "latency_s": round(now() - started, 3)}
            if health is not None:
                row.update({k: health.get(k) for k in ("threads", "ping_timers", "rss_mb", "sessions", "vad_threads",
                                                       "status")})
                row["workers"] = {name: {k: w.get(k) for k in ("state", "pid", "restarts")}
                                  for name, w in (health.get("workers") or {}).items()}
            else:
                self.anomaly("server", "/health did not answer within 5 s")
            with self.lock:
                self.health.append(row)
            self.done.wait(HEALTH_EVERY_S - (now() - started))

    def quiet_figures(self) -> dict:
        """Front threads and RSS with the sessions idle: the least threads of three samples 2 s apart (a transient
        timer thread must not count), the last RSS."""
        samples = []
        for _ in range(3):
            health = self.get_health()
            if health is not None:
                samples.append(health)
            time.sleep(2)
        if not samples:
            return {}
        return {"at": now(), "threads": min(h["threads"] for h in samples),
                "ping_timers": samples[-1].get("ping_timers"), "rss_mb": samples[-1]["rss_mb"],
                "sessions": samples[-1]["sessions"]}

    def ready_pid(self, worker: str, timeout: float) -> tuple[int | None, float]:
        """The worker's pid once /health shows it ready (or None after timeout), and how long that took."""
        started = now()
        while now() - started < timeout and not self.done.is_set():
            health = self.get_health() or {}
            info = (health.get("workers") or {}).get(worker) or {}
            if info.get("state") == "ready" and info.get("pid"):
                return info["pid"], now() - started
            time.sleep(1)
        return None, now() - started

    # --- faults -----------------------------------------------------------------------------------------------------
    def inject_faults(self) -> None:
        kinds = [k for k in self.args.faults.split(",") if k]
        duration = self.args.minutes * 60
        k = 0
        while kinds:
            due = self.t0 + (k + 1) * self.args.fault_every
            if due - self.t0 > duration - RECOVERY_S or self.done.wait(max(0.0, due - now())):
                return
            self.inject(kinds[k % len(kinds)], due)
            k += 1

    def inject(self, kind: str, due: float) -> None:
        worker = WORKER_OF[kind]
        fault = {"kind": kind, "due": self.t(due), "worker": worker, "pid": None}
        pid, waited = self.ready_pid(worker, timeout=120)
        fault["waited_for_ready_s"] = round(waited, 1)
        if pid is None:
            fault.update(at=self.t(now()), skipped=f"the {worker} worker was not ready for 120 s")
            self.record_fault(fault)
            return
        trigger = "playing" if kind == "freeze_tts" else "sent"
        hit = self.wait_moment(trigger, now(), TRIGGER_WAIT_S)
        if hit is not None:
            fault["moment"] = f"{hit[1]}: " + ("reply playing" if trigger == "playing" else "question just sent")
            if trigger == "sent":
                time.sleep(max(0.0, hit[0] + INJECT_AFTER_SENT_S - now()))
        else:
            fault["moment"] = f"no '{trigger}' moment within {TRIGGER_WAIT_S:g} s: injected anyway"
        health = self.get_health() or {}
        info = (health.get("workers") or {}).get(worker) or {}
        if info.get("pid") != pid or info.get("state") != "ready":
            fault["note"] = f"the worker changed before injection: now {info.get('state')} pid {info.get('pid')}"
            pid = info.get("pid") or pid
        fault["pid"], fault["restarts_before"] = pid, info.get("restarts")
        try:
            process = psutil.Process(pid)
            if kind == "kill_llm":
                process.kill()
            elif kind in ("freeze_llm", "freeze_tts"):
                process.suspend()
                with self.lock:
                    self.frozen.append(process)
                threading.Thread(target=self.thaw, args=(process, fault), daemon=True).start()
            else:  # SIGUSR1: only to a worker that handles it (its default action would kill the worker)
                if not handles_sigusr1(pid):
                    fault.update(at=self.t(now()), skipped="SIGUSR1 is not handled by the worker "
                                                           "(started without VITA_FAULT_SIGNALS=1?)")
                    self.record_fault(fault)
                    return
                process.send_signal(signal.SIGUSR1)
        except psutil.Error as exc:
            fault.update(at=self.t(now()), skipped=f"could not signal pid {pid}: {exc!r}")
            self.record_fault(fault)
            return
        fault["at_mono"] = now()
        fault["at"] = self.t(fault["at_mono"])
        self.record_fault(fault)
        self.follow(fault)

    def follow(self, fault: dict) -> None:
        """Watch /health every 0.5 s after a fault: when the front marked the worker down, when a new one was ready
        (or that the same process stayed, for a freeze it survived or a lost turn end)."""
        started, pid, worker = fault["at_mono"], fault["pid"], fault["worker"]
        same_after = {"freeze_llm": self.args.freeze_s + 3, "freeze_tts": self.args.freeze_s + 3,
                      "lose_end": self.stall_s + 5}.get(fault["kind"])
        while not self.done.is_set() and now() - started < 180:
            info = ((self.get_health() or {}).get("workers") or {}).get(worker) or {}
            if info.get("state") not in ("ready", None) and "down_s" not in fault:
                fault["down_s"] = round(now() - started, 1)
                fault["down_as"] = info.get("state")
            if info.get("state") == "ready" and info.get("pid") != pid:
                fault["back_s"] = round(now() - started, 1)
                fault["afterwards"] = (f"marked {fault.get('down_as')} after {fault.get('down_s')} s, new {worker} "
                                       f"worker ready after {fault['back_s']} s")
                break
            if same_after and now() - started >= same_after and info.get("pid") == pid \
                    and info.get("state") == "ready":
                fault["afterwards"] = f"same {worker} worker kept" + (
                    f" (marked {fault['down_as']} after {fault['down_s']} s)" if "down_s" in fault else
                    ", never marked down")
                break
            time.sleep(0.5)
        else:
            fault["afterwards"] = f"{worker} worker not ready again within {now() - started:.0f} s"
        self.say(f"{fault['kind']}: {fault['afterwards']}")

    def record_fault(self, fault: dict) -> None:
        with self.lock:
            self.faults.append(fault)
        where = f"pid {fault.get('pid')}, {fault.get('moment', '')}"
        self.say(f"FAULT {fault['kind']} " + (f"SKIPPED: {fault['skipped']}" if "skipped" in fault else where))

    def thaw(self, process: psutil.Process, fault: dict) -> None:
        self.done.wait(self.args.freeze_s)
        self.resume(process, fault)

    def resume(self, process: psutil.Process, fault: dict | None = None) -> None:
        with self.lock:
            if process not in self.frozen:
                return
            self.frozen.remove(process)
        try:
            process.resume()  # psutil checks it is still the same process (no pid reuse)
            outcome = "SIGCONT sent"
        except psutil.Error:
            outcome = "gone before SIGCONT (killed by the supervisor)"
        if fault is not None:
            fault["thaw"] = outcome
            self.say(f"{fault['kind']} pid {process.pid}: {outcome}")

    def resume_all(self) -> None:
        for process in list(self.frozen):
            self.resume(process)

    # --- reporting ---------------------------------------------------------------------------------------------------
    def recovery(self, fault: dict, sessions: list[str]) -> dict[str, float | None]:
        """Per session: seconds from the fault to the first reply audio of a question started after it."""
        out = {}
        for name in sessions:
            times = [t.first_audio_at for t in self.turns if t.session == name and t.first_audio_at is not None
                     and t.speech_start >= fault["at_mono"]]
            out[name] = round(min(times) - fault["at_mono"], 1) if times else None
        return out


def handles_sigusr1(pid: int) -> bool:
    """The process has a handler for SIGUSR1 (bit 10 of SigCgt in /proc/PID/status)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGUSR1 - 1) & 1)
    except OSError:
        return False
    return False


# --- one talking session -------------------------------------------------------------------------------------------
class Session:
    def __init__(self, soak: Soak, name: str, seed: int):
        self.soak = soak
        self.name = name
        self.seed = seed
        self.rng = random.Random(seed)
        self.client: SoakClient | None = None
        self.mic: Microphone | None = None
        self.cursor = 0
        self.turns: dict[int, Turn] = {}  # by turn_id
        self.said: collections.deque = collections.deque(maxlen=4)  # (Utterance, Turn) of the latest questions
        self.log: list = []  # the turn-taking events (no audio, deltas or timings), for the JSON
        self.speaking: Turn | None = None
        self.open: list[Turn] = []  # not ended, not stuck
        self.ended: list[Turn] = []  # ended, not yet printed (an error may still come)
        self.recent: collections.deque = collections.deque(maxlen=12)  # last events, for a stuck turn's report
        self.last_tid = 0
        self.reconnects = 0
        self.extended = 0  # questions heard as two turns, the first cancelled as "extended" by the server
        self.server_ended: set[int] = set()  # turn ids the server sent `listening` for (not as "extended")
        self.committed: list[tuple[int, float]] = []  # (turn id, when) of every `turn` the server sent
        self.stray_audio = 0  # reply audio messages that came when no turn of this session was speaking
        self.stray_logged_at = 0.0

    def connect(self) -> None:
        self.client = SoakClient(self.soak.url).connect()
        self.cursor = 0
        level = self.soak.args.noise_level
        background = noise(10.0, level=level, seed=self.seed) if level > 0 else None
        self.mic = Microphone(self.client, binary=True, background=background, name=f"mic-{self.name}")

    def close(self) -> None:
        if self.mic is not None:
            self.mic.close()
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()

    def reconnect(self) -> None:
        self.soak.anomaly(self.name, "disconnected by the server; reconnecting", recent=list(self.recent))
        self.close()
        self.reconnects += 1
        for turn in self.open:  # a new connection is a new session: its turns end with the old one
            turn.ended_at, turn.end_reason = now(), "disconnected"
        self.open, self.turns, self.speaking, self.last_tid = [], {}, None, 0
        self.said.clear()
        deadline = now() + 60
        while now() < deadline:
            try:
                self.connect()
                return
            except Exception:
                time.sleep(2)
        raise RuntimeError(f"{self.name}: could not reconnect for 60 s")

    # --- events -------------------------------------------------------------------------------------------------
    def pump(self, until, deadline: float) -> bool:
        """Handle the client's events until until() holds (True) or the deadline passes (False)."""
        while True:
            with self.client.changed:
                fresh = self.client.events[self.cursor:]
                self.cursor += len(fresh)
            for t, name, data in fresh:
                self.handle(t, name, data)
            self.check_stuck()
            if until():
                return True
            if now() >= deadline:
                return False
            if self.mic.broken or any(name == "disconnect" for _, name, _ in fresh):
                self.reconnect()
            with self.client.changed:
                if len(self.client.events) == self.cursor:
                    self.client.changed.wait(min(0.25, max(0.0, deadline - now())))

    def handle(self, t: float, name: str, data: object) -> None:
        self.recent.append((round(t - self.soak.t0, 2), name, data if name != "audio" else f"{data} B"))
        if name in LOGGED_EVENTS:
            self.log.append((t, name, data))
        if name == "turn":
            tid = data["turn_id"]
            if tid <= self.last_tid:
                self.soak.anomaly(self.name, f"turn id {tid} after {self.last_tid}")
            self.last_tid = max(self.last_tid, tid)
            self.committed.append((tid, t))
            # A turn is the latest question's whose speech had started (the next one may be queued already).
            turn = next((q for u, q in reversed(self.said) if 0 < u.onset_sent <= t), None)
            if turn is None:
                self.soak.anomaly(self.name, f"turn {tid} committed with no question pending", turn=data)
                return
            if turn.turn_id is not None:
                self.split(turn, tid)
            turn.turn_id, turn.committed_at = tid, t
            self.turns[tid] = turn
        elif name == "state":
            self.on_state(t, data)
        elif name == "audio":
            turn = self.speaking
            if turn is None:
                self.stray_audio += 1
                if t - self.stray_logged_at > 5:  # one line per burst
                    self.stray_logged_at = t
                    self.soak.anomaly(self.name, "reply audio with no turn speaking", recent=list(self.recent)[-6:])
                return
            turn.first_audio_at = turn.first_audio_at or t
            turn.last_audio_at = t
            turn.audio_s += data / 2 / 24000 if isinstance(data, int) else 0.0
            if turn.first_audio_at == t:
                self.soak.announce("playing", self.name)
        elif name == "error":
            self.on_error(t, data)
        elif name == "turn_cancelled":
            turn = self.turns.get(data.get("turn_id"))
            if turn is not None:
                turn.cancelled = (t, data.get("reason"))
                if data.get("reason") == "barge-in" and turn.barged_at is None:
                    self.soak.anomaly(self.name, f"turn {turn.turn_id} cancelled by a barge-in nobody made",
                                      recent=list(self.recent)[-8:])
        elif name == "transcript":
            turn = self.turns.get(data.get("turn_id"))
            if turn is not None:
                turn.transcript = data.get("text", "")
        elif name == "response_text":
            turn = self.turns.get(data.get("turn_id"))
            if turn is not None:
                turn.reply = data.get("text", "")
        elif name in ("out_time", "too_many_users"):
            self.soak.anomaly(self.name, f"server sent {name}")

    def split(self, turn: Turn, tid: int) -> None:
        """One question made a second turn (a pause in it ended the first): the first part is set apart, not
        counted, and the question's record starts afresh with the new turn. Expected when the server cancelled the
        first part as "extended" (the user went on); an anomaly otherwise (e.g. a barge-in on one's own question)."""
        if turn.cancelled is not None and turn.cancelled[1] == "extended":
            self.extended += 1
        else:
            self.soak.anomaly(self.name, f"one question made turns {turn.turn_id} and {tid}",
                              question=turn.question, recent=list(self.recent))
        first = copy.deepcopy(turn)
        first.question += " (its first part)"
        self.turns[turn.turn_id] = first
        if self.speaking is turn:
            self.speaking = first
        self.open = [x for x in self.open if x is not turn]
        self.ended = [x for x in self.ended if x is not turn]
        turn.states, turn.errors, turn.audio_s, turn.transcript, turn.reply = [], [], 0.0, "", ""
        turn.first_audio_at = turn.last_audio_at = turn.ended_at = turn.end_reason = turn.cancelled = None
        turn.withdrawn_at = None
        if turn.speech_end > 0 and turn.stuck_at is None:
            self.open.append(turn)

    def on_state(self, t: float, data: dict) -> None:
        state, tid, reason = data.get("state"), data.get("turn_id"), data.get("reason")
        turn = self.turns.get(tid)
        if turn is None:
            self.soak.anomaly(self.name, f"state {state} for unknown turn {tid}", payload=data)
            return
        seen = [s for _, s, _ in turn.states]
        expected = {"thinking": not seen, "speaking": seen == ["thinking"],
                    "listening": bool(seen) and seen[-1] != "listening"}
        if not expected.get(state, False):
            self.soak.anomaly(self.name, f"turn {tid}: state {state} after {seen}", payload=data)
        turn.states.append((t, state, reason))
        if state == "listening" and reason != "extended":
            self.server_ended.add(tid)  # the server ended this turn id, whatever the question bookkeeping says
        if state == "speaking":
            self.speaking = turn
        elif state == "listening":
            if self.speaking is turn:
                self.speaking = None
            if reason == "extended":  # withdrawn because the user went on: the continued request is a new turn
                turn.withdrawn_at = t
            elif turn.ended_at is None:
                turn.ended_at, turn.end_reason = t, reason
                if turn.stuck_at is not None:
                    self.soak.say(f"{self.name}: stuck turn {tid} ended after all, "
                                  f"{t - turn.speech_end:.1f} s after its question")
                with contextlib.suppress(ValueError):
                    self.open.remove(turn)
                self.ended.append(turn)

    def on_error(self, t: float, data: dict) -> None:
        code, tid = data.get("code"), data.get("turn_id")
        turn = self.turns.get(tid) if tid is not None else None
        if turn is None and tid is None:  # turn_stalled comes before its cancel, worker_failed just after it
            candidates = [x for x in self.turns.values() if x.ended_at is None or t - x.ended_at <= ERROR_AFTER_END_S]
            turn = max(candidates, key=lambda x: x.turn_id, default=None)
        if turn is None:
            with self.soak.lock:
                self.soak.session_errors.append({"at": t, "session": self.name, **data})
            self.soak.say(f"{self.name}: error {code} outside any turn: {data.get('message')}")
            return
        turn.errors.append((t, code, data.get("message")))

    def check_stuck(self) -> None:
        for turn in list(self.open):
            if turn.turn_id in self.server_ended:  # ended by the server (e.g. a first part set apart by split())
                self.open.remove(turn)
                continue
            if turn.withdrawn_at is not None and any(tid > turn.turn_id and t >= turn.withdrawn_at
                                                     for tid, t in self.committed):
                # Withdrawn as "extended" and carried into a turn the server made next: when the next question began
                # within extend_grace_ms of this one's first audio, that turn is booked to the next question.
                turn.carried = True
                self.open.remove(turn)
                continue
            if now() > turn.deadline(self.soak.stall_s, self.soak.args.margin_s):
                turn.stuck_at = now()
                self.open.remove(turn)
                how = ("was withdrawn as extended and no turn followed" if turn.withdrawn_at is not None
                       else "did not end")
                self.soak.anomaly(self.name, f"STUCK: turn {turn.turn_id or '(none committed)'} "
                                             f"({turn.question!r}) {how}",
                                  states=[(round(x - self.soak.t0, 2), s, r) for x, s, r in turn.states],
                                  recent=list(self.recent))

    def report_turn(self, turn: Turn) -> None:
        outcome = turn.outcome()
        if turn.ended_at is None:
            return
        if outcome not in ("answered", "barge_in") or self.soak.args.verbose:
            first = f", first audio {turn.first_audio_at - turn.speech_end:.2f} s" if turn.first_audio_at else ""
            self.soak.say(f"{self.name}: turn {turn.turn_id} {outcome} after {turn.ended_at - turn.speech_end:.1f} s"
                          f"{first} ({turn.question!r})")

    # --- talking ---------------------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self.talk()
        except Exception as exc:  # a broken session must not hang the soak; it is reported
            self.soak.anomaly(self.name, f"session driver failed: {exc!r}")
            with contextlib.suppress(threading.BrokenBarrierError):
                self.soak.warm.abort()

    def talk(self) -> None:
        soak = self.soak
        index = 0
        while not soak.stopping.is_set():
            warmup = index < WARMUP_TURNS
            if index == WARMUP_TURNS:  # the start figures are taken with both sessions idle
                with contextlib.suppress(threading.BrokenBarrierError):
                    soak.warm.wait(timeout=600)
                soak.go.wait()
                if soak.stopping.is_set():
                    return
                self.pump(lambda: False, now() + self.rng.uniform(0.0, 3.0))  # not in step with the other
            barge = not warmup and self.rng.random() < soak.args.barge_p
            question = self.rng.choice(LONG_QUESTIONS if barge else QUESTIONS + EXTRA_QUESTIONS)
            turn = Turn(self.name, index, question, warmup, barge)
            with soak.lock:
                soak.turns.append(turn)
            index += 1
            self.ask(turn)
            if turn.speech_end == 0.0:
                continue
            if barge and self.pump(lambda t=turn: t.first_audio_at is not None or t.ended_at is not None
                                   or t.stuck_at is not None, turn.deadline(soak.stall_s, soak.args.margin_s)) \
                    and turn.first_audio_at is not None and turn.ended_at is None:
                self.pump(lambda: False, now() + self.rng.uniform(0.2, 0.8))
                if turn.ended_at is None:
                    turn.barged_at = now()
                    continue  # the next question goes out now, over the reply
            self.pump(lambda t=turn: t.ended_at is not None or t.stuck_at is not None, now() + HARD_CAP_S)
            self.pump(lambda: False, now() + self.rng.uniform(1.0, 3.0))
        # Stopping: let whatever is still open end (or be found stuck).
        self.pump(lambda: not self.open, now() + HARD_CAP_S)
        self.pump(lambda: False, now() + ERROR_AFTER_END_S)
        self.flush()

    def flush(self) -> None:
        """Print the turns that ended (an error may follow a turn's end, so not at once)."""
        while self.ended:
            self.report_turn(self.ended.pop(0))

    def ask(self, turn: Turn) -> None:
        """Speak the question; it is open (watched for its end) from its last voiced sample on."""
        self.flush()
        utterance = self.mic.say(spoken(turn.question))
        self.said.append((utterance, turn))
        self.pump(lambda: utterance.voiced_end.is_set(), now() + 60)
        if utterance.failed or not utterance.voiced_end.is_set():  # the connection broke while speaking
            self.soak.anomaly(self.name, f"question {turn.question!r} could not be sent")
            with self.soak.lock:
                self.soak.turns.remove(turn)
            return
        turn.speech_start, turn.speech_end = utterance.onset_sent, utterance.end_sent
        self.open.append(turn)
        self.soak.announce("sent", self.name)


# --- the run -------------------------------------------------------------------------------------------------------
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
    command = " ".join([".venv/bin/python", "-m", "scripts.bench.soak_faults", *map(shlex.quote, sys.argv[1:])])

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
