"""What vLLM is started with on this machine: the environment it must see before it is imported (device, threads,
the ISA cap), the cores its engine thread runs on, its engine arguments, and its prefill in steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vita.config import Config
from vita.cpu import (
    CpuFeatures,
    cpu_dtype,
    engine_bind,
    engine_cores,
    int8_kernel,
    isa_cap_env,
    omp_threads_bind,
    read_cpu,
)
from workers.llm.engines.omni import read_model_config


def device_env(config: Config) -> dict[str, str]:
    """The LLM process's environment for its engine (threads, KV cache space, ISA cap, offline hubs): set before
    vLLM, torch or CTranslate2 are imported."""
    llm = config.llm
    env = {"VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if llm.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["VLLM_CPU_KVCACHE_SPACE"] = str(llm.kv_cache_space_gib)
        env.update(isa_cap_env())  # read before torch / CTranslate2 are imported
        if llm.tensor_parallel_size > 1:
            bind = omp_threads_bind(llm.omp_threads_bind)
            if bind:
                env["VLLM_CPU_OMP_THREADS_BIND"] = bind
        else:
            # The engine core runs in this process, in local_engine's engine thread, with its one model worker
            # ("uni" executor, see local_engine.engine_kwargs): no process to spawn for either (each one's
            # imports cost ~10 s of every start), and more tokens/s.
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            # vLLM binds only the worker processes it spawns, so here the binding is ours: one OpenMP thread a
            # core (read when torch is imported), on those cores (the engine thread's affinity, LocalVllmEngine).
            cores = in_process_cores(config, read_cpu())
            if cores is not None:
                env["OMP_NUM_THREADS"] = str(len(cores))
                env["KMP_AFFINITY"] = "disabled"  # a preloaded Intel OpenMP keeps the thread's binding as it is
    elif llm.visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = llm.visible_devices
    return env


def in_process_cores(config: Config, cpu: CpuFeatures) -> tuple[int, ...] | None:
    """The cores the in-process engine's OpenMP threads are bound to, one a core (llm.omp_threads_bind, 'auto'
    resolved for the seats); None: unbound."""
    return engine_cores(engine_bind(config.llm.omp_threads_bind, config.server.max_users, cpu), cpu)


def engine_kwargs(config: Config, omni: bool, cpu: CpuFeatures | None = None) -> dict[str, Any]:
    """AsyncEngineArgs for this config; omni models also get their per-prompt media limits.

    On a CPU, dtype 'auto' follows the CPU (bf16 only where measured faster: AMX). A 32-token KV block lets
    prefix caching keep the persona's tokens between turns (with vLLM's 128 the short fixed prefix never fills
    a block).
    """
    llm = config.llm
    dtype = cpu_dtype(llm.dtype, cpu or read_cpu()) if llm.device == "cpu" else llm.dtype
    kwargs: dict[str, Any] = dict(
        model=str(config.llm_model_path()), dtype=dtype, max_model_len=llm.max_model_len,
        enforce_eager=llm.enforce_eager, tensor_parallel_size=llm.tensor_parallel_size, disable_log_stats=True,
        block_size=llm.block_size, enable_prefix_caching=llm.prefix_caching,
    )
    kwargs.update(prefill_steps(config, omni))
    if llm.device == "cpu" and llm.tensor_parallel_size == 1:
        kwargs["distributed_executor_backend"] = "uni"  # the model runs in the engine core's process
    if llm.load_format != "auto":
        kwargs["load_format"] = llm.load_format
    if llm.device == "cuda":
        kwargs["gpu_memory_utilization"] = llm.gpu_memory_utilization
    if omni:
        kwargs["limit_mm_per_prompt"] = {"audio": llm.limit_audios_per_prompt,
                                         "image": llm.limit_images_per_prompt}
    return kwargs


def prefill_steps(config: Config, omni: bool) -> dict[str, Any]:
    """The engine's step limits for prompts (LlmConfig.prefill_steps); vLLM's own for a model that hears or sees
    (an image's or an utterance's tokens must fit one step)."""
    if omni:
        return {}
    chunk, share = config.llm.prefill_steps()
    kwargs: dict[str, Any] = {}
    if chunk:
        kwargs["max_num_batched_tokens"] = chunk
        kwargs["max_num_seqs"] = min(128, chunk)  # vLLM: at most one sequence a token of the step
    if share:
        kwargs["long_prefill_token_threshold"] = share
    return kwargs


def weights_description(model_dir: Path, dtype: str, cpu: CpuFeatures) -> str:
    """What the weights are and which matmul kernel runs them: int8 W8A8 models name vLLM's int8 path."""
    quant = read_model_config(model_dir).get("quantization_config") or {}
    if quant.get("quant_method") == "compressed-tensors" and quant.get("format") == "int-quantized":
        return f"int8 W8A8 weights, {int8_kernel(cpu)}, {dtype} activations"
    return f"{dtype} weights"
