"""What this CPU can do, read once at start: machines of one kind differ (most AVX2-only, some AVX512-BF16/AMX),
and the fastest LLM dtype depends on it (bf16 pays where the CPU has bf16 instructions; on AVX2 it is emulated).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuFeatures:
    model: str
    cores: tuple[int, ...]  # the core ids this process may run on
    flags: frozenset[str]

    @property
    def fast_bf16(self) -> bool:
        """bf16 beats fp32 for the LLM where the CPU has bf16 instructions. With AMX: first token 0.09 s vs 0.19 s
        (NOTES §6). With AVX512-BF16 alone (2026-11-23, Qwen 0.5B, 2 cores): decode 16.3 vs 11.5 tokens/s, voice-
        to-voice p50 0.995 vs 1.120 s in fresh sessions and 1.17 s either way in a 46-turn session (prefill is a
        little slower in bf16 there; the history stays in the prefix cache), answers the same. On AVX2 bf16 is
        emulated (first token 0.59 s): float32."""
        return "amx_bf16" in self.flags or "avx512_bf16" in self.flags

    def summary(self) -> str:
        isa = [name for name in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if name in self.flags]
        return f"{self.model}, {len(self.cores)} cores, {' '.join(isa) or 'no AVX2'}"


# VITA_MAX_CPU_ISA=avx2 makes an AVX512 machine choose and run as an AVX2-only one would (measuring the AVX2
# branch without such a machine): the flags below are hidden from every choice here, vLLM loads its AVX2 library,
# and torch and oneDNN stop at AVX2 (apply_isa_cap).
ISA_CAP_ENV = "VITA_MAX_CPU_ISA"
_ABOVE_AVX2 = ("avx512", "amx")


def read_cpu(cpuinfo: str | None = None) -> CpuFeatures:
    """Parse /proc/cpuinfo (or the given text): the first processor's model name and flags (capped by
    VITA_MAX_CPU_ISA=avx2 when it is set)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model, flags = "unknown CPU", frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown CPU":
            model = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    if os.environ.get(ISA_CAP_ENV, "").lower() == "avx2":
        flags = frozenset(f for f in flags if not f.startswith(_ABOVE_AVX2))
        model += " (capped at AVX2 by VITA_MAX_CPU_ISA)"
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    return CpuFeatures(model, tuple(sorted(cores)), flags)


def isa_cap_env() -> dict[str, str]:
    """With VITA_MAX_CPU_ISA=avx2: the variables that stop torch, oneDNN and CTranslate2 at AVX2 (each reads its
    own before it is imported); empty otherwise."""
    if os.environ.get(ISA_CAP_ENV, "").lower() != "avx2":
        return {}
    return {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2"}


def apply_isa_cap() -> None:
    """Before vLLM is imported: with VITA_MAX_CPU_ISA=avx2, make torch, oneDNN and vLLM's library choice stop at
    AVX2 (vLLM picks _C, _C_AVX512 or _C_AVX2 by torch's own checks, so those are answered no)."""
    capped = isa_cap_env()
    if not capped:
        return
    os.environ.update(capped)
    import torch

    for check in ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_avx512_vnni_supported",
                  "_is_amx_tile_supported", "_is_amx_fp16_supported"):
        if hasattr(torch.cpu, check):
            setattr(torch.cpu, check, lambda: False)


def choose_llm(cpu: CpuFeatures) -> tuple[str, str]:
    """llm.model 'auto': the bundled model this CPU answers best with at conversational speed, and the measured
    reason (2026-11-24, 2-core AMD EPYC Zen 4; the AVX2 branch with VITA_MAX_CPU_ISA=avx2; docs/models.md "Which LLM
    serves" says why, with links to the tables and commands)."""
    if "amx_int8" in cpu.flags or "avx512_vnni" in cpu.flags:
        return ("qwen2.5-coder-1.5b-instruct-int8",
                "the CPU has int8 instructions (AVX512-VNNI/AMX): the 1.5B model in int8 decodes 1.7x faster than "
                "in bf16 and answers 92-94 % of the report set (0.5B model: 82-86 %), 85-89 % of the held-out set "
                "(0.5B: 57 %)")
    return ("qwen2.5-coder-0.5b-instruct",
            "the CPU has no AVX512-VNNI or AMX: vLLM's int8 path decodes at 1.3 tokens/s there, and the 1.5B model "
            "in float32 (3.9 tokens/s) doubles voice-to-voice (2.4 against 1.2 s p50 for the 0.5B model)")


def int8_kernel(cpu: CpuFeatures) -> str:
    """Which of vLLM's CPU int8 matmuls an int8 W8A8 model runs on here (vLLM decides the same way)."""
    if "amx_int8" in cpu.flags and "amx_tile" in cpu.flags:
        return "AMX int8 (vLLM's sgl kernel)"
    if "avx512_vnni" in cpu.flags:
        return "oneDNN int8 with AVX512-VNNI"
    return "oneDNN int8 with AVX2"


