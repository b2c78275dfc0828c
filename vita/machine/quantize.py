"""A GGUF LLM straight to an int8 W8A8 checkpoint in the compressed-tensors format, which vLLM's CPU int8 kernel
loads with no flag (oneDNN; AMX's own kernel where the CPU has it).

Why int8: on two cores decoding is bound by reading the weights, and int8 weights are half of bf16's, so the
1.5B model decodes 1.7x faster than in bf16 while answering far more questions right than the 0.5B model
(docs/models.md, "Which LLM serves"). Round-to-nearest per output channel (scale = max|w| / 127) of every attention
and MLP projection and of the output matrix ``lm_head`` (a quarter of what each token reads; int8 there: ~0.1 s less to
the first spoken words, the same answers but one of 102); embeddings, norms and biases stay bf16. Activations are
quantized per token at run time.

The GGUF is dequantized by the ``gguf`` package's reference code, one tensor at a time, in a pool of worker
processes (numpy's dequantizer is single-threaded); each worker writes one safetensors shard.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import multiprocessing
import re
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The Linear layers quantized to int8 (Hugging Face names); everything else is kept in bf16.
INT8_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
INT8_OUTPUT = "lm_head.weight"
INT8_MAX = 127

# GGUF tensor names of llama-family models (qwen2 included: llama.cpp does not permute its q/k) → Hugging Face.
_GGUF_LAYER_PARTS = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
_GGUF_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
_GGUF_LAYER = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
# Architectures whose GGUF tensors map by the tables above without any reshaping.
PLAIN_GGUF_ARCHITECTURES = frozenset({"qwen2"})


_W8A8 = {
    "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False},
    "input_activations": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True},
    "output_activations": None,
}


def compressed_tensors_config(output_matrix: bool = True) -> dict[str, Any]:
    """``config.json``'s quantization_config: int8 weights per channel (static), int8 activations per token
    (dynamic), symmetric: every Linear, and lm_head (vLLM matches it by name, not as a Linear) unless the model has
    no output matrix of its own (tied embeddings)."""
    groups = {"group_0": {**copy.deepcopy(_W8A8), "targets": ["Linear"]}}
    if output_matrix:
        groups["group_1"] = {**copy.deepcopy(_W8A8), "targets": ["lm_head"]}
    return {
        "quant_method": "compressed-tensors",
        "format": "int-quantized",
        "quantization_status": "compressed",
        "config_groups": groups,
        "ignore": [] if output_matrix else ["lm_head"],
    }


def hf_name(gguf_name: str) -> str:
    """The Hugging Face parameter name of a GGUF tensor (ValueError for one these tables do not know)."""
    if gguf_name in _GGUF_TOP:
        return _GGUF_TOP[gguf_name]
    match = _GGUF_LAYER.fullmatch(gguf_name)
    if match and match.group(2) in _GGUF_LAYER_PARTS:
        layer, part, kind = match.groups()
        return f"model.layers.{layer}.{_GGUF_LAYER_PARTS[part]}.{kind}"
    raise ValueError(f"GGUF tensor {gguf_name!r} has no known Hugging Face name")


def is_int8_target(name: str) -> bool:
    """A projection's weight (not its bias) and the output matrix are quantized."""
    if name == INT8_OUTPUT:
        return True
    parts = name.split(".")
    return len(parts) >= 2 and parts[-1] == "weight" and parts[-2] in INT8_PROJECTIONS


def quantize_per_channel(weight: Any) -> tuple[Any, Any]:
    """Symmetric round-to-nearest int8 per output row: (int8 [out, in], float32 scale [out, 1]).
    An all-zero row gets scale 1 so that it stays exactly zero."""
    import torch

    w = weight.to(torch.float32)
    scale = w.abs().amax(dim=1, keepdim=True) / INT8_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def convert_tensor(name: str, weight: Any) -> dict[str, Any]:
    """One dequantized tensor → the checkpoint's tensors for it (int8 weight + scale, or bf16)."""
    import torch

    if is_int8_target(name):
        q, scale = quantize_per_channel(weight)
        return {name: q, name + "_scale": scale}
    return {name: weight.to(torch.bfloat16).contiguous()}


