"""Memory-bound elementwise work of a transformer layer and of the loss.

Normalisation, rotary embedding, activation functions, bias-dropout-add and residual adds do
almost no FLOPs; their time is the bytes they move through HBM (roofline, Williams et al.
2009). Korthikanti et al. 2022 §4.2.2 make the same point for sequence parallelism: without
SP every tensor-parallel rank repeats the norm and dropout work on the whole sequence, with SP
each rank does 1/t of it. Counted per token, in elements read + written (bf16 activations,
Megatron-style fused kernels: fused RMSNorm/LayerNorm, fused bias-GeLU / SwiGLU, fused
bias-dropout-add):

- each norm: read h, write h;
- rotary embedding on Q and K: read and write (a + g)·d (only with rotary positions);
- activation: GeLU read f, write f; SwiGLU read 2f, write f (per tensor rank: f / t);
- each residual (bias-dropout-)add: read 2h, write h, plus a 1-byte mask when dropout is on.

The backward pass moves about twice the forward bytes (it reads the saved input and the
incoming gradient and writes the input gradient). The loss is priced with the LM head
(training.py, CROSS_ENTROPY_FORWARD_PASSES and CROSS_ENTROPY_BACKWARD_PASSES).
"""

from __future__ import annotations

from specs.model import ModelSpec

BYTES_PER_ACTIVATION = 2.0
BACKWARD_BYTES_RATIO = 2.0


def mlp_width(model: ModelSpec, is_moe: bool) -> float:
    """FFN width one token passes through: the dense f, or top_k routed experts plus the
    shared experts of an MoE layer."""
    if not is_moe or model.moe is None:
        return float(model.ffn_hidden_size)
    m = model.moe
    return float(m.top_k * m.expert_ffn_hidden_size + m.num_shared_experts * m.shared_ffn)


def layer_elementwise_bytes(
    model: ModelSpec,
    tokens: float,
    *,
    tensor: int,
    sequence_parallel: bool,
    ffn_hidden_size: float,
    gated: bool,
) -> float:
    """Forward HBM bytes of one layer's elementwise kernels on one GPU.

    Args:
        model: the architecture (h, heads, KV heads, head dim, dropout, position embedding).
        tokens: tokens in the micro-batch on this GPU's sequence share (b·s / context).
        tensor: tensor-parallel degree t.
        sequence_parallel: norms and residual work split over t (else repeated on every rank).
        ffn_hidden_size: FFN width of this layer's MLP (experts: per routed token copy).
        gated: SwiGLU (three matrices) or a plain activation.
    Returns:
        Bytes read + written in the forward pass.
    """
    h = model.hidden_size
    hidden_share = 1.0 / tensor if sequence_parallel else 1.0
    norms = 2 * (2 * h) * hidden_share
    mask = 0.5 if model.dropout else 0.0  # 1-byte mask in 2-byte element units
    residual = 2 * (3 * h + mask * h) * hidden_share
    rope = 0.0
    if model.position_embedding == "rope":
        rope = 2 * (model.num_attention_heads + model.kv_heads) * model.head_size / tensor
    f = ffn_hidden_size / tensor
    activation = (3 * f) if gated else (2 * f)
    return tokens * (norms + residual + rope + activation) * BYTES_PER_ACTIVATION
