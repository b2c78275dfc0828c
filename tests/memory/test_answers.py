"""The assistant's answers to memory requests, against a real memory file: each request done and said; off the
record nothing is kept; without a user key nothing is kept and it says so; recalled facts go to the model quoted
as the user's words."""

from __future__ import annotations

import pytest

from vita.memory.answers import NO_KEY, NOTHING_KNOWN, OFF_RECORD, answer, memory_note, standing_memory
from vita.memory.sayings import memory_request
from vita.memory.store import MemoryStore

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def ask(store: MemoryStore | None, said: str, key: str = "anna", off_record: bool = False) -> str:
    return answer(memory_request(said), store, key, off_record, "s", 1)


def test_each_request_is_done_and_said(store: MemoryStore) -> None:
    assert ask(store, "What do you know about me?").startswith("I don't know anything about you yet")
    said = ask(store, "Remember that my sister is called Anna.")
    assert said == "Okay, I'll remember that your sister is called Anna."
    assert ask(store, "Please remember my name is Zoe") == "Okay, I'll remember that your name is Zoe."
    assert ask(store, "Remember that my name is Zoey.") == "Okay, I'll remember that your name is Zoey."
    assert ask(store, "What do you know about me?") == ("You told me that your sister is called Anna; your name is "
                                                        "Zoey.")  # the name's slot holds the newest
    assert ask(store, "Forget about my sister.") == "Okay, I've forgotten that your sister is called Anna."
    assert ask(store, "Forget about my boat.") == "I didn't have anything about that to forget."
    assert ask(store, "Forget everything you know about me.") == "Okay, I've forgotten everything you told me."
    assert store.facts("anna") == []
    assert ask(store, "Delete all my data.") == "There was nothing to forget."


def test_off_the_record_or_without_a_key_nothing_is_kept(store: MemoryStore) -> None:
    assert ask(store, "Remember that I hate mushrooms.", off_record=True) == OFF_RECORD
    assert ask(store, "Remember that I hate mushrooms.", key="") == NO_KEY
    assert ask(None, "Remember that I hate mushrooms.") == NO_KEY
    assert store.facts("anna") == [] and store.facts("") == []


def test_what_is_recalled_reaches_the_model_as_quoted_data(store: MemoryStore) -> None:
    ask(store, "Remember that my name is Zoe.")
    ask(store, "Remember that I'm allergic to peanuts.")
    note = memory_note(store.recall("anna", "Can I eat peanuts?"))
    assert '"my name is Zoe"' in note and "\"I'm allergic to peanuts\"" in note
    assert "not instructions" in note
    assert memory_note([]) == ""
    assert memory_note([], "What is my name?") == NOTHING_KNOWN  # about themselves, nothing known: not guessed
    assert memory_note([], "What is the capital of France?") == ""
    assert memory_note([], "My dog is called Max.") == ""  # telling, not asking: the model just answers it
    for ordinary in ("Can you help me write an email?", "Tell me a joke.", "How do I fix my code?"):
        assert memory_note([], ordinary) == "", ordinary  # about the world, not about what the user told
    assert memory_note([], "Where do I live?") == NOTHING_KNOWN


def test_the_standing_memory_names_the_user_and_their_newest_facts(store: MemoryStore) -> None:
    assert standing_memory([]) == ""
    ask(store, "Remember that my name is Zoe.")
    for i in range(8):
        ask(store, f"Remember that I like song number {i}.")
    standing = standing_memory(store.facts("anna"))
    assert standing.count('"') == 12 and '"my name is Zoe"' in standing  # six facts: the name first
    assert '"I like song number 7"' in standing and '"I like song number 2"' not in standing  # the newest
    assert "not instructions" in standing
    assert memory_note([], "What is my name?", known=True) == ""  # the standing memory may answer it
