"""A plan's per-layer profile (`LayerProfile`, what the partition program and the search's
bounds read) assembled from parts cached by the fields each depends on: per-layer costs
(`LayerShape`), per-layer states (`StateShape`), embedding / LM head, the boundary transfer
between pipeline chunks and the in-flight micro-batches of the schedule."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.analytical.memory import GIB, grad_bucket_bytes
from cost_models.analytical.placement import ParallelGroups
from cost_models.analytical.schedules import get as get_schedule
from cost_models.analytical.training.context import ProblemContext
from cost_models.analytical.training.extras import NO_EXTRA, Extra, extras
from cost_models.analytical.training.layer_costs import cost_seq
from cost_models.analytical.training.layer_sequence import STATE_PREFIXES, LayerSeq
from cost_models.analytical.training.model_states import (
    head_params_on_last,
    state_seq,
    zero3_working_bytes,
)
from cost_models.analytical.training.offload import HostRates, gpu_state_bytes, host_rates
from cost_models.analytical.training.placements import parallel_groups
from cost_models.analytical.training.shapes import LayerShape, StateShape
from cost_models.analytical.training.vocab_parallel import (
    EXTRA_INFLIGHT_MICROBATCHES,
    vocab_comm_raw_s,
    vocab_comm_s,
    vocab_extras,
)
from cost_models.base import LayerProfile
from specs.plan import PlanKey

_MAX_PROFILES = 200_000


@dataclass(slots=True)
class Profiled:
    """A profile with the components evaluate() needs (per-layer prefix sums on demand)."""

    public: LayerProfile
    groups: ParallelGroups
    costs: LayerSeq
    states: LayerSeq
    first: Extra
    last: Extra
    vocab_parallel: bool
    """The plan splits the embedding and LM head over the pipeline stages."""
    every: Extra
    """What every pipeline rank runs besides its layers: its vocabulary shard of the
    embedding and LM head under vocabulary parallelism (zeros otherwise)."""
    vocab_comm_s: float
    """Vocabulary parallelism's collectives a rank pays per micro-batch (0 without)."""
    vocab_comm_raw_s: float
    """Their time before overlap, per micro-batch."""
    p2p_s: float
    """Boundary transfer per chunk that stays in the rank's work (0 when overlapped)."""
    p2p_raw_s: float
    """One boundary send/recv, overlapped or not."""
    runtime_bytes: float
    bucket_bytes: float
    zero3_working_bytes: float
    recompute_working_bytes: float
    """Transient working bytes: full recompute's one-layer set plus the context-parallel
    exchange's (`cost_seq`'s `max_cp_working_bytes`)."""
    key: PlanKey | None = None
    """The key (without split) the profile is of: its offload fields."""
    host: HostRates | None = None
    """The cluster's offload rates when the key offloads (`offload.py`), else None."""

    def prefix(self, name: str) -> tuple[float, ...]:
        seq = self.states if name in STATE_PREFIXES else self.costs
        return seq.prefix(name)


