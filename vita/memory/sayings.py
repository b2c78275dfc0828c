"""What a user says about remembering, and the facts about themselves they state in passing — read from their words
by rules, so that "remember that…", "forget…" and "what do you know about me?" work every time (a 1.5B model does
not), and a fact costs no model time at all.

A fact is kept in the user's own words ("my sister is called Anna"); ``second_person`` turns them round for the
assistant to say or to read ("your sister is called Anna"). A fact may fill a slot (the user's name, where they
live): a newer one in the same slot replaces the older, which is how "actually, I moved to Paris" corrects it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_FACT_WORDS = 16  # a fact longer than this is not a fact about the user but a story: not kept


@dataclass(frozen=True)
class Fact:
    text: str  # the user's words, first person, no edge punctuation
    slot: str = ""  # "name", "home", "work", ...: one fact a slot; "": as many as said


@dataclass(frozen=True)
class MemoryRequest:
    """An explicit request about memory: remember a fact, forget what matches, forget everything, or say what is
    remembered."""

    kind: str  # "remember", "forget", "forget_all", "recall"
    text: str = ""  # what to remember or forget, as said


def _words(pattern: str) -> re.Pattern:
    return re.compile(pattern, re.IGNORECASE)


_EDGES = re.compile(r"^[\s,.;:!?-]+|[\s,.;:!?-]+$")
_LEAD = (r"^(?:(?:hey|hi|ok|okay|so|and|now|please|vita|alright|also)[,!]? )*(?:please )?"
         r"(?:can you |could you |would you )?")
_TAIL = r"(?:,? please)?$"
_EVERYTHING = (r"(?:all (?:of )?(?:my|the) (?:data|memories|facts|information)|"
               r"(?:every ?thing|all) (?:that )?you (?:know|remember) about me|everything about me|"
               r"what you know about me|everything you (?:know|remember)|my memory|your memory of me|"
               r"all your memories of me)")
# What a request to remember or forget may not be about: a question ("can you remember what I asked?").
_NOT_A_FACT = _words(r"^(?:what|when|where|who|whom|why|how|which|if|whether|anything|something)\b")
_REQUESTS = [
    ("forget_all", _words(_LEAD + r"(?:forget|erase|delete|clear|wipe|remove) " + _EVERYTHING + r"(?: about me)?"
                          + _TAIL)),
    ("forget_all", _words(_LEAD + r"(?:delete|erase|clear|wipe) (?:all )?(?:of )?(?:my|your) (?:memories|memory|data)"
                          r"(?: of me| about me)?" + _TAIL)),
    ("recall", _words(_LEAD + r"(?:what|what else) (?:do|did) you (?:know|remember|recall) (?:about|of) me\b")),
    ("recall", _words(_LEAD + r"what have you (?:remembered|kept|saved|stored) (?:about|of) me\b")),
    ("recall", _words(_LEAD + r"(?:tell me )?what (?:do )?you (?:know|remember) about me\b")),
    ("recall", _words(_LEAD + r"what do you remember" + _TAIL)),
    # (only "forget": "delete the second item on my list" is someone else's request)
    ("forget", _words(_LEAD + r"(?:forget|stop remembering) (?:that |about |the fact that |what i (?:said|told you) "
                              r"about )?(?P<text>.+?)" + _TAIL)),
    ("remember", _words(_LEAD + r"(?:remember|keep in mind|note|don'?t forget|make a note) (?:that |this: ?|for me "
                                r"that )?(?P<text>.+?)" + _TAIL)),
]

_END = r"(?=$|[,.;!?]| and | but | now\b| with | because )"
_NOT_NAMES = r"(?:and|but|i|im|from|in|at|the|a|by|now|so|too|here|there|to|with|actually|please)\b"
_NAME = rf"(?P<name>(?!{_NOT_NAMES})[A-Za-z][A-Za-z'-]+(?: (?!{_NOT_NAMES})[A-Za-z][A-Za-z'-]+)?)"
# What a fact is about: a thing, not a pronoun ("I like it" says nothing to keep).
_OBJ = r"(?!(?:it|that|this|them|him|her|you|me|so|too|very|to|the same)\b)[a-z][a-z' -]{1,40}?"
# Facts stated in passing: the pattern and the slot it fills ("": any number of them).
_PASSING = [
    (_words(r"\b(?:my name is|my name's|call me|i'm called|i am called) " + _NAME + r"\b"), "name"),
    (_words(r"\b(?:i live in|i'm living in|i am living in|i (?:have |'ve )?moved to|i now live in|i live near) "
            + _OBJ + _END), "home"),
    (_words(r"\b(?:i'm from|i am from|i come from|i grew up in) " + _OBJ + _END), "origin"),
    (_words(r"\b(?:i work (?:as|at|for|in)|i'm working (?:as|at|for)|my job is) " + _OBJ + _END), "work"),
    (_words(r"\b(?:i'm|i am) (?:allergic to " + _OBJ + r"|(?:a )?vegetarian|(?:a )?vegan|lactose intolerant|"
            r"diabetic|gluten intolerant)" + _END), ""),
    (_words(r"\bi (?:really |do )?(?:love|like|enjoy|prefer|hate|dislike|can't stand|don't like|don't eat|never eat) "
            + _OBJ + _END), ""),
    (_words(r"\bmy favou?rite (?P<what>[a-z]+(?: [a-z]+)?) is " + _OBJ + _END), "favourite"),
    (_words(r"\bmy (?P<who>wife|husband|partner|son|daughter|brother|sister|mother|mom|mum|father|dad|boyfriend|"
            r"girlfriend|best friend|boss|dog|cat)(?:'s name is| is called| is named) " + _NAME + r"\b"), "person"),
]
# A question about a fact is not a statement of it.
_QUESTION = _words(r"^(?:do|does|did|is|are|am|what|who|where|when|how|can|could|would|will|should)\b")

_SECOND_PERSON = [(r"\bi am\b", "you are"), (r"\bi'm\b", "you're"), (r"\bi've\b", "you've"), (r"\bi'll\b", "you'll"),
                  (r"\bi'd\b", "you'd"), (r"\bi was\b", "you were"), (r"\bi\b", "you"), (r"\bmy\b", "your"),
                  (r"\bmine\b", "yours"), (r"\bme\b", "you"), (r"\bmyself\b", "yourself")]


def plain(text: str) -> str:
    """One line, plain apostrophes, no edge punctuation; case kept (a name is said back as it was written)."""
    return _EDGES.sub("", " ".join(text.replace("\u2019", "'").split()))


def memory_request(said: str) -> MemoryRequest | None:
    """An explicit request about memory, or None: "Remember that my sister is Anna." yes; "I remember that film."
    no (the user remembering, not asking)."""
    words = plain(said)
    if not words or len(words.split()) > 3 * MAX_FACT_WORDS:
        return None
    for kind, pattern in _REQUESTS:
        match = pattern.search(words)
        if match is None:
            continue
        text = plain(match.groupdict().get("text") or "")
        if kind in ("remember", "forget") and (not text or text.lower() in ("it", "this", "that", "everything")
                                               or len(text.split()) > MAX_FACT_WORDS
                                               or _NOT_A_FACT.match(text)):
            return None
        return MemoryRequest(kind, text)
    return None


def facts_in_passing(said: str) -> list[Fact]:
    """The facts about themselves a user stated ("My name is Anna and I live in Lyon."), in their words."""
    if not plain(said) or memory_request(said) is not None:
        return []
    found: list[Fact] = []
    for sentence in re.split(r"(?<=[.!?])\s+", " ".join(said.replace("\u2019", "'").split())):
        if sentence.rstrip().endswith("?") or _QUESTION.match(plain(sentence)):
            continue
        for pattern, slot in _PASSING:
            for match in pattern.finditer(sentence):
                text = plain(match.group(0))
                if len(text.split()) > MAX_FACT_WORDS:
                    continue
                if slot == "favourite":
                    slot_key = f"favourite {match.group('what').lower()}"
                elif slot == "person":
                    slot_key = f"person {match.group('who').lower()}"
                else:
                    slot_key = slot
                found.append(Fact(text, slot_key))
    return found


def slot_of(text: str) -> str:
    """The slot a fact asked to be remembered fills, read the way a fact in passing is ("" when none)."""
    facts = facts_in_passing(text)
    return facts[0].slot if len(facts) == 1 and len(facts[0].text) >= len(plain(text)) - 2 else ""


def second_person(text: str) -> str:
    """The user's words about themselves, as the assistant says them back: "my sister is Anna" → "your sister is
    Anna"."""
    out = plain(text)
    for pattern, into in _SECOND_PERSON:
        out = re.sub(pattern, into, out, flags=re.IGNORECASE)
    return out
