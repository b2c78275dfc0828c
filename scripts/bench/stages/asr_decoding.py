"""Benchmark other decodings of the same audio than the server's (Whisper base greedy, decoded again with a beam
where it is unsure; workers/llm/engines/asr.py): would they hear the spoken questions of scripts/eval/questions.json
better, in the evaluation voices and the room benchmark's rooms ("piper@babble_noise10")?

beam: the server's decoding against a beam of asr.redecode_beam_size from the start: how far each transcript is from
the question (exact, close: a quarter of the words or fewer wrong, part: half, garbled), and the time an utterance
takes.
alternatives: where the server's rule asks again (Whisper unsure, the second model disagreeing, or the LLM's reading
of the words: MisheardRule), would another of the beam's hypotheses pass the same rule (its own score, the same second
model's words, the LLM's reading of it after four exchanges), and how far is the best of them from the question?
Both modes hear the same stretches of each room.

Usage: .venv/bin/python -m scripts.bench.stages.asr_decoding [beam|alternatives] [--voices piper@babble_noise10,...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from scripts.bench.stages.asr import GARBLED_WER, ROOM_SEED, reading_model, spoken_questions, voice_audio
from vita.config import Config
from vita.words import said_words
from workers.llm.engines.asr import (
    MAX_REPLY_TOKENS,
    WHISPER_RATE,
    MisheardRule,
    Transcription,
    WhisperTranscriber,
    pcm16_to_float,
    window_seconds,
    word_error_rate,
)

CLOSE_WER = 0.25
HYPOTHESES = 5  # alternatives: the beam's hypotheses kept (at most its width, asr.redecode_beam_size)


def graded(question: str, heard: str) -> str:
    """How far a transcript is from the question: exact, close (a quarter of the words or fewer wrong), part (half),
    garbled."""
    error = word_error_rate(question, heard)
    return ("exact" if error == 0 else "close" if error <= CLOSE_WER else "part" if error <= GARBLED_WER
            else "garbled")


def tally(grades: list[str]) -> str:
    """Each grade's count, in order."""
    return " ".join(f"{g} {grades.count(g)}" for g in ("exact", "close", "part", "garbled", "asked", "silent"))


def beam(models: Path, voices: list[str]) -> None:
    """The server's decoding against a beam of asr.redecode_beam_size from the start, on the same clips."""
    cfg = Config().asr
    server = WhisperTranscriber(models / cfg.model, "int8", 2, "en", 1, redecode_below=cfg.redecode_below,
                                redecode_beam_size=cfg.redecode_beam_size)
    wide = WhisperTranscriber(models / cfg.model, "int8", 2, "en", cfg.redecode_beam_size)
    server.warm_up()  # (timed as the server runs them: warmed on Whisper's largest input)
    wide.warm_up()
    for voice in voices:
        rng = np.random.default_rng(ROOM_SEED)
        grades: dict[str, list[str]] = {"server": [], "beam": []}
        took: dict[str, list[float]] = {"server": [], "beam": []}
        changed = []
        for q in spoken_questions():
            clip = voice_audio(voice, q, rng).tobytes()
            heard = {}
            for name, asr in (("server", server), ("beam", wide)):
                started = time.perf_counter()
                heard[name] = asr.hear(clip).text
                took[name].append(time.perf_counter() - started)
                grades[name].append(graded(q, heard[name]) if heard[name] else "silent")
            if grades["server"][-1] != grades["beam"][-1]:
                changed.append(f"{q!r}: {heard['server']!r} / {heard['beam']!r}")
        for name in ("server", "beam"):
            print(f"{voice:<24} {name:<7} {tally(grades[name])}; p50 {statistics.median(took[name]):.3f} s", flush=True)
        for line in changed:
            print(f"    graded apart: {line}")


def beam_hypotheses(asr: WhisperTranscriber, clip: bytes) -> list[Transcription]:
    """The server's beam (asr.redecode_beam_size wide, on the short window) with its finished hypotheses, best first,
    one for each wording (the same words written otherwise are one), loops left out; each scored as the server scores
    a transcript (the mean log-probability of its tokens)."""
    audio = pcm16_to_float(clip, WHISPER_RATE)
    encoded, prompt = asr._encode(audio, window_seconds(audio.size / WHISPER_RATE, True))
    width = asr.redecode_beam_size
    result = asr.model.model.generate(encoded, [prompt], beam_size=width, num_hypotheses=min(HYPOTHESES, width),
                                      return_scores=True, suppress_blank=True, suppress_tokens=[-1],
                                      max_length=len(prompt) + MAX_REPLY_TOKENS)[0]
    found: dict[tuple[str, ...], Transcription] = {}
    for ids, score in zip(result.sequences_ids, result.scores, strict=True):
        t = Transcription.decoded(asr._tokenizer.decode([i for i in ids if i < asr._tokenizer.eot]).strip(), score)
        if t.text and not t.looped:
            found.setdefault(tuple(said_words(t.text)), t)
    return list(found.values())


