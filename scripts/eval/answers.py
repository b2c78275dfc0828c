"""Answer evaluation: are the assistant's replies right, short, and free of copies of earlier answers?

Typed (the LLM alone, through the project's own PromptBuilder, history and reply budget, in-process vLLM):
    .venv/bin/python -m scripts.eval.answers typed [--model NAME|DIR] [--set report|tune|all]
Spoken (the full server over the socket, one long session per voice, camera questions left out: no face
can be synthesised for the Haar cue; they are measured typed):
    .venv/bin/python -m scripts.eval.answers spoken [--url URL] [--voices hibari,espeak] [--lines wide,phone]
        [-- server flags]      (phone: each question as a phone line carries it, 8 kHz G.711 μ-law)

Questions live in scripts/eval/questions.json; each says which words make it right. 'tune' questions may be
used to choose prompts and settings, 'report' ones only to report. Prints right %, heard % (spoken: the
question's key words in the transcript), mean words, replies over 25 words, repeats of an earlier answer to
a different question, first-token and voice-to-voice times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from scripts.bench.measure import answered_turn, open_mic, send_speech
from scripts.eval.questions import chains, load_questions
from scripts.eval.scoring import Result, print_results, score
from scripts.eval.voices import synthesize


# --- typed: the LLM alone -------------------------------------------------------------------------------------
async def typed_run(config, questions: list[dict]) -> dict[str, list[Result]]:
    from transformers import AutoTokenizer

    from workers.llm.engines.generation import EnginePrompt, SamplingSettings
    from workers.llm.engines.local_engine import LocalVllmEngine
    from workers.llm.prompting import NEVER_WRITTEN, ConversationHistory, Exchange, PromptBuilder
    from workers.llm.speech_pieces import ReplyShaper

    llm = config.llm
    engine = LocalVllmEngine(config)
    await engine.start(lambda *a: None)
    print(f"engine: {engine.description}", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(str(config.llm_model_path()))
    prompts = PromptBuilder(tokenizer, llm.prompt_style, llm.persona, llm.history_tokens)
    sampling = SamplingSettings(llm.max_tokens, llm.temperature, banned=NEVER_WRITTEN)  # (as the server's)

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

def spoken_run(url: str, voice: str, questions: list[dict], line: str = "wide") -> list[Result]:
    """line "phone": each question as a phone line carries it (8 kHz G.711 μ-law), what the server's ASR hears of a
    call; "wide": the page's 16 kHz."""
    from tests.harness.client import RecordingClient
    from tests.harness.phone_client import as_heard_over_phone

    client = RecordingClient(url).connect()
    results = []
    try:
        for group in chains(questions):
            for q in group:
                speech = synthesize(voice, q["q"])
                if line == "phone":
                    speech = as_heard_over_phone(speech)
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
                                    for k in ("asr_s", "first_piece_s", "asr_logprob", "asr_beam", "asked_again")}
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
    parser.add_argument("--lines", default="wide", help="spoken: comma-separated: wide (16 kHz), phone (8 kHz μ-law)")
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
        from workers.llm.engines.vllm_settings import device_env

        os.environ.update(device_env(config))
        runs = asyncio.run(typed_run(config, questions))
        report["model"] = config.llm_model_path().name
        for name, results in runs.items():
            score(results, by_id)
            report[name] = {"summary": print_results(f"typed {name} ({report['model']})", results),
                            "results": [asdict(r) for r in results]}
    else:
        from tests.harness.server import start_server, stop_server, wait_ready

        spoken_qs = [q for q in questions if "camera" not in q]
        server = None
        url = args.url
        if url is None:
            server = start_server(Path(tempfile.mkdtemp()), "--timeout", "3600", *args.server_args)
            wait_ready(server)
            url = server.url
        try:
            for line in args.lines.split(","):
                for voice in args.voices.split(","):
                    results = spoken_run(url, voice, spoken_qs, line)
                    score(results, by_id)
                    name = voice if line == "wide" else f"{voice}, {line} line"
                    report[name] = {"summary": print_results(f"spoken, one session, voice {name}", results),
                                    "results": [asdict(r) for r in results]}
        finally:
            if server is not None:
                stop_server(server)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
