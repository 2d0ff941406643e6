"""Data-parallel communication of one step and what of it the framework hides: gradient
reduction, the sharded optimizer's parameter all-gather and ZeRO-3 / FSDP per-unit gathers,
priced collective by collective (buckets or units) with the framework's overlap rules
(`cost_models.frameworks`).

Per pipeline rank j (parameters n_j, forward f_j and backward b_j per micro-batch, L_j
layers; Rajbhandari et al. 2020 §5 for what each ZeRO stage communicates):

- ZeRO 0/1 and every pipelined plan: the gradients are reduced once per step (all-reduce for
  ZeRO 0, the framework's sharded collective otherwise) in buckets; with
  `overlap_grad_reduce` the buckets run during the last micro-batch's backward and only
  max(one bucket, C − b_j) is left after it, else all of C. The sharded optimizer then
  all-gathers the updated bf16 parameters (fp8 with `fp8_param_gather`), hidden behind the
  next first forward with `overlap_param_gather`, else exposed.
- ZeRO-2 without pipelining: the reduction runs on every micro-batch, behind that
  micro-batch's backward when overlapped; parameters are gathered once per step after the
  optimizer (DeepSpeed) or, when the framework reshards after backward (FSDP
  `SHARD_GRAD_OP`, FSDP2), per micro-batch with prefetch like ZeRO-3's forward.
- ZeRO-3: every micro-batch gathers each unit (a layer) before its forward and again before
  its backward, and reduce-scatters its gradient after the backward (once per step with
  pipelining: FSDP2 under `torch.distributed.pipelining` reduces after the last
  micro-batch). With prefetch, unit i+1's gather runs while unit i computes: exposed are
  the first gather, the last reduce-scatter and max(0, comm − compute) per unit; without,
  everything.

A pipeline rank j > 0 ends its last backward Σ_{i<j} b_i before rank 0 does (1F1B drains
toward rank 0) and starts its first forward Σ_{i<j} f_i after it: that slack hides its
gradient reduction and its parameter gather respectively. The step waits for the slowest.

MoE: routed-expert parameters are reduced (and, under ZeRO, sharded and gathered) over the
expert-data-parallel group, d·c·t / (e·etp) ranks of stride e·etp (Megatron-Core folding,
Liu et al. 2025 §3), the rest over data × context; the two run one after the other.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from cost_models.analytical.placement import GroupPlacement, flat_group, place_group
from cost_models.analytical.training.context import ProblemContext
from cost_models.analytical.training.placements import expert_groups
from cost_models.analytical.training.profile import Profiled
from cost_models.frameworks import FrameworkConfig
from specs.plan import PlanKey

PARAM_BYTES = 2.0
"""bf16 parameters on the wire of a gather."""


@dataclass(frozen=True, slots=True)
class RankWork:
    """What the data-parallel model needs of one pipeline rank."""

    dense_params: float
    """Parameters reduced over data × context (embedding and head included)."""
    expert_params: float
    """Routed-expert parameters, reduced over the expert-data group."""
    units: int
    """FSDP / ZeRO-3 units on the rank (layers, plus the embedding and the head)."""
    forward_s: float
    """Forward of one micro-batch on the rank."""
    backward_s: float
    """Backward (with recompute) of one micro-batch on the rank."""
    fill_slack_s: float
    """How long after rank 0 the rank starts its first forward."""
    drain_slack_s: float
    """How long before rank 0 the rank ends its last backward."""
    nic_busy_s: float = 0.0
    """Per micro-batch, how long the rank's NIC carries its expert all-to-all (when the
    expert group spans scale-up domains); forward and backward each take half."""


@dataclass(frozen=True, slots=True)
class _Comm:
    """A set of equal collectives run back to back."""

    total_s: float
    one_s: float
    """One of them (the last bucket, the first unit)."""


@dataclass(frozen=True, slots=True)
class DataParallelTime:
    exposed_s: float
    """On the critical path of the step."""
    raw_s: float
    """Every data-parallel collective of the busiest rank, hidden or not."""
    rank_exposed_s: tuple[float, ...] = ()
    """Per pipeline rank: its exposed part (the step's is the largest)."""
    rank_raw_s: tuple[float, ...] = ()
    """Per pipeline rank: all of its data-parallel collectives."""


def data_parallel_s(
    ctx: ProblemContext, prof: Profiled, key: PlanKey, ranks: list[RankWork], m: int
) -> DataParallelTime:
    """Exposed and raw data-parallel communication of one step (module docstring)."""
    fw = ctx.framework(key.framework)
    cfg = fw.config
    dense_group = prof.groups.data_context
    expert_group: GroupPlacement | None = None
    if any(r.expert_params for r in ranks):
        egroup = expert_groups(
            ctx, key.expert, key.expert_tensor, key.data * key.context * key.tensor
        ).expert_data
        expert_group = egroup if egroup.size > 1 else None
    if dense_group.size <= 1 and expert_group is None:
        none = (0.0,) * len(ranks)
        return DataParallelTime(0.0, 0.0, none, none)
    zero, pp = key.zero_stage, key.pipeline
    rank_exposed: list[float] = []
    rank_raw: list[float] = []
    for j, rank in enumerate(ranks):
        parts = [(rank.dense_params, dense_group)]
        if expert_group is not None:
            parts.append((rank.expert_params, expert_group))
        elif rank.expert_params:  # experts replicated nowhere else: reduced with the rest
            parts[0] = (rank.dense_params + rank.expert_params, dense_group)
        if rank.nic_busy_s and any(g.tier == "inter" for _, g in parts if g.size > 1):
            rank = _nic_window(rank)
        if zero == 3:
            exposed, raw = _zero3(ctx, cfg, parts, rank, m, pp, fw.reshards_after_forward(3))
        elif zero == 2 and pp == 1 and cfg.grad_reduce_every_microbatch:
            exposed, raw = _zero2_per_microbatch(ctx, cfg, parts, rank, m, j)
        else:
            exposed, raw = _once_per_step(ctx, cfg, parts, rank, j, key)
        rank_exposed.append(exposed)
        rank_raw.append(raw)
    return DataParallelTime(
        max(rank_exposed, default=0.0),
        max(rank_raw, default=0.0),
        tuple(rank_exposed),
        tuple(rank_raw),
    )


def _nic_window(rank: RankWork) -> RankWork:
    """The rank's compute as a window for hiding data-parallel traffic that crosses scale-up
    domains: without the time its NIC is busy with the expert all-to-all. Both go out
    through the same NIC (one per GPU on rail-optimised H100/B200 nodes), so the NIC does
    them one after the other; the all-to-all is already on the critical path (Megatron-Core
    does not overlap it), the gathers and reductions queue behind it."""
    half = rank.nic_busy_s / 2.0
    return dataclasses.replace(
        rank,
        forward_s=max(0.0, rank.forward_s - half),
        backward_s=max(0.0, rank.backward_s - half),
    )


def _bucket_elements(cfg: FrameworkConfig, params: float, rank: RankWork, j: int, dp: int) -> float:
    """Elements per gradient bucket on pipeline rank j."""
    if cfg.bucket_per_layer:
        return params / max(1, rank.units)
    if cfg.grad_bucket_elements is None or (cfg.buckets_on_first_stage_only and j > 0):
        return params
    return cfg.grad_bucket_elements + cfg.grad_bucket_elements_per_dp_rank * dp


def _collective(ctx: ProblemContext, kind: str, size_bytes: float, group: GroupPlacement) -> float:
    comm = ctx.comm
    if kind == "all_reduce":
        return comm.all_reduce(size_bytes, group)
    if kind == "all_gather":
        return comm.all_gather(size_bytes, group)
    return comm.reduce_scatter(size_bytes, group)


def _chunks(
    ctx: ProblemContext,
    kind: str,
    params: float,
    chunk_params: float,
    bytes_per_param: float,
    group: GroupPlacement,
) -> _Comm:
    """`params` moved in chunks of `chunk_params` (buckets or units), one collective each."""
    if params <= 0 or group.size <= 1:
        return _Comm(0.0, 0.0)
    count = max(1, math.ceil(params / max(1.0, chunk_params) - 1e-9))
    one = _collective(ctx, kind, params / count * bytes_per_param, group)
    return _Comm(count * one, one)


def _reduce_kind(cfg: FrameworkConfig, zero: int) -> str:
    if zero == 0:
        return "all_reduce"
    if zero == 3:
        return "reduce_scatter"
    return cfg.sharded_grad_collective


def _gather_bytes(cfg: FrameworkConfig, ctx: ProblemContext) -> float:
    """Bytes per parameter of a parameter all-gather."""
    fp8 = ctx.problem.workload.precision == "fp8" and cfg.fp8_param_gather
    return 1.0 if fp8 else PARAM_BYTES


def _once_per_step(
    ctx: ProblemContext,
    cfg: FrameworkConfig,
    parts: list[tuple[float, GroupPlacement]],
    rank: RankWork,
    j: int,
    key: PlanKey,
) -> tuple[float, float]:
    """Gradients reduced once per step; the sharded optimizer's gather after it (ZeRO 1/2),
    or the FSDP per-unit gathers of a pipelined ZeRO-2 plan (kept across micro-batches)."""
    zero = key.zero_stage
    reduce_kind = _reduce_kind(cfg, zero)
    grad = gather = gather_one = last_bucket = 0.0
    per_unit_gather = zero == 2 and cfg.bucket_per_layer
    for params, group in parts:
        bucket = _bucket_elements(cfg, params, rank, j, key.data * key.context)
        reduced = _chunks(ctx, reduce_kind, params, bucket, cfg.grad_reduce_bytes, group)
        grad += reduced.total_s
        last_bucket = max(last_bucket, reduced.one_s)
        if zero >= 1:
            chunk = params / max(1, rank.units) if per_unit_gather else bucket
            gathered = _chunks(ctx, "all_gather", params, chunk, _gather_bytes(cfg, ctx), group)
            gather += gathered.total_s
            gather_one = max(gather_one, gathered.one_s)
    # FSDP2 under a pipeline schedule reduces after the last backward (not overlapped).
    overlapped = cfg.overlap_grad_reduce and not (key.pipeline > 1 and cfg.bucket_per_layer)
    grad_exposed = max(last_bucket, grad - rank.backward_s) if overlapped else grad
    grad_exposed = max(0.0, grad_exposed - rank.drain_slack_s)
    if per_unit_gather:  # FSDP gathers unit by unit in the first forward, prefetched
        units = max(1, rank.units)
        unit_fwd = rank.forward_s / units
        gather_exposed = gather_one + (units - 1) * max(0.0, gather_one - unit_fwd)
    elif cfg.overlap_param_gather:
        gather_exposed = max(gather_one, gather - rank.forward_s)
    else:
        gather_exposed = gather
    gather_exposed = max(0.0, gather_exposed - rank.fill_slack_s)
    return grad_exposed + gather_exposed, grad + gather


def _zero2_per_microbatch(
    ctx: ProblemContext,
    cfg: FrameworkConfig,
    parts: list[tuple[float, GroupPlacement]],
    rank: RankWork,
    m: int,
    j: int,
) -> tuple[float, float]:
    """ZeRO-2 without pipelining: a reduction per micro-batch behind its backward; the
    parameters gathered once per step after the optimizer (DeepSpeed) or, with per-layer
    units (FSDP), before every micro-batch's forward with prefetch."""
    reduce_kind = _reduce_kind(cfg, 2)
    grad = last_bucket = gather = gather_one = 0.0
    for params, group in parts:
        bucket = _bucket_elements(cfg, params, rank, j, group.size)
        reduced = _chunks(ctx, reduce_kind, params, bucket, cfg.grad_reduce_bytes, group)
        grad += reduced.total_s
        last_bucket = max(last_bucket, reduced.one_s)
        chunk = params / max(1, rank.units) if cfg.bucket_per_layer else bucket
        gathered = _chunks(ctx, "all_gather", params, chunk, _gather_bytes(cfg, ctx), group)
        gather += gathered.total_s
        gather_one = max(gather_one, gathered.one_s)
    per_mb = max(last_bucket, grad - rank.backward_s) if cfg.overlap_grad_reduce else grad
    if cfg.bucket_per_layer:
        units = max(1, rank.units)
        unit_fwd = rank.forward_s / units
        gather_mb = gather_one + (units - 1) * max(0.0, gather_one - unit_fwd)
        return m * (per_mb + gather_mb), m * (grad + gather)
    return m * per_mb + gather, m * grad + gather


def _zero3(
    ctx: ProblemContext,
    cfg: FrameworkConfig,
    parts: list[tuple[float, GroupPlacement]],
    rank: RankWork,
    m: int,
    pp: int,
    reshard: bool,
) -> tuple[float, float]:
    """ZeRO-3 / FSDP full sharding: per-unit gathers in every micro-batch's forward (and
    backward when resharded after forward), reduce-scatters per micro-batch (or once per
    step with pipelining or without per-micro-batch reduction)."""
    units = max(1, rank.units)
    ag = rs = 0.0
    for params, group in parts:
        g = flat_group(group) if cfg.zero3_flat_ring else group
        ag += _chunks(ctx, "all_gather", params, params / units, _gather_bytes(cfg, ctx), g).one_s
        rs += _chunks(ctx, "reduce_scatter", params, params / units, cfg.grad_reduce_bytes, g).one_s
    bwd_ag = ag if reshard else 0.0
    once = pp > 1 or not cfg.grad_reduce_every_microbatch
    unit_f, unit_b = rank.forward_s / units, rank.backward_s / units
    if cfg.zero3_prefetch:
        fwd = ag + (units - 1) * max(0.0, ag - unit_f)
        bwd_comm = bwd_ag + (0.0 if once else rs)
        bwd = bwd_ag + (units - 1) * max(0.0, bwd_comm - unit_b) + (0.0 if once else rs)
    else:
        fwd = units * ag
        bwd = units * (bwd_ag + (0.0 if once else rs))
    exposed = m * (fwd + bwd)
    raw = m * units * (ag + bwd_ag + (0.0 if once else rs))
    if once:  # one reduce-scatter per unit after the last backward
        tail = max(0.0, units * rs - rank.drain_slack_s)
        exposed += tail
        raw += units * rs
    return exposed, raw


def tied_embedding_sync_s(ctx: ProblemContext, key: PlanKey) -> float:
    """The all-reduce that keeps tied input and output embeddings equal when they sit on
    different pipeline ranks: after the backward, the first and the last stage sum their
    word-embedding gradients (each TP rank its V·h/t shard, at the framework's gradient
    bytes), a two-rank all-reduce (Megatron-LM's `_allreduce_word_embedding_grads` over
    its embedding group; DeepSpeed's `PipelineModule.allreduce_tied_weight_gradients`),
    not overlapped with compute. Ranks are laid out tensor, context, data, then pipeline
    outermost, so the two are (p − 1)·t·c·d ranks apart. Zero without tied embeddings or
    without a pipeline."""
    size = tied_embedding_bytes(ctx, key)
    if size == 0.0:
        return 0.0
    stride = (key.pipeline - 1) * key.tensor * key.context * key.data
    return ctx.comm.all_reduce(size, place_group(2, stride, ctx.domain_gpus, ctx.leaf_gpus))


def tied_embedding_bytes(ctx: ProblemContext, key: PlanKey) -> float:
    """Bytes each rank of the first and the last stage all-reduces to keep tied embeddings
    equal (`tied_embedding_sync_s`): its V·h/t word-embedding gradient shard at the
    framework's gradient bytes; 0 when nothing is tied across stages (under vocabulary
    parallelism each rank's shard serves both ends)."""
    model = ctx.model
    if not model.tie_embeddings or key.pipeline < 2 or key.vocab_parallel:
        return 0.0
    grad_bytes = ctx.framework(key.framework).config.grad_reduce_bytes
    return model.vocab_size * model.hidden_size / key.tensor * grad_bytes
