"""Plain camera questions answered from what the vision parts found, as the built-in tools' answers are said.

"What does the sign say?", "What is this?", "How many fingers am I holding up?", "Can you see me?" have one right
answer, and it is in the scene. The bundled 0.5B model, given the scene beside such a question, answered "I'm
sorry, but I can't assist with that." to "Can you read this for me?", and asked with the camera off what it was
being shown, it invented ("I'm holding up a book."). These are said as they are; any other question about the
picture ("Is this coffee hot?", "What colour is the sign?") goes to the model with the scene beside it.
"""

from __future__ import annotations

import re

from workers.vision.quoting import neutral
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

# A value printed on something ("What date is on the label?", "How much does it cost?", "What number is on the
# bus?"): read from the picture, never looked up (the clock) nor made up. The thing is any short noun phrase.
_THING = r"(it|this|that|these|those|they|there|(the|this|that|these|those|my|your|its) (\w+ ){0,2}\w+)"
_VALUE_WORD = r"(date|day|price|cost|time|number|numbers|code|year|amount|total|sum)"
_VALUE = re.compile(
    rf"((what|which)( is|'s| are| was)?( the| its| this| that)?( \w+)? {_VALUE_WORD}"
    rf"( (is|are|does|do) {_THING})?( (is|are|was))?( (written |printed |shown )?(on|of|for|in) {_THING})?"
    rf"( (say|show|read))?"
    rf"|how much (is|are|does|do|would|will|did) {_THING}( cost| costs| be)?( (on|in|at) {_THING})?"
    rf"|what (does|do) {_THING} cost( on {_THING})?"
    rf"|when (does|do|will) {_THING} expire"
    rf"|(what|when)( is|'s| are) (the|its) (expiry|expiration|best before|best-before|use by|sell by) dates?"
    rf"( (on|of) {_THING})?)", re.I)
_VALUE_KINDS = (("price", re.compile(r"\b(price|prices|cost|costs|how much)\b", re.I)),
                ("date", re.compile(r"\b(date|dates|day|year|expire|expiry|expiration|best.before|use by|sell by)\b",
                                    re.I)),
                ("time", re.compile(r"\btime\b", re.I)),
                ("number", re.compile(r"\b(numbers?|code|amount|total|sum)\b", re.I)))
_MONTH = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_FOUND = {
    "price": re.compile(r"([$€£¥₹]\s?\d[\d,]*([.,]\d{1,2})?|\d[\d,]*([.,]\d{1,2})?\s?(€|£|\$|eur|usd|gbp|chf|"
                        r"dollars?|euros?|pounds?|cents?)(?!\w)|(?<![\d.,:/-])\d+[.,]\d{2}(?![\d.,:/-]))", re.I),
    "date": re.compile(rf"(\b\d{{1,4}}[./-]\d{{1,2}}[./-]\d{{1,4}}\b|\b\d{{1,2}}(st|nd|rd|th)? {_MONTH}( \d{{2,4}})?"
                       rf"|\b{_MONTH} \d{{1,2}}(st|nd|rd|th)?(,? \d{{4}})?\b|\b{_MONTH} \d{{4}}\b"
                       rf"|\b(0?[1-9]|1[0-2])/\d{{2}}(\d{{2}})?\b|\b(19|20)\d{{2}}\b)", re.I),
    "time": re.compile(r"\b\d{1,2}:\d{2}(\s?[ap]\.?m\b\.?)?|\b\d{1,2}\s?[ap]\.?m\b\.?", re.I),
    "number": re.compile(r"\d+([.,:/-]\d+)*"),
}
# "What is in the cup?": what the classifier saw names the contents ("a cup of coffee (espresso)": coffee); when it
# names only the container ("a coffee mug") the model answers from the scene, which says no more.
_CONTENTS = re.compile(r"(what( is|'s| do i have| have i got| is there| are there)?( \w+)? in "
                       r"(the|this|that|my|your|his|her) (\w+ )?\w+|what('s| is) inside( (it|this|that|the \w+))?)",
                       re.I)
_FILLED = re.compile(r"^an? (cup|mug|glass|bowl|plate|bottle|jar|can|box|bag|pot|jug|basket|tray|carton) of (.+)$")
_CONTAINER = re.compile(r"\b(cups?|mugs?|glass|bowls?|plates?|bottles?|jars?|cans?|box|bags?|\w*pots?|jugs?|"
                        r"baskets?|trays?|cartons?|crates?|buckets?|pitchers?|vases?|envelopes?|purses?|backpacks?|"
                        r"suitcases?|barrels?|tubs?|pans?|sacks?)$")

_SHOWN = re.compile(r"\b(camera|holding|showing|show you|in my hands?|sign|label|card|page|written|fingers|"
                    r"see me|can you see|do you see|in front of|picture|tag|receipt|menu|ticket|screen|clock|"
                    r"(in|on) (this|that|my) \w+|in the (cup|mug|glass|bowl|box|bag|jar|bottle))\b", re.I)

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
    kinds = [(_READ, "read"), (_IDENTIFY, "identify"), (_VALUE, "value"), (_CONTENTS, "contents"),
             (_FINGERS, "fingers"), (_SEE_ME, "see me"), (_HOW_MANY_PEOPLE, "people")]
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
        said = ", then ".join(f'"{neutral(row)}"' for row in rows[:6])
        return f"It says {said}."
    if kind == "value":
        return _value_answer(bare, scene)
    if kind == "contents":
        return _contents_answer(scene)
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


def value_kind(question: str) -> str | None:
    """What kind of printed value a question asks for: "price", "date", "time", "number", or None."""
    return next((kind for kind, words in _VALUE_KINDS if words.search(question or "")), None)


def values_in(rows: list[str], kind: str) -> list[tuple[str, str]]:
    """(value, the row it is in) for each value of `kind` read, in reading order."""
    found = []
    for row in rows:
        found += [(m.group(0).strip(), row) for m in _FOUND[kind].finditer(row)]
    return found


MAX_QUOTED_ROW = 60  # a longer row is not said whole: only the value in it


def _value_answer(question: str, scene: Scene) -> str | None:
    """The one value of the kind asked for that the text holds, said with the row it is in ("It says "BEST BEFORE
    12 MARCH 2027"."); None when there are several or none (the model reads the text beside the question) or no
    text was read (asked to hold it closer)."""
    if scene.text is None:
        return None
    rows = [neutral(row) for row in scene.text.rows()]
    if not rows:
        return "I can't make out any text in the picture. Hold it a little closer, facing the camera."
    kind = value_kind(question)
    values = {value for value, _ in values_in(rows, kind)} if kind else set()
    if len(values) != 1:
        return None
    value, row = values_in(rows, kind)[0]
    return f'It says "{row if len(row) <= MAX_QUOTED_ROW else value}".'


def _contents_answer(scene: Scene) -> str | None:
    """What the classifier saw, as the contents asked about: "a cup of coffee (espresso)" -> "coffee (espresso)";
    None when it saw nothing sure, or only a container (the model answers from the scene)."""
    if scene.objects is None or not scene.objects.guesses:
        return None
    plain = scene.objects.guesses[0].plain
    if (filled := _FILLED.match(plain)) is not None:
        return f"It looks like {filled[2]}."
    if _CONTAINER.search(plain.split(" (")[0]):
        return None
    return f"It looks like {plain}."
