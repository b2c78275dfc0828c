"""Benchmark ASR: Whisper base and tiny.en — speed (30 s window against the short window) and accuracy.

speed: six Piper-spoken questions, per-model medians and what each heard.
batch: utterances that end together (1, 2, 4), Whisper base on the short window: one batched encode and decode,
one after another on two threads, or side by side on one thread each (as the server runs them); when each is heard.
accuracy: the spoken questions of scripts/eval/questions.json in evaluation voices (hibari natural, piper and
espeak-ng robotic, each optionally with noise, "espeak+noise", or in a room of the room benchmark,
"piper@babble_noise10"), through each model: word error rate, garbled
transcripts (WER > 0.5, numbers compared as digits), and the server's "say it again" rule (Whisper's confidence
and, when it is unsure, the second model's opinion): what it catches among the garbled, and what it costs among
the rest.

sense: those transcripts (accuracy --json) through the LLM with the server's note for words Whisper was unsure of
(what a remote engine does).
reading: those transcripts read by the LLM as the server reads them (asr.reading_below: the model's mean
log-probability of the words, workers/llm/engines/local_engine.words_logprob, as a first question and after four
exchanges) and judged by the server's rule (MisheardRule.implausible): what it asks again among the garbled, the
exact and the rest.

Usage: .venv/bin/python -m scripts.bench.stages.asr [speed|batch|accuracy|sense|reading] [--voices hibari,piper,espeak]
       [--models ...] [--json transcripts.json] [--out judged.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from scripts.eval.questions import QUESTIONS as QUESTIONS_FILE
from scripts.eval.voices import synthesize
from tests.harness.speech import silence, spoken
from vita.config import Config
from workers.llm.engines.asr import (
    MIN_WINDOW_S,
    WHISPER_RATE,
    MisheardRule,
    Transcription,
    WhisperTranscriber,
    pcm16_to_float,
    word_error_rate,
)

QUESTIONS = ["What is the capital of France?", "How many legs does a spider have?", "Who wrote Romeo and Juliet?",
             "What do bees make?", "Can you tell me a joke about cats?", "What is seven times eight?"]
GARBLED_WER = 0.5
ROOM_SEED = 0  # where in each room's sound a question is heard (scripts/bench/stages/asr_decoding.py's too)
NOISE_SNR_DB = 10


def asked(rows: list[dict], key: str) -> str:
    """How many of these rows have `key` true, "n/total"."""
    return f"{sum(r[key] for r in rows)}/{len(rows)}"


def speed(models: Path) -> None:
    clips = [np.concatenate([silence(0.2), spoken(q), silence(0.3)]).tobytes() for q in QUESTIONS]
    for name in ("whisper-base", "whisper-tiny.en"):
        for short in (False, True):
            asr = WhisperTranscriber(models / name, "int8", 2, "en", 1, short_window=short)
            times, heard = [], []
            for clip in clips:
                started = time.perf_counter()
                heard.append(asr.transcribe(clip))
                times.append(time.perf_counter() - started)
            window = "short window" if short else "30 s window"
            print(f"{name:<16} {window:<13} median {statistics.median(times[1:]):.3f} s  {heard}")


def batch(models: Path, runs: int = 3) -> None:
    """Utterances that end together: one batched encode and decode, one after another on two threads (asr.workers
    1), or side by side on one thread each (asr.workers 2, the default); when each is heard, medians of `runs`
    (the first run of each warms up and is left out)."""
    serial = WhisperTranscriber(models / "whisper-base", "int8", 2, "en", 1)
    side = WhisperTranscriber(models / "whisper-base", "int8", 1, "en", 1, workers=2)
    serial.warm_up()
    side.warm_up()
    model = serial.model
    prompt = model.get_prompt(serial._tokenizer, [], without_timestamps=True)
    frames = int(MIN_WINDOW_S * 100)
    clips = [pcm16_to_float(np.concatenate([silence(0.2), spoken(q), silence(0.3)]).tobytes(), WHISPER_RATE)
             for q in QUESTIONS[:4]]
    pcm = [(clip * 32768).astype(np.int16).tobytes() for clip in clips]

    def batched(n: int) -> float:
        started = time.perf_counter()
        features = [model.feature_extractor(np.pad(c, (0, int(MIN_WINDOW_S * WHISPER_RATE) - c.size)), padding=0)
                    [:, :frames] for c in clips[:n]]
        encoded = model.encode(np.stack(features))
        model.model.generate(encoded, [prompt] * n, beam_size=1, max_length=len(prompt) + 128)
        return time.perf_counter() - started

    def heard(asr: WhisperTranscriber, pool: ThreadPoolExecutor, n: int) -> list[float]:
        started = time.perf_counter()

        def hear(clip: bytes) -> float:
            asr.hear(clip)
            return time.perf_counter() - started

        return sorted(pool.map(hear, pcm[:n]))

    def medians(asr: WhisperTranscriber, pool: ThreadPoolExecutor, n: int) -> str:
        each = [statistics.median(t) for t in zip(*[heard(asr, pool, n) for _ in range(runs + 1)][1:], strict=True)]
        return f"{' / '.join(f'{t:.3f}' for t in each)} s (mean {statistics.mean(each):.3f})"

    with ThreadPoolExecutor(1) as one, ThreadPoolExecutor(2) as two:
        for n in (1, 2, 4):
            together = statistics.median([batched(n) for _ in range(runs + 1)][1:])
            print(f"{n} at once: one batch heard all at {together:.3f} s; one after another on two threads at "
                  f"{medians(serial, one, n)}; side by side on one thread each at {medians(side, two, n)}")


def spoken_questions() -> list[str]:
    """The evaluation's questions that need no camera."""
    return [q["q"] for q in json.loads(QUESTIONS_FILE.read_text())["questions"] if "camera" not in q]


