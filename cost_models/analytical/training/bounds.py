"""Provable lower bounds the exact search prunes with (`BoundedTrainingCostModel`): peak
memory of a group of plans and the step time of one plan under every pipeline split.
Every cached number is computed by the same expression `profile.py` / `estimate.py` use."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from cost_models.analytical.gemm import MEMORY_EFFICIENCY
from cost_models.analytical.memory import GIB, grad_bucket_bytes
from cost_models.analytical.placement import flat_group
from cost_models.analytical.schedule import pipeline_step
from cost_models.analytical.schedules import StageSums
from cost_models.analytical.schedules import get as get_schedule
from cost_models.analytical.schedules.base import BubbleSchedule
from cost_models.analytical.schedules.one_f_one_b import GPipe
from cost_models.analytical.training.context import ProblemContext
from cost_models.analytical.training.estimate import (
    adam_step_s,
    fill_drain_s,
    rank_shards,
    rank_work,
    stage_times,
)
from cost_models.analytical.training.extras import extra_times
from cost_models.analytical.training.layer_costs import NO_EXCHANGE, cost_seq
from cost_models.analytical.training.model_states import (
    extra_states,
    head_params_on_last,
    state_seq,
    zero3_working_bytes,
)
from cost_models.analytical.training.offload import gpu_state_bytes, host_rates, optimizer_step_s
from cost_models.analytical.training.placements import parallel_groups
from cost_models.analytical.training.profile import (
    microbatches,
    p2p_overlapped,
    p2p_s,
    profiled,
)
from cost_models.analytical.training.shapes import LayerShape, StateShape
from cost_models.analytical.training.vocab_parallel import (
    vocab_comm_raw_s,
    vocab_comm_s,
    vocab_states,
    vocab_times,
)
from cost_models.base import LayerProfile
from specs.plan import PlanKey


@dataclass(frozen=True, slots=True)
class BoundTerms:
    """The split-independent terms of the step-time bound of one (layer shape, data,
    pipeline)."""

    total_s: float
    """Σ layers + both extras, per micro-batch."""
    forward_s: float
    """Of which the forwards (layers and extras)."""
    wgrad_s: float
    """Of which the layers' weight-gradient GEMMs (W)."""
    largest_layer_s: float
    smallest_layer_s: float
    larger_extra_s: float
    every_s: float
    """Work every rank runs besides its layers per micro-batch (the vocabulary shard and its
    collectives under vocabulary parallelism; 0 otherwise)."""
    p2p_s: float
    """One boundary transfer per micro-batch (0 with pipeline 1)."""
    p2p_hidden: tuple[bool, bool]
    """Whether the framework hides the transfers (without, with interleaving)."""
    microbatches: int


def group_memory_lower_bound_bytes(ctx: ProblemContext, key: PlanKey) -> float:
    """Model states and fixed bytes only: a peak-memory lower bound valid for every
    micro-batch size, recompute mode, virtual pipeline degree, schedule and split of the
    plan's degrees and ZeRO stage (`GroupMemoryBoundedCostModel`).

    Why it is a bound: evaluate() charges pipeline rank j its layers' weights, gradients
    and optimizer states, the embedding / LM-head states when it holds the first / last
    chunk, the ZeRO-3 working copy, the runtime context and the gradient bucket (none of
    which depends on micro-batch, recompute, v or the schedule), plus (1 + fragmentation)
    × activations ≥ 0. The busiest rank holds at least the mean over the p ranks (every
    layer's states once, both extras once) and at least what rank 0 holds: the
    embedding and ≥ 1 layer (every chunk has a layer; with p = 1 everything). Under
    vocabulary parallelism every rank also holds its vocabulary shard's states (a constant
    per rank, `vocab_parallel.vocab_states`), the first and last chunk what stays there.
    """
    shape, pp, vocab = StateShape.of(key), key.pipeline, key.vocab_parallel
    offloaded = key.offload_optimizer != "none" or key.offload_parameters != "none"
    memo: tuple[object, ...] = (
        (shape, pp, vocab)
        if not offloaded
        else (shape, pp, vocab, key.offload_optimizer, key.offload_parameters)
    )
    hit = ctx.group_memory.get(memo)
    if hit is not None:
        return hit
    model = ctx.model
    states = state_seq(ctx, shape)
    every = 0.0
    if vocab:
        first, last, shard = vocab_states(ctx, shape, pp)
        every = shard.total_bytes
    else:
        first, last = extra_states(ctx, shape, head_params_on_last(model, pp))
    if offloaded:  # never with vocabulary parallelism (`rules`: not priced together)
        # only what stays on the GPU (`offload.py`), as evaluate() charges it
        on_gpu = [gpu_state_bytes(st, key) for st in states.items]
        first_b, last_b = gpu_state_bytes(first, key), gpu_state_bytes(last, key)
        fixed_off = ctx.config.runtime_context_gib * GIB + zero3_working_bytes(ctx, shape)
        if shape.zero_stage < 3:
            fixed_off += grad_bucket_bytes(shape.shards, states.params_sum / pp)
        mean_off = (sum(on_gpu) + first_b + last_b) / pp
        rank0_off = first_b + min(on_gpu) + (last_b if pp == 1 else 0.0)
        hit = ctx.group_memory[memo] = fixed_off + max(mean_off, rank0_off)
        return hit
    bucket = (
        grad_bucket_bytes(shape.shards, states.params_sum / pp) if shape.zero_stage < 3 else 0.0
    )
    zero3 = zero3_working_bytes(ctx, shape)
    fixed = ctx.config.runtime_context_gib * GIB + bucket + zero3 + every
    layer_bytes = states.public["state"]
    mean = (sum(layer_bytes) + first.total_bytes + last.total_bytes) / pp
    rank0 = first.total_bytes + min(layer_bytes) + (last.total_bytes if pp == 1 else 0.0)
    hit = ctx.group_memory[memo] = fixed + max(mean, rank0)
    return hit


