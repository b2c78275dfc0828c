"""How the in-process vLLM engine is configured (no engine starts here; tests/workers/test_llm_worker.py runs it)."""

from __future__ import annotations

import pytest

from vita.config import Config
from vita.machine.cpu import CpuFeatures
from workers.local_engine import device_env, engine_kwargs, words_logprob

pytestmark = pytest.mark.fast

AVX2_ONLY = CpuFeatures(model="test", cores=(0, 1), flags=frozenset({"avx2"}))


def test_one_cpu_worker_runs_inside_the_engine_core():
    config = Config()
    assert engine_kwargs(config, False, AVX2_ONLY)["distributed_executor_backend"] == "uni"
    # vLLM's CPU platform turns "uni" back into a process of its own unless this is off.
    assert device_env(config)["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_tensor_parallel_keeps_vllms_worker_processes():
    config = Config()
    config.llm.tensor_parallel_size = 2
    assert "distributed_executor_backend" not in engine_kwargs(config, False, AVX2_ONLY)
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in device_env(config)


def test_the_words_are_read_from_the_prompts_log_probabilities():
    """vLLM's prompt_logprobs: None first, then {token: logprob} per position."""
    ids = [1, 2, 3, 4, 5, 6, 7, 8]
    logprobs = [None] + [{t: -float(t)} for t in ids[1:]]
    # The words are tokens 4..6 and the end of their turn token 7; token 8 comes after it (2 after the words).
    assert words_logprob(logprobs, ids, (3, 2)) == pytest.approx(-(4 + 5 + 6 + 7) / 4)
    assert words_logprob(logprobs, ids, (1, 1)) == pytest.approx(-(7 + 8) / 2)
    assert words_logprob(logprobs[:7], ids, (1, 1)) is None  # cut short: one left, too few to judge by
    assert words_logprob(None, ids, (3, 2)) is None
    broken = logprobs[:5] + [{99: -1.0}] + logprobs[6:]  # no entry for the prompt's own token: not read
    assert words_logprob(broken, ids, (3, 2)) is None
