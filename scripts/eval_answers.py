"""Answer evaluation: are the assistant's replies right, short, and free of copies of earlier answers?

Typed (the LLM alone, through the project's own PromptBuilder, history and reply budget, in-process vLLM):
    .venv/bin/python scripts/eval_answers.py typed [--model NAME|DIR] [--set report|tune|all]
Spoken (the full server over the socket, one long session per voice, camera questions left out: no face
can be synthesised for the Haar cue; they are measured typed):
    .venv/bin/python scripts/eval_answers.py spoken [--url URL] [--voices hibari,espeak] [-- server flags]

Questions live in scripts/eval_questions.json; each says which words make it right. 'tune' questions may be
used to choose prompts and settings, 'report' ones only to report. Prints right %, heard % (spoken: the
question's key words in the transcript), mean words, replies over 25 words, repeats of an earlier answer to
a different question, first-token and voice-to-voice times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from vita.harness.client import RecordingClient


QUESTIONS = Path(__file__).with_name("eval_questions.json")
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


def load_questions(which: str) -> list[dict]:
    qs = json.loads(QUESTIONS.read_text())["questions"]
    return [q for q in qs if which == "all" or q["set"] == which]


_NUMBERS = {w: str(i) for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"])}


def _norm(text: str) -> str:
    text = text.lower().replace("’", "'")
    return " " + re.sub(r"[^a-z0-9' ]+", " ", text.replace("-", " ")) + " "


def _digits(text: str) -> str:
    """Number words as digits, so "ten" and "10" (as Whisper writes it) are one word."""
    return " ".join(_NUMBERS.get(w, w) for w in text.split())


def _has(text: str, phrase: str) -> bool:
    return all(f" {_norm(part).strip()} " in text for part in phrase.split("|"))


def is_right(question: dict, reply: str) -> bool:
    text = _norm(reply)
    if any(_has(text, r) for r in question.get("reject", ())):
        return False
    return any(_has(text, a) for a in question["accept"])


def key_words(question: str) -> list[str]:
    """The question's two longest content words (numbers count whatever their length)."""
    words = [w for w in _digits(_norm(question)).split() if (len(w) >= 4 or w.isdigit()) and w not in _STOP]
    return sorted(words, key=lambda w: (w.isdigit(), len(w)), reverse=True)[:2]


def heard_ok(question: str, transcript: str) -> bool:
    text = f" {_digits(_norm(transcript))} "
    return all(f" {w} " in text for w in key_words(question))


def mark_repeats(results: list[Result], questions: dict[str, dict]) -> None:
    """A reply equal (after normalising) to an earlier reply to a different question in the same run; a
    follow-up may repeat the answer it follows ("Please say that again.")."""
    seen: dict[str, Result] = {}
    for r in results:
        r.repeat_of = None
        key = _norm(r.reply).strip()
        if key and key in seen and _norm(seen[key].question) != _norm(r.question) \
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


# --- typed: the LLM alone -------------------------------------------------------------------------------------
def chains(questions: list[dict]) -> list[list[dict]]:
    """Questions grouped so each follow-up comes right after the question it needs."""
    by_id, groups, where = {q["id"]: q for q in questions}, [], {}
    for q in questions:
        if q.get("after") in by_id and q["after"] in where:
            where[q["id"]] = where[q["after"]]
            groups[where[q["id"]]].append(q)
        else:
            where[q["id"]] = len(groups)
            groups.append([q])
    return groups