def step_time_lower_bound_s(ctx: ProblemContext, key: PlanKey) -> float:
    """Step time ≥ schedule(max_j W_j) + optimizer + overhead, for every split
    (`BoundedTrainingCostModel`).

    Why it is a bound: evaluate()'s rank work W_j (layers' compute, recompute, exposed TP
    and CP communication, the extras on the first / last rank, 2·v boundary transfers)
    sums over the ranks to ΣW, which no split changes. The busiest rank's W is at least
    ΣW / p, at least the largest layer plus the transfers (layers are not split) and at
    least an extra plus v smallest layers (every chunk has a layer). The schedule's own
    bound (`Schedule.lower_bound_s`, proved in `schedules/base.py` and per schedule) takes
    that lower bound on max W and the split-independent sums ΣF, ΣB, ΣW (F with half the
    transfers, W the layers' weight gradients, B the rest, as `estimate.stage_times`
    splits them); for 1F1B it is (m−1)·max W + ΣW, for interleaved (m − 1/v)·max W + ΣW/v
    (Narayanan et al. 2021 §2.2.1-2.2.2). The Adam step takes the busiest rank's shard, at
    least the mean shard; data-parallel exposure is ≥ 0. Under vocabulary parallelism the
    extras leave the first and last rank and every rank runs its share of them and pays its
    collectives (`vocab_parallel.py`): ΣW counts that share p times, and every rank's W is
    at least its layers, transfers and share, so the share adds to the largest-layer and
    smallest-layers terms.
    """
    pp, v, d, t, c = key.pipeline, key.virtual_pipeline, key.data, key.tensor, key.context
    e, etp = key.expert, key.expert_tensor
    if key.stage_layers:
        return _split_bound_s(ctx, key)
    # Plain tuples equal to (and hashing like) the named shapes, built field by field: this
    # runs once per candidate of a search; the named shapes are built on a miss only.
    layer = (
        t,
        c,
        key.micro_batch_size,
        key.recompute,
        key.sequence_parallel,
        key.flash_attention,
        e,
        etp,
        key.framework,
        key.context_parallel_algorithm,
        key.context_parallel_heads,
    )
    vocab = key.vocab_parallel
    terms = ctx.bound_terms.get((layer, d, pp, vocab))
    if terms is None:
        terms = _cached_terms(ctx, key, LayerShape.of(key))
    states = (t, d * c, key.zero_stage, e, etp, key.framework)
    optimizer = ctx.bound_optimizer.get((states, pp, vocab))
    if optimizer is None:
        named = StateShape.of(key)
        optimizer = ctx.bound_optimizer[(named, pp, vocab)] = _optimizer_s(ctx, named, pp, vocab)
    if key.offload_optimizer != "none":
        optimizer = _offloaded_optimizer_s(ctx, key)
    p2p_rank = 0.0 if terms.p2p_hidden[v > 1] else 2 * v * terms.p2p_s
    total = terms.total_s + pp * p2p_rank
    if pp == 1:
        w_max = total
    else:
        w_max = max(
            total / pp,
            terms.largest_layer_s + p2p_rank + terms.every_s,
            terms.larger_extra_s + v * terms.smallest_layer_s + p2p_rank + terms.every_s,
        )
    m = terms.microbatches
    forward = terms.forward_s + pp * p2p_rank / 2.0
    sums = StageSums(forward, total - forward - terms.wgrad_s, terms.wgrad_s)
    sched = get_schedule(key.pipeline_schedule).lower_bound_s(m, pp, v, w_max, sums)
    gathers = 0.0
    if key.zero_stage >= 2:
        unit = ctx.bound_gathers.get((states, pp))
        if unit is None:
            named = StateShape.of(key)
            unit = ctx.bound_gathers[(named, pp)] = _unit_gather_s(ctx, key)
        gathers = terms.microbatches * unit
    return (sched + optimizer + gathers) * ctx.straggler + ctx.config.step_overhead_s


