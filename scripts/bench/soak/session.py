"""One talking session of the fault soak: a client whose microphone never stops, asking question after question
(barging in on about one reply in four), following each turn through the server's events and reporting what comes
out of order, outside a turn, or never ends."""

from __future__ import annotations

import collections
import contextlib
import copy
import random
import threading
import time

from scripts.bench.soak.control import Soak
from scripts.bench.soak.turn import HARD_CAP_S, Turn, now
from scripts.eval.questions import E2E_LONG_QUESTIONS as LONG_QUESTIONS
from scripts.eval.questions import E2E_QUESTIONS as QUESTIONS
from tests.harness.client import RecordingClient
from tests.harness.speech import Microphone, noise, spoken

WARMUP_TURNS = 2  # per session, before the start figures are taken and the first fault's clock starts
ERROR_AFTER_END_S = 1.0  # an error without turn_id this soon after a turn ended is that turn's (worker_failed)
LOGGED_EVENTS = {"vad", "turn", "state", "turn_cancelled", "error", "stop_tts", "duck", "transcript", "response_text",
                 "server_status", "disconnect", "out_time"}
EXTRA_QUESTIONS = ["How many legs does a spider have?", "What color is the sky on a clear day?",
                   "Who wrote Romeo and Juliet?", "What is two plus three?"]


class SoakClient(RecordingClient):
    """A RecordingClient that keeps only the length of each reply audio message (20 minutes of it is ~100 MB)."""

    async def _record(self, event: str, data: object = None) -> None:
        if event == "audio" and isinstance(data, (bytes, bytearray)):
            data = len(data)
        await super()._record(event, data)


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
