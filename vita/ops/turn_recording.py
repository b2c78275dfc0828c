"""A turn's recording, for the user who says "it misheard me": a folder per turn with the audio the VAD cut
(``heard.wav``), the prompt the model saw with what the camera told it (``prompt.json``, written by the LLM
worker), the reply's audio as the voice made it (``reply.wav``), and ``turn.json``: what ASR heard, the reply's
text, the camera's description, the tools called, every stage's timings, how the turn ended.

Off unless the operator records every session (``recording.enabled``) or lets a user record their own
(``recording.per_session``, the page's switch). Folders live under ``recording.path``/<session pseudonym>/, are
linked from the turn log's ``recording`` column, and go oldest first past ``recording.max_mb`` or after
``recording.retention_days``. Files are written on a thread of the recorder's own: a session's thread only hands
over what it has.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import queue
import re
import shutil
import threading
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vita.messages import ReplyText, SceneSeen, ToolUsed, Transcript, TtsChunk, TurnTimings

log = logging.getLogger("vita.ops.turn_recording")

PROMPT_FILE = "prompt.json"  # the LLM worker's part of a recording
OPEN_KEPT = 64  # turns a recorder keeps open (a turn whose end never comes is written as it is past this)
REPLY_AUDIO_MAX_S = 120.0  # a reply's audio kept, at most
PRUNE_EVERY_S = 60.0
SESSION_FOLDER = re.compile(r"[0-9a-f]{16}")  # a session's pseudonym (the turn log's)
TURN_FOLDER = re.compile(r"\d{4,}-\d{8}-\d{6}")  # a turn's: its id and when it began


@dataclass
class _Recording:
    folder: Path
    started_at: float
    heard: bytes = b""
    heard_rate: int = 16000
    reply: list[bytes] = field(default_factory=list)
    reply_bytes: int = 0
    reply_rate: int = 24000
    facts: dict[str, Any] = field(default_factory=lambda: {"transcript": "", "reply": "", "timings": {},
                                                           "camera": None, "tools": []})


class TurnRecorder:
    def __init__(self, root: Path, max_mb: float, retention_days: float):
        self.root = root
        self.max_bytes = int(max_mb * 1024 * 1024)
        self.retention_s = retention_days * 86400
        self._open: dict[tuple[str, int], _Recording] = {}
        self._lock = threading.Lock()  # the session's thread, and the dispatcher for an ended session's facts
        self._jobs: queue.Queue = queue.Queue(maxsize=256)
        self._pruned_at = 0.0
        self.written = 0
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="turn-recorder", daemon=True)
        self._thread.start()

    def begin(self, sid: str, session: str, turn_id: int, source: str) -> str:
        """A recorded turn starts: its folder (made now: the LLM worker writes the prompt there), or "" if it cannot
        be made (said once in the log; the turn goes on unrecorded)."""
        with self._lock:
            again = self._open.get((sid, turn_id))  # a speculative turn started again, longer: the same turn
        if again is not None:
            again.facts["source"] = source
            return str(again.folder)
        folder = self.root / session / f"{turn_id:04d}-{time.strftime('%Y%m%d-%H%M%S')}"
        try:
            for made in (self.root, self.root / session, folder):  # the server's user's only
                made.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            if self.error is None:
                log.error("cannot record turns under %s: %s", self.root, exc)
            self.error = str(exc)
            return ""
        recording = _Recording(folder, time.time())
        recording.facts.update(session=session, turn_id=turn_id, source=source)
        with self._lock:
            self._open[(sid, turn_id)] = recording
            while len(self._open) > OPEN_KEPT:  # the oldest open turn, whose end never came
                self._finish(min(self._open, key=lambda k: self._open[k].started_at), {"end_reason": "lost"})
        return str(folder)

    def folder(self, sid: str, turn_id: int) -> str | None:
        with self._lock:
            recording = self._open.get((sid, turn_id))
        return str(recording.folder) if recording is not None else None

    def heard(self, sid: str, turn_id: int, pcm: bytes, rate: int) -> None:
        with self._lock:
            recording = self._open.get((sid, turn_id))
            if recording is not None:
                recording.heard, recording.heard_rate = pcm, rate

    def fact(self, message: Any) -> None:
        """A worker's output about a recorded turn."""
        key = (getattr(message, "session_id", None), getattr(message, "turn_id", None))
        with self._lock:
            recording = self._open.get(key)
            if recording is None:
                return
            facts = recording.facts
            if isinstance(message, TtsChunk):
                if message.pcm and recording.reply_bytes < REPLY_AUDIO_MAX_S * message.sample_rate * 2:
                    recording.reply.append(message.pcm)
                    recording.reply_bytes += len(message.pcm)
                    recording.reply_rate = message.sample_rate
            elif isinstance(message, Transcript):
                facts["transcript"] = message.text
            elif isinstance(message, ReplyText) and message.done:
                facts["reply"] = message.text
            elif isinstance(message, TurnTimings):
                facts["timings"][message.stage] = message.timings
            elif isinstance(message, SceneSeen):
                facts["camera"] = {"description": message.description, "text": list(message.text),
                                   "objects": list(message.objects), "people": message.people,
                                   "fingers": message.fingers}
            elif isinstance(message, ToolUsed):
                facts["tools"].append({"name": message.name, "arguments": message.arguments,
                                       "result": message.result, "outcome": message.outcome,
                                       "duration_s": message.duration_s})

    def front_timings(self, sid: str, turn_id: int, timings: dict[str, float]) -> None:
        with self._lock:
            recording = self._open.get((sid, turn_id))
            if recording is not None:
                recording.facts["timings"].setdefault("front", {}).update(timings)

    def ended(self, sid: str, turn_id: int, reason: str, interrupted: bool) -> None:
        """The front is done with the turn: its recording is written (the reply's text and timings that come
        after it, from a worker still finishing, are not waited for)."""
        with self._lock:
            self._finish((sid, turn_id), {"end_reason": reason, "interrupted": interrupted})

    def discard(self, sid: str, turn_id: int) -> None:
        """A speculative turn that never was one: nothing of it is kept."""
        with self._lock:
            recording = self._open.pop((sid, turn_id), None)
        if recording is not None:
            self._put(("remove", recording.folder))

    def session_ended(self, sid: str) -> None:
        with self._lock:
            for key in [k for k in self._open if k[0] == sid]:
                self._finish(key, {"end_reason": "session ended", "interrupted": True})

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            for key in list(self._open):
                self._finish(key, {"end_reason": "server stopped", "interrupted": True})
        with contextlib.suppress(queue.Full):
            self._jobs.put(None, timeout=timeout)
        self._thread.join(timeout)

    # --- the writer -----------------------------------------------------------------------------------------
    def _finish(self, key: tuple[str, int], facts: dict[str, Any]) -> None:
        recording = self._open.pop(key, None)
        if recording is not None:
            recording.facts.update(facts)
            self._put(("write", recording))

    def _put(self, job: tuple[str, Any]) -> None:
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            log.warning("a turn's recording was dropped: the disk is not keeping up")

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            kind, what = job
            try:
                if kind == "write":
                    self._write(what)
                else:
                    shutil.rmtree(what, ignore_errors=True)
                if time.monotonic() - self._pruned_at >= PRUNE_EVERY_S:
                    self.prune()
            except Exception as exc:  # (the writer goes on: one turn's recording is lost, not all that follow)
                log.warning("could not write a turn's recording: %s", exc)

    def _write(self, recording: _Recording) -> None:
        folder = recording.folder
        if not folder.is_dir():  # (pruned meanwhile: a turn older than the limits allow)
            return
        if recording.heard:
            _wav(folder / "heard.wav", recording.heard, recording.heard_rate)
        if recording.reply:
            _wav(folder / "reply.wav", b"".join(recording.reply), recording.reply_rate)
        facts = {**recording.facts, "started_at": recording.started_at, "written_at": time.time(),
                 "files": sorted(p.name for p in folder.iterdir()) + ["turn.json"]}
        _private(folder / "turn.json", json.dumps(facts, indent=2, ensure_ascii=False).encode())
        self.written += 1

    def prune(self, now: float | None = None) -> int:
        """Recordings past their age, then the oldest past the size limit, are deleted; returns how many."""
        self._pruned_at = time.monotonic()
        now = time.time() if now is None else now
        turns = []
        for session in _folders(self.root, SESSION_FOLDER):
            for turn in _folders(session, TURN_FOLDER):  # (nothing but recordings is ever deleted)
                files = [f for f in turn.iterdir() if f.is_file()]
                stamp = max([f.stat().st_mtime for f in files] or [turn.stat().st_mtime])
                turns.append((stamp, sum(f.stat().st_size for f in files), turn))
        turns.sort()
        total = sum(size for _, size, _ in turns)
        deleted = 0
        for stamp, size, turn in turns:
            if now - stamp <= self.retention_s and total <= self.max_bytes:
                break
            shutil.rmtree(turn, ignore_errors=True)
            total -= size
            deleted += 1
        for session in _folders(self.root, SESSION_FOLDER):
            with contextlib.suppress(OSError):
                session.rmdir()  # (only if empty)
        return deleted


def _folders(path: Path, name: re.Pattern) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir() and name.fullmatch(p.name)]
    except OSError:
        return []


def _private(path: Path, data: bytes) -> None:
    """A file the server's user alone may read (what a user said)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _wav(path: Path, pcm: bytes, rate: int) -> None:
    sound = io.BytesIO()
    with wave.open(sound, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)
    _private(path, sound.getvalue())


def write_prompt(folder: str, prompt: dict[str, Any]) -> None:
    """The LLM worker's part: the prompt as the model saw it (never fails the turn)."""
    try:
        path = Path(folder)
        if path.is_dir():  # (a discarded turn's folder is gone: nothing to add to)
            _private(path / PROMPT_FILE, json.dumps(prompt, indent=2, ensure_ascii=False, default=str).encode())
    except OSError as exc:
        log.warning("could not record the prompt: %s", exc)
