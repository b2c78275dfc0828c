"""The LLM worker's memory over a real memory file: a committed turn's request is carried out at once; a speculative
turn's waits for its commit, and goes with it when it is discarded; facts in passing are kept only for a user
with a key, on the record; recall is the user's own."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from vita.messages import TurnRequest
from workers.llm.worker_sessions import WorkerSessions
from workers.memory.remembering import Remembering

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


@pytest.fixture
def memory(tmp_path: Path):
    remembering = Remembering(tmp_path / "memory.sqlite3", 365, WorkerSessions(4), logging.getLogger("test"))
    remembering.setup()
    yield remembering
    remembering.close()


def turn(turn_id: int, speculative: bool = False, user: str = "anna", off_record: bool = False) -> TurnRequest:
    return TurnRequest("sid", turn_id, speculative=speculative, user_key=user, off_record=off_record)


def kept(memory: Remembering, user: str = "anna") -> list[str]:
    return [f.text for f in memory.store.facts(user)]


def test_a_committed_turns_request_is_done_at_once(memory: Remembering) -> None:
    assert memory.asked(turn(1), "Remember that I like jazz.") == "Okay, I'll remember that you like jazz."
    assert kept(memory) == ["I like jazz"]
    assert memory.asked(turn(2), "What is the capital of France?") is None


def test_a_speculative_turns_changes_wait_for_its_commit_or_go_with_it(memory: Remembering) -> None:
    assert memory.asked(turn(1, speculative=True), "Remember that I like jazz.") == \
        "Okay, I'll remember that you like jazz."
    memory.learn(turn(1, speculative=True), "My name is Anna.")
    assert kept(memory) == []  # not yet: the user may still be speaking
    memory.committed("sid", 1)
    assert kept(memory) == ["I like jazz", "My name is Anna"]
    said = memory.asked(turn(2, speculative=True), "Forget everything you know about me.")
    assert said == "Okay, I've forgotten everything you told me." and len(kept(memory)) == 2
    memory.forgotten("sid", 2)  # discarded: the user went on ("...about my sister")
    memory.committed("sid", 3)
    assert len(kept(memory)) == 2
    memory.asked(turn(4, speculative=True), "Forget that I like jazz.")
    memory.committed("sid", 4)
    assert kept(memory) == ["My name is Anna"]
    memory.asked(turn(5, speculative=True), "Remember that I hate opera.")  # never committed (superseded)
    assert kept(memory) == ["My name is Anna"]
    memory.committed("sid", 6)  # the commit came before the turn's words were heard
    memory.asked(turn(6, speculative=True), "Remember that I hate opera.")
    assert kept(memory) == ["My name is Anna", "I hate opera"]


def test_nothing_is_kept_off_the_record_or_without_a_key_and_recall_is_the_users_own(memory: Remembering) -> None:
    memory.learn(turn(1, off_record=True), "My name is Anna.")
    memory.learn(turn(2, user=""), "My name is Bob.")
    assert kept(memory) == [] and kept(memory, "") == []
    memory.learn(turn(3), "My name is Anna and I'm allergic to peanuts.")
    standing, note = memory.recall(turn(4), "Can I eat peanuts?")
    assert '"My name is Anna"' in standing and "allergic to peanuts" in standing and note == ""  # (said already)
    assert memory.recall(turn(5, user="bob"), "Can I eat peanuts?") == ("", "")
    assert memory.recall(turn(6, user=""), "Can I eat peanuts?") == ("", "")


def test_a_memory_file_that_cannot_be_opened_is_no_memory_and_no_failure(tmp_path: Path, caplog) -> None:
    (tmp_path / "file").write_text("")
    remembering = Remembering(tmp_path / "file" / "memory.sqlite3", 365, WorkerSessions(4), logging.getLogger("t"))
    remembering.setup()
    assert remembering.store is None and "memory is off" in caplog.text
    assert remembering.asked(turn(1), "Remember that I like jazz.").startswith("I can't keep memories")
    assert remembering.recall(turn(1), "jazz") == ("", "")
    remembering.learn(turn(1), "My name is Anna.")  # nothing raised
