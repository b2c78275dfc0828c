"""Plain camera questions answered from what the vision parts found, as the built-in tools' answers are said.

"What does the sign say?", "What is this?", "How many fingers am I holding up?", "Can you see me?" have one right
answer, and it is in the scene. The bundled 0.5B model, given the scene beside such a question, answered "I'm
sorry, but I can't assist with that." to "Can you read this for me?", and asked with the camera off what it was
being shown, it invented ("I'm holding up a book."). These are said as they are; any other question about the
picture ("Is this coffee hot?", "What colour is the sign?") goes to the model with the scene beside it.
"""

from __future__ import annotations

import re

from workers.vision.scene import Scene

CAMERA_OFF_REPLY = "I can't see anything right now: your camera is off. Turn it on and show me."

MAX_PLAIN_CHARS = 120  # a longer question is not a plain one
_LEAD = re.compile(r"^((hey|hi|ok(ay)?|so|and|now|please|vita)[,!]? )+", re.I)
_TAIL_WORDS = re.compile(r"(,? (please|for me|to me|out loud|right now|now|here|there|vita))+$", re.I)
_READ = re.compile(r"(what (does|do) (it|(this|that|these|the|my|your)( \w+){0,2}) (say|read)( on (it|the \w+))?"
                   r"|(can|could) you read (this|that|it|the \w+)( out)?( for me| to me)?"
                   r"|read (this|that|it|the \w+)( out)?( for me| to me)?"
                   r"|what('s| is) written( on (it|this|that|the \w+))?"
                   r"|what('s| is) on the (sign|label|card|paper|note|page|screen))", re.I)
_IDENTIFY = re.compile(r"(what( is|'s) (this|that|it)|what am i holding( up)?( to the camera)?"
                       r"|what (animal|thing|object|food|vehicle) is (this|that|it)|what do i have in my hands?"
                       r"|what( is|'s) in my hands?|what am i showing you|do you know what (this|that) is)", re.I)
_SEE_ME = re.compile(r"(can|do) you see me", re.I)
_HOW_MANY_PEOPLE = re.compile(r"(how many (people|persons|faces) (do you see|can you see|are (there|here|in "
                              r"(the|this) (picture|image|photo|frame)))|is (anyone|anybody|someone) (there|here))",
                              re.I)
_FINGERS = re.compile(r"how many fingers (am i|do i|are you seeing|can you see|do you see|are)"
                      r"( holding( up)?| showing( you)?| raising| putting up| up)?( to the camera)?", re.I)

_SHOWN = re.compile(r"\b(camera|holding|showing|show you|in my hands?|sign|label|card|page|written|fingers|"
                    r"see me|can you see|do you see|in front of|picture)\b", re.I)

_NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _bare(question: str) -> str:
    """The question without greetings, "please", "for me" and its punctuation."""
    text = " ".join(question.replace("’", "'").split())[:MAX_PLAIN_CHARS + 1].rstrip(" .?!,")
    return _TAIL_WORDS.sub("", _LEAD.sub("", text)).rstrip(" .?!,")


def _number(n: int) -> str:
    return _NUMBERS[n] if 0 <= n < len(_NUMBERS) else str(n)


def direct_answer(question: str, scene: Scene | None, camera_on: bool) -> str | None:
    """The answer to a plain camera question, or None (the model answers, with the scene beside the question).
    `scene` None with the camera on: the picture could not be analysed (the model says what it can)."""
    bare = _bare(question)
    if len(bare) > MAX_PLAIN_CHARS:
        return None
    kinds = [(_READ, "read"), (_IDENTIFY, "identify"), (_FINGERS, "fingers"), (_SEE_ME, "see me"),
             (_HOW_MANY_PEOPLE, "people")]
    kind = next((name for pattern, name in kinds if pattern.fullmatch(bare)), None)
    if kind is None:
        return None
    if not camera_on:
        # "What is that?" may well be about what was just said: only a question that names the camera or what is
        # held up to it gets "your camera is off".
        return CAMERA_OFF_REPLY if _SHOWN.search(bare) else None
    if scene is None:
        return None
    if kind == "read":
        if scene.text is None:
            return None
        rows = scene.text.rows()
        if not rows:
            return "I can't make out any text in the picture. Hold it a little closer, facing the camera."
        said = ", then ".join(f'"{row}"' for row in rows[:6])
        return f"It says {said}."
    if kind == "identify":
        if scene.objects is None:
            return None
        guesses = scene.objects.guesses
        if not guesses:
            return None  # nothing confident: the model may use the rest of the scene (text, people)
        if len(guesses) == 1:
            return f"It looks like {guesses[0].plain}."
        return f"It looks like {guesses[0].plain}, or maybe {guesses[1].plain}."
    if scene.people is None:
        return None
    if kind == "fingers":
        if not scene.ran("hands"):
            return None
        hands = scene.people.hands
        if not hands:
            return "I don't see a hand. Hold it up in front of the camera."
        total = sum(h.fingers for h in hands)
        return f"You're holding up {_number(total)} finger{'s' if total != 1 else ''}."
    people = scene.people.people
    if kind == "see me":
        return "Yes, I can see you." if people else "I can't see anyone right now."
    if people == 0:
        return "I don't see anyone."
    return f"I see {_number(people)} {'person' if people == 1 else 'people'}."
