"""One camera frame -> a short factual description a text-only model can use, from the enabled vision parts.

The question decides what is run and said: "what does it say?" reads text first, "what is this / what am I
holding?" names objects, "how many fingers?" looks at hands, "can you see me / how many people?" counts faces;
anything else gets a short summary of everything found. Nothing is stated that no model detected, and an absence
("no text visible") is stated only when the question asked about that thing and its part ran.

    describer = SceneDescriber(VisionConfig(text=True, objects=True, people=True, hands=True))
    describer.setup()
    describer.describe("what does the sign say?", jpeg_bytes)  # -> 'camera: text read: "PLATFORM 9"'
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from workers.vision.frames import ChangeDetector, to_bgr
from workers.vision.objects import ObjectClassifier, ObjectReading
from workers.vision.ocr import TextReader, TextReading
from workers.vision.people import PeopleAndHands, PeopleReading
from workers.vision.quoting import neutral

log = logging.getLogger("vita.vision")

PARTS = ("text", "objects", "people", "hands")

# What a question asks about. Checked in this order; the first match leads, the others may follow it.
_ASKS_HANDS = re.compile(
    r"\b(fingers?|thumbs?|gestures?|gesturing|wav(e|es|ing)|point(ing)?|peace sign|victory sign|fist|palm|"
    r"high five|hands? (up|raised)|raised? (my |a |the )?hands?|how many hands|which hand|show(ing)? you with my)\b")
_ASKS_TEXT = re.compile(
    r"\b(say|says|said|saying|read|reads|reading|written|writing|write|text|words?|letters?|spell|spelled|"
    r"sign|signs|label|title|headline|caption|printed|print|number on|digits?|message|note|page|menu|screen say|"
    # a value printed on something: read, never looked up
    r"date|dates|dated|expir\w*|best before|use by|sell by|price|prices|priced|cost|costs|how much|numbers?|"
    r"time on|time does|what time (is|does) (the|this|that) \w+ (say|show|read))\b")
_ASKS_PEOPLE = re.compile(
    r"\b(who|people|person|persons|anyone|anybody|someone|somebody|faces?|see me|look(ing)? at (me|you|the camera)|"
    r"how many of us|am i (there|visible|in)|is (he|she) |are (they|we) |man|woman|men|women|kids?|child(ren)?|"
    r"friends?)\b")
_ASKS_OBJECTS = re.compile(
    r"\b(what is (this|that|it)|what's (this|that|it)|whats (this|that)|what are (these|those)|holding|hold|"
    r"object|objects|thing|things|item|items|identify|recogni[sz]e|kind of|type of|animal|food|drink|"
    r"in my hand|on the table|in front of|on (the|this|my) (screen|desk|shelf)|inside|"
    r"in (the|this|that|my|your) (cup|mug|glass|bowl|box|bag|jar|bottle|can|tin|basket|plate|pot|pan|"
    r"container|package|packet|tray))\b")
_ASKS_SCENE = re.compile(r"\b(see|look|looks|describe|camera|picture|image|photo|view|show|showing)\b")


@dataclass(frozen=True)
class Focus:
    """What to look for, most wanted first; `asked` are the parts the question named (absences may be said)."""
    parts: tuple[str, ...]
    asked: frozenset[str]


def focus_of(question: str | None) -> Focus:
    """Which parts a question asks about. A question about nothing in particular (or no question) gets all."""
    q = (question or "").lower().replace("’", "'")
    asked: list[str] = []
    hands = bool(_ASKS_HANDS.search(q)) and not re.search(r"\bin (my|your|his|her|their) hands?\b", q)
    if hands:
        asked.append("hands")
    if _ASKS_TEXT.search(q):
        asked.append("text")
    objects = _ASKS_OBJECTS.search(q)
    # "How many fingers am I holding up?" is about the hand, not about something held.
    if objects and not (hands and all(m.group(0) in ("holding", "hold") for m in _ASKS_OBJECTS.finditer(q))):
        asked.append("objects")
    if _ASKS_PEOPLE.search(q):
        asked.append("people")
    if not asked:
        return Focus(("people", "hands", "objects", "text"), frozenset())
    return Focus(tuple(asked), frozenset(asked))


@dataclass(frozen=True)
class VisionConfig:
    """The switches a server config would carry (suggested YAML: a `vision:` section with these keys)."""
    text: bool = True
    objects: bool = True
    people: bool = True
    hands: bool = True  # needs people (and mediapipe; with the Haar fallback there are no hands)
    threads: int = 1
    text_min_score: float = 0.75
    text_det_side: int = 960
    object_min_score: float = 0.3
    people_backend: str = "auto"  # auto | mediapipe | haar
    face_range: str = "full"  # short | full
    hand_model: str = "full"  # lite | full
    run_all: bool = False  # run every enabled part on each frame, whatever the question (else only those asked)


@dataclass
class Scene:
    """What the parts found in one frame (None: that part did not run on it)."""
    size: tuple[int, int]  # width, height
    text: TextReading | None = None
    objects: ObjectReading | None = None
    people: PeopleReading | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def ran(self, part: str) -> bool:
        if part == "hands":
            return self.people is not None and self.people.hands_checked
        return getattr(self, part) is not None


_NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _count(n: int, one: str, many: str) -> str:
    word = _NUMBER_WORDS[n] if n < len(_NUMBER_WORDS) else str(n)
    return f"{word} {one if n == 1 else many}"


def _confidence(p: float) -> str:
    return "most likely" if p >= 0.6 else "possibly"


SURE_TEXT = 0.9  # rows read with a lower score are marked "(unsure)"


def _say_text(reading: TextReading, asked: bool, max_chars: int = 300) -> str | None:
    rows = reading.scored_rows()
    if not rows:
        return "no text visible" if asked else None
    # Quoted as data: a sign's own quotes, brackets, newlines and template tokens cannot break out (quoting.py).
    quoted = " / ".join(f'"{neutral(r)}"' + ("" if score >= SURE_TEXT else " (unsure)") for r, score in rows)
    if len(quoted) > max_chars:
        quoted = quoted[:max_chars].rsplit(" ", 1)[0]
        quoted += '"' * (quoted.count('"') % 2) + " …"  # (a row cut short keeps its closing quote)
    return f"text read: {quoted}"


def _say_objects(reading: ObjectReading, asked: bool) -> str | None:
    if not reading.guesses:
        return "no object recognised with confidence" if asked else None
    parts = [f"{_confidence(g.group_score)} {g.plain}" for g in reading.guesses]
    return "main object: " + "; or ".join(parts)


def _say_people(reading: PeopleReading, asked: bool) -> str | None:
    n = reading.people
    if n == 0:
        return "no one visible" if asked else None
    facing = reading.facing
    judged = [f for f in reading.faces if f.facing is not None]
    if reading.backend == "haar":
        # The frontal cascade only finds faces turned to the camera.
        return f"{_count(n, 'person', 'people')} facing the camera"
    if not judged:
        return _count(n, "person", "people") + " visible"
    if n == 1:
        return "one person, " + ("looking at the camera" if facing else "not looking at the camera")
    if facing == n:
        return f"{_count(n, 'person', 'people')}, all looking at the camera"
    if facing == 0:
        return f"{_count(n, 'person', 'people')}, none looking at the camera"
    return f"{_count(n, 'person', 'people')}, {_NUMBER_WORDS[facing] if facing < 11 else facing} looking at the camera"


def _describe_hand(hand) -> str:
    fingers = _count(hand.fingers, "finger", "fingers") + " up"
    if hand.gesture in ("thumbs up", "thumbs down", "pointing", "victory"):
        detail = {"victory": "a V sign (index and middle finger)"}.get(hand.gesture, hand.gesture)
        return f"{detail} ({fingers})"
    if hand.gesture == "open palm":
        return f"an open palm ({fingers})"
    if hand.gesture == "fist":
        return "a fist (no fingers up)"
    if hand.raised:
        return f"{fingers} ({', '.join(hand.raised)})"
    return fingers


def _say_hands(reading: PeopleReading, asked: bool) -> str | None:
    hands = reading.hands
    if not hands:
        return "no hands visible" if asked else None
    if len(hands) == 1:
        return "one hand: " + _describe_hand(hands[0])
    total = sum(h.fingers for h in hands)
    each = "; ".join(_describe_hand(h) for h in hands)
    return f"{_count(len(hands), 'hand', 'hands')} ({_count(total, 'finger', 'fingers')} up in all): {each}"


def render(scene: Scene, question: str | None = None, focus: Focus | None = None) -> str:
    """The description of a scene for a question, e.g. 'camera: text read: "EXIT" / "Gate 12"'. Only what some
    part found is said; an absence only for a part the question asked about and that ran. Empty when there is
    nothing to say: no part ran, or the parts the question asked about did not run."""
    focus = focus or focus_of(question)
    said: list[str] = []
    order = list(focus.parts) + [p for p in ("people", "hands", "objects", "text") if p not in focus.parts]
    for part in order:
        if not scene.ran(part):
            continue
        asked = part in focus.asked
        if focus.asked and not asked and part != "text":
            # A pointed question gets its answer, plus any text (it is rarely noise and often the point).
            continue
        if part == "text":
            phrase = _say_text(scene.text, asked)
        elif part == "objects":
            phrase = _say_objects(scene.objects, asked)
        elif part == "people":
            phrase = _say_people(scene.people, asked)
        else:
            phrase = _say_hands(scene.people, asked)
        if phrase:
            said.append(phrase)
    if not said:
        if focus.asked or not any(scene.ran(p) for p in PARTS):
            return ""
        return "camera: nothing recognised with confidence"
    return "camera: " + "; ".join(said)


class SceneDescriber:
    """Runs the enabled parts on a frame and says what they found, as the question wants.

    `setup()` loads every enabled part (the slow bit, seconds); `look(frame, question)` runs the parts the question
    needs (all enabled parts for a general question or with run_all) and keeps the result, so asking again about an
    unchanged picture reruns nothing; `describe(question, frame)` looks and renders. `changed(frame)` is the cheap
    "has the picture changed?" check a caller can use to skip frames."""

    def __init__(self, config: VisionConfig | None = None, text: TextReader | None = None,
                 objects: ObjectClassifier | None = None, people: PeopleAndHands | None = None):
        self.config = config = config or VisionConfig()
        self.text = text if text is not None else (
            TextReader(min_score=config.text_min_score, threads=config.threads, det_side=config.text_det_side)
            if config.text else None)
        self.objects = objects if objects is not None else (
            ObjectClassifier(threads=config.threads, min_score=config.object_min_score)
            if config.objects else None)
        self.people = people if people is not None else (
            PeopleAndHands(backend=config.people_backend, hands=config.hands, face_range=config.face_range,
                           hand_model=config.hand_model)
            if config.people or config.hands else None)
        self.change = ChangeDetector()  # the caller's "has it changed?" (changed())
        self.cache_change = ChangeDetector()  # whether the last scene still describes the frame (look())
        self.scene: Scene | None = None
        self.image: np.ndarray | None = None  # the frame the scene was read from
        self.lock = threading.Lock()
        self.setup_seconds: dict[str, float] = {}

    @property
    def enabled(self) -> tuple[str, ...]:
        parts = []
        if self.text is not None:
            parts.append("text")
        if self.objects is not None:
            parts.append("objects")
        if self.people is not None:
            parts.append("people")
            if self.people.want_hands:
                parts.append("hands")
        return tuple(parts)

    def setup(self) -> dict[str, float]:
        """Load every enabled part; returns each one's load time in seconds."""
        for name, part in (("text", self.text), ("objects", self.objects), ("people", self.people)):
            if part is not None:
                started = time.perf_counter()
                part.setup()
                self.setup_seconds[name] = time.perf_counter() - started
                log.info("vision %s ready in %.2f s", name, self.setup_seconds[name])
        return dict(self.setup_seconds)

    def changed(self, frame: bytes | np.ndarray) -> bool:
        """Whether this frame differs from the last one that counted as changed (and if so, it now counts)."""
        return self.change.check(to_bgr(frame)).changed

    def analyse(self, frame: bytes | np.ndarray) -> Scene:
        """Every enabled part on this frame, afresh: no reading of an earlier frame is reused (the server's vision
        stage calls this for many sessions' cameras, each with its own change check)."""
        image = to_bgr(frame)
        scene = Scene((image.shape[1], image.shape[0]))
        if self.text is not None:
            scene.text = self.text.read(image)
            scene.seconds["text"] = scene.text.seconds
        if self.objects is not None:
            scene.objects = self.objects.classify(image)
            scene.seconds["objects"] = scene.objects.seconds
        if self.people is not None:
            scene.people = self.people.look(image)
            scene.seconds["people"] = scene.people.seconds
        return scene

    def look(self, frame: bytes | np.ndarray, question: str | None = None) -> Scene:
        image = to_bgr(frame)
        focus = focus_of(question)
        wanted = set(self.enabled) if (self.config.run_all or not focus.asked) else set(focus.parts)
        wanted &= set(self.enabled)
        if "hands" in wanted:
            wanted.add("people")  # one model run gives both
        with self.lock:
            change = self.cache_change.check(image)
            scene = self.scene
            if change.changed or scene is None:
                scene = Scene((image.shape[1], image.shape[0]))
            if "text" in wanted and scene.text is None:
                scene.text = self.text.read(image)
                scene.seconds["text"] = scene.text.seconds
            if "objects" in wanted and scene.objects is None:
                scene.objects = self.objects.classify(image)
                scene.seconds["objects"] = scene.objects.seconds
            if "people" in wanted and scene.people is None:
                scene.people = self.people.look(image)
                scene.seconds["people"] = scene.people.seconds
            if scene is not self.scene or self.image is None:
                self.image = image
            self.scene = scene
            return scene

    def describe(self, question: str | None = None, frame: bytes | np.ndarray | None = None) -> str:
        """A compact description for the question, of `frame` (or of the last frame looked at). Empty when there is
        no frame yet."""
        if frame is None:
            frame = self.image
            if frame is None:
                return ""
        return render(self.look(frame, question), question)