def context_free_step_lower_bound_s(
    ctx: ProblemContext, key: PlanKey, work_floor_s: float = 0.0
) -> float:
    """A step-time lower bound of `key` under every context-parallel algorithm and head
    degree (the search screens a key's algorithms as one entry with it,
    `solver.search.cp_groups`).

    `work_floor_s`: a number the caller has proved to be at most the busiest rank's work
    per micro-batch (evaluate()'s rank work, `estimate.rank_work`) of every algorithm
    under every split the search can give it (`cp_groups.refine_group`: the partition
    program's optimum on `context_free_profile`); `max W` is taken at least that large.

    Why it is a bound: the layers are priced with no exchange (`layer_costs.NO_EXCHANGE`:
    every part of a layer's cost at most its value under any algorithm), so the busiest
    rank's work per micro-batch is at least the `max W` computed as in
    `step_time_lower_bound_s` from them (monotone in each layer's time), and ΣF, ΣB at most
    the algorithm's (ΣW, the weight-gradient GEMMs, is the same). Every rank runs its work
    once per micro-batch, so a step takes at least m · max W (`steps` module docstring);
    where the schedule's own bound does not decrease as max W, ΣF and ΣB grow
    (`_monotone_bound`) it is taken too. Plus the optimizer and gathers as there.
    Keys with a fixed split are not grouped (use `step_time_lower_bound_s`)."""
    pp, v, d = key.pipeline, key.virtual_pipeline, key.data
    vocab = key.vocab_parallel
    terms = _no_exchange_terms(ctx, key, key.recompute)
    states = (
        key.tensor,
        d * key.context,
        key.zero_stage,
        key.expert,
        key.expert_tensor,
        key.framework,
    )
    optimizer = ctx.bound_optimizer.get((states, pp, vocab))
    if optimizer is None:
        named = StateShape.of(key)
        optimizer = ctx.bound_optimizer[(named, pp, vocab)] = _optimizer_s(ctx, named, pp, vocab)
    if key.offload_optimizer != "none":
        optimizer = _offloaded_optimizer_s(ctx, key)
    p2p_rank = 0.0 if terms.p2p_hidden[v > 1] else 2 * v * terms.p2p_s
    total = terms.total_s + pp * p2p_rank
    if pp == 1:
        w_max = total
    else:
        w_max = max(
            total / pp,
            terms.largest_layer_s + p2p_rank + terms.every_s,
            terms.larger_extra_s + v * terms.smallest_layer_s + p2p_rank + terms.every_s,
        )
    w_max = max(w_max, work_floor_s)
    gathers = 0.0
    if key.zero_stage >= 2:
        unit = ctx.bound_gathers.get((states, pp))
        if unit is None:
            named = StateShape.of(key)
            unit = ctx.bound_gathers[(named, pp)] = _unit_gather_s(ctx, key)
        gathers = terms.microbatches * unit
    m = terms.microbatches
    sched = m * w_max
    schedule = get_schedule(key.pipeline_schedule)
    monotone = ctx.bound_monotone.get((key.pipeline_schedule, m, pp, v))
    if monotone is None:
        monotone = ctx.bound_monotone[(key.pipeline_schedule, m, pp, v)] = _monotone_bound(
            schedule, m, pp, v
        )
    if monotone:
        forward = terms.forward_s + pp * p2p_rank / 2.0
        sums = StageSums(forward, total - forward - terms.wgrad_s, terms.wgrad_s)
        sched = max(sched, schedule.lower_bound_s(m, pp, v, w_max, sums))
    return (sched + optimizer + gathers) * ctx.straggler + ctx.config.step_overhead_s


