"""vLLM's async engine inside the LLM worker process: the default, and the GPU box's 7B path."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

from vita.cpu import CpuFeatures, cpu_dtype, read_cpu
from vita.messages import WorkerState
from workers.generation import Delta, EnginePrompt, SamplingSettings


def engine_kwargs(config: Any, omni: bool, cpu: CpuFeatures | None = None) -> dict[str, Any]:
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


def vllm_input(prompt: EnginePrompt) -> Any:
    """A plain string, or vLLM's multi-modal prompt dict (audio as (array, rate) pairs, images as PIL)."""
    if not prompt.has_media:
        return prompt.text
    data: dict[str, list] = {}
    if prompt.audio:
        data["audio"] = list(prompt.audio)
    if prompt.images:
        from PIL import Image

        data["image"] = [Image.fromarray(image) for image in prompt.images]
    return {"prompt": prompt.text, "multi_modal_data": data}


class LocalVllmEngine:
    def __init__(self, config: Any, omni: bool = False):
        self.config = config
        self.omni = omni
        self.engine = None
        self.cpu = read_cpu()
        self.kwargs = engine_kwargs(config, omni, self.cpu)
        self.description = f"vLLM in process ({config.llm_model_path().name}, {self.kwargs['dtype']}"
        if config.llm.device == "cpu":
            threads = os.environ.get("VLLM_CPU_OMP_THREADS_BIND") or "vLLM's default"
            self.description += f", cores {threads}; CPU {self.cpu.summary()}"
        self.description += ")"
        if config.llm.load_format == "dummy":
            self.description += " with RANDOM weights (load_format dummy): replies are noise"

    async def start(self, report: Any) -> None:
        report(WorkerState.LOADING, f"starting vLLM engine on {self.config.llm_model_path()} "
                                    "(about a minute on CPU)")
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**self.kwargs))

    async def stream(self, prompt: EnginePrompt, sampling: SamplingSettings,
                     request_id: str) -> AsyncIterator[Delta]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(temperature=sampling.temperature, max_tokens=sampling.max_tokens,
                                stop=list(prompt.stop), output_kind=RequestOutputKind.DELTA)
        first = True
        async for output in self.engine.generate(vllm_input(prompt), params, request_id):
            completion = output.outputs[0]
            prompt_tokens = len(output.prompt_token_ids or ()) if first else None
            first = False
            yield Delta(completion.text, len(completion.token_ids), prompt_tokens)

    async def abort(self, request_id: str) -> None:
        if self.engine is not None:
            await self.engine.abort(request_id)

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None
