"""A turn's recording on real files: what the front hands over (the audio the VAD cut, the workers' news, the reply's
audio) lands in one folder per turn; a discarded speculation leaves nothing; the size and age limits delete the
oldest first; a folder that cannot be made is one error and the turn goes on; the turn log links each recording,
and an old turn log gains the column."""

from __future__ import annotations

import json
import os
import sqlite3
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from vita.messages import ReplyText, SceneSeen, ToolUsed, Transcript, TtsChunk, TurnTimings
from vita.ops.turn_log import open_db
from vita.ops.turn_recording import PROMPT_FILE, TurnRecorder, write_prompt

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


@pytest.fixture
def recorder(tmp_path: Path):
    running = TurnRecorder(tmp_path / "recordings", max_mb=50, retention_days=7)
    yield running
    running.close()


def settle(recorder: TurnRecorder, written: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while recorder.written < written and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recorder.written == written


def wav(path: Path) -> tuple[int, int]:
    with wave.open(str(path)) as f:
        return f.getframerate(), f.getnframes()


def test_a_turn_is_one_folder_with_what_was_heard_said_and_timed(recorder: TurnRecorder) -> None:
    folder = Path(recorder.begin("sid", "5e55", 1, "speech"))
    assert folder.is_dir() and folder.parent.name == "5e55" and folder.name.startswith("0001-")
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    write_prompt(str(folder), {"text": "<|im_start|>user\nwhat is two and two"})  # (the LLM worker's part)
    heard = (np.sin(np.arange(16000) / 5) * 8000).astype(np.int16).tobytes()
    recorder.heard("sid", 1, heard, 16000)
    recorder.front_timings("sid", 1, {"end_of_speech_s": 0.3})
    for message in (Transcript("sid", 1, "what is two and two"),
                    SceneSeen("sid", 1, "a red sign", text=("STOP",)),
                    ToolUsed("sid", 1, "calculate", '{"expression": "2+2"}', "4", True, "ok", 0.01),
                    TtsChunk("sid", 1, 0, b"\x01\x00" * 4800), TtsChunk("sid", 1, 1, b"\x02\x00" * 2400),
                    TtsChunk("other", 1, 0, b"\x03\x00" * 2400),  # another session's: not this turn's
                    ReplyText("sid", 1, "", done=True, text="Four."),
                    TurnTimings("sid", 1, "llm", {"asr_s": 0.4, "first_token_s": 0.2}),
                    TurnTimings("sid", 1, "tts", {"first_chunk_s": 0.1})):
        recorder.fact(message)
    assert recorder.folder("sid", 1) == str(folder)
    recorder.ended("sid", 1, "done", interrupted=False)
    settle(recorder, 1)
    assert wav(folder / "heard.wav") == (16000, 16000)
    assert oct((folder / "heard.wav").stat().st_mode & 0o777) == "0o600"
    assert wav(folder / "reply.wav") == (24000, 7200)
    turn = json.loads((folder / "turn.json").read_text())
    assert turn["session"] == "5e55" and turn["turn_id"] == 1 and turn["source"] == "speech"
    assert turn["transcript"] == "what is two and two" and turn["reply"] == "Four."
    assert turn["camera"]["text"] == ["STOP"] and turn["tools"][0]["result"] == "4"
    assert turn["timings"] == {"front": {"end_of_speech_s": 0.3}, "llm": {"asr_s": 0.4, "first_token_s": 0.2},
                               "tts": {"first_chunk_s": 0.1}}
    assert turn["end_reason"] == "done" and turn["interrupted"] is False
    assert json.loads((folder / PROMPT_FILE).read_text())["text"].endswith("two and two")
    recorder.fact(TtsChunk("sid", 1, 2, b"\x01\x00" * 100))  # late news of an ended turn: nothing to add to
    assert recorder.folder("sid", 1) is None


def test_a_discarded_speculation_leaves_nothing_and_a_restarted_one_keeps_its_folder(recorder: TurnRecorder) -> None:
    first = recorder.begin("sid", "s", 2, "speech")
    assert recorder.begin("sid", "s", 2, "speech") == first  # started again, longer: the same turn
    recorder.discard("sid", 2)
    deadline = time.monotonic() + 5
    while Path(first).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not Path(first).exists()
    write_prompt(first, {"text": "late"})  # the worker's prompt after the discard: no folder is made for it
    assert not Path(first).exists()


def test_the_sessions_end_writes_its_open_turns(recorder: TurnRecorder) -> None:
    folder = Path(recorder.begin("sid", "s", 3, "text"))
    recorder.begin("other", "o", 1, "text")
    recorder.session_ended("sid")
    settle(recorder, 1)
    assert json.loads((folder / "turn.json").read_text())["end_reason"] == "session ended"
    assert recorder.folder("other", 1) is not None  # another session's turn goes on


def test_the_oldest_go_first_past_the_size_and_the_age_and_nothing_else_is_ever_deleted(tmp_path: Path) -> None:
    session = "0123456789abcdef"  # (a pseudonym, as the turn log's)
    recorder = TurnRecorder(tmp_path / "r", max_mb=0.25, retention_days=1)
    try:
        folders = []
        for turn_id in range(1, 5):
            folder = Path(recorder.begin("sid", session, turn_id, "speech"))
            (folder / "heard.wav").write_bytes(b"\0" * 100_000)
            stamp = time.time() - (10 - turn_id) * 60  # older first
            os.utime(folder / "heard.wav", (stamp, stamp))
            folders.append(folder)
        foreign = [tmp_path / "r" / "notes" / "2024", tmp_path / "r" / session / "not-a-turn"]
        for folder in foreign:  # an operator's own folders under recording.path, however old and big
            folder.mkdir(parents=True)
            (folder / "data").write_bytes(b"\0" * 300_000)
            os.utime(folder / "data", (0, 0))
        assert recorder.prune() == 2  # 400 kB of recordings: down to 200 kB, the two oldest gone
        assert [f.exists() for f in folders] == [False, False, True, True]
        assert recorder.prune(now=time.time() + 2 * 86400) == 2  # a day past: all of them
        assert all(f.exists() for f in foreign)
        assert oct(folders[0].parent.stat().st_mode & 0o777) == "0o700"  # the server's user's only
    finally:
        recorder.close()


def test_a_folder_that_cannot_be_made_is_one_error_and_no_recording(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "file").write_text("")
    recorder = TurnRecorder(tmp_path / "file" / "recordings", max_mb=1, retention_days=1)
    try:
        assert recorder.begin("sid", "s", 1, "speech") == ""
        assert recorder.begin("sid", "s", 2, "speech") == ""
        assert recorder.error and len([r for r in caplog.records if "cannot record" in r.message]) == 1
        recorder.ended("sid", 1, "done", interrupted=False)  # nothing open: nothing to do, nothing raised
    finally:
        recorder.close()


def test_the_turn_log_links_recordings_and_an_old_log_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "turns.sqlite3"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE turns (id INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL, turn_id INTEGER "
                "NOT NULL, started_at REAL NOT NULL, ended_at REAL NOT NULL, source TEXT NOT NULL, transcript TEXT "
                "NOT NULL DEFAULT '', typed_text TEXT NOT NULL DEFAULT '', reply TEXT NOT NULL DEFAULT '', "
                "interrupted INTEGER NOT NULL DEFAULT 0, end_reason TEXT NOT NULL DEFAULT '', timings TEXT NOT NULL "
                "DEFAULT '{}')")
    old.execute("INSERT INTO turns (session, turn_id, started_at, ended_at, source) VALUES ('s', 1, 1, 2, 'speech')")
    old.commit()
    old.close()
    db = open_db(path)
    assert [row[0] for row in db.execute("SELECT recording FROM turns")] == [""]
    db.close()
