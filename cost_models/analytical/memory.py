"""Memory per GPU: model states by ZeRO stage, activations by recompute / SP / CP, pipeline
in-flight micro-batches, logits and fixed allocations.

Model states per parameter depend on the framework (`cost_models.frameworks`,
`FrameworkProfile.state_bytes_per_param`).

Activations per layer and micro-batch follow Korthikanti et al. 2022 §4.1 / Table 2, counted
tensor by tensor for a generic layer so that a GPT layer with dropout and no flash attention
gives exactly 34·s·b·h + 5·a·s²·b bytes (bf16, 1-byte dropout masks).
"""

from __future__ import annotations

from cost_models.analytical.flops import attention_dims
from specs.model import ModelSpec
from specs.plan import Recompute

GIB = 1024.0**3


def activation_terms(
    model: ModelSpec,
    is_moe: bool,
    b: int,
    s: int,
    context: int = 1,
    flash: bool = True,
    expert_tensor: int = 1,
    load_factor: float = 1.0,
    linear_input_bytes: float = 2.0,
) -> tuple[float, float, float]:
    """(replicated, split, score) activation bytes of one layer and micro-batch, before
    tensor parallelism and recompute.

    replicated: tensors Megatron keeps whole on every tensor rank without sequence
    parallelism: the two norm inputs (4sbh), the QKV input (2sbh), the MLP input (2sbh), the
    two residual dropout masks (2sbh, 1 byte, with dropout) and MLA's latent inputs.
    split: Q, K, V (GQA-sized K and V), the attention output, the flash kernel's fp32
    log-sum-exp, the MLP up/gate outputs and the activation output.
    score: the s×s softmax output (2as²b) and, with dropout, its mask (as²b) and the dropout
    output (2as²b), only without flash attention.
    Context parallelism divides the sequence (queries) by c.
    MoE layers store, per routed token copy on the GPU (λ·top_k·etp copies per token of the
    tensor-parallel share, `moe.py`): the gathered input (2h bytes, every ETP rank keeps the
    whole token) and the expert's up / activation outputs (2·f·(up+1)/etp bytes), i.e.
    λ·top_k·(2h·etp + 2f·(up+1)) per token before the division by t.

    `linear_input_bytes`: bytes per element of a saved linear input (2 in BF16; FP8
    training saves the FP8 copies the wgrad GEMM reads, `fp8.py`): the QKV and MLP inputs,
    the activation output (the down projection's input), the experts' gathered inputs and
    activation outputs; the attention output stays in BF16 for flash attention's backward
    and gains its FP8 copy.
    """
    h, a, g = model.hidden_size, model.num_attention_heads, model.kv_heads
    sl = s / context
    tok = sl * b
    qk, v = attention_dims(model)
    drop = model.dropout
    ib = linear_input_bytes
    rep = tok * h * (2 * 2 + ib + ib) + (2 * tok * h if drop else 0.0)
    if model.mla is not None:
        m = model.mla
        rep += 2 * tok * ((m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim)
        split = 2 * tok * a * (qk + qk + v) + 2 * tok * a * v
    else:
        split = 2 * tok * (a * qk + g * qk + g * v) + 2 * tok * a * v
    if flash:
        split += 4 * tok * a
    if ib != 2.0:  # the out-projection's FP8 input copy beside the BF16 attention output
        split += ib * tok * a * v
    if is_moe:
        assert model.moe is not None
        moe = model.moe
        rep += 4 * tok * moe.num_experts  # fp32 router logits
        fe = moe.expert_ffn_hidden_size
        up = 2 if model.gated_mlp else 1
        split += load_factor * moe.top_k * (ib * tok * h * expert_tensor + tok * fe * (2 * up + ib))
        if moe.num_shared_experts:
            split += tok * moe.num_shared_experts * moe.shared_ffn * (2 * up + ib)
    else:
        up = 2 if model.gated_mlp else 1
        split += tok * model.ffn_hidden_size * (2 * up + ib)
    score = 0.0
    if not flash:
        score = a * sl * s * b * (5 if drop else 2)
    return rep, split, score


def layer_activation_bytes(
    model: ModelSpec,
    is_moe: bool,
    b: int,
    s: int,
    tensor: int,
    context: int,
    sequence_parallel: bool,
    flash: bool,
    recompute: Recompute,
    expert_tensor: int = 1,
    load_factor: float = 1.0,
    linear_input_bytes: float = 2.0,
) -> float:
    """Activation bytes one layer stores per in-flight micro-batch on one GPU.

    Korthikanti et al. 2022 Table 2: without SP the replicated tensors stay whole and the
    rest divide by t (10 + 24/t + 5as/(ht) for GPT); with SP everything divides by t;
    selective recompute drops the s² terms; full recompute keeps only the layer input
    (2sbh, /t with SP).
    """
    if recompute == "full":
        inp = 2.0 * (s / context) * b * model.hidden_size
        return inp / tensor if sequence_parallel else inp
    rep, split, score = activation_terms(
        model, is_moe, b, s, context, flash, expert_tensor, load_factor, linear_input_bytes
    )
    if recompute == "selective":
        score = 0.0
    if sequence_parallel:
        return (rep + split + score) / tensor
    return rep + (split + score) / tensor


def inflight_1f1b(pipeline: int, microbatches: int) -> tuple[tuple[int, ...], ...]:
    """Micro-batches held at the memory peak by pipeline rank j under 1F1B: min(p − j, m)
    (Narayanan et al. 2021 §2.2.1; rank 0 warms up with p micro-batches)."""
    return tuple((min(pipeline - j, microbatches),) for j in range(pipeline))


def inflight_interleaved(
    pipeline: int, virtual: int, microbatches: int
) -> tuple[tuple[int, ...], ...]:
    """[rank][local chunk] micro-batches held at the peak under interleaved 1F1B.

    Megatron's warm-up count: rank j runs (v−1)·p + 2(p−j−1) + 1 forward micro-batch-chunks
    before its first backward, distributed as: local chunk 0 holds p + max(0, p−2j−1),
    chunks 1..v−2 hold p each, chunk v−1 holds min(p, 2p−2j−1); each capped at m. For rank
    0 this totals v·p + p − 1 chunk-micro-batches = p·(1 + (p−1)/(p·v)) micro-batches' worth
    of its layers (Narayanan et al. 2021 §2.2.2).
    """
    p, v, m = pipeline, virtual, microbatches
    out = []
    for j in range(p):
        counts = [p + max(0, p - 2 * j - 1)] + [p] * (v - 2) + [min(p, 2 * p - 2 * j - 1)]
        out.append(tuple(min(c, m) for c in counts))
    return tuple(out)


def logits_bytes(b: int, s: int, vocab: int, tensor: int, context: int) -> float:
    """fp32 logits and their gradient for one micro-batch on the last stage:
    (s/c)·b·V/t × 4 bytes × 2 (Megatron vocab-parallel cross entropy)."""
    return (s / context) * b * vocab / tensor * 4.0 * 2.0


def grad_bucket_bytes(data_shards: int, grad_elements: float) -> float:
    """Data-parallel gradient bucket: Megatron's bucket of max(40M, 1M·dp) fp32 elements,
    capped at the GPU's gradient size; none without data parallelism."""
    if data_shards <= 1:
        return 0.0
    return 4.0 * min(max(40e6, 1e6 * data_shards), grad_elements)