def relaxed_step_lower_bound_s(ctx: ProblemContext, key: PlanKey) -> float:
    """A step-time lower bound of every plan that shares `key`'s degrees (data, tensor,
    pipeline, context, expert, expert-tensor), sequence parallelism, flash attention,
    micro-batch size, framework and vocabulary parallelism, whatever its recompute mode,
    virtual pipeline degree, schedule, ZeRO stage, offload, context-parallel algorithm,
    head degree and split (the search queues such a family of candidates as one entry
    until it reaches the front: `solver.search.cp_groups`).

    It is `context_free_step_lower_bound_s` with everything those fields change taken at
    its least: recompute `none` (under `NO_EXCHANGE` a layer's cost is its
    recompute-independent core plus what the mode re-runs, `layer_costs.layer_cost`, so
    every term of the bound — Σ layers, the largest and the smallest layer — is smallest
    without recompute; the extras do not read the mode), no boundary transfers (≥ 0) and
    one chunk per rank (v ≥ 1 smallest layers), the schedule's bound replaced by
    m · max W (every schedule runs each rank's work once per micro-batch: `steps`), and no
    optimizer step or gathers (≥ 0). Each is at most its value in the context-free bound of
    any member, which is at most the member's step time."""
    pp = key.pipeline
    terms = _no_exchange_terms(ctx, key, "none")
    if pp == 1:
        w_max = terms.total_s
    else:
        w_max = max(
            terms.total_s / pp,
            terms.largest_layer_s + terms.every_s,
            terms.larger_extra_s + terms.smallest_layer_s + terms.every_s,
        )
    return terms.microbatches * w_max * ctx.straggler + ctx.config.step_overhead_s


def _no_exchange_terms(ctx: ProblemContext, key: PlanKey, recompute: str) -> BoundTerms:
    """The bound terms of `key` with no context-parallel exchange (`NO_EXCHANGE`) under
    `recompute`, through the cache (looked up with a plain tuple equal to the named
    shape, built on a miss only)."""
    layer = (
        key.tensor,
        key.context,
        key.micro_batch_size,
        recompute,
        key.sequence_parallel,
        key.flash_attention,
        key.expert,
        key.expert_tensor,
        key.framework,
        NO_EXCHANGE,
        1,
    )
    terms = ctx.bound_terms.get((layer, key.data, key.pipeline, key.vocab_parallel))
    if terms is None:
        free = key._replace(
            recompute=recompute, context_parallel_algorithm=NO_EXCHANGE, context_parallel_heads=1
        )
        terms = _cached_terms(ctx, free, LayerShape.of(free))
    return terms


def context_free_profile(ctx: ProblemContext, key: PlanKey) -> LayerProfile | None:
    """A profile of `key` with no context-parallel exchange (`layer_costs.NO_EXCHANGE`),
    whose partition program (`solver.formulations.stage_partition`) bounds that of every
    algorithm and head degree of `key` from below; None where it would not (a schedule
    that does not place chunk c on rank c mod p: the program's rank times are then not
    the ranks' work).

    Why it is a bound. Against the profile of any algorithm a of `key`: the layer times are
    at most a's (`NO_EXCHANGE`: each part of a layer's cost at most its value under any
    algorithm), the fixed bytes at most a's (no exchange holds no transient K/V bytes:
    `cost_seq`'s `max_cp_working_bytes` is 0, the rest does not read the algorithm), and
    everything else is a's: layer states and activations (`_activation_bytes` and the
    states do not read the algorithm), the extras (priced under ring for every algorithm,
    `extras.py`), the boundary transfer (its bytes do not read the algorithm), the
    in-flight counts, the micro-batches and the limit. Every constraint of the program
    only tightens and its objective only grows as these numbers grow, so every split
    feasible for a is feasible here, with no larger rank times: the program's optimum
    here is at most a's, and a's optimum at most the slowest rank's constraint-(c) time of
    the split the search evaluates for a; that time is at most evaluate()'s rank work of
    the split (`estimate.rank_work`: the same layer times and extras, 2·v ≥ 2 boundary
    transfers) when chunk c runs on rank c mod p (the program's placement, "loop")."""
    if get_schedule(key.pipeline_schedule).placement != "loop":
        return None
    free = key._replace(context_parallel_algorithm=NO_EXCHANGE, context_parallel_heads=1)
    return profiled(ctx, free).public