def cpu_dtype(configured: str, cpu: CpuFeatures) -> str:
    """llm.dtype 'auto' on a CPU: bfloat16 where it is measured faster (AVX512-BF16 or AMX), else float32."""
    if configured != "auto":
        return configured
    return "bfloat16" if cpu.fast_bf16 else "float32"


UNBOUND = ("all", "vllm", "auto")  # omp_threads_bind values that bind nothing of ours as they are (see engine_bind,
# engine_cores, omp_threads_bind)


def engine_bind(configured: str, seats: int | None, cpu: CpuFeatures) -> str:
    """What omp_threads_bind 'auto' means here: every core ('all'), unless the server seats more users than it has
    cores; then every core but the first, which is left to the voice, ASR, the end-of-turn model and the front. An
    OpenMP step waits for its slowest thread, and with several users at once the others preempt one of the engine's
    threads all the time: on a 2-core Zen 4, four users asking at once got voice-to-voice p50 2.61 s with the engine
    on one core against 3.05 s on both (decoding 4.5 against 3.5 tokens/s), one user alone 1.13 against 1.04 s.
    Any other value is returned as it is."""
    if configured != "auto":
        return configured
    if seats is None or len(cpu.cores) < 2 or seats <= len(cpu.cores):
        return "all"
    return ",".join(map(str, cpu.cores[1:]))


def omp_threads_bind(configured: str) -> str | None:
    """VLLM_CPU_OMP_THREADS_BIND, read by the engine processes vLLM spawns (tensor_parallel_size over 1), one core
    list a rank ('0-1|2-3'): 'all' and 'vllm' leave vLLM its own binding (a rank a NUMA node); a list is passed
    through."""
    return None if configured in UNBOUND else configured


def engine_cores(configured: str, cpu: CpuFeatures) -> tuple[int, ...] | None:
    """The cores a listed omp_threads_bind puts the in-process engine on, one OpenMP thread a core; None for 'all'
    and 'vllm': torch's own thread count, unbound, as it always was in process. vLLM applies
    VLLM_CPU_OMP_THREADS_BIND only to worker processes it spawns: without this, an engine stepped in the LLM
    worker's own thread ran on every core whatever the list. Raises ValueError, saying why, for a list that is not
    one or that names no core this process may use."""
    if configured in UNBOUND:
        return None
    cores: set[int] = set()
    for part in configured.split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise ValueError(f"{configured!r} is not a core list such as 0-1 or 0,2")
        cores.update(range(int(first), int(last or first) + 1))
    usable = tuple(sorted(cores & set(cpu.cores)))
    if not usable:
        raise ValueError(f"{configured!r} names none of the cores this process may use "
                         f"({','.join(map(str, cpu.cores))})")
    return usable


def name_os_thread(name: str) -> None:
    """Give the calling thread its name where the OS shows it (/proc/PID/task/TID/comm, top -H), so the CPU
    budget can say which stage holds each core (scripts/bench/latency.py); threads it starts later (vLLM's OpenMP
    threads, CTranslate2's) inherit it. Linux only; elsewhere nothing happens."""
    with contextlib.suppress(Exception):  # only a label: never worth failing the thread it names
        ctypes.CDLL(None, use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def trim_heap() -> None:
    """Give the heap's free pages back to the OS (glibc keeps what a burst of large messages left free: an abuser's
    flood of 200 KB JSON audio kept the front ~40 MB bigger after it left). Elsewhere nothing happens."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value


def keep_large_buffers_off_the_heap() -> None:
    """Pin glibc's mmap threshold: a buffer over it gets pages of its own, handed back the moment it is freed.
    Left dynamic, glibc raises the threshold (up to 32 MB) after the first large buffer is freed, and every later
    multi-megabyte message is carved from the heap, where the small objects around it keep the pages from going
    back: a client sending 2 MB Realtime events left the front ~20 MB bigger for good. Elsewhere nothing happens."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").mallopt(-3, MMAP_THRESHOLD_BYTES)  # M_MMAP_THRESHOLD


def set_nice(nice: int) -> str:
    """Run the calling thread, and every thread and process it starts from now on, at ``nice`` (call it before
    those start: Linux keeps a nice value per thread, and new threads and processes inherit their creator's).
    Raising priority needs root or CAP_SYS_NICE; without, the current value stays. Returns what happened, for
    the start-up log."""
    if not hasattr(os, "setpriority"):
        return "priority unchanged (not supported here)"
    current = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError:
        return (f"running at nice {current}: nice {nice} needs root or CAP_SYS_NICE (the server's stages then share "
                "the CPU equally with other programs)")
    return f"running at nice {nice}" + (" (before other programs on this machine)" if nice < 0 else "")