@functools.cache
def room_bed(room: str) -> np.ndarray | None:
    from scripts.bench.rooms.sounds import build_bed

    return build_bed(room, 60.0)


def voice_audio(voice: str, text: str, rng: np.random.Generator) -> np.ndarray:
    """int16 16 kHz speech; "+noise": white noise NOISE_SNR_DB under the speech's level; "@ROOM": the voice at the
    room benchmark's level in one of its rooms (scripts/bench/rooms/sounds.py: "hibari@babble_noise10"), from a
    random point of the room's sound."""
    name, _, noisy = voice.partition("+")
    name, _, room = name.partition("@")
    audio = synthesize(name, text).astype(np.float32)
    if noisy:
        level = float(np.sqrt(np.mean(audio ** 2)))
        audio = audio + rng.normal(0, level * 10 ** (-NOISE_SNR_DB / 20), audio.size)
    audio = np.concatenate([np.zeros(3200), audio, np.zeros(4800)])
    return (in_room(audio, room, rng) if room else audio).clip(-32768, 32767).astype(np.int16)


def in_room(audio: np.ndarray, room: str, rng: np.random.Generator) -> np.ndarray:
    """`audio` brought to the user's level of the room benchmark, over a random stretch of the room's sound."""
    from scripts.bench.rooms.sounds import ECHO_ROOMS, USER_DB, at_level

    if room in ECHO_ROOMS:
        raise SystemExit(f"{room}: an echo room needs the assistant's reply: run the room benchmark")
    voice = at_level(audio, USER_DB).astype(np.float64)
    bed = room_bed(room)
    if bed is None:
        return voice
    if bed.size <= voice.size:  # a voice longer than the room's sound hears it again
        bed = np.tile(bed, voice.size // bed.size + 1)
    start = int(rng.integers(0, bed.size - voice.size))
    return voice + bed[start:start + voice.size]


def accuracy(models: Path, names: list[str], voices: list[str], out: str | None) -> None:
    """Each model as the server's first ASR, with the server's rule for "say it again"
    (workers/llm/engines/asr.MisheardRule: its confidence, then, when unsure, the configured second model's
    opinion)."""
    questions = spoken_questions()
    cfg = Config().asr
    rule = MisheardRule.from_config(cfg)
    second = WhisperTranscriber(models / cfg.second_opinion, "int8", 2, "en", 1) if cfg.second_opinion else None
    rows = []
    for name in names:
        asr = WhisperTranscriber(models / name, "int8", 2, "en", 1, redecode_below=cfg.redecode_below,
                                 redecode_beam_size=cfg.redecode_beam_size)
        for voice in voices:
            rng = np.random.default_rng(ROOM_SEED)
            results = []
            for q in questions:
                audio = voice_audio(voice, q, rng).tobytes()
                heard = asr.hear(audio)
                unsure = rule.unsure(heard)
                row = {"model": name, "voice": voice, "question": q, "heard": heard.text,
                       "logprob": heard.avg_logprob, "beam": heard.beam, "wer": word_error_rate(q, heard.text),
                       "unsure": unsure, "second": None, "asked_again": unsure}
                if second is not None and name != cfg.second_opinion and rule.worth_a_second_opinion(heard):
                    other = second.hear(audio)
                    row["second"] = other.text
                    row["asked_again"] = rule.disagree(heard, other)
                results.append(row)
            garbled = [r for r in results if r["wer"] > GARBLED_WER]
            clear = [r for r in results if r["wer"] <= GARBLED_WER]
            mean_wer = statistics.mean(r["wer"] for r in results)

            print(f"{name:<16} {voice:<20} n {len(results)}  mean WER {mean_wer:.3f}  garbled {len(garbled)}  "
                  f"asked again, confidence alone / with the second opinion: garbled {asked(garbled, 'unsure')} / "
                  f"{asked(garbled, 'asked_again')}, the rest {asked(clear, 'unsure')} / {asked(clear, 'asked_again')}"
                  f"; second model run {sum(r['second'] is not None for r in results)}"
                  f"; decoded again with beam search {sum(r['beam'] for r in results)}", flush=True)
            rows += results
    if out:
        Path(out).write_text(json.dumps(rows, indent=1))


def sense(transcripts: str, below: float | None, write_to: str | None = None) -> None:
    """The transcripts of an `accuracy --json` run through the default LLM with the server's note beside the
    question (workers/llm/turn_run.SENSE_CHECK; no history), where Whisper's confidence is under `below` (None: every
    one): what the model asks again on top of the rules above, garbled and not."""
    import os

    from vita.words import asks_again
    from workers.llm.engines.vllm_settings import device_env, engine_kwargs
    from workers.llm.prompting import ConversationHistory, PromptBuilder
    from workers.llm.turn_run import SENSE_CHECK

    config = Config()
    os.environ.update(device_env(config))
    from vllm import LLM, SamplingParams

    llm = LLM(**engine_kwargs(config, False))
    prompts = PromptBuilder(llm.get_tokenizer(), config.llm.prompt_style, config.llm.persona)
    rows = json.loads(Path(transcripts).read_text())
    checked = [r for r in rows if r["heard"] and not r["asked_again"] and (below is None or r["logprob"] < below)]
    texts = [prompts.build(ConversationHistory(0), r["heard"], note=SENSE_CHECK) for r in checked]
    outs = llm.generate(texts, SamplingParams(max_tokens=12, temperature=0), use_tqdm=False)
    for row, out in zip(checked, outs, strict=True):
        row["sense_reply"] = out.outputs[0].text
        row["asked_again"] = asks_again(row["sense_reply"])
    for voice in dict.fromkeys(r["voice"] for r in rows):
        mine = [r for r in rows if r["voice"] == voice]
        garbled = [r for r in mine if r["wer"] > GARBLED_WER]
        clear = [r for r in mine if r["wer"] <= GARBLED_WER]
        print(f"{voice:<20} note under {below}: asked again, garbled {sum(r['asked_again'] for r in garbled)}/"
              f"{len(garbled)}, the rest {sum(r['asked_again'] for r in clear)}/{len(clear)}; "
              f"{sum('sense_reply' in r for r in mine)} checked", flush=True)
    if write_to:
        Path(write_to).write_text(json.dumps(rows, indent=1))


# A conversation before the question, on other topics, as a long session's question follows one.
EARLIER = (("What is the tallest mountain in the world?", "Mount Everest is the tallest mountain."),
           ("How far away is the moon?", "About 384,000 kilometres."),
           ("Can you recommend a good book?", "Try To Kill a Mockingbird by Harper Lee."),
           ("What's the weather usually like in London?", "Mild and often rainy."))


def reading_model(config: Config) -> tuple[Any, Any, Any]:
    """The default LLM in this process, set up as the server's engine is, with its prompt builder and a history of four
    exchanges on other topics (EARLIER): for reading words as the server reads them."""
    import os

    from workers.llm.engines.vllm_settings import device_env, engine_kwargs
    from workers.llm.prompting import ConversationHistory, Exchange, PromptBuilder

    os.environ.update(device_env(config))
    from vllm import LLM

    llm = LLM(**engine_kwargs(config, False))
    prompts = PromptBuilder(llm.get_tokenizer(), config.llm.prompt_style, config.llm.persona,
                            config.llm.history_tokens)
    earlier = ConversationHistory(2 * len(EARLIER))
    for question, answer in EARLIER:
        earlier.add(Exchange(question, answer))
    return llm, prompts, earlier


def reading(transcripts: str, write_to: str | None = None) -> None:
    """The server's reading of unsure words, on the transcripts of an `accuracy --json` run: each as a first
    question (the harder case for a follow-up such as "And in Fahrenheit?"), then after four exchanges on other
    topics (where every question in a long session comes). --out keeps the second reading's judgement."""
    from vllm import SamplingParams

    from workers.llm.engines.local_engine import words_logprob
    from workers.llm.prompting import ConversationHistory

    config = Config()
    rule = MisheardRule.from_config(config.asr)
    llm, prompts, earlier = reading_model(config)
    rows = json.loads(Path(transcripts).read_text())
    for context, history in (("first question", ConversationHistory(0)), ("after 4 exchanges", earlier)):
        for row in rows:
            row["read_asked"] = row["asked_again"]
        read = [r for r in rows
                if not r["asked_again"] and rule.worth_a_reading(Transcription(r["heard"], r["logprob"]))]
        texts = [prompts.build(history, r["heard"]) for r in read]
        outs = llm.generate(texts, SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0), use_tqdm=False)
        for row, text, out in zip(read, texts, outs, strict=True):
            found = prompts.words_from_end(text, row["heard"])
            row["words_logprob"] = (words_logprob(out.prompt_logprobs, out.prompt_token_ids, 0, found)
                                    if found else None)
            row["read_asked"] = row["words_logprob"] is not None and rule.implausible(
                Transcription(row["heard"], row["logprob"]), row["words_logprob"])
        print(f"-- {context}", flush=True)
        for voice in dict.fromkeys(r["voice"] for r in rows):
            mine = [r for r in rows if r["voice"] == voice and r["heard"]]
            garbled = [r for r in mine if r["wer"] > GARBLED_WER]
            exact = [r for r in mine if r["wer"] == 0]
            rest = [r for r in mine if 0 < r["wer"] <= GARBLED_WER]
            print(f"{voice:<20} asked again without / with the reading: garbled {asked(garbled, 'asked_again')} / "
                  f"{asked(garbled, 'read_asked')}, exact {asked(exact, 'asked_again')} / "
                  f"{asked(exact, 'read_asked')}, the rest {asked(rest, 'asked_again')} / {asked(rest, 'read_asked')}"
                  f"; {sum(r.get('words_logprob') is not None for r in mine)} read", flush=True)
    if write_to:
        Path(write_to).write_text(json.dumps(rows, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", choices=("speed", "batch", "accuracy", "sense", "reading"),
                        default="speed")
    parser.add_argument("--voices", default="hibari,piper,espeak:en-us",
                        help="accuracy: evaluation voices (scripts/eval/voices.py), '+noise' for 10 dB SNR, "
                        "'@ROOM' in a room of scripts/bench/rooms ('piper@babble_noise10')")
    parser.add_argument("--models", default="whisper-base,whisper-tiny.en", help="each as the first ASR")
    parser.add_argument("--json", help="accuracy: every transcript here; sense, reading: the transcripts to check")
    parser.add_argument("--out", help="sense, reading: the transcripts with the model's judgement here")
    parser.add_argument("--sense_below", default="config",
                        help="sense: the note under this confidence (default asr.sense_check_below; all: every one)")
    args = parser.parse_args()
    models = Config().models_path()
    if args.what == "speed":
        speed(models)
    elif args.what == "batch":
        batch(models)
    elif args.what == "sense":
        below = (Config().asr.sense_check_below if args.sense_below == "config"
                 else None if args.sense_below == "all" else float(args.sense_below))
        sense(args.json, below, args.out)
    elif args.what == "reading":
        reading(args.json, args.out)
    else:
        accuracy(models, args.models.split(","), args.voices.split(","), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
