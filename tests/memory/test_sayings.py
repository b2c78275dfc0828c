"""Memory requests and facts in passing, read by rules from what a user says: requests work whatever the politeness
around them, a user remembering something is no request, a question about a fact is no statement of it, and a
pronoun is no fact."""

from __future__ import annotations

import pytest

from vita.memory.sayings import Fact, MemoryRequest, facts_in_passing, memory_request, second_person, slot_of

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


@pytest.mark.parametrize(("said", "asked"), [
    ("Remember that my sister is called Anna.", MemoryRequest("remember", "my sister is called Anna")),
    ("Please remember I'm allergic to peanuts", MemoryRequest("remember", "I'm allergic to peanuts")),
    ("Okay, keep in mind that I work nights.", MemoryRequest("remember", "I work nights")),
    ("Forget that I live in Lyon.", MemoryRequest("forget", "I live in Lyon")),
    ("Hey Vita, forget about my sister.", MemoryRequest("forget", "my sister")),
    ("Forget everything you know about me.", MemoryRequest("forget_all")),
    ("Delete all my data, please.", MemoryRequest("forget_all")),
    ("Please erase your memory of me", MemoryRequest("forget_all")),
    ("What do you know about me?", MemoryRequest("recall")),
    ("So what do you remember?", MemoryRequest("recall")),
    ("What have you saved about me", MemoryRequest("recall")),
    ("I remember that film.", None),
    ("Clear all.", None),  # someone else's request (a list's, a page's), not the user's memory
    ("Delete everything.", None),
    ("Forget everything.", None),
    ("Delete the second item on my list.", None),
    ("Can you remember what I asked earlier?", None),  # a question, no fact
    ("Remember when we went to Rome?", None),
    ("Do you remember the capital of France?", None),
    ("Remember it.", None),
    ("What is the capital of France?", None),
    ("", None),
])
def test_requests_about_memory(said: str, asked: MemoryRequest | None) -> None:
    assert memory_request(said) == asked


@pytest.mark.parametrize(("said", "facts"), [
    ("My name is Anna and I live in Lyon.", [Fact("My name is Anna", "name"), Fact("I live in Lyon", "home")]),
    ("Hi, I am called Pierre Dupont. I work as a nurse.",
     [Fact("I am called Pierre Dupont", "name"), Fact("I work as a nurse", "work")]),
    ("Actually I moved to Paris last year.", [Fact("I moved to Paris last year", "home")]),
    ("I love jazz but I hate opera.", [Fact("I love jazz", ""), Fact("I hate opera", "")]),
    ("My favourite colour is green.", [Fact("My favourite colour is green", "favourite colour")]),
    ("My dog is called Rex.", [Fact("My dog is called Rex", "person dog")]),
    ("I am vegetarian, by the way.", [Fact("I am vegetarian", "")]),
    ("I'm allergic to peanuts and cats.", [Fact("I'm allergic to peanuts", "")]),
    ("Where do I live?", []),
    ("Do I like jazz?", []),
    ("I like it.", []),
    ("What is the capital of France?", []),
    ("Remember that my name is Anna.", []),  # a request, answered as one
])
def test_facts_stated_in_passing(said: str, facts: list[Fact]) -> None:
    assert facts_in_passing(said) == facts


def test_facts_are_said_back_to_the_user_and_fill_their_slot() -> None:
    assert second_person("My sister is called Anna") == "your sister is called Anna"
    assert second_person("I'm allergic to peanuts") == "you're allergic to peanuts"
    assert second_person("I am a nurse and my job is hard") == "you are a nurse and your job is hard"
    assert slot_of("my name is Anna") == "name" and slot_of("I live in Lyon") == "home"
    assert slot_of("the car is red") == ""
