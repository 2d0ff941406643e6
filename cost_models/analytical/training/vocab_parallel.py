"""Vocabulary parallelism: the embedding and the LM head with its loss split along the
vocabulary over every pipeline stage instead of living on the first and the last one.

Source: Yeung, Qi, Lin, Wan, "Balancing Pipeline Parallelism with Vocabulary Parallelism",
MLSys 2025 (arXiv 2411.05288), and its implementation, the sail-sg/VocabularyParallelism
fork of Megatron-LM (`--enable-vocab-parallel`; `megatron/core/pipeline_parallel/
vocab_parallel_schedule.py`). Each of the tensor × pipeline GPUs of a data-parallel replica
holds V / (t·p) vocabulary rows of the input embedding and of the output layer.

Per micro-batch, on every pipeline rank (each GPU of its tensor group):

- Output layer: the LM-head GEMMs (forward, input gradient, weight gradient) and the fp32
  cross entropy over its V / (t·p) logit columns (`extras.head_times`, the same roofline as
  the naive head with the vocabulary split p times further), with the head's tensor-parallel
  exchange as on the last stage; its fp32 logits and their gradient for one micro-batch at
  a time (`memory.logits_bytes` over t·p) and the head's input (the broadcast copy of the
  last stage's output, bf16, sequence-sharded under sequence parallelism).
- Input layer: every rank looks its vocabulary shard up for all tokens and writes a masked
  T·h output that the pipeline group sums, so the memory-bound lookup does not shrink with p
  (the paper's Table 3: the input layer reaches 8-40 % of linear scaling); its exchange over
  the tensor group as on the first stage.
- Parameters, gradients and optimizer states of V·h / (t·p) embedding and (untied) V·h /
  (t·p) head weights; the final norm stays on the last stage, learned positions on the first.
- Collectives over the pipeline group (`lm_head_model_parallel_group`, one rank per stage),
  per GPU, on T' = tokens / t tokens under sequence parallelism (T' = tokens otherwise):
  the broadcast of the last stage's output with the loss gradient, fp32, T'·(h + 1)·4 bytes
  (`broadcast_lm_head_input`); the softmax barrier's three all-reduces of per-token max, sum
  and target logit, 3 × T'·4 bytes; the all-reduce of the input gradient, fp32, T'·h·4 bytes
  (`reduce_lm_head_res_alg2`); the embedding output all-reduce, bf16, T'·h·2 bytes, and the
  broadcast of its gradient from the first stage (`input_embedding_*_step_helper`). A
  broadcast is priced as an all-gather to its size (a pipelined ring moves each byte over
  each link once). They run on their own stream, overlapped with the transformer layers'
  compute (paper §4, Fig. 5; the fork's `LM_HEAD_RES_REDUCE_STREAM`): the plan is charged the
  compute they take from the kernels they hide behind, `interference` × their time, as for
  the overlapped data-parallel traffic.
- One more micro-batch of activations in flight on every rank: the one-barrier algorithm the
  fork runs by default holds p + 1 micro-batches at the first stage where 1F1B holds p (the
  fork's README schedule table; the paper's Fig. 10: Algorithm 2, p + 1; Algorithm 1's two
  barriers, p + 2), capped at the micro-batch count.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.analytical.memory import logits_bytes
from cost_models.analytical.placement import ParallelGroups
from cost_models.analytical.training.context import ProblemContext
from cost_models.analytical.training.extras import Extra, ExtraTimes, extra_times, head_times
from cost_models.analytical.training.model_states import LayerState, state
from cost_models.analytical.training.shapes import LayerShape, StateShape

EXTRA_INFLIGHT_MICROBATCHES = 1
"""Micro-batches each rank holds beyond its schedule's count (module docstring)."""

SOFTMAX_ALL_REDUCES = 3
"""All-reduces of the softmax barrier per micro-batch: per-token max, sum of exponentials
and the target's logit (`reduce_lm_head_res_alg2`)."""


@dataclass(frozen=True, slots=True)
class VocabExtras:
    """The embedding / LM-head costs of a vocabulary-parallel plan: what stays on the first
    and last chunk and the share every pipeline rank runs, per micro-batch."""

    first: Extra
    """First chunk: learned positions (if any) and the embedding output kept for the first
    layer's backward per in-flight micro-batch."""
    last: Extra
    """Last chunk: the final norm's states."""
    every: Extra
    """Every rank: its vocabulary shard of the embedding and of the output layer."""