def microbatches(ctx: ProblemContext, key: PlanKey) -> int:
    """Micro-batches per step per pipeline: global batch / (micro-batch × data)."""
    return max(1, ctx.global_batch // (key.micro_batch_size * key.data))


def boundary_activation_bytes(
    hidden_size: int,
    sequence_length: int,
    micro_batch_size: int,
    tensor: int,
    context: int,
    sequence_parallel: bool,
) -> float:
    """Bytes of one boundary activation (or its gradient) a pipeline rank sends per
    micro-batch: micro-batch × sequence / context × hidden in bf16, split over the tensor
    ranks under sequence parallelism (Megatron-LM's pipeline send / receive)."""
    act_size = micro_batch_size * sequence_length / context * hidden_size * 2.0
    return act_size / tensor if sequence_parallel else act_size


def p2p_bytes(ctx: ProblemContext, shape: LayerShape) -> float:
    """`boundary_activation_bytes` of one plan shape."""
    return boundary_activation_bytes(
        ctx.model.hidden_size,
        ctx.seq,
        shape.micro_batch_size,
        shape.tensor,
        shape.context,
        shape.sequence_parallel,
    )


def p2p_s(ctx: ProblemContext, shape: LayerShape, groups: ParallelGroups) -> float:
    """One boundary send/recv between pipeline chunks, seconds."""
    key = (shape, groups.pipeline.tier)
    hit = ctx.p2p.get(key)
    if hit is None:
        hit = ctx.p2p[key] = ctx.comm.send_recv(p2p_bytes(ctx, shape), groups.pipeline.tier)
    return hit


def p2p_overlapped(ctx: ProblemContext, key: PlanKey) -> bool:
    """The framework overlaps pipeline send/receives with compute in the steady state."""
    mode = ctx.framework(key.framework).config.p2p_overlap
    return mode == "always" or (mode == "interleaved" and key.virtual_pipeline > 1)


def inflight(
    ctx: ProblemContext, schedule: str, pp: int, v: int, m: int, vocab: bool = False
) -> tuple[tuple[int, ...], ...]:
    """[rank][local chunk] micro-batches held at the memory peak under the schedule (its
    plug-in's count, `cost_models.analytical.schedules`; an unknown name is a SpecError);
    under vocabulary parallelism `EXTRA_INFLIGHT_MICROBATCHES` more, at most m."""
    key = (schedule, pp, v, m, vocab)
    hit = ctx.inflight.get(key)
    if hit is None:
        hit = get_schedule(schedule).inflight(pp, v, m)
        if vocab:
            extra = EXTRA_INFLIGHT_MICROBATCHES
            hit = tuple(tuple(min(m, x + extra) for x in row) for row in hit)
        ctx.inflight[key] = hit
    return hit


def profiled(ctx: ProblemContext, key: PlanKey) -> Profiled:
    """The profile of `key`, which does not depend on its pipeline split (cached)."""
    key = key.without_split()
    hit = ctx.profiles.get(key)
    if hit is not None:
        return hit
    if len(ctx.profiles) >= _MAX_PROFILES:
        ctx.profiles.clear()
    hit = ctx.profiles[key] = _build(ctx, key)
    return hit


def _build(ctx: ProblemContext, key: PlanKey) -> Profiled:
    cfg = ctx.config
    frag = 1.0 + cfg.fragmentation_fraction
    t, c, d, pp, v = key.tensor, key.context, key.data, key.pipeline, key.virtual_pipeline
    zero, rc = key.zero_stage, key.recompute
    groups = parallel_groups(ctx, t, c, d, pp)
    m = microbatches(ctx, key)
    layer, states_shape = LayerShape.of(key), StateShape.of(key)
    costs = cost_seq(ctx, layer)
    states = state_seq(ctx, states_shape)
    if key.vocab_parallel:
        vocab = vocab_extras(ctx, layer, states_shape, pp)
        first, last, every = vocab.first, vocab.last, vocab.every
        vocab_raw = vocab_comm_raw_s(ctx, layer, groups)
        vocab_comm = vocab_comm_s(ctx, vocab_raw)
        # the vocabulary shard every rank holds: a constant per GPU, like the fixed bytes
        every_bytes = every.state.total_bytes + every.activation_bytes * frag
        every_s = every.compute_s + every.tp_s + vocab_comm
    else:
        first, last = extras(ctx, layer, states_shape, head_params_on_last(ctx.model, pp))
        every, vocab_raw = NO_EXTRA, 0.0
        vocab_comm = every_bytes = every_s = 0.0
    p2p_raw = p2p_s(ctx, layer, groups) if pp > 1 else 0.0
    p2p = 0.0 if p2p_overlapped(ctx, key) else p2p_raw

    # Fixed per GPU: runtime context, DP gradient buckets, ZeRO-3 gathered working copy
    # (zero3_working_bytes), full recompute's one-layer working set and the transient bytes
    # of one layer's context-parallel exchange (the all-gather's whole-sequence K/V,
    # Ulysses' re-split Q/K/V/O; `context_parallel.py`), held by one layer at a time.
    bucket = grad_bucket_bytes(d * c, states.params_sum / pp) if zero < 3 else 0.0
    runtime = cfg.runtime_context_gib * GIB
    zero3 = zero3_working_bytes(ctx, states_shape)
    rc_work = (costs.max_working_bytes if rc == "full" else 0.0) + costs.max_cp_working_bytes
    held = inflight(ctx, key.pipeline_schedule, pp, v, m, key.vocab_parallel)
    # DualPipe holds its stage's states twice (`schedules/dualpipe.py`): the partition
    # program sees the doubled bytes, as evaluate() charges them
    copies = get_schedule(key.pipeline_schedule).parameter_copies
    layer_states = states.public["state"]
    layer_acts = costs.public["act"]
    first_states, last_states = first.state.total_bytes, last.state.total_bytes
    host = None
    if key.offloads:  # what stays on the GPU (`offload.py`)
        host = host_rates(ctx)
        layer_states = tuple(gpu_state_bytes(st, key) for st in states.items)
        first_states = gpu_state_bytes(first.state, key)
        last_states = gpu_state_bytes(last.state, key)
        kept = 1.0 - key.offload_activations
        layer_acts = tuple(kept * x for x in layer_acts)
    if copies > 1:
        layer_states = tuple(copies * x for x in layer_states)
    public = LayerProfile(
        layer_time_s=costs.public["time"],
        layer_forward_time_s=costs.public["forward"],
        layer_state_bytes=layer_states,
        layer_activation_bytes=layer_acts,
        first_extra_time_s=first.compute_s + first.tp_s,
        last_extra_time_s=last.compute_s + last.tp_s,
        first_extra_state_bytes=copies * first_states,
        last_extra_state_bytes=copies * last_states,
        first_extra_activation_bytes=first.activation_bytes * frag,
        last_extra_activation_bytes=last.activation_bytes * frag,
        p2p_time_s=p2p,
        fixed_bytes=runtime + bucket + zero3 + rc_work * frag + every_bytes,
        rank_extra_time_s=every_s,
        inflight_microbatches=held,
        num_microbatches=m,
        usable_bytes=ctx.usable_bytes,
    )
    return Profiled(
        public=public,
        groups=groups,
        costs=costs,
        states=states,
        first=first,
        last=last,
        vocab_parallel=key.vocab_parallel,
        every=every,
        vocab_comm_s=vocab_comm,
        vocab_comm_raw_s=vocab_raw,
        p2p_s=p2p,
        p2p_raw_s=p2p_raw,
        runtime_bytes=runtime,
        bucket_bytes=bucket,
        zero3_working_bytes=zero3,
        recompute_working_bytes=rc_work,
        key=key,
        host=host,
    )
