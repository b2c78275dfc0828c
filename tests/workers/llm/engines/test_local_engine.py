"""How the in-process vLLM engine is configured (no engine starts here; tests/workers/llm/test_llm_worker.py
runs it)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest

from vita.config import Config
from vita.cpu import CpuFeatures
from workers.llm.engines import local_engine
from workers.llm.engines.local_engine import LocalVllmEngine, TextAssembler, words_logprob
from workers.llm.engines.vllm_settings import device_env, engine_kwargs

pytestmark = pytest.mark.fast

AVX2_ONLY = CpuFeatures(model="test", cores=(0, 1), flags=frozenset({"avx2"}))


def test_one_cpu_worker_runs_inside_the_engine_core():
    config = Config()
    assert engine_kwargs(config, False, AVX2_ONLY)["distributed_executor_backend"] == "uni"
    # vLLM's CPU platform turns "uni" back into a process of its own unless this is off.
    assert device_env(config)["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_a_cpu_prefills_a_long_prompt_in_steps_others_can_join():
    config = Config()
    steps = {k: v for k, v in engine_kwargs(config, False, AVX2_ONLY).items() if k in STEP_KEYS}
    assert steps == {"max_num_batched_tokens": 128, "max_num_seqs": 128, "long_prefill_token_threshold": 32}
    assert not STEP_KEYS & set(engine_kwargs(config, True, AVX2_ONLY))  # an image's tokens must fit one step
    config.llm.prefill_chunk_tokens, config.llm.prefill_share_tokens = 64, None
    steps = {k: v for k, v in engine_kwargs(config, False, AVX2_ONLY).items() if k in STEP_KEYS}
    assert steps == {"max_num_batched_tokens": 64, "max_num_seqs": 64, "long_prefill_token_threshold": 32}
    config.llm.prefill_chunk_tokens, config.llm.prefill_share_tokens = 0, 0  # vLLM's own steps
    assert not STEP_KEYS & set(engine_kwargs(config, False, AVX2_ONLY))
    gpu = Config()
    gpu.llm.device = "cuda"
    assert not STEP_KEYS & set(engine_kwargs(gpu, False, AVX2_ONLY))


STEP_KEYS = {"max_num_batched_tokens", "max_num_seqs", "long_prefill_token_threshold"}


def test_the_in_process_engine_gets_one_openmp_thread_a_listed_core():
    """vLLM binds only the worker processes it spawns; in process the thread count is ours to set."""
    config = Config()
    config.llm.omp_threads_bind = str(min(os.sched_getaffinity(0)))
    env = device_env(config)
    assert env["OMP_NUM_THREADS"] == "1" and env["KMP_AFFINITY"] == "disabled"
    config.llm.omp_threads_bind = "all"  # torch's own thread count, as before
    assert "OMP_NUM_THREADS" not in device_env(config)


def test_the_openmp_threads_the_engine_thread_starts_run_on_its_cores_only():
    """What LocalVllmEngine relies on: the OpenMP threads torch starts for the thread that runs the model inherit its
    binding (here two threads bound to one core, so that a thread left unbound shows), the worker's other threads
    keep every core."""
    core = min(os.sched_getaffinity(0))
    script = textwrap.dedent(f"""
        import json, os, threading
        os.environ["OMP_NUM_THREADS"] = "2"
        import torch
        from workers.llm.engines.local_engine import bind_engine_thread
        seen = {{}}
        def engine():
            before = set(os.listdir("/proc/self/task"))
            bind_engine_thread(({core},))
            a = torch.rand(512, 512)
            for _ in range(20):
                a = torch.tanh(a @ a)
            started = set(os.listdir("/proc/self/task")) - before  # (while this thread and its team live)
            seen["started"] = [sorted(os.sched_getaffinity(int(t))) for t in started]
            seen["threads"] = torch.get_num_threads()
        thread = threading.Thread(target=engine)
        thread.start(); thread.join()
        print(json.dumps([seen["threads"], seen["started"], sorted(os.sched_getaffinity(0))]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stderr[-2000:]
    threads, started, main = json.loads(out.stdout.strip().splitlines()[-1])
    assert threads == 2 and started, "torch started no OpenMP thread: nothing was checked"
    assert all(cores == [core] for cores in started), f"threads the engine thread started may run on {started}"
    assert main == sorted(os.sched_getaffinity(0))  # the worker's other threads keep every core


def test_the_engine_thread_is_bound_before_the_engine_is_built(monkeypatch):
    core = min(os.sched_getaffinity(0))
    config = Config()
    config.llm.omp_threads_bind, config.llm.cpu_nice = str(core), 0
    seen = {}

    def building():  # the first call of the engine thread's build: stop it there
        seen["cores"] = sorted(os.sched_getaffinity(0))
        raise RuntimeError("stopped before vLLM")

    monkeypatch.setattr(local_engine, "apply_isa_cap", building)
    engine = LocalVllmEngine(config)
    assert engine.cores == (core,) and f"cores {core};" in engine.description
    with pytest.raises(RuntimeError, match="stopped before vLLM"):
        asyncio.run(engine.start(lambda *_: None))
    assert seen["cores"] == [core]


def test_tensor_parallel_keeps_vllms_worker_processes():
    config = Config()
    config.llm.tensor_parallel_size = 2
    assert "distributed_executor_backend" not in engine_kwargs(config, False, AVX2_ONLY)
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in device_env(config)
    assert "VLLM_CPU_OMP_THREADS_BIND" not in device_env(config)  # 'all': vLLM binds a rank a NUMA node
    config.llm.omp_threads_bind = "0-1|2-3"
    assert device_env(config)["VLLM_CPU_OMP_THREADS_BIND"] == "0-1|2-3"
    assert "OMP_NUM_THREADS" not in device_env(config)


def test_the_words_are_read_where_the_engine_computed_them():
    """vLLM's prompt_logprobs: None first, then {token: logprob} per position; positions found in the prefix cache
    hold whatever the unfilled slot held, so they are never read."""
    ids = [1, 2, 3, 4, 5, 6, 7, 8]
    logprobs = [None] + [{t: -float(t)} for t in ids[1:]]
    # The words are tokens 4..6 and the end of their turn token 7; token 8 comes after it (2 after the words).
    # The opening token 4 is left out: a new topic's first word is surprising, not nonsense
    assert words_logprob(logprobs, ids, 0, (3, 2)) == pytest.approx(-(5 + 6 + 7) / 3)
    # 3 tokens cached: positions 1..3 were not computed (position i is predicted from token i - 1, the first
    # computed one is 4), their slots unfilled; what is read starts at 4
    garbage = [None] + [{t: 1e30} for t in ids[1:4]] + logprobs[4:]
    assert words_logprob(garbage, ids, 3, (3, 2)) == pytest.approx(-(5 + 6 + 7) / 3)
    # Some of what is read cached (the same words after the same history again): only their easiest tokens would
    # be left to read, so they are not read at all
    assert words_logprob(logprobs, ids, 4, (3, 2)) is None
    assert words_logprob(logprobs, ids, 5, (3, 2)) is None
    assert words_logprob(None, ids, 0, (3, 2)) is None
    assert words_logprob(logprobs[:7], ids, 0, (1, 1)) is None  # cut short: one left, too few to judge by
    broken = logprobs[:5] + [{99: -1.0}] + logprobs[6:]  # no entry for the prompt's own token: not read
    assert words_logprob(broken, ids, 0, (3, 2)) is None


class ByteTokenizer:
    """Token ids are UTF-8 bytes: a character may take several tokens, as in byte-level BPE."""

    def decode(self, ids, skip_special_tokens=True, clean_up_tokenization_spaces=False) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


def test_the_reply_is_assembled_from_its_tokens_holding_back_half_a_character():
    text = TextAssembler(ByteTokenizer())
    degrees = list("°".encode())
    assert text.feed(list(b"It is 20")) == "It is 20"
    assert text.feed(degrees[:1]) == ""  # half of the degree sign
    assert text.feed(degrees[1:] + list(b"C.")) == "°C."
    assert text.sent == "It is 20°C."


def test_the_banned_strings_are_every_token_that_holds_one():
    """A reply never writes an ellipsis (prompting.NEVER_WRITTEN): each token holding one gets a bias no logit
    overcomes; nothing to ban (or no token list) is no bias at all."""
    from workers.llm.engines.local_engine import BANNED_BIAS, LocalVllmEngine

    engine = LocalVllmEngine.__new__(LocalVllmEngine)  # (bias_against uses only the token list)
    engine.token_texts, engine.biases = ["Hello", "...", " …", ".", "..\n", "Paris"], {}
    assert engine.bias_against(("…", "..")) == {1: BANNED_BIAS, 2: BANNED_BIAS, 4: BANNED_BIAS}
    assert engine.bias_against(()) is None and engine.bias_against(("zzz",)) is None
    engine.token_texts, engine.biases = [], {}  # (a tokenizer that could not list its tokens)
    assert engine.bias_against(("…", "..")) is None
