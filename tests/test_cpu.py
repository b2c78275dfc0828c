"""CPU feature detection and the engine settings it picks (pure: cpuinfo text in, settings out)."""

from __future__ import annotations

import pytest

from vita.cpu import cpu_dtype, omp_threads_bind, read_cpu

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast

AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse avx2 fma\n"
AVX512_BF16 = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: avx2 avx512f avx512_bf16\n"
AMX = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


def test_flags_and_model_are_read_from_the_first_processor():
    cpu = read_cpu(AVX512_BF16 + "processor\t: 1\nmodel name\t: other\nflags\t\t: none\n")
    assert cpu.model == "Intel Xeon" and "avx512_bf16" in cpu.flags and "none" not in cpu.flags
    assert "avx512_bf16" in cpu.summary() and len(cpu.cores) >= 1


def test_auto_dtype_is_bf16_only_where_the_cpu_has_bf16_instructions():
    assert cpu_dtype("auto", read_cpu(AVX2)) == "float32"
    assert cpu_dtype("auto", read_cpu(AVX512_BF16)) == "bfloat16"
    assert cpu_dtype("auto", read_cpu(AMX)) == "bfloat16"
    assert cpu_dtype("bfloat16", read_cpu(AVX2)) == "bfloat16"  # an explicit choice stands


def test_thread_binding_all_lists_every_allowed_core_and_vllm_leaves_it_alone():
    cpu = read_cpu(AVX2)
    cores = omp_threads_bind("all", cpu).split(",")
    assert cores and all(c.isdigit() for c in cores)
    assert omp_threads_bind("vllm", cpu) is None
    assert omp_threads_bind("0-1", cpu) == "0-1"
