"""Set-up's proof that a built LLM folder really serves: vLLM loads it with the server's own engine settings and
this CPU's kernels, and it answers one question right. Run in a process of its own (vLLM reads its settings from
the environment at import): ``python -m workers.llm.engines.llm_check MODEL_DIR``; exit status 0 = it answered, 1 =
it did not (the reason on stderr).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

QUESTION = "What is the capital of France?"
EXPECTED = "paris"


def answer(model_dir: Path) -> str:
    from vita.config import Config
    from vita.cpu import apply_isa_cap
    from workers.llm.engines.vllm_settings import device_env, engine_kwargs

    config = Config()
    config.llm.model_path = str(model_dir)
    if os.environ.get("VITA_TARGET") == "gpu":  # set by scripts/setup.sh: the CUDA build of vLLM is installed
        config.llm.device, config.llm.dtype = "cuda", "auto"
    os.environ.update(device_env(config))  # exactly the LLM worker's environment, before vLLM is imported
    apply_isa_cap()
    from vllm import LLM, SamplingParams

    llm = LLM(**engine_kwargs(config, omni=False))
    messages = [{"role": "system", "content": config.llm.persona}, {"role": "user", "content": QUESTION}]
    prompt = llm.get_tokenizer().apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    out = llm.generate([prompt], SamplingParams(max_tokens=24, temperature=0.0), use_tqdm=False)
    return out[0].outputs[0].text


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    started = time.monotonic()
    reply = answer(Path(argv[0]))
    if EXPECTED not in reply.lower():
        print(f"{QUESTION!r} was answered {reply!r}: no {EXPECTED!r} in it", file=sys.stderr)
        return 1
    print(f"answer check ok in {time.monotonic() - started:.0f} s: {QUESTION!r} -> {reply.strip()!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