def vocab_times(ctx: ProblemContext, layer: LayerShape, pipeline: int) -> ExtraTimes:
    """Every rank's share per micro-batch (module docstring): the embedding lookup with its
    tensor-parallel exchange, the LM head and loss over V / (t·p) columns with theirs, and
    the activations (the shard's logits, the head's input); cached per (layer shape,
    pipeline)."""
    key = (layer, pipeline)
    hit = ctx.vocab_times.get(key)
    if hit is not None:
        return hit
    model, s = ctx.model, ctx.seq
    t, c, b, sp = layer.tensor, layer.context, layer.micro_batch_size, layer.sequence_parallel
    h, vocab = model.hidden_size, model.vocab_size
    emb, head = extra_times(ctx, layer)  # the naive extras (tensor-parallel exchanges)
    tokens = b * s / c
    head_input = tokens * h * 2.0 / (t if sp else 1)
    logits = logits_bytes(b, s, vocab, t * pipeline, c)
    share = head_times(ctx, tokens, vocab / (t * pipeline), head.tp_s, sp, logits)
    hit = ctx.vocab_times[key] = ExtraTimes(
        compute_s=emb.compute_s + share.compute_s,
        tp_s=emb.tp_s + share.tp_s,
        forward_s=emb.forward_s + share.forward_s,
        activation_bytes=share.activation_bytes + head_input,
    )
    return hit


def vocab_states(
    ctx: ProblemContext, states: StateShape, pipeline: int
) -> tuple[LayerState, LayerState, LayerState]:
    """(first chunk: learned positions; last chunk: the final norm; every rank: V·h / (t·p)
    embedding rows and, untied, as many LM-head rows) states, cached per (state shape,
    pipeline)."""
    key = (states, pipeline)
    hit = ctx.vocab_states.get(key)
    if hit is not None:
        return hit
    model, t = ctx.model, states.tensor
    profile = ctx.framework(states.framework)
    h, vocab = model.hidden_size, model.vocab_size
    rows = vocab * h / (t * pipeline)
    weights = rows if model.tie_embeddings else 2 * rows
    positions = (model.embedding_parameters() - vocab * h) / t
    hit = ctx.vocab_states[key] = (
        state(profile, positions, 0.0, states),
        state(profile, model.norm_parameters(), 0.0, states),
        state(profile, weights, 0.0, states),
    )
    return hit


def vocab_extras(
    ctx: ProblemContext, layer: LayerShape, states: StateShape, pipeline: int
) -> VocabExtras:
    """The first / last / every-rank extras of a vocabulary-parallel plan (cached per
    (layer shape, state shape, pipeline))."""
    key = (layer, states, pipeline)
    hit = ctx.vocab_extras.get(key)
    if hit is not None:
        return hit
    every_t = vocab_times(ctx, layer, pipeline)
    first_s, last_s, every_s = vocab_states(ctx, states, pipeline)
    embedding_output = extra_times(ctx, layer)[0].activation_bytes
    hit = ctx.vocab_extras[key] = VocabExtras(
        first=Extra(0.0, 0.0, 0.0, first_s, embedding_output),
        last=Extra(0.0, 0.0, 0.0, last_s, 0.0),
        every=Extra(
            every_t.compute_s, every_t.tp_s, every_t.forward_s, every_s, every_t.activation_bytes
        ),
    )
    return hit


def vocab_comm_raw_s(ctx: ProblemContext, layer: LayerShape, groups: ParallelGroups) -> float:
    """Time of one micro-batch's collectives over the pipeline group (module docstring),
    seconds, before overlap; 0 without a pipeline."""
    group = groups.pipeline
    if group.size <= 1:
        return 0.0
    key = (layer.tensor, layer.context, layer.micro_batch_size, layer.sequence_parallel, group)
    hit = ctx.vocab_comm.get(key)
    if hit is None:
        t, sp = layer.tensor, layer.sequence_parallel
        h = ctx.model.hidden_size
        tokens = layer.micro_batch_size * ctx.seq / layer.context / (t if sp else 1)
        comm = ctx.comm
        hit = (
            comm.all_gather(tokens * (h + 1) * 4.0, group)  # broadcast of the head's input
            + SOFTMAX_ALL_REDUCES * comm.all_reduce(tokens * 4.0, group)
            + comm.all_reduce(tokens * h * 4.0, group)  # the head's input gradient
            + comm.all_reduce(tokens * h * 2.0, group)  # the embedding output
            + comm.all_gather(tokens * h * 2.0, group)  # broadcast of its gradient
        )
        ctx.vocab_comm[key] = hit
    return hit


def vocab_comm_s(ctx: ProblemContext, raw_s: float) -> float:
    """The part of the overlapped collectives a rank pays per micro-batch: the compute they
    take from the kernels they hide behind (`ProblemContext.interference`)."""
    return ctx.interference * raw_s
