"""Set-up's proof that a built LLM folder really serves: vLLM loads it with the kernels this CPU will use and it
answers one question right. Run in a process of its own (vLLM's settings are read from the environment at import):
``python -m vita.llm_check MODEL_DIR``; exit status 0 = it answered, 1 = it did not (the reason on stderr).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

QUESTION = "What is the capital of France?"
EXPECTED = "paris"


def check_env(cpu_cores: tuple[int, ...], gpu: bool = False) -> dict[str, str]:
    """vLLM offline; on the CPU (setup's VITA_TARGET=cpu) in this process, with a small KV cache and every core this
    process may use; on a GPU machine vLLM's own defaults."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    if not gpu:
        env.update(CUDA_VISIBLE_DEVICES="", VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
                   VLLM_CPU_OMP_THREADS_BIND=",".join(map(str, cpu_cores)))
    return env


def answer(model_dir: Path) -> str:
    from vita.config import LlmConfig
    from vita.cpu import apply_isa_cap, cpu_dtype, read_cpu

    cpu = read_cpu()
    gpu = os.environ.get("VITA_TARGET") == "gpu"  # set by scripts/setup.sh: the CUDA build of vLLM is installed
    os.environ.update(check_env(cpu.cores, gpu))
    apply_isa_cap()
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(model_dir), dtype="auto" if gpu else cpu_dtype("auto", cpu), max_model_len=512,
              enforce_eager=True, disable_log_stats=True, **({} if gpu else {"block_size": 32}))
    messages = [{"role": "system", "content": LlmConfig().persona}, {"role": "user", "content": QUESTION}]
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