def _monotone_bound(schedule: object, m: int, pp: int, v: int) -> bool:
    """Whether the schedule's own bound can take the no-exchange terms: it must not
    decrease when max W, ΣF or ΣB grow (ΣW, the weight-gradient GEMMs, is the same under
    every algorithm). GPipe's (m − 1)·max W + ΣT is; a `BubbleSchedule`'s m·w + κ·max(0,
    β·(F, B, W) − a·w, F − w) is when β_F, β_B ≥ 0 and m ≥ κ·max(a, 1) (its slope in w);
    any other schedule is not trusted (m · max W alone is used)."""
    if isinstance(schedule, GPipe):
        return True
    if not isinstance(schedule, BubbleSchedule):
        return False
    b_f, b_b, b_w = schedule.beta
    kappa = schedule.kappa(pp, v) if pp > 1 else 0.0
    return b_f >= 0 and b_b >= 0 and m >= kappa * max(b_f, b_b, b_w, 1.0)


def _cached_terms(ctx: ProblemContext, key: PlanKey, layer: LayerShape) -> BoundTerms:
    """`_terms` of `key` through the cache; a vocabulary-parallel key's from its naive
    twin's (`_vocab_terms`)."""
    d, pp = key.data, key.pipeline
    naive = ctx.bound_terms.get((layer, d, pp, False))
    if naive is None:
        naive = ctx.bound_terms[(layer, d, pp, False)] = _terms(ctx, key, layer)
    if not key.vocab_parallel:
        return naive
    hit = ctx.bound_terms[(layer, d, pp, True)] = _vocab_terms(ctx, key, layer, naive)
    return hit


def _vocab_terms(
    ctx: ProblemContext, key: PlanKey, layer: LayerShape, naive: BoundTerms
) -> BoundTerms:
    """The terms under vocabulary parallelism: the extras leave the first and last rank and
    every rank runs its share and pays its collectives (`rank_work`, `_forward_backward`)."""
    pp = key.pipeline
    first, last = extra_times(ctx, layer)
    share = vocab_times(ctx, layer, pp)
    groups = parallel_groups(ctx, key.tensor, key.context, key.data, pp)
    comm = vocab_comm_s(ctx, vocab_comm_raw_s(ctx, layer, groups))
    every = share.compute_s + share.tp_s + comm
    naive_extras = first.compute_s + first.tp_s + last.compute_s + last.tp_s
    return dataclasses.replace(
        naive,
        total_s=naive.total_s + pp * every - naive_extras,
        forward_s=naive.forward_s
        + pp * (share.forward_s + comm / 2.0)
        - first.forward_s
        - last.forward_s,
        larger_extra_s=0.0,
        every_s=every,
    )


def _terms(ctx: ProblemContext, key: PlanKey, layer: LayerShape) -> BoundTerms:
    sums = ctx.bound_layer_sums.get(layer)
    if sums is None:
        seq = cost_seq(ctx, layer)
        times = seq.stats()
        first, last = extra_times(ctx, layer)
        first_x = first.compute_s + first.tp_s
        last_x = last.compute_s + last.tp_s
        sums = ctx.bound_layer_sums[layer] = (
            times.total + first_x + last_x,
            times.largest,
            times.smallest,
            max(first_x, last_x),
            seq.prefix("forward")[-1] + first.forward_s + last.forward_s,
            seq.prefix("wgrad")[-1],
        )
    total, largest, smallest, larger_extra, forward, wgrad = sums
    pp = key.pipeline
    groups = parallel_groups(ctx, key.tensor, key.context, key.data, pp)
    return BoundTerms(
        total_s=total,
        forward_s=forward,
        wgrad_s=wgrad,
        largest_layer_s=largest,
        smallest_layer_s=smallest,
        larger_extra_s=larger_extra,
        every_s=0.0,
        p2p_s=p2p_s(ctx, layer, groups) if pp > 1 else 0.0,
        p2p_hidden=(
            p2p_overlapped(ctx, key._replace(virtual_pipeline=1)),
            p2p_overlapped(ctx, key._replace(virtual_pipeline=2)),
        ),
        microbatches=microbatches(ctx, key),
    )