def split_evenly(sizes: dict[str, int], parts: int) -> list[list[str]]:
    """Names in ``parts`` groups of near-equal total size (largest first, each to the lightest group), so each
    worker has about the same dequantizing to do. Deterministic: the same sizes give the same groups."""
    groups: list[list[str]] = [[] for _ in range(parts)]
    loads = [0] * parts
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        lightest = loads.index(min(loads))
        groups[lightest].append(name)
        loads[lightest] += sizes[name]
    return [sorted(g) for g in groups if g]


@dataclass(frozen=True)
class GgufTensor:
    """Where one tensor's bytes lie in the GGUF file: enough for a worker to map it without parsing the
    file's metadata again (that parse, mostly the 150k-token vocabulary, takes ~8 s)."""

    name: str
    quant_type: int
    offset: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def stored_size(self) -> int:
        """Items as stored (bytes of a quantized tensor, floats of an F32 one): roughly its dequantizing work."""
        return math.prod(self.shape)


def _write_shard(gguf_path: str, tensors: list[GgufTensor], out_file: str) -> dict[str, str]:
    """In a worker process: dequantize these GGUF tensors, convert them, save one safetensors file."""
    import numpy as np
    import torch
    from gguf import GGMLQuantizationType, dequantize
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    converted: dict[str, Any] = {}
    for t in tensors:
        raw = np.memmap(gguf_path, dtype=np.dtype(t.dtype), mode="r", offset=t.offset, shape=t.shape)
        weight = torch.from_numpy(np.array(dequantize(raw, GGMLQuantizationType(t.quant_type)), copy=True))
        converted.update(convert_tensor(hf_name(t.name), weight))
        del raw
    save_file(converted, out_file, metadata={"format": "pt"})
    return {name: Path(out_file).name for name in converted}


def sha256_files(paths: Iterable[Path]) -> str:
    """One digest over the files' bytes in the given order."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as src:
            while block := src.read(8 << 20):
                digest.update(block)
    return digest.hexdigest()


def gguf_to_int8(gguf_path: Path, out: Path, workers: int = 2) -> list[Path]:
    """Write an int8 W8A8 checkpoint of this GGUF into ``out`` (config, tokenizer, shards + index); return the
    weight files in index order."""
    from gguf import GGUFReader
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    tensors = {t.name: GgufTensor(t.name, int(t.tensor_type), int(t.data_offset), t.data.dtype.str,
                                  tuple(t.data.shape)) for t in GGUFReader(str(gguf_path)).tensors}
    for name in tensors:
        hf_name(name)  # fail before any work on a tensor these tables do not know
    groups = split_evenly({name: t.stored_size for name, t in tensors.items()}, workers)
    files = [out / f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    # Spawned, not forked: the process building models has CTranslate2 and onnxruntime threads by now.
    with ProcessPoolExecutor(max_workers=len(groups), mp_context=multiprocessing.get_context("spawn")) as pool:
        jobs = [pool.submit(_write_shard, str(gguf_path), [tensors[n] for n in g], str(f))
                for g, f in zip(groups, files, strict=True)]
        # The config and tokenizer are read from the GGUF's metadata while the workers dequantize.
        config = AutoConfig.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        if config.model_type not in PLAIN_GGUF_ARCHITECTURES:
            raise ValueError(f"{gguf_path.name}: model type {config.model_type!r} is not one this converter maps "
                             f"({', '.join(sorted(PLAIN_GGUF_ARCHITECTURES))})")
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        weight_map: dict[str, str] = {}
        for job in jobs:
            weight_map.update(job.result())
    config.dtype = "bfloat16"
    config.tie_word_embeddings = "output.weight" not in tensors  # no output matrix: the embeddings serve as one
    settings = config.to_dict()
    settings["quantization_config"] = compressed_tensors_config(output_matrix="output.weight" in tensors)
    (out / "config.json").write_text(json.dumps(settings, indent=2, sort_keys=True))
    tokenizer.save_pretrained(out)
    GenerationConfig.from_model_config(config).save_pretrained(out)
    total = sum(f.stat().st_size for f in files)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return files