def server_asks(rule: MisheardRule, heard: Transcription, other: Transcription | None,
                words_logprob: float | None) -> bool:
    """Would the server ask again on these words (workers/llm/hearing.py, then reply_generation.judge_words)? Whisper
    too unsure or looping; unsure enough for a second opinion and the second model (`other`) disagreeing; unsure
    enough for a reading and the model finding the words implausible. The model's reading may be None (too few
    tokens, the words not found): then Whisper's rules alone decide, and it is answered."""
    if not heard.text:
        return False
    if rule.unsure(heard):
        return True
    if other is not None and rule.worth_a_second_opinion(heard) and rule.disagree(heard, other):
        return True
    return rule.worth_a_reading(heard) and words_logprob is not None and rule.implausible(heard, words_logprob)


def best_passing(rule: MisheardRule, heard: Transcription, hypotheses: list[Transcription],
                 other: Transcription | None, read: dict[str, float | None]) -> Transcription | None:
    """Of the beam's other wordings, the best that the server would answer (Whisper's score plus reading_weight times
    the model's, where the model read it); None: none."""
    passing = [(h.avg_logprob + rule.reading_weight * (read.get(h.text) or 0.0), h) for h in hypotheses
               if said_words(h.text) != said_words(heard.text) and not server_asks(rule, h, other, read.get(h.text))]
    return max(passing, key=lambda scored: scored[0])[1] if passing else None


def alternatives(models: Path, voices: list[str]) -> None:
    """Where the server asks again (Whisper unsure, the second model disagreeing, the model's reading), the beam's
    other wordings judged by the same rule; the model reads each after four exchanges (asr.py EARLIER), as in a
    session. A looped transcript (asked again whatever its words) is offered none."""
    from workers.llm.engines.local_engine import words_logprob

    config = Config()
    cfg, rule = config.asr, MisheardRule.from_config(config.asr)
    asr = WhisperTranscriber(models / cfg.model, "int8", 2, "en", 1, redecode_below=cfg.redecode_below,
                             redecode_beam_size=cfg.redecode_beam_size)
    second = WhisperTranscriber(models / cfg.second_opinion, "int8", 2, "en", 1) if cfg.second_opinion else None
    rows = []
    for voice in voices:
        rng = np.random.default_rng(ROOM_SEED)
        for q in spoken_questions():
            clip = voice_audio(voice, q, rng).tobytes()
            heard = asr.hear(clip)
            row = {"voice": voice, "question": q, "heard": heard, "hypotheses": [], "other": None}
            if heard.text and heard.avg_logprob < (rule.reading_below or 0.0):  # unsure: a rule may ask again
                row["other"] = second.hear(clip) if second is not None else None
                row["hypotheses"] = [] if heard.looped else beam_hypotheses(asr, clip)
            rows.append(row)
    from vllm import SamplingParams

    llm, prompts, earlier = reading_model(config)
    texts = sorted({t.text for r in rows for t in (r["heard"], *r["hypotheses"]) if r["hypotheses"]})
    built = [prompts.build(earlier, t) for t in texts]
    outs = llm.generate(built, SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0), use_tqdm=False)
    read: dict[str, float | None] = {}
    for text, rendered, out in zip(texts, built, outs, strict=True):
        found = prompts.words_from_end(rendered, text)
        read[text] = words_logprob(out.prompt_logprobs, out.prompt_token_ids, 0, found) if found else None

    for voice in voices:
        today, with_them, rescued = [], [], []
        for row in (r for r in rows if r["voice"] == voice):
            q, heard, other = row["question"], row["heard"], row["other"]
            asked = server_asks(rule, heard, other, read.get(heard.text))
            grade = "silent" if not heard.text else "asked" if asked else graded(q, heard.text)
            today.append(grade)
            best = best_passing(rule, heard, row["hypotheses"], other, read) if asked else None
            if best is not None:
                grade = graded(q, best.text)
                rescued.append(f"{q!r}: {heard.text!r} -> {best.text!r} ({grade})")
            with_them.append(grade)
        print(f"{voice:<24} today {tally(today)}\n{'':<24} with the beam's alternatives {tally(with_them)}",
              flush=True)
        for line in rescued:
            print(f"    {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", choices=("beam", "alternatives"), default="beam")
    parser.add_argument("--voices", default="hibari@babble_noise10,piper@babble_noise10",
                        help="evaluation voices (scripts/eval/voices.py), '@ROOM' in a room of scripts/bench/rooms")
    args = parser.parse_args()
    models, voices = Config().models_path(), args.voices.split(",")
    if args.what == "beam":
        beam(models, voices)
    else:
        alternatives(models, voices)
    return 0


if __name__ == "__main__":
    sys.exit(main())
