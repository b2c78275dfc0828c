"""Scoring a reply: is it right (the question's accepted words, none of its rejected ones, not too long), was the
question heard (its key words in the transcript), and is it a copy of an earlier answer; and the summary every
evaluation prints."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

import numpy as np

MAX_WORDS = 25


_STOP = {"what", "which", "does", "there", "about", "your", "with", "that", "this", "have", "many", "would",
         "could", "should", "please", "tell", "again", "where", "much", "known"}


@dataclass
class Result:
    id: str
    kind: str
    question: str
    reply: str = ""
    heard: str | None = None
    right: bool = False
    heard_ok: bool | None = None
    words: int = 0
    repeat_of: str | None = None
    first_token_s: float | None = None
    voice_to_voice_s: float | None = None
    extra: dict = field(default_factory=dict)


_NUMBERS = {w: str(i) for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"])}


def norm(text: str) -> str:
    text = text.lower().replace("’", "'")
    return " " + re.sub(r"[^a-z0-9' ]+", " ", text.replace("-", " ")) + " "


def digits(text: str) -> str:
    """Number words as digits, so "ten" and "10" (as Whisper writes it) are one word."""
    return " ".join(_NUMBERS.get(w, w) for w in text.split())


def _has(text: str, phrase: str) -> bool:
    return all(f" {norm(part).strip()} " in text for part in phrase.split("|"))


def share(rows: list[dict], test) -> float:
    """The percentage of `rows` that pass `test` (0 for none)."""
    return round(100 * sum(1 for r in rows if test(r)) / len(rows), 1) if rows else 0.0


_ARTICLES = {"a", "an", "the"}
_VERBS = ("is", "are", "was", "were", "do", "does", "did", "can", "has", "have")
_NEGATIONS = re.compile(r" (no|not|never|cannot|neither|nor|unlike|instead|rather|but|\w+n't) ")


def affirms(question: str, text: str) -> bool:
    """A yes said as the answer ("Is a whale a mammal?" "A whale is a mammal."): the question's words but its opening
    verb, in order, with only such verbs and articles between them, and no negation or contrast (`text`: normalised;
    a reply that asks back is not an answer: is_right)."""
    words = [w for w in norm(question).split()[1:] if w not in _ARTICLES]
    filler = "(?: (?:" + "|".join((*_ARTICLES, *_VERBS)) + "))*"
    said = re.compile(" " + filler.join(" " + re.escape(w) if i else re.escape(w) for i, w in enumerate(words)) + " ")
    return bool(words) and bool(said.search(text)) and not _NEGATIONS.search(text)


def is_right(question: dict, reply: str) -> bool:
    text = norm(reply)
    if any(_has(text, r) for r in question.get("reject", ())):
        return False
    return any(_has(text, a) for a in question["accept"]) or (
        question.get("kind") == "yes/no" and "yes" in question["accept"] and "?" not in reply
        and affirms(question["q"], text))


def key_words(question: str) -> list[str]:
    """The question's two longest content words (numbers count whatever their length)."""
    words = [w for w in digits(norm(question)).split() if (len(w) >= 4 or w.isdigit()) and w not in _STOP]
    return sorted(words, key=lambda w: (w.isdigit(), len(w)), reverse=True)[:2]


def heard_ok(question: str, transcript: str) -> bool:
    text = f" {digits(norm(transcript))} "
    return all(f" {w} " in text for w in key_words(question))


def mark_repeats(results: list[Result], questions: dict[str, dict]) -> None:
    """A reply equal (after normalising) to an earlier reply to a different question in the same run; a
    follow-up may repeat the answer it follows ("Please say that again.")."""
    seen: dict[str, Result] = {}
    for r in results:
        r.repeat_of = None
        key = norm(r.reply).strip()
        if key and key in seen and norm(seen[key].question) != norm(r.question) \
                and questions[r.id].get("after") != seen[key].id:
            r.repeat_of = seen[key].id
        seen.setdefault(key, r)


def score(results: list[Result], questions: dict[str, dict]) -> None:
    for r in results:
        q = questions[r.id]
        r.words = len(r.reply.split())
        r.right = is_right(q, r.reply) and r.words <= q.get("max_words", MAX_WORDS)
        if r.heard is not None:
            r.heard_ok = heard_ok(r.question, r.heard)
    mark_repeats(results, questions)


def asked(result: Result) -> bool:
    return bool(result.extra.get("asked_again"))


def summary(results: list[Result]) -> dict:
    n = len(results)
    heard = [r.heard_ok for r in results if r.heard_ok is not None]
    ft = [r.first_token_s for r in results if r.first_token_s is not None]
    v2v = [r.voice_to_voice_s for r in results if r.voice_to_voice_s is not None]
    return {"questions": n, "right_pct": round(100 * sum(r.right for r in results) / n, 1) if n else 0.0,
            "heard_pct": round(100 * sum(heard) / len(heard), 1) if heard else None,
            "mean_words": round(statistics.mean(r.words for r in results), 1) if n else 0.0,
            "over_25_words": sum(r.words > MAX_WORDS for r in results),
            "repeats": sum(r.repeat_of is not None for r in results),
            # asr.ask_again_below: "say it again" when Whisper misheard (the key words not heard), and when not
            "asked_again_misheard": f"{sum(asked(r) for r in results if r.heard_ok is False)}"
                                    f"/{sum(r.heard_ok is False for r in results)}",
            "asked_again_heard": f"{sum(asked(r) for r in results if r.heard_ok)}"
                                 f"/{sum(bool(r.heard_ok) for r in results)}",
            "first_token_p50_s": round(statistics.median(ft), 3) if ft else None,
            "voice_to_voice_p50_s": round(statistics.median(v2v), 3) if v2v else None,
            "voice_to_voice_p90_s": round(float(np.percentile(v2v, 90)), 3) if v2v else None}


def print_results(title: str, results: list[Result]) -> dict:
    print(f"\n== {title}")
    for r in results:
        mark = "ok " if r.right else "NO "
        heard = f" heard {r.heard!r}" if r.heard is not None and not r.heard_ok else ""
        rep = f" REPEATS {r.repeat_of}" if r.repeat_of else ""
        print(f"{mark} [{r.kind}] {r.question} -> {r.reply!r}{heard}{rep}")
    s = summary(results)
    print(f"-- {title}: " + ", ".join(f"{k} {v}" for k, v in s.items()))
    return s
