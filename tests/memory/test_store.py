"""The memory file, for real: facts kept per user key (a slot's newer fact replacing the older), recalled for a
question by their words, never across keys; and what is forgotten is gone from the file's bytes, not only from
the answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from vita.memory.sayings import Fact
from vita.memory.store import MAX_FACTS_PER_USER, MemoryStore

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def in_file(store: MemoryStore, word: str) -> bool:
    files = [store.path, *store.path.parent.glob(store.path.name + "-*")]  # (and any journal beside it)
    return any(word.encode() in f.read_bytes() for f in files if f.exists())


def test_facts_are_kept_per_user_and_a_slot_holds_the_newest(store: MemoryStore) -> None:
    store.keep("anna", Fact("My name is Anna", "name"), "s1", 1)
    store.keep("anna", Fact("I live in Lyon", "home"), "s1", 2)
    store.keep("anna", Fact("I'm allergic to peanuts"), "s1", 3)
    store.keep("anna", Fact("I moved to Paris", "home"), "s2", 1)  # a correction
    store.keep("anna", Fact("i'm allergic to peanuts"), "s2", 2)  # said again: kept once
    store.keep("bob", Fact("My name is Bob", "name"))
    kept = store.facts("anna")
    assert [f.text for f in kept] == ["My name is Anna", "I moved to Paris", "i'm allergic to peanuts"]
    assert (kept[1].session, kept[1].turn_id) == ("s2", 1)
    assert [f.text for f in store.facts("bob")] == ["My name is Bob"]
    assert store.facts("nobody") == []


def test_a_question_recalls_the_name_and_what_shares_its_words_never_another_users(store: MemoryStore) -> None:
    store.keep("anna", Fact("My name is Anna", "name"))
    store.keep("anna", Fact("I'm allergic to peanuts"))
    store.keep("anna", Fact("My dog is called Rex", "person dog"))
    store.keep("bob", Fact("I love peanuts"))
    assert [f.text for f in store.recall("anna", "Can I eat peanut butter? Peanuts?")] == [
        "My name is Anna", "I'm allergic to peanuts"]
    assert [f.text for f in store.recall("anna", "What is my dog called?")] == ["My name is Anna",
                                                                                "My dog is called Rex"]
    assert [f.text for f in store.recall("bob", "Can I eat peanuts?")] == ["I love peanuts"]
    assert store.recall("carol", "peanuts") == []
    assert [f.text for f in store.recall("anna", 'what about "quotes" AND OR NOT *')] == ["My name is Anna"]


def test_forgetting_leaves_nothing_in_the_file(store: MemoryStore) -> None:
    store.keep("anna", Fact("I'm allergic to peanuts"))
    store.keep("anna", Fact("My sister is called Zelda", "person sister"))
    store.keep("anna", Fact("I collect xylophones"))
    store.keep("bob", Fact("I collect stamps"))
    assert in_file(store, "Zelda") and in_file(store, "peanuts")
    assert store.forget("anna", "my sister") == ["My sister is called Zelda"]
    assert not in_file(store, "Zelda")
    assert store.forget("anna", "a thing never said") == []
    assert store.forget_one("bob", store.facts("anna")[0].id) is False  # another user's fact: not theirs to delete
    assert store.forget_one("anna", store.facts("anna")[0].id) is True
    assert not in_file(store, "peanuts")
    assert store.forget_all("anna") == 1
    assert not in_file(store, "xylophones") and store.facts("anna") == []
    assert [f.text for f in store.facts("bob")] == ["I collect stamps"]  # another user's memory untouched


def test_old_facts_go_past_the_retention_and_a_user_keeps_at_most_so_many(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "m.sqlite3", retention_days=1)
    try:
        for i in range(MAX_FACTS_PER_USER + 5):
            store.keep("anna", Fact(f"I like thing number {i}"))
        kept = store.facts("anna")
        assert len(kept) == MAX_FACTS_PER_USER and kept[0].text == "I like thing number 5"
        assert store.prune(now=kept[-1].created_at + 2 * 86400) == MAX_FACTS_PER_USER
        assert store.facts("anna") == []
    finally:
        store.close()


def test_a_question_about_a_slot_recalls_its_fact_without_sharing_a_word(store: MemoryStore) -> None:
    store.keep("anna", Fact("I work as a teacher", "work"))
    store.keep("anna", Fact("I moved to Madrid", "home"))
    store.keep("anna", Fact("My dog is called Max", "person dog"))
    store.keep("anna", Fact("My favourite colour is green", "favourite colour"))
    assert [f.text for f in store.recall("anna", "What is my job?")] == ["I work as a teacher"]
    assert [f.text for f in store.recall("anna", "Which city do I live in?")] == ["I moved to Madrid"]
    assert [f.text for f in store.recall("anna", "What is my dog's name?")] == ["My dog is called Max"]
    assert [f.text for f in store.recall("anna", "What's my favorite colour?")] == ["My favourite colour is green"]
    assert store.recall("bob", "What is my job?") == []


def test_forget_finds_a_slots_fact_and_words_with_accents(store: MemoryStore) -> None:
    store.keep("anna", Fact("I moved to Zürich", "home"))
    store.keep("anna", Fact("I work as a teacher", "work"))
    store.keep("anna", Fact("My sister is called Émilie", "person sister"))
    assert [f.text for f in store.matching("anna", "where I live")] == ["I moved to Zürich"]
    assert store.forget("anna", "my job") == ["I work as a teacher"]
    assert store.forget("anna", "Emilie") == ["My sister is called Émilie"]
    assert store.forget("anna", "zurich") == ["I moved to Zürich"]
    assert store.facts("anna") == []
    assert oct(store.path.stat().st_mode & 0o777) == "0o600"  # the server's user's only
