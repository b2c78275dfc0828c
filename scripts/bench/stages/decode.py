"""Benchmark the LLM engine alone: first token and decode tokens/s with this config (dtype, compilation...).

Usage: .venv/bin/python -m scripts.bench.stages.decode [--config FILE] [--model NAME|DIR] [--dtype DTYPE] [--streams N]
(a config file e.g. with `llm: {enforce_eager: false}`; --streams: N requests at once, as N users asking together,
each stream's first token and decode rate)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

PROMPTS = ["Tell me about the history of Rome in detail.", "Describe a summer day at the beach.",
           "Explain how a car engine works.", "What is the capital of France?"]


async def measure(config, streams: int = 1) -> None:
    from transformers import AutoTokenizer

    from workers.llm.engines.generation import EnginePrompt, SamplingSettings
    from workers.llm.engines.local_engine import LocalVllmEngine
    from workers.llm.prompting import ConversationHistory, PromptBuilder

    started = time.monotonic()
    engine = LocalVllmEngine(config)
    await engine.start(lambda *_: None)
    print(f"{engine.description}: engine loaded in {time.monotonic() - started:.0f} s", flush=True)
    builder = PromptBuilder(AutoTokenizer.from_pretrained(str(config.llm_model_path())), config.llm.prompt_style,
                            config.llm.persona)
    firsts, rates = [], []

    async def one(question: str, request_id: str, kept: bool) -> None:
        prompt = EnginePrompt(builder.build(ConversationHistory(0), question), None, tuple(builder.stop))
        sent, first, tokens = time.monotonic(), None, 0
        async for delta in engine.stream(prompt, SamplingSettings(48, 0.0), request_id):
            tokens += delta.tokens
            first = first if first is not None else time.monotonic() - sent
        total = time.monotonic() - sent
        if kept and tokens > 1:
            firsts.append(first)
            rates.append((tokens - 1) / (total - first))

    for i in range(len(PROMPTS) * 2):  # the first round warms up
        await asyncio.gather(*(one(PROMPTS[(i + k) % len(PROMPTS)], f"bench-{i}-{k}", i > 0) for k in range(streams)))
    print(f"{streams} stream(s) at once: first token p50 {statistics.median(firsts):.3f} s, decode p50 "
          f"{statistics.median(rates):.1f} tokens/s per stream")
    engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="YAML config (default: configs/default.yaml)")
    parser.add_argument("--model", help="a bundled model's name or a model folder (default: the config's choice)")
    parser.add_argument("--dtype", help="override llm.dtype (auto, bfloat16, float32)")
    parser.add_argument("--streams", type=int, default=1, help="requests at once (default 1)")
    args = parser.parse_args()
    from vita.config import load_config
    from workers.llm.engines.vllm_settings import device_env

    config = load_config(args.config)
    if args.model:
        config.llm.model_path = args.model
    if args.dtype:
        config.llm.dtype = args.dtype
    os.environ.update(device_env(config))  # before vLLM is imported: threads, KV cache space
    asyncio.run(measure(config, args.streams))
    return 0


if __name__ == "__main__":
    sys.exit(main())
