"""How the in-process vLLM engine is configured (no engine starts here; tests/workers/test_llm_worker.py runs it)."""

from __future__ import annotations

import pytest

from vita.config import Config
from vita.machine.cpu import CpuFeatures
from workers.local_engine import device_env, engine_kwargs

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