def _unit_gather_s(ctx: ProblemContext, key: PlanKey) -> float:
    """A lower bound on the data-parallel gathers every micro-batch exposes under ZeRO-2/3
    (`data_parallel.py`): FSDP gathers a unit before its forward (and, resharded after
    forward, again before its backward), and nothing can hide the first unit's gather of
    either pass; a unit holds at least one layer's parameters. 0 where the framework gathers
    once per step (pipelined ZeRO-2, DeepSpeed ZeRO-2)."""
    profile = ctx.framework(key.framework)
    cfg = profile.config
    zero = key.zero_stage
    per_microbatch = zero == 3 or (
        zero == 2
        and key.pipeline == 1
        and cfg.grad_reduce_every_microbatch
        and cfg.bucket_per_layer
    )
    if not per_microbatch:
        return 0.0
    groups = parallel_groups(ctx, key.tensor, key.context, key.data, key.pipeline)
    group = groups.data_context
    if cfg.zero3_flat_ring:
        group = flat_group(group)
    if group.size <= 1:
        return 0.0
    states = state_seq(ctx, StateShape.of(key))
    smallest = min(st.params - st.expert_params for st in states.items)
    fp8 = ctx.problem.workload.precision == "fp8" and cfg.fp8_param_gather
    gather = ctx.comm.all_gather(smallest * (1.0 if fp8 else 2.0), group)
    passes = 2 if zero == 3 and profile.reshards_after_forward(3) else 1
    return passes * gather


def _optimizer_s(ctx: ProblemContext, shape: StateShape, pp: int, vocab: bool = False) -> float:
    """The Adam step of the mean shard per pipeline rank, seconds."""
    states = state_seq(ctx, shape)
    every = 0.0
    if vocab:
        first, last, shard = vocab_states(ctx, shape, pp)
        every = pp * shard.shard_params
    else:
        first, last = extra_states(ctx, shape, head_params_on_last(ctx.model, pp))
    shard_total = states.prefix("shard_params")[-1] + first.shard_params + last.shard_params + every
    hbm = ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY
    return shard_total / pp * ctx.config.adam_step_bytes_per_param / hbm


def _offloaded_optimizer_s(ctx: ProblemContext, key: PlanKey) -> float:
    """With the optimizer offloaded (no GPU Adam step): the CPU step and the parameters sent
    back of the mean shard per pipeline rank (`offload.optimizer_step_s`, linear in the
    shard; the busiest rank's offload seconds are at least its own, so at least the mean's),
    seconds; 0 when the cluster cannot offload (the rules refuse such keys)."""
    rates = host_rates(ctx)
    if rates is None or (rates.nvme is None and key.offload_optimizer == "nvme"):
        return 0.0
    shape, pp = StateShape.of(key), key.pipeline
    states = state_seq(ctx, shape)
    first, last = extra_states(ctx, shape, head_params_on_last(ctx.model, pp))
    shard_total = states.prefix("shard_params")[-1] + first.shard_params + last.shard_params
    return optimizer_step_s(rates, key, shard_total / pp)


def _split_bound_s(ctx: ProblemContext, key: PlanKey) -> float:
    """The bound of a key whose split is fixed: evaluate()'s schedule of the ranks' exact
    work (`estimate.rank_work`), the fill and drain of overlapped transfers, the Adam step
    of the busiest shard and the per-micro-batch ZeRO-2/3 gathers no overlap hides; only
    the exposed data-parallel communication beyond those and the FP8 weight casts (both
    ≥ 0) are left out."""
    prof = profiled(ctx, key)
    pp, v = key.pipeline, key.virtual_pipeline
    m = prof.public.num_microbatches
    schedule = get_schedule(key.pipeline_schedule)
    split = rank_work(prof, key.stage_layers, pp, v, schedule.placement)
    sched = pipeline_step(stage_times(prof, split, pp), m, v, key.pipeline_schedule).step_s
    gathers = m * _unit_gather_s(ctx, key) if key.zero_stage >= 2 else 0.0
    typical = sched + fill_drain_s(prof, pp) + adam_step_s(ctx, prof, split, pp) + gathers
    if key.offload_optimizer != "none" and prof.host is not None:
        if prof.host.nvme is not None or key.offload_optimizer != "nvme":
            shards = rank_shards(prof, split, pp)
            typical += max(optimizer_step_s(prof.host, key, x) for x in shards)
    return typical * ctx.straggler + ctx.config.step_overhead_s
