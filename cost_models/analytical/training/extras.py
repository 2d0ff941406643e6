"""The embedding (first pipeline chunk) and the LM head with its loss (last chunk): time per
micro-batch, activation bytes and model states."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.analytical.gemm import MEMORY_EFFICIENCY
from cost_models.analytical.memory import logits_bytes
from cost_models.analytical.placement import ParallelGroups
from cost_models.analytical.training.context import ProblemContext
from cost_models.analytical.training.layer_costs import tp_exchange_s
from cost_models.analytical.training.model_states import LayerState, extra_states
from cost_models.analytical.training.placements import parallel_groups
from cost_models.analytical.training.shapes import LayerShape, StateShape

CROSS_ENTROPY_FORWARD_PASSES = 9.5
"""fp32-sized HBM passes over the logits in the forward of Megatron's vocab-parallel cross
entropy on `logits.float()`: the bf16→fp32 cast (read 2 + write 4 bytes = 1.5 passes), the
max (1), subtracting it (2), exp (2), the sum (1) and the normalisation kept for backward (2)."""
CROSS_ENTROPY_BACKWARD_PASSES = 5.5
"""Backward: subtract the one-hot target (2), scale by the incoming gradient (2) and the
fp32→bf16 cast for the LM-head GEMMs (1.5)."""


@dataclass(frozen=True, slots=True)
class ExtraTimes:
    """Time and activations of the embedding or of the LM head + loss, per micro-batch."""

    compute_s: float
    tp_s: float
    """Exposed tensor-parallel communication."""
    forward_s: float
    activation_bytes: float


@dataclass(frozen=True, slots=True)
class Extra:
    """Embedding (first chunk) or LM head (last chunk) costs with their states."""

    compute_s: float
    tp_s: float
    forward_s: float
    state: LayerState
    activation_bytes: float


NO_EXTRA = Extra(0.0, 0.0, 0.0, LayerState(0.0, 0.0, 0.0, 0.0, 0.0), 0.0)
"""No extra work or state (the every-rank share without vocabulary parallelism)."""


def extra_times(ctx: ProblemContext, shape: LayerShape) -> tuple[ExtraTimes, ExtraTimes]:
    """(embedding, LM head + loss) times and activations; only the tensor, context,
    micro-batch and sequence-parallel fields of `shape` enter (every context-parallel
    algorithm shares the ring's entry)."""
    hit = ctx.extra_times.get(shape)
    if hit is not None:
        return hit
    if shape.context_parallel_algorithm != "ring":
        hit = ctx.extra_times[shape] = extra_times(
            ctx, shape._replace(context_parallel_algorithm="ring", context_parallel_heads=1)
        )
        return hit
    model, s = ctx.model, ctx.seq
    t, c, b, sp = shape.tensor, shape.context, shape.micro_batch_size, shape.sequence_parallel
    groups: ParallelGroups = parallel_groups(ctx, t, c, 1, 1)
    h, vocab = model.hidden_size, model.vocab_size
    hbm = ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY
    tokens = b * s / c
    act_size = tokens * h * 2.0
    # Embedding: a memory-bound lookup (read + write T·h bf16) forward, scatter-add backward;
    # vocab-parallel output reduced over the tensor group (RS with SP, AR without).
    emb_s = 2 * 2 * act_size / hbm
    emb_tp = tp_exchange_s(ctx, act_size, groups, sp)
    first = ExtraTimes(
        compute_s=emb_s,
        tp_s=emb_tp,
        forward_s=emb_s / 2 + (emb_tp if not sp else emb_tp / 2),
        activation_bytes=act_size / t if sp else act_size,
    )
    # LM head (vocab-parallel GEMM) and the fp32 cross entropy over the logits.
    head_tp = tp_exchange_s(ctx, act_size, groups, sp)
    last = head_times(ctx, tokens, vocab / t, head_tp, sp, logits_bytes(b, s, vocab, t, c))
    hit = ctx.extra_times[shape] = (first, last)
    return hit


def head_times(
    ctx: ProblemContext,
    tokens: float,
    vocab_columns: float,
    tp_s: float,
    sequence_parallel: bool,
    activation_bytes: float,
) -> ExtraTimes:
    """The LM head GEMMs (forward, input and weight gradient) over `vocab_columns` vocabulary
    rows per GPU and the fp32 cross entropy over those logits (`CROSS_ENTROPY_*_PASSES`),
    for `tokens` tokens of one micro-batch; `tp_s` is its exposed tensor-parallel exchange."""
    h = ctx.model.hidden_size
    hbm = ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY
    head_f, head_b = ctx.gemm.forward_backward_s(tokens, h, vocab_columns)
    ce_pass = tokens * vocab_columns * 4.0 / hbm
    ce_f = CROSS_ENTROPY_FORWARD_PASSES * ce_pass
    ce_b = CROSS_ENTROPY_BACKWARD_PASSES * ce_pass
    return ExtraTimes(
        compute_s=head_f + head_b + ce_f + ce_b,
        tp_s=tp_s,
        forward_s=head_f + ce_f + (tp_s / 2 if sequence_parallel else 0.0),
        activation_bytes=activation_bytes,
    )


def extras(
    ctx: ProblemContext, layer: LayerShape, states: StateShape, head_params_on: bool
) -> tuple[Extra, Extra]:
    """(embedding on the first chunk, LM head + loss on the last chunk) with their states."""
    key = (layer, states, head_params_on)
    hit = ctx.extras.get(key)
    if hit is not None:
        return hit
    if layer.context_parallel_algorithm != "ring":  # the extras do not read the algorithm
        ring = layer._replace(context_parallel_algorithm="ring", context_parallel_heads=1)
        hit = ctx.extras[key] = extras(ctx, ring, states, head_params_on)
        return hit
    first_t, last_t = extra_times(ctx, layer)
    first_s, last_s = extra_states(ctx, states, head_params_on)
    hit = ctx.extras[key] = (
        Extra(
            first_t.compute_s, first_t.tp_s, first_t.forward_s, first_s, first_t.activation_bytes
        ),
        Extra(last_t.compute_s, last_t.tp_s, last_t.forward_s, last_s, last_t.activation_bytes),
    )
    return hit
