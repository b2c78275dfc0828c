"""The fault soak's control, outside the sessions: the record they and the report share (turns, anomalies, faults,
/health samples), the moments a fault waits for, /health sampled all along, and each fault injected by signal to
a worker's pid and followed until the worker is ready again."""

from __future__ import annotations

import argparse
import signal
import threading
import time
from pathlib import Path

import psutil
import requests

from scripts.bench.soak.turn import Turn, now

FAULTS = ("kill_llm", "freeze_llm", "engine_raise", "freeze_tts", "lose_end")
WORKER_OF = {"kill_llm": "llm", "freeze_llm": "llm", "engine_raise": "llm", "freeze_tts": "tts", "lose_end": "tts"}
RECOVERY_S = 60.0  # every session must be answered again within this long after each fault
HEALTH_EVERY_S = 10.0
INJECT_AFTER_SENT_S = 0.4  # "mid-turn": this long after a question's last voiced sample (the turn is committed)
TRIGGER_WAIT_S = 30.0  # how long a fault waits for its moment (a question sent, a reply playing)


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
