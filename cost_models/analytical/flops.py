"""FLOPs of a decoder layer, the LM head and a training step.

Every GEMM (m×k)·(k×n) costs 2·m·k·n FLOPs. Forward per layer and micro-batch of T = b·s
tokens: QKV (GQA) 2·T·h·(a·d + 2·g·d), output projection 2·T·a·d·h, MLP 2·T·3·h·f (gated)
or 2·T·2·h·f (plain), MoE router 2·T·h·E plus top_k routed experts and the shared experts
per token; MLA projections per DeepSeek-V3 (arXiv 2412.19437 §2.1.1). The attention core
(QKᵀ and AV) is 2·b·s²·a·(d_qk + d_v) = 4·b·s²·h for d = h/a: the full, unmasked term of
Narayanan et al. 2021 eq. 3 (model FLOPs for MFU); the causal kernel's time is priced at half
of it in `attention.py`. Embedding lookups do no FLOPs; the LM head is 2·T·h·V.
Backward = 2 × forward; full recompute adds one forward of every layer, selective recompute
the attention core forward (Korthikanti et al. 2022 §4.3). Biases and norms are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specs.model import ModelSpec
from specs.plan import Recompute

Split = Literal["col", "row", "rep", "expert_col", "expert_row"]
"""How tensor parallelism splits a GEMM: column-parallel (n / t), row-parallel (k / t),
replicated, or an expert GEMM (tokens and expert-tensor split, see `split_gemm`)."""


@dataclass(frozen=True, slots=True)
class GemmShape:
    """One forward GEMM of a layer, unsplit: (m×k)·(k×n)."""

    name: str
    m: float
    k: float
    n: float
    split: Split

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n


def split_gemm(g: GemmShape, tensor: int, expert_tensor: int) -> tuple[float, float, float]:
    """The per-GPU shape of a GEMM under tensor parallelism (Shoeybi et al. 2019 §3).

    Expert GEMMs: a GPU of the tensor group handles 1/t of the group's routed tokens on
    balance, with each expert's matrices split over expert_tensor (so per-GPU FLOPs are the
    group's total / t, the same as for a dense layer).
    """
    if g.split == "col":
        return g.m, g.k, g.n / tensor
    if g.split == "row":
        return g.m, g.k / tensor, g.n
    if g.split == "expert_col":
        return g.m * expert_tensor / tensor, g.k, g.n / expert_tensor
    if g.split == "expert_row":
        return g.m * expert_tensor / tensor, g.k / expert_tensor, g.n
    return g.m, g.k, g.n


def _mlp(name: str, tokens: float, h: int, f: int, gated: bool, expert: bool) -> list[GemmShape]:
    col: Split = "expert_col" if expert else "col"
    row: Split = "expert_row" if expert else "row"
    up = 2 * f if gated else f  # gate and up projections fused
    return [
        GemmShape(f"{name}_up", tokens, h, up, col),
        GemmShape(f"{name}_down", tokens, f, h, row),
    ]


def attention_dims(model: ModelSpec) -> tuple[int, int]:
    """(d_qk, d_v): per-head query/key and value dimensions."""
    if model.mla is not None:
        return model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim, model.mla.v_head_dim
    return model.head_size, model.head_size


def layer_gemms(model: ModelSpec, is_moe: bool, tokens: float) -> list[GemmShape]:
    """Forward GEMMs of one layer for `tokens` tokens, before any parallel split."""
    h, a, g, d = model.hidden_size, model.num_attention_heads, model.kv_heads, model.head_size
    out: list[GemmShape] = []
    if model.mla is not None:
        m = model.mla
        qk, v = attention_dims(model)
        # Down-projections are small and replicated over the tensor group (Megatron MLA).
        if m.q_lora_rank:
            out.append(GemmShape("q_down", tokens, h, m.q_lora_rank, "rep"))
            out.append(GemmShape("q_up", tokens, m.q_lora_rank, a * qk, "col"))
        else:
            out.append(GemmShape("q", tokens, h, a * qk, "col"))
        out.append(GemmShape("kv_down", tokens, h, m.kv_lora_rank + m.qk_rope_head_dim, "rep"))
        out.append(GemmShape("kv_up", tokens, m.kv_lora_rank, a * (m.qk_nope_head_dim + v), "col"))
        out.append(GemmShape("out", tokens, a * v, h, "row"))
    else:
        out.append(GemmShape("qkv", tokens, h, a * d + 2 * g * d, "col"))
        out.append(GemmShape("out", tokens, a * d, h, "row"))
    if is_moe:
        assert model.moe is not None
        moe = model.moe
        out.append(GemmShape("router", tokens, h, moe.num_experts, "rep"))
        out += _mlp(
            "expert", tokens * moe.top_k, h, moe.expert_ffn_hidden_size, model.gated_mlp, True
        )
        if moe.num_shared_experts:
            f_shared = moe.num_shared_experts * moe.shared_ffn
            out += _mlp("shared", tokens, h, f_shared, model.gated_mlp, False)
    else:
        out += _mlp("mlp", tokens, h, model.ffn_hidden_size, model.gated_mlp, False)
    return out


def attention_core_forward_flops(model: ModelSpec, b: float, s: float) -> float:
    """QKᵀ and AV, full (unmasked) s² term: 2·b·s²·a·(d_qk + d_v) (= 4·b·s²·h for d = h/a;
    Narayanan et al. 2021 eq. 3 convention)."""
    qk, v = attention_dims(model)
    return 2.0 * b * s * s * model.num_attention_heads * (qk + v)


def layer_forward_flops(model: ModelSpec, index: int, b: float, s: float) -> float:
    """Model FLOPs of the forward of layer `index` for b sequences of s tokens."""
    return _kind_forward_flops(model, model.is_moe_layer(index), b, s)


def _kind_forward_flops(model: ModelSpec, moe: bool, b: float, s: float) -> float:
    gemms = sum(gm.flops for gm in layer_gemms(model, moe, b * s))
    return gemms + attention_core_forward_flops(model, b, s)


def layers_forward_flops(model: ModelSpec, b: float, s: float) -> float:
    """Forward FLOPs of all layers: a layer's FLOPs depend only on whether it is an MoE
    layer, so each kind is priced once and counted."""
    moe = model.num_moe_layers
    dense = model.num_layers - moe
    out = dense * _kind_forward_flops(model, False, b, s) if dense else 0.0
    return out + (moe * _kind_forward_flops(model, True, b, s) if moe else 0.0)


def lm_head_forward_flops(model: ModelSpec, tokens: float) -> float:
    """LM head projection 2·T·h·V (the embedding lookup does no FLOPs)."""
    return 2.0 * tokens * model.hidden_size * model.vocab_size


def model_flops_per_step(model: ModelSpec, global_batch: int, s: int) -> float:
    """Model FLOPs of one optimizer step (forward + backward = 3 × forward, no recompute):
    the numerator of MFU (Chowdhery et al. 2022 App. B; Korthikanti et al. 2022 §6)."""
    fwd = layers_forward_flops(model, 1, s) + lm_head_forward_flops(model, s)
    return 3.0 * global_batch * fwd


def mixed_model_flops_per_step(
    model: ModelSpec,
    global_batch: int,
    s: int,
    token_fraction: float,
    attention_fraction: float,
) -> float:
    """`model_flops_per_step` of sequences of s tokens of which `token_fraction` are counted
    (the linear parts: GEMMs and LM head scale with tokens) and whose attention core does
    `attention_fraction` of one s-token document's s² work (documents attend within
    themselves, `sequence_lengths.py`)."""
    attention = model.num_layers * attention_core_forward_flops(model, 1, s)
    linear = layers_forward_flops(model, 1, s) - attention + lm_head_forward_flops(model, s)
    return 3.0 * global_batch * (linear * token_fraction + attention * attention_fraction)


def recompute_flops_per_step(
    model: ModelSpec,
    global_batch: int,
    s: int,
    recompute: Recompute,
    attention_factor: float = 1.0,
) -> float:
    """Extra forward FLOPs per step re-run by activation recomputation: every layer's
    forward (full) or the attention core forward (selective; Korthikanti et al. 2022 §4.3);
    the attention core at `attention_factor` of its s² work (a document mix,
    `sequence_lengths.py`)."""
    if recompute == "full":
        per_seq = layers_forward_flops(model, 1, s)
        if attention_factor != 1.0:
            per_seq -= (1.0 - attention_factor) * (
                model.num_layers * attention_core_forward_flops(model, 1, s)
            )
    elif recompute == "selective":
        per_seq = model.num_layers * attention_core_forward_flops(model, 1, s) * attention_factor
    else:
        return 0.0
    return global_batch * per_seq


def narayanan_model_flops(global_batch: int, s: int, layers: int, h: int, vocab: int) -> float:
    """Narayanan et al. 2021 eq. 3 without recompute (72 instead of 96):
    72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)). For GPT-shaped models only (f = 4h, g = a)."""
    return 72.0 * global_batch * s * layers * h * h * (1 + s / (6 * h) + vocab / (12 * layers * h))
