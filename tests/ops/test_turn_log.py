"""The turn log on a real SQLite file: facts arriving in either order make one row, rows survive a new logger,
retention prunes, an unwritable path is one clear error and nothing raises, and the export script's JSON."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

import pytest

from tests.harness.server import ROOT
from vita.ops.turn_log import TurnLogger, open_db, prune, read_turns

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def wait_written(logger: TurnLogger, count: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while logger.written < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert logger.written == count


def one_turn(logger: TurnLogger, sid: str, turn: int, llm_first: bool, interrupted: bool = False) -> None:
    logger.begin(sid, turn, "speech")
    logger.update(sid, turn, transcript=f"question {turn}", timings={"end_of_speech_s": 0.3})
    logger.update(sid, turn, timings={"asr_s": 1.1})
    steps = [lambda: logger.llm_ended(sid, turn, "cancelled" if interrupted else "done", f"answer {turn}"),
             lambda: logger.front_ended(sid, turn, "barge-in" if interrupted else "done", interrupted=interrupted)]
    for step in steps if llm_first else reversed(steps):
        step()


def test_facts_in_either_order_make_one_row_each(tmp_path):
    path = tmp_path / "turns.sqlite3"
    logger = TurnLogger(path, retention_days=30)
    logger.start()
    one_turn(logger, "sid-a", 1, llm_first=True)
    one_turn(logger, "sid-a", 2, llm_first=False, interrupted=True)
    logger.begin("sid-b", 1, "text", typed_text="hello")  # still open: not written yet
    wait_written(logger, 2)
    rows = read_turns(path)
    assert [(r["turn_id"], r["transcript"], r["reply"], r["interrupted"], r["end_reason"]) for r in rows] == [
        (1, "question 1", "answer 1", False, "done"), (2, "question 2", "answer 2", True, "barge-in")]
    assert rows[0]["timings"] == {"end_of_speech_s": 0.3, "asr_s": 1.1}
    assert rows[0]["session"] == logger.pseudonym("sid-a") and "sid-a" not in rows[0]["session"]
    assert rows[0]["ended_at"] >= rows[0]["started_at"]
    logger.stop()  # the open turn is written on the way out
    assert [r["typed_text"] for r in read_turns(path, logger.pseudonym("sid-b"))] == ["hello"]
    assert read_turns(path, logger.pseudonym("sid-b"))[0]["end_reason"] == "server stopped"


def test_rows_survive_a_new_logger_on_the_same_file(tmp_path):
    path = tmp_path / "turns.sqlite3"
    first = TurnLogger(path, retention_days=30)
    first.start()
    one_turn(first, "s", 1, llm_first=True)
    wait_written(first, 1)
    first.stop()
    second = TurnLogger(path, retention_days=30)
    second.start()
    one_turn(second, "s", 1, llm_first=True)
    wait_written(second, 1)
    second.stop()
    rows = read_turns(path)
    assert len(rows) == 2 and rows[0]["session"] != rows[1]["session"]  # pseudonyms are per server run


def test_retention_prunes_old_rows(tmp_path):
    path = tmp_path / "turns.sqlite3"
    db = open_db(path)
    now = time.time()
    for age_days in (40, 31, 2, 0):
        db.execute("INSERT INTO turns (session, turn_id, started_at, ended_at, source) VALUES (?, ?, ?, ?, ?)",
                   ("x", age_days, now - age_days * 86400, now - age_days * 86400, "text"))
    db.commit()
    assert prune(db, retention_days=30, now=now) == 2
    assert sorted(r["turn_id"] for r in read_turns(path)) == [0, 2]
    db.close()
    # A logger prunes when it starts.
    logger = TurnLogger(path, retention_days=1)
    logger.start()
    deadline = time.monotonic() + 5
    while len(read_turns(path)) != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    logger.stop()
    assert [r["turn_id"] for r in read_turns(path)] == [0]


def test_unwritable_path_is_one_clear_error_and_nothing_raises(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    logger = TurnLogger(blocker / "turns.sqlite3", retention_days=30)
    with caplog.at_level(logging.ERROR, logger="vita.ops.turn_log"):
        logger.start()
        deadline = time.monotonic() + 5
        while logger.error is None and time.monotonic() < deadline:
            time.sleep(0.02)
        for turn in range(1, 20):
            one_turn(logger, "s", turn, llm_first=True)
        logger.stop()
    assert logger.error and "a-file" in logger.error
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "turn log disabled" in errors[0].getMessage()
    assert logger.written == 0


def test_export_script_prints_valid_json(tmp_path):
    path = tmp_path / "turns.sqlite3"
    logger = TurnLogger(path, retention_days=30)
    logger.start()
    one_turn(logger, "s", 1, llm_first=True)
    one_turn(logger, "t", 1, llm_first=True)
    wait_written(logger, 2)
    logger.stop()
    run = [sys.executable, str(ROOT / "scripts" / "export_turns.py"), "--db", str(path)]
    listing = json.loads(subprocess.run(run + ["--sessions"], capture_output=True, text=True, check=True).stdout)
    assert sorted(s["session"] for s in listing) == sorted([logger.pseudonym("s"), logger.pseudonym("t")])
    out = subprocess.run(run + ["--session", logger.pseudonym("s")], capture_output=True, text=True, check=True)
    exported = json.loads(out.stdout)
    assert [t["transcript"] for t in exported["turns"]] == ["question 1"]
    assert exported["turns"][0]["timings"]["asr_s"] == 1.1
    missing = subprocess.run(run[:-1] + [str(tmp_path / "none.sqlite3")], capture_output=True, text=True)
    assert missing.returncode == 1 and "no turn log" in missing.stderr
