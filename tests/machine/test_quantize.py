"""int8 W8A8 conversion (pure: small tensors in, tensors out; the real build is checked in test_models)."""

from __future__ import annotations

import pytest
import torch

from vita.machine.quantize import (
    compressed_tensors_config,
    convert_tensor,
    hf_name,
    is_int8_target,
    quantize_per_channel,
    split_evenly,
)

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def test_each_row_is_rounded_to_the_nearest_of_255_levels_of_its_own_scale():
    torch.manual_seed(0)
    w = torch.randn(16, 64) * torch.logspace(-3, 1, 16).unsqueeze(1)  # rows of very different magnitudes
    q, scale = quantize_per_channel(w.to(torch.bfloat16))
    assert q.dtype == torch.int8 and q.shape == w.shape and scale.shape == (16, 1) and scale.dtype == torch.float32
    assert q.abs().max(dim=1).values.tolist() == [127] * 16  # each row's largest weight uses the full range
    exact = w.to(torch.bfloat16).float()
    assert torch.all((q.float() * scale - exact).abs() <= scale / 2 + 1e-7)  # nearest level, per row


def test_an_all_zero_row_stays_exactly_zero():
    w = torch.zeros(2, 8)
    w[1, 3] = -0.5
    q, scale = quantize_per_channel(w)
    assert q[0].tolist() == [0] * 8 and torch.isfinite(scale).all()
    assert q[1, 3].item() == -127 and (q[1].float() * scale[1]).tolist()[3] == pytest.approx(-0.5)


def test_projections_become_int8_with_a_scale_and_everything_else_bf16():
    w = torch.randn(4, 8)
    out = convert_tensor("model.layers.3.mlp.down_proj.weight", w)
    assert set(out) == {"model.layers.3.mlp.down_proj.weight", "model.layers.3.mlp.down_proj.weight_scale"}
    assert out["model.layers.3.mlp.down_proj.weight"].dtype == torch.int8
    assert convert_tensor("lm_head.weight", w)["lm_head.weight"].dtype == torch.int8  # the output matrix too
    for name in ("model.layers.3.self_attn.q_proj.bias", "model.embed_tokens.weight",
                 "model.layers.0.input_layernorm.weight"):
        (kept,) = convert_tensor(name, w).values()
        assert kept.dtype == torch.bfloat16 and not is_int8_target(name)


def test_gguf_names_map_to_hugging_face_names_and_unknown_ones_are_refused():
    assert hf_name("blk.12.attn_output.weight") == "model.layers.12.self_attn.o_proj.weight"
    assert hf_name("blk.0.attn_q.bias") == "model.layers.0.self_attn.q_proj.bias"
    assert hf_name("blk.27.ffn_norm.weight") == "model.layers.27.post_attention_layernorm.weight"
    assert hf_name("output.weight") == "lm_head.weight"
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    with pytest.raises(ValueError, match="rope_freqs"):
        hf_name("rope_freqs.weight")


def test_work_is_split_evenly_every_tensor_once_and_the_same_way_every_time():
    sizes = {"embed": 100, "head": 100, **{f"layer{i}": 10 + i for i in range(20)}}
    groups = split_evenly(sizes, 2)
    assert sorted(n for g in groups for n in g) == sorted(sizes)
    loads = [sum(sizes[n] for n in g) for g in groups]
    assert max(loads) - min(loads) <= max(sizes.values())
    assert groups == split_evenly(dict(reversed(sizes.items())), 2)
    assert split_evenly({"one": 5}, 2) == [["one"]]  # no empty shard


def test_the_config_is_compressed_tensors_w8a8_dynamic_per_token_for_linears_and_the_output_matrix():
    config = compressed_tensors_config()
    group = config["config_groups"]["group_0"]
    assert config["quant_method"] == "compressed-tensors" and config["format"] == "int-quantized"
    assert group["targets"] == ["Linear"] and config["config_groups"]["group_1"]["targets"] == ["lm_head"]
    assert config["ignore"] == [] and config["config_groups"]["group_1"]["weights"] == group["weights"]
    tied = compressed_tensors_config(output_matrix=False)  # lm_head is the embedding: left alone
    assert list(tied["config_groups"]) == ["group_0"] and tied["ignore"] == ["lm_head"]
    assert group["weights"] == {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                                "dynamic": False}
    assert group["input_activations"]["strategy"] == "token" and group["input_activations"]["dynamic"] is True