async def typed_run(config, questions: list[dict]) -> dict[str, list[Result]]:
    from transformers import AutoTokenizer

    from workers.generation import EnginePrompt, SamplingSettings
    from workers.local_engine import LocalVllmEngine
    from workers.prompting import ConversationHistory, Exchange, PromptBuilder
    from workers.speech_pieces import ReplyShaper

    llm = config.llm
    engine = LocalVllmEngine(config)
    await engine.start(lambda *a: None)
    print(f"engine: {engine.description}", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(str(config.llm_model_path()))
    prompts = PromptBuilder(tokenizer, llm.prompt_style, llm.persona, llm.history_tokens)
    sampling = SamplingSettings(llm.max_tokens, llm.temperature)

    async def ask(history, q: dict, n: int) -> Result:
        user = q["q"]
        prompt = EnginePrompt(prompts.build(history, user, q.get("camera", "")),
                              prompts.messages(history, user, q.get("camera", "")), tuple(prompts.stop))
        shaper, spoken, tokens = ReplyShaper(llm.max_reply_words, llm.first_piece_words), [], 0
        started, first = time.monotonic(), None
        async for delta in engine.stream(prompt, sampling, f"eval-{n}"):
            tokens += delta.tokens
            first = first if first is not None else time.monotonic() - started
            spoken += shaper.feed(delta.text)
            if shaper.complete:
                await engine.abort(f"eval-{n}")
                break
        spoken += shaper.finish(cut_by_token_limit=tokens >= llm.max_tokens)
        reply = " ".join(spoken)
        history.add(Exchange(user, reply))
        return Result(q["id"], q["kind"], user, reply, first_token_s=first)

    out: dict[str, list[Result]] = {"fresh": [], "session": []}
    n = 0
    for group in chains(questions):  # fresh: each chain in a session of its own
        history = ConversationHistory(llm.history_turns)
        for q in group:
            n += 1
            out["fresh"].append(await ask(history, q, n))
    history = ConversationHistory(llm.history_turns)  # session: everything in one long conversation
    for group in chains(questions):
        for q in group:
            n += 1
            out["session"].append(await ask(history, q, n))
    engine.close()
    return out


# --- spoken: the full server over the socket ------------------------------------------------------------------
def synthesize(voice: str, text: str) -> np.ndarray:
    """int16 16 kHz speech of `text` in one of the evaluation voices (none of them used to tune anything)."""
    import soxr

    if voice == "hibari":
        from hibari import Hibari

        engine = synthesize.__dict__.setdefault("hibari", Hibari())
        audio = np.asarray(engine(text), dtype=np.float32)
        return (soxr.resample(audio, engine.sample_rate, 16000) * 32767).clip(-32768, 32767).astype(np.int16)
    if voice.startswith("espeak"):
        variant = voice.partition(":")[2] or "en-us"
        if shutil.which("espeak-ng") is None:
            raise SystemExit("the espeak voice needs the espeak-ng program (Debian: apt-get install espeak-ng)")
        wav = subprocess.run(["espeak-ng", "-v", variant, "-s", "160", "--stdout", text], capture_output=True,
                             check=True).stdout
        import io
        import wave

        with wave.open(io.BytesIO(wav)) as w:
            rate, data = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        return soxr.resample(data.astype(np.float32), rate, 16000).clip(-32768, 32767).astype(np.int16)
    if voice == "piper":
        from vita.harness.speech import spoken

        return np.asarray(spoken(text))
    raise SystemExit(f"unknown voice {voice!r}: hibari, espeak[:VARIANT] or piper")


def answered_turn(client: RecordingClient, after: float) -> int:
    """The turn that answered the question asked after `after`, once it is over: a turn withdrawn because the
    question went on ("...Canada? Keep it short.": `extended`) is followed by the one that carries it."""
    from bench import first_after

    while True:
        turn_at, turn = first_after(client, "turn", after, timeout=30)
        tid = turn["turn_id"]
        if not client.wait_for(lambda evs, t=tid: any(n == "state" and d.get("state") == "listening"
                                                      and d.get("turn_id") == t for _, n, d in evs), 60):
            raise TimeoutError(f"turn {tid} did not end within 60 s")
        ends = [d for _, n, d in client.events if n == "state" and d.get("turn_id") == tid
                and d.get("state") == "listening"]
        if ends[-1].get("reason") != "extended":
            return tid
        after = turn_at + 1e-6


def spoken_run(url: str, voice: str, questions: list[dict]) -> list[Result]:
    from bench import open_mic, send_speech

    from vita.harness.client import RecordingClient

    client = RecordingClient(url).connect()
    results = []
    try:
        for group in chains(questions):
            for q in group:
                speech = synthesize(voice, q["q"])
                voiced_at = send_speech(client, speech, lead_s=0.3, tail_s=0.2)
                result = Result(q["id"], q["kind"], q["q"])
                try:
                    with open_mic(client):  # as a page's: the silence after the question reaches the server
                        tid = answered_turn(client, voiced_at - 1)
                    client.wait_for(lambda evs, t=tid: any(n == "timings" and d.get("turn_id") == t
                                                           and d.get("stage") == "front" for _, n, d in evs), 5)
                    texts = [d for _, n, d in client.events if n == "response_text" and d.get("turn_id") == tid]
                    heard = [d for _, n, d in client.events if n == "transcript" and d.get("turn_id") == tid]
                    stages = {d["stage"]: d for _, n, d in client.events
                              if n == "timings" and d.get("turn_id") == tid}
                    result.reply = texts[-1]["text"] if texts else ""
                    result.heard = heard[-1]["text"] if heard else ""
                    result.first_token_s = stages.get("llm", {}).get("first_token_s")
                    result.voice_to_voice_s = stages.get("front", {}).get("voice_to_voice_s")
                    result.extra = {k: stages.get("llm", {}).get(k)
                                    for k in ("asr_s", "first_piece_s", "asr_logprob", "asr_beam", "asked_again",
                                              "words_logprob")}
                except TimeoutError:
                    result.heard = ""
                results.append(result)
                time.sleep(0.3)
    finally:
        client.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("typed", "spoken"))
    parser.add_argument("--set", default="report", choices=("report", "tune", "kinds", "heldout", "all"))
    parser.add_argument("--model", help="typed: a bundled model's name or a model folder (default: llm.model)")
    parser.add_argument("--config", help="YAML config (default: configs/default.yaml)")
    parser.add_argument("--url", help="spoken: a running server (default: start one with the default config)")
    parser.add_argument("--voices", default="hibari,espeak:en-us", help="spoken: comma-separated voices")
    parser.add_argument("--json", help="write all results here")
    # (split by hand: argparse does not give a positional list the words after "--" once `mode` is taken)
    argv = sys.argv[1:]
    server_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.server_args = server_args
    from vita.config import load_config

    questions = load_questions(args.set)
    by_id = {q["id"]: q for q in questions}
    report: dict = {"mode": args.mode, "set": args.set}
    if args.mode == "typed":
        config = load_config(args.config)
        if args.model:
            config.llm.model_path = args.model
        from workers.local_engine import device_env

        os.environ.update(device_env(config))
        runs = asyncio.run(typed_run(config, questions))
        report["model"] = config.llm_model_path().name
        for name, results in runs.items():
            score(results, by_id)
            report[name] = {"summary": print_results(f"typed {name} ({report['model']})", results),
                            "results": [asdict(r) for r in results]}
    else:
        from vita.harness.server import start_server, stop_server, wait_ready

        spoken_qs = [q for q in questions if "camera" not in q]
        server = None
        url = args.url
        if url is None:
            server = start_server(Path(tempfile.mkdtemp()), "--timeout", "3600", *args.server_args)
            wait_ready(server)
            url = server.url
        try:
            for voice in args.voices.split(","):
                results = spoken_run(url, voice, spoken_qs)
                score(results, by_id)
                report[voice] = {"summary": print_results(f"spoken, one session, voice {voice}", results),
                                 "results": [asdict(r) for r in results]}
        finally:
            if server is not None:
                stop_server(server)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
