"""CPU feature detection and the engine settings it picks (pure: cpuinfo text in, settings out)."""

from __future__ import annotations

import dataclasses

import pytest

from vita.cpu import (
    ISA_CAP_ENV,
    choose_llm,
    cpu_dtype,
    engine_bind,
    engine_cores,
    int8_kernel,
    omp_threads_bind,
    read_cpu,
)
from vita.machine.models import LLM_NAMES

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


def test_vllms_own_processes_get_a_listed_binding_and_otherwise_their_own():
    assert omp_threads_bind("all") is None and omp_threads_bind("vllm") is None
    assert omp_threads_bind("0-1|2-3") == "0-1|2-3"


def test_auto_gives_the_engine_every_core_unless_more_users_are_seated_than_there_are_cores():
    two = dataclasses.replace(read_cpu(AVX2), cores=(0, 1))
    assert engine_bind("auto", 2, two) == "all" and engine_bind("auto", None, two) == "all"  # (auto seats: all)
    assert engine_bind("auto", 4, two) == "1"  # the first core left to the voice, ASR and the front
    assert engine_cores(engine_bind("auto", 4, two), two) == (1,)
    four = dataclasses.replace(two, cores=(0, 1, 2, 3))
    assert engine_bind("auto", 4, four) == "all" and engine_bind("auto", 6, four) == "1,2,3"
    assert engine_bind("auto", 8, dataclasses.replace(two, cores=(0,))) == "all"  # one core: nothing to leave
    assert engine_bind("0,2", 8, four) == "0,2"  # a list is the operator's
    assert omp_threads_bind("auto") is None  # (vLLM's own processes: their own binding)


def test_the_engines_cores_are_the_listed_ones_this_process_may_use():
    cpu = dataclasses.replace(read_cpu(AVX2), cores=(0, 1, 2, 3))
    assert engine_cores("all", cpu) is None  # torch's own thread count, as always in process
    assert engine_cores("1", cpu) == (1,)
    assert engine_cores("0,2-3", cpu) == (0, 2, 3)
    assert engine_cores("1-5", cpu) == (1, 2, 3)  # cores this process may not use are left out
    assert engine_cores("vllm", cpu) is None
    with pytest.raises(ValueError, match="none of the cores"):
        engine_cores("6-7", cpu)
    with pytest.raises(ValueError, match="not a core list"):
        engine_cores("first", cpu)


VNNI = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: avx2 avx512f avx512_bf16 avx512_vnni\n"
AMX_INT8 = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: avx2 avx512f avx512_vnni amx_tile amx_int8\n"


def test_the_int8_kernel_named_is_the_one_vllm_takes_on_that_cpu():
    assert int8_kernel(read_cpu(AMX_INT8)).startswith("AMX")
    assert "AVX512-VNNI" in int8_kernel(read_cpu(VNNI))
    assert "AVX2" in int8_kernel(read_cpu(AVX2))


def test_auto_model_is_the_int8_1_5b_with_int8_instructions_and_the_0_5b_without():
    for text in (VNNI, AMX_INT8):
        name, why = choose_llm(read_cpu(text))
        assert name == "qwen2.5-coder-1.5b-instruct-int8" and "int8" in why and name in LLM_NAMES
    for text in (AVX2, AVX512_BF16):  # no VNNI: vLLM's int8 path would crawl
        name, why = choose_llm(read_cpu(text))
        assert name == "qwen2.5-coder-0.5b-instruct" and "voice-to-voice" in why and name in LLM_NAMES


def test_an_isa_cap_hides_everything_above_avx2(monkeypatch):
    monkeypatch.setenv(ISA_CAP_ENV, "avx2")
    capped = read_cpu(AMX_INT8)
    assert "avx2" in capped.flags and not any(f.startswith(("avx512", "amx")) for f in capped.flags)
    assert cpu_dtype("auto", capped) == "float32" and "AVX2" in int8_kernel(capped)
    assert choose_llm(capped) == choose_llm(read_cpu(AVX2))
    assert "capped" in capped.model
