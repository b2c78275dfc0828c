"""Benchmark the engine's prefill steps: a short question asked while another session's long prompt is prefilled.

Usage: .venv/bin/python -m scripts.bench.stages.prefill_steps [--config FILE] [--chunk N] [--share N] [--rounds N]
(--chunk 0 --share 0: vLLM's own steps, a whole prompt at once)

Prints the first token and the whole reply of: a short question alone, a ~720-token prompt alone (uncached: each
round opens it differently), and the short question asked 0.5 s after the long prompt started.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

LONG = "Please read this carefully. " + " ".join(f"Item {i} is a small blue box with a red lid and a label."
                                                 for i in range(40))


async def measure(config, rounds: int) -> None:
    from transformers import AutoTokenizer

    from workers.llm.engines.generation import EnginePrompt, SamplingSettings
    from workers.llm.engines.local_engine import LocalVllmEngine
    from workers.llm.prompting import ConversationHistory, PromptBuilder

    engine = LocalVllmEngine(config)
    await engine.start(lambda *_: None)
    print(f"{engine.description}; steps: {engine.kwargs.get('max_num_batched_tokens', 'vLLM default')} tokens, "
          f"a long prompt's share beside others {engine.kwargs.get('long_prefill_token_threshold', 'all')}",
          flush=True)
    builder = PromptBuilder(AutoTokenizer.from_pretrained(str(config.llm_model_path())), config.llm.prompt_style,
                            config.llm.persona)

    async def ask(question: str, request_id: str, tokens: int = 24) -> tuple[float, float]:
        sent, first = time.monotonic(), None
        prompt = EnginePrompt(builder.build(ConversationHistory(0), question))
        async for _ in engine.stream(prompt, SamplingSettings(tokens, 0.0), request_id):
            first = first if first is not None else time.monotonic() - sent
        return first or 0.0, time.monotonic() - sent

    await ask("Hello there, warm up.", "warm-0")
    await ask("Warm up. " + LONG, "warm-1", 2)
    rows: dict[str, list[tuple[float, float]]] = {}
    for k in range(rounds):
        rows.setdefault("short alone", []).append(await ask(f"What is the capital of country number {k}?", f"s{k}"))
        rows.setdefault("long alone", []).append(await ask(f"Case {k} alone. " + LONG, f"l{k}", 4))
        long = asyncio.create_task(ask(f"Case {k} beside. " + LONG, f"L{k}", 4))
        await asyncio.sleep(0.5)
        rows.setdefault("short beside the long", []).append(await ask(f"Which river runs through city {k}?",
                                                                      f"S{k}"))
        rows.setdefault("the long beside the short", []).append(await long)
    for name, values in rows.items():
        print(f"{name:26} first token p50 {statistics.median(v[0] for v in values):.2f} s, whole reply p50 "
              f"{statistics.median(v[1] for v in values):.2f} s ({len(values)} rounds)", flush=True)
    engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="YAML config (default: configs/default.yaml)")
    parser.add_argument("--chunk", type=int, help="llm.prefill_chunk_tokens (0: vLLM's own)")
    parser.add_argument("--share", type=int, help="llm.prefill_share_tokens (0: no cap)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from vita.config import load_config
    from workers.llm.engines.vllm_settings import device_env

    config = load_config(args.config)
    if args.chunk is not None:
        config.llm.prefill_chunk_tokens = args.chunk
    if args.share is not None:
        config.llm.prefill_share_tokens = args.share
    from vita.config_checks import validate

    validate(config)  # (a step vLLM refuses is said here, by its option's name)
    os.environ.update(device_env(config))  # before vLLM is imported: threads, KV cache space
    asyncio.run(measure(config, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
