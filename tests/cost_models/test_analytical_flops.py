"""FLOP counts against Narayanan et al. 2021 eq. 3 and hand-derived GEMM sums."""

from __future__ import annotations

from cm_support import gpt, llama3_70b

from cost_models.analytical.flops import (
    attention_core_forward_flops,
    layer_forward_flops,
    layer_gemms,
    lm_head_forward_flops,
    model_flops_per_step,
    narayanan_model_flops,
    recompute_flops_per_step,
)
from specs.model import ModelSpec, MoESpec


def test_gpt_model_flops_equal_narayanan_eq3() -> None:
    # GPT-3 175B shape: f = 4h, g = a, so every term of eq. 3 matches exactly.
    model = gpt(layers=96, h=12288, a=96, vocab=51200)
    ours = model_flops_per_step(model, 1536, 2048)
    ref = narayanan_model_flops(1536, 2048, 96, 12288, 51200)
    assert abs(ours - ref) / ref < 1e-12


def test_gpt_layer_terms() -> None:
    # per layer forward: 24·T·h² GEMMs + 4·b·s²·h attention core (Narayanan eq. 3 terms)
    model = gpt(h=1024, a=16)
    b, s = 2, 512
    gemms = sum(g.flops for g in layer_gemms(model, False, b * s))
    assert gemms == 24 * b * s * 1024**2
    assert attention_core_forward_flops(model, b, s) == 4 * b * s * s * 1024
    assert lm_head_forward_flops(model, b * s) == 2 * b * s * 1024 * 51200


def test_gqa_gated_layer_flops() -> None:
    # Llama-3-70B: QKV 2·T·h·(a·d + 2·g·d) = 2·T·8192·(8192 + 2048); out 2·T·8192²;
    # MLP 2·T·3·8192·28672; core 2·s²·a·(2d) = 4·s²·8192 per sequence.
    m, s = llama3_70b(), 4096
    expected = 2 * s * 8192 * (8192 + 2048) + 2 * s * 8192**2 + 2 * s * 3 * 8192 * 28672
    expected += 4 * s * s * 8192
    assert layer_forward_flops(m, 0, 1, s) == expected


def test_moe_layers_cost_top_k_experts_and_differ_from_dense() -> None:
    moe = MoESpec(
        num_experts=8,
        top_k=2,
        expert_ffn_hidden_size=1024,
        num_shared_experts=1,
        num_dense_layers=1,
    )
    m = ModelSpec(
        num_layers=4,
        hidden_size=512,
        num_attention_heads=8,
        ffn_hidden_size=2048,
        vocab_size=1000,
        moe=moe,
    )
    T = 100
    attn = 2 * T * 512 * (512 + 2 * 512) + 2 * T * 512 * 512
    dense = attn + 2 * T * 3 * 512 * 2048
    sparse = attn + 2 * T * 512 * 8 + 2 * T * 2 * 3 * 512 * 1024 + 2 * T * 3 * 512 * 1024
    core = attention_core_forward_flops(m, 1, T)
    assert layer_forward_flops(m, 0, 1, T) == dense + core
    assert layer_forward_flops(m, 1, 1, T) == sparse + core


def test_recompute_flops() -> None:
    model = gpt(layers=4, h=256, a=4)
    s, B = 128, 8
    full = recompute_flops_per_step(model, B, s, "full")
    assert full == B * sum(layer_forward_flops(model, i, 1, s) for i in range(4))
    assert recompute_flops_per_step(model, B, s, "selective") == B * 4 * 4 * s * s * 256
    assert recompute_flops_per_step(model, B, s, "none") == 0.0


def test_layers_counted_by_kind_equal_the_per_layer_sums() -> None:
    """`model_flops_per_step`, `recompute_flops_per_step` and `num_parameters` price each layer
    kind once; they must equal the layer-by-layer sums for every preset, dense, interleaved
    MoE (Llama-4 style frequency) and MoE after leading dense layers (DeepSeek)."""
    from specs.presets import get_preset, list_presets

    for name in list_presets():
        model = get_preset(name)
        per_layer = sum(layer_forward_flops(model, i, 1, 2048) for i in range(model.num_layers))
        expected = 3.0 * 8 * (per_layer + lm_head_forward_flops(model, 2048))
        assert abs(model_flops_per_step(model, 8, 2048) - expected) <= 1e-9 * expected, name
        full = recompute_flops_per_step(model, 8, 2048, "full")
        assert abs(full - 8 * per_layer) <= 1e-9 * full, name
        params = sum(model.layer_parameters(i) for i in range(model.num_layers))
        params += model.embedding_parameters() + model.head_parameters()
        assert model.num_parameters() == params, name
        active = sum(model.layer_parameters(i, active=True) for i in range(model.num_layers))
        active += model.embedding_parameters() + model.head_parameters()
        assert model.num_active_parameters() == active, name
