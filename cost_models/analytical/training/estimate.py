"""The full estimate of a plan with its pipeline split: per-rank work per micro-batch, the
schedule (`schedule.py`), exposed data-parallel communication, the Adam step, memory per
pipeline rank, metrics and the figures explanations quote."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import itemgetter
from typing import Any

from cost_models.analytical.flops import model_flops_per_step, recompute_flops_per_step
from cost_models.analytical.gemm import MEMORY_EFFICIENCY
from cost_models.analytical.memory import GIB
from cost_models.analytical.schedule import pipeline_step
from cost_models.analytical.schedules import StageTimes
from cost_models.analytical.schedules import get as get_schedule
from cost_models.analytical.training.context import ProblemContext
from cost_models.analytical.training.data_parallel import (
    RankWork,
    data_parallel_s,
    tied_embedding_bytes,
    tied_embedding_sync_s,
)
from cost_models.analytical.training.layer_sequence import PREFIX_FIELDS
from cost_models.analytical.training.offload import HOST_MEMORY_USABLE, rank_offload
from cost_models.analytical.training.placements import expert_groups, expert_load
from cost_models.analytical.training.profile import Profiled, p2p_bytes, profiled
from cost_models.analytical.training.shapes import LayerShape
from cost_models.base import TrainingEstimate
from cost_models.error_bars import stored_quantiles
from specs.errors import InfeasiblePlan
from specs.plan import (
    MemoryReport,
    PlanKey,
    StageMemory,
    TimeBreakdown,
    TrainingMetrics,
    TrainingPlan,
    Violation,
)


def _gib(x: float) -> float:
    return x / GIB


def _error_bars(step_time_s: float) -> dict[str, float]:
    """step_time_s_low / _high from the residuals on the published runs (error_bars.py)."""
    quantiles = stored_quantiles("analytical")
    if quantiles is None:
        return {}
    low, high = quantiles.interval(step_time_s)
    return {"step_time_s_low": low, "step_time_s_high": high}


ChunkSum = Callable[[str, int], float]
"""chunk_sum(prefix name, rank): the sum of a per-layer field over the rank's chunks."""


def _chunk_sum(prof: Profiled, rank_ranges: list[list[tuple[int, int]]], v: int) -> ChunkSum:
    arrays = {name: prof.prefix(name) for name in PREFIX_FIELDS}
    if v == 1:  # one chunk per rank: sum([x]) is 0.0 + x, without building the list
        single = [ranges[0] for ranges in rank_ranges]

        def one(name: str, rank: int) -> float:
            arr = arrays[name]
            lo, hi = single[rank]
            return 0.0 + (arr[hi] - arr[lo])

        return one

    # each rank's chunk ends and starts, read from a prefix array in one C call each
    picks = [
        (itemgetter(*(hi for _, hi in ranges)), itemgetter(*(lo for lo, _ in ranges)))
        for ranges in rank_ranges
    ]

    def many(name: str, rank: int) -> float:
        arr = arrays[name]
        ends, starts = picks[rank]
        return float(sum(ends(arr)) - sum(starts(arr)))

    return many


@dataclass(frozen=True, slots=True)
class RankSplit:
    """Per pipeline rank, per micro-batch, under one split: its chunks and its work."""

    rank_ranges: list[list[tuple[int, int]]]
    """[rank] -> [start, end) layer ranges of its chunks, in local order."""
    chunk_sum: ChunkSum
    work: list[float]
    p2p_s: float
    """Boundary transfers per micro-batch on every rank (2·v exposed send/receives)."""
    last_rank: int = -1
    """The rank of the last chunk (the LM head): pp − 1, or 0 in a V (`rank_chunks`)."""


def rank_chunks(pp: int, v: int, placement: str = "loop") -> list[list[int]]:
    """Per pipeline rank, its chunks (indices into `stage_layers`) in local order: chunk c on
    rank c mod pp ("loop": Megatron, torchtitan's default), or chunks j and 2pp − 1 − j on
    rank j ("v": ZB-V, V-Half, DualPipeV). DualPipe's rank j runs stage j of one direction
    and, priced alike, stage pp − 1 − j of the other (`schedules/dualpipe.py`)."""
    if placement == "v" and pp > 1:
        return [[j, 2 * pp - 1 - j] for j in range(pp)]
    return [list(range(j, pp * v, pp)) for j in range(pp)]


def rank_work(
    prof: Profiled, stages: Sequence[int], pp: int, v: int, placement: str = "loop"
) -> RankSplit:
    """The work of every pipeline rank per micro-batch under the split `stages`: its
    layers' compute, recompute, TP / CP / EP communication and host time (the layers'
    `time`), 2·v boundary transfers, and the embedding (rank 0) and LM head (the rank of the
    last chunk), or under vocabulary parallelism every rank's share of both and its
    pipeline-group collectives."""
    bounds = list(accumulate(stages, initial=0))
    chunks = rank_chunks(pp, v, placement)
    rank_ranges = [[(bounds[ci], bounds[ci + 1]) for ci in chunks[j]] for j in range(pp)]
    chunk_sum = _chunk_sum(prof, rank_ranges, v)
    p2p_rank = 2 * v * prof.p2p_s if pp > 1 else 0.0
    last = 0 if placement == "v" and pp > 1 else pp - 1
    every = prof.public.rank_extra_time_s  # the vocabulary shard (vocab_parallel.py)
    work = [chunk_sum("time", j) + p2p_rank + every for j in range(pp)]
    work[0] += prof.first.compute_s + prof.first.tp_s
    work[last] += prof.last.compute_s + prof.last.tp_s
    return RankSplit(rank_ranges, chunk_sum, work, p2p_rank, last)


def stage_times(prof: Profiled, split: RankSplit, pp: int) -> StageTimes:
    """Per rank F (forward with its half of the boundary transfers), W (the weight-gradient
    GEMMs, `layer_costs.py`) and B (the rest of the rank's work) per micro-batch; the
    extras' backward counts as B. T_j = the rank's work exactly."""
    fwd, _bwd = _forward_backward(prof, split, pp)
    half = split.p2p_s / 2.0
    wgrad = [split.chunk_sum("wgrad", j) for j in range(pp)]
    f = [x + half for x in fwd]
    b = [t - fx - wx for t, fx, wx in zip(split.work, f, wgrad, strict=True)]
    return StageTimes(tuple(f), tuple(b), tuple(wgrad), tuple(split.work))


def rank_parts(prof: Profiled, split: RankSplit, j: int, pp: int) -> dict[str, float]:
    """Rank j's work per micro-batch by component (the time breakdown)."""
    chunk_sum = split.chunk_sum
    parts = {
        "compute": chunk_sum("compute", j),
        "recompute": chunk_sum("recompute", j),
        "tp": chunk_sum("tp", j),
        "cp": chunk_sum("cp", j),
        "ep": chunk_sum("ep", j),
        "host": chunk_sum("host", j),
        "pp": split.p2p_s + prof.vocab_comm_s,
    }
    parts["compute"] += prof.every.compute_s
    parts["tp"] += prof.every.tp_s
    if j == 0:
        parts["compute"] += prof.first.compute_s
        parts["tp"] += prof.first.tp_s
    if j == split.last_rank % pp:
        parts["compute"] += prof.last.compute_s
        parts["tp"] += prof.last.tp_s
    return parts


def adam_step_s(ctx: ProblemContext, prof: Profiled, split: RankSplit, pp: int) -> float:
    """The optimizer step of the rank with the largest shard (every rank steps at once)."""
    return max(rank_adam_step_s(ctx, prof, split, pp))


def rank_adam_step_s(ctx: ProblemContext, prof: Profiled, split: RankSplit, pp: int) -> list[float]:
    """Each pipeline rank's optimizer step: its parameter shard streamed through HBM."""
    shard = rank_shards(prof, split, pp)
    if prof.key is not None and prof.key.offload_optimizer != "none":
        return [0.0] * pp  # the Adam step runs on the CPU (`offload.py`)
    per_param = ctx.config.adam_step_bytes_per_param / (ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY)
    return [x * per_param for x in shard]


def rank_shards(prof: Profiled, split: RankSplit, pp: int) -> list[float]:
    """Each pipeline rank's optimizer shard, parameters."""
    shard = [split.chunk_sum("shard_params", j) for j in range(pp)]
    shard[0] += prof.first.state.shard_params
    shard[split.last_rank] += prof.last.state.shard_params
    if prof.vocab_parallel:  # every rank steps its vocabulary shard
        shard = [x + prof.every.state.shard_params for x in shard]
    return shard


def _rank_state(prof: Profiled, split: RankSplit, name: str, j: int, pp: int) -> float:
    """A state prefix (`weights`, `optimizer`) summed over rank j's chunks and extras."""
    total = split.chunk_sum(name, j)
    attr = f"{name}_bytes"
    if j == 0:
        total += getattr(prof.first.state, attr)
    if j == split.last_rank % pp:
        total += getattr(prof.last.state, attr)
    return total


def offload_s(
    prof: Profiled,
    split: RankSplit,
    pp: int,
    m: int,
    fwd_rank: list[float],
    bwd_rank: list[float],
    violations: list[Violation],
) -> tuple[float, dict[str, Any]]:
    """The step's offload seconds (the busiest rank's, `offload.py`) and its figures;
    appends a `host_memory` violation when a node's offloaded bytes exceed its host memory."""
    key, rates = prof.key, prof.host
    if key is None or rates is None or not key.offloads:
        return 0.0, {}
    act_prefix = prof.prefix("act")
    held = prof.public.inflight_microbatches
    shard = rank_shards(prof, split, pp)
    ranks = []
    for j in range(pp):
        ranges = split.rank_ranges[j]
        ranks.append(
            rank_offload(
                rates,
                key,
                forward_s=fwd_rank[j],
                backward_s=bwd_rank[j],
                activation_bytes=split.chunk_sum("act", j),
                held_activation_bytes=sum(
                    held[j][c] * (act_prefix[hi] - act_prefix[lo])
                    for c, (lo, hi) in enumerate(ranges)
                ),
                weights_bytes=_rank_state(prof, split, "weights", j, pp),
                optimizer_bytes=_rank_state(prof, split, "optimizer", j, pp),
                shard_params=shard[j],
            )
        )
    per_rank = [m * r.per_microbatch_s + r.optimizer_s for r in ranks]
    node_bytes = rates.gpus_per_node * max(r.host_bytes for r in ranks)
    if node_bytes > rates.host_memory_bytes:
        violations.append(
            Violation(
                kind="host_memory",
                field="plan.offload",
                detail=(
                    f"offloaded states and activations take {_gib(node_bytes):.0f} GiB of host "
                    f"memory per node; {_gib(rates.host_memory_bytes):.0f} GiB are usable "
                    f"({HOST_MEMORY_USABLE:.0%} of the node's DRAM)"
                ),
            )
        )
    return max(per_rank), {
        "rank_offload_s": per_rank,
        "offload_activation_s_per_microbatch": [r.per_microbatch_s for r in ranks],
        "offload_optimizer_s": [r.optimizer_s for r in ranks],
        "offload_host_bytes_per_node": node_bytes,
        "host_link_bytes_per_s": rates.link,
        "host_dram_bytes_per_s_per_gpu": rates.dram,
        "nvme_bytes_per_s_per_gpu": rates.nvme,
    }


def fill_drain_s(prof: Profiled, pp: int) -> float:
    """Overlapped send/receives still fill and drain the pipeline: one hop per stage
    boundary each way (0 when the transfers are exposed: they are in the rank work)."""
    return 2 * (pp - 1) * prof.p2p_raw_s if prof.p2p_s == 0.0 else 0.0


def _forward_backward(prof: Profiled, split: RankSplit, pp: int) -> tuple[list[float], list[float]]:
    """Forward and backward (with recompute) time per micro-batch of every rank."""
    fwd = [split.chunk_sum("forward", j) for j in range(pp)]
    bwd = [split.chunk_sum("backward", j) for j in range(pp)]
    if prof.vocab_parallel:
        # every rank's vocabulary share; its collectives half in the forward (broadcast,
        # softmax barrier), half in the backward (input-gradient and embedding reductions)
        every = prof.every
        fwd_every = every.forward_s + prof.vocab_comm_s / 2.0
        bwd_every = every.compute_s + every.tp_s + prof.vocab_comm_s - fwd_every
        fwd = [x + fwd_every for x in fwd]
        bwd = [x + bwd_every for x in bwd]
    fwd[0] += prof.first.forward_s
    bwd[0] += prof.first.compute_s + prof.first.tp_s - prof.first.forward_s
    fwd[split.last_rank] += prof.last.forward_s
    bwd[split.last_rank] += prof.last.compute_s + prof.last.tp_s - prof.last.forward_s
    return fwd, bwd


def evaluate(
    ctx: ProblemContext, plan: TrainingPlan, violations: list[Violation]
) -> TrainingEstimate:
    """Full estimate of a plan with stage_layers set (the caller checked the rules and
    passes their `violations`).

    Raises:
        InfeasiblePlan: kind "divisibility" when the degrees do not multiply to the GPU
            count or stage_layers is missing or does not sum to num_layers.
    """
    problem = ctx.problem
    p = plan.parallelism
    if p.world_size != problem.num_gpus:
        raise InfeasiblePlan(
            "divisibility",
            violations[0].detail
            if violations
            else f"plan uses {p.world_size} GPUs, cluster has {problem.num_gpus}",
        )
    model = ctx.model
    L, pp, v = model.num_layers, p.pipeline, p.virtual_pipeline
    stages = plan.stage_layers
    if stages is None:
        raise InfeasiblePlan(
            "divisibility",
            "stage_layers must be set to evaluate a plan "
            f"(pipeline × virtual_pipeline = {pp * v} entries summing to "
            f"num_layers = {L})",
        )
    if len(stages) != pp * v or sum(stages) != L or min(stages) < 1:
        raise InfeasiblePlan(
            "divisibility",
            f"stage_layers {stages} must have {pp * v} "
            f"positive entries summing to num_layers ({L}); "
            f"they sum to {sum(stages)}",
        )
    key = plan.key()
    prof = profiled(ctx, key)
    cfg, pub = ctx.config, prof.public
    m = pub.num_microbatches
    schedule = get_schedule(plan.pipeline_schedule)
    split = rank_work(prof, stages, pp, v, schedule.placement)
    rank_ranges, chunk_sum, work = split.rank_ranges, split.chunk_sum, split.work
    last = split.last_rank % pp
    fwd_rank, bwd_rank = _forward_backward(prof, split, pp)
    times = stage_times(prof, split, pp)
    sched = pipeline_step(times, m, v, plan.pipeline_schedule)
    crit = max(range(pp), key=lambda j: work[j])

    # Parameters per rank (for DP traffic and the optimizer step).
    params = [chunk_sum("params", j) for j in range(pp)]
    expert_params = [chunk_sum("expert_params", j) for j in range(pp)]
    params[0] += prof.first.state.params
    params[last] += prof.last.state.params
    if key.vocab_parallel:
        params = [x + prof.every.state.params for x in params]
    layers_per_rank = [sum(hi - lo for lo, hi in ranges) for ranges in rank_ranges]
    a2a_on_nic = (
        model.moe is not None
        and key.expert > 1
        and expert_groups(
            ctx, key.expert, key.expert_tensor, p.data * p.context * p.tensor
        ).expert.tier
        == "inter"
    )
    ranks = [
        RankWork(
            dense_params=params[j] - expert_params[j],
            expert_params=expert_params[j],
            units=layers_per_rank[j] + (j == 0) + (j == last) + key.vocab_parallel,
            forward_s=fwd_rank[j],
            backward_s=bwd_rank[j],
            fill_slack_s=sum(fwd_rank[:j]),
            drain_slack_s=sum(bwd_rank[:j]),
            nic_busy_s=chunk_sum("a2a", j) if a2a_on_nic else 0.0,
        )
        for j in range(pp)
    ]
    dp = data_parallel_s(ctx, prof, key, ranks, m)
    rank_optimizer = rank_adam_step_s(ctx, prof, split, pp)
    optimizer_s = max(rank_optimizer)
    fill_drain = fill_drain_s(prof, pp)
    fp8_weights = _fp8_weight_casts_s(ctx, key, params, prof, last)
    # the overlapped part of the data-parallel traffic took SMs from the compute it hid in
    dp_exposed = dp.exposed_s + ctx.interference * max(0.0, dp.raw_s - dp.exposed_s)
    tied = tied_embedding_sync_s(ctx, key)
    offload, offload_details = offload_s(prof, split, pp, m, fwd_rank, bwd_rank, violations)
    typical = sched.step_s + fill_drain + dp_exposed + tied + optimizer_s + fp8_weights + offload
    stragglers = typical * (ctx.straggler - 1.0)
    step = typical + stragglers + cfg.step_overhead_s

    cparts = rank_parts(prof, split, crit, pp)
    breakdown = TimeBreakdown(
        compute=m * (cparts["compute"] + cparts["recompute"]),
        tensor_parallel_comm=m * cparts["tp"],
        data_parallel_comm=dp_exposed + tied,
        pipeline_comm=m * cparts["pp"] + fill_drain,
        context_parallel_comm=m * cparts["cp"],
        expert_parallel_comm=m * cparts["ep"],
        bubble=sched.bubble_s,
        optimizer=optimizer_s,
        recompute=m * cparts["recompute"],
        overhead=cfg.step_overhead_s + m * cparts["host"] + fp8_weights + stragglers,
        offload=offload,
    )
    memory, totals = _memory(
        ctx, prof, rank_ranges, chunk_sum, violations, last, schedule.parameter_copies
    )

    n = problem.num_gpus
    rc_flops = ctx.recompute_flops.get(plan.recompute)
    if rc_flops is None:
        rc_flops = recompute_flops_per_step(
            model,
            ctx.global_batch,
            ctx.seq,
            plan.recompute,
            1.0
            if ctx.lengths is None
            else ctx.lengths.priced_attention_factor(plan.flash_attention),
        )
        ctx.recompute_flops[plan.recompute] = rc_flops
    mix = ctx.lengths
    real_tokens: float = ctx.global_batch * ctx.seq
    processed = ctx.processed_flops
    if mix is not None:
        real_tokens *= mix.real_token_fraction
        if not plan.flash_attention:  # the unfused kernel computes the masked blocks too
            processed = model_flops_per_step(model, ctx.global_batch, ctx.seq)
    metrics = TrainingMetrics(
        step_time_s=step,
        tokens_per_s=real_tokens / step,
        model_tflops_per_gpu=ctx.model_flops / step / n / 1e12,
        mfu=ctx.model_flops / step / n / ctx.peak_flops,
        **_mfu_by_peak(ctx, ctx.model_flops / step / n),
        peak_memory_gib=memory.peak_gib,
        bubble_fraction=sched.bubble_s / step,
        time_breakdown_s=breakdown,
        hardware_tflops_per_gpu=(processed + rc_flops) / step / n / 1e12,
        **_error_bars(step),
    )
    details: dict[str, Any] = {
        "num_microbatches": m,
        "rank_work_s": work,
        "rank_forward_s": fwd_rank,
        "rank_input_grad_s": list(times.input_grad_s),
        "rank_weight_grad_s": list(times.weight_grad_s),
        "stage_forward_s": list(times.forward_s),
        "pipeline_schedule": plan.pipeline_schedule,
        "vocab_parallel": plan.vocab_parallel,
        "vocab_parallel_comm_raw_s": prof.vocab_comm_raw_s,
        "critical_rank": crit,
        "group_tiers": prof.groups.tiers(),
        "p2p_time_s": prof.p2p_raw_s,
        "p2p_overlapped": prof.p2p_s == 0.0 and prof.p2p_raw_s > 0.0,
        "data_parallel_comm_raw_s": dp.raw_s,
        "data_parallel_comm_exposed_s": dp.exposed_s,
        "framework": key.framework,
        "rank_params": params,
        "memory_total_gib": [_gib(x) for x in totals],
        # per-rank parts of the step, for composing plans whose ranks sit on different
        # hardware (`cost_models.mixed`)
        "rank_data_parallel_exposed_s": list(dp.rank_exposed_s),
        "rank_data_parallel_raw_s": list(dp.rank_raw_s),
        "rank_optimizer_s": rank_optimizer,
        "p2p_bytes": p2p_bytes(ctx, LayerShape.of(key)) if pp > 1 else 0.0,
        "fill_drain_s": fill_drain,
        "fp8_weight_casts_s": fp8_weights,
        "tied_embedding_sync_s": tied,
        "tied_embedding_bytes": tied_embedding_bytes(ctx, key),
        "dp_interference": ctx.interference,
        "straggler_factor": ctx.straggler,
        "step_overhead_s": cfg.step_overhead_s,
        "model_flops_per_step": ctx.model_flops,
        "recompute_flops_per_step": rc_flops,
        **offload_details,
    }
    if model.moe is not None:
        details["expert_parallel"] = _moe_details(ctx, prof, key, crit, chunk_sum, m)
    if mix is not None:
        lengths = mix.report(ctx.global_batch)
        lengths["priced_attention_factor"] = mix.priced_attention_factor(key.flash_attention)
        per_bucket = mix.per_bucket_context_parallel(
            key.context,
            key.micro_batch_size * ctx.seq / key.context,
            breakdown.context_parallel_comm,
            step,
        )
        if per_bucket is not None:
            lengths["per_bucket_context_parallel"] = per_bucket
        details["sequence_lengths"] = lengths
    return TrainingEstimate(
        plan=plan,
        feasible=not violations,
        violations=violations,
        metrics=metrics,
        memory=memory,
        details=details,
    )


def _mfu_by_peak(ctx: ProblemContext, flops_per_gpu_s: float) -> dict[str, float]:
    """MFU against the dense BF16 and, for FP8 training, FP8 peaks (both named)."""
    acc = ctx.problem.cluster.accelerator
    out: dict[str, float] = {}
    precision = ctx.problem.workload.precision
    if precision in ("bf16", "fp16", "fp8"):
        try:
            out["mfu_bf16_peak"] = flops_per_gpu_s / acc.peak_flops("bf16")
        except KeyError:
            pass
    if precision == "fp8" and acc.peak_tflops.get("fp8"):
        out["mfu_fp8_peak"] = flops_per_gpu_s / acc.peak_flops("fp8")
    return out


def _fp8_weight_casts_s(
    ctx: ProblemContext, key: PlanKey, params: list[float], prof: Profiled, last: int
) -> float:
    """FP8 weight quantisation, once per step on the busiest rank (Transformer Engine caches
    the FP8 weights across a step's micro-batches, `fp8.py`): read BF16, write the FP8
    copies; with FP8 primary weights only the transposes where needed. The embedding and
    the LM head stay in BF16."""
    fp8 = ctx.fp8
    if fp8 is None:
        return 0.0
    if ctx.framework(key.framework).config.fp8_param_gather:
        per_param = 2.0 if fp8.transposes else 0.0
    else:
        per_param = fp8.quantize_bytes_per_element
    extras = (prof.first.state.params, prof.last.state.params)
    every = prof.every.state.params
    layer_params = [
        p - every - (extras[0] if j == 0 else 0.0) - (extras[1] if j == last else 0.0)
        for j, p in enumerate(params)
    ]
    return max(layer_params) * per_param / (ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY)


def _memory(
    ctx: ProblemContext,
    prof: Profiled,
    rank_ranges: list[list[tuple[int, int]]],
    chunk_sum: ChunkSum,
    violations: list[Violation],
    last: int = -1,
    copies: int = 1,
) -> tuple[MemoryReport, list[float]]:
    """Memory per pipeline rank (appending a `memory` violation per rank over the limit)
    and the per-rank totals, bytes. `last`: the rank of the LM head; `copies`: parameter
    copies per rank (DualPipe holds its stage and its mirror's: weights, gradients and
    optimizer states twice)."""
    pub = prof.public
    frag = ctx.config.fragmentation_fraction
    act_prefix = prof.prefix("act")
    usable = ctx.usable_bytes
    pp = len(rank_ranges)
    by_stage: list[StageMemory] = []
    totals: list[float] = []
    key = prof.key
    offloads = key is not None and key.offloads
    for j in range(pp):
        every = prof.every
        weights = chunk_sum("weights", j) + prof.zero3_working_bytes + every.state.weights_bytes
        grads = chunk_sum("grads", j) + every.state.grads_bytes
        opt = chunk_sum("optimizer", j) + every.state.optimizer_bytes
        acts = prof.recompute_working_bytes + every.activation_bytes
        held = pub.inflight_microbatches[j]
        if offloads:  # a fraction of the layers' activations waits in host memory
            assert key is not None
            kept = 1.0 - key.offload_activations
            for chunk, (lo, hi) in enumerate(rank_ranges[j]):
                acts += kept * held[chunk] * (act_prefix[hi] - act_prefix[lo])
        else:
            for chunk, (lo, hi) in enumerate(rank_ranges[j]):
                acts += held[chunk] * (act_prefix[hi] - act_prefix[lo])
        if j == 0:
            weights += prof.first.state.weights_bytes
            grads += prof.first.state.grads_bytes
            opt += prof.first.state.optimizer_bytes
            acts += pub.inflight_microbatches[0][0] * prof.first.activation_bytes
        if j == last % pp:
            weights += prof.last.state.weights_bytes
            grads += prof.last.state.grads_bytes
            opt += prof.last.state.optimizer_bytes
            acts += prof.last.activation_bytes
        if offloads:  # offloaded states leave the GPU (`offload.py`); ZeRO-3's copy stays
            assert key is not None
            if key.offload_parameters != "none":
                weights = prof.zero3_working_bytes
            if key.offload_optimizer != "none":
                opt = 0.0
        if copies > 1:
            weights, grads, opt = copies * weights, copies * grads, copies * opt
        other = prof.runtime_bytes + prof.bucket_bytes + frag * acts
        total = weights + grads + opt + acts + other
        totals.append(total)
        by_stage.append(
            StageMemory(
                weights_gib=_gib(weights),
                gradients_gib=_gib(grads),
                optimizer_gib=_gib(opt),
                activations_gib=_gib(acts),
                other_gib=_gib(other),
                total_gib=_gib(total),
            )
        )
        if total > usable:
            violations.append(
                Violation(
                    kind="memory",
                    detail=(
                        f"pipeline rank {j} needs {_gib(total):.1f} GiB of {_gib(usable):.2f} GiB "
                        f"usable (weights {_gib(weights):.1f}, gradients {_gib(grads):.1f}, optimizer "
                        f"{_gib(opt):.1f}, activations {_gib(acts):.1f}, other {_gib(other):.1f})"
                    ),
                )
            )
    peak = max(totals)
    report = MemoryReport(
        peak_gib=_gib(peak),
        capacity_gib=ctx.problem.cluster.accelerator.memory_gib,
        usable_gib=_gib(usable),
        by_stage=by_stage,
    )
    return report, totals


def _moe_details(
    ctx: ProblemContext,
    prof: Profiled,
    key: PlanKey,
    crit: int,
    chunk_sum: ChunkSum,
    m: int,
) -> dict[str, Any]:
    """Expert-parallel figures for explanations: the all-to-all time of one MoE layer per
    micro-batch (forward + backward + recomputed forward), the tiers its groups cross, the
    busiest EP rank's load factor and the critical rank's all-to-all seconds per step."""
    moe_layer = next(i for i, f in enumerate(ctx.moe_flags) if f)
    cost = prof.costs.items[moe_layer]
    groups = expert_groups(ctx, key.expert, key.expert_tensor, key.data * key.context * key.tensor)
    return {
        "all_to_all_s_per_layer": cost.a2a_s,
        "expert_comm_s_per_layer": cost.ep_s,
        "all_to_all_tier": groups.expert.tier,
        "expert_tensor_tier": groups.expert_tensor.tier,
        "expert_data_tier": groups.expert_data.tier,
        "load_factor": expert_load(ctx, key.expert).load_factor,
        "all_to_all_s_per_step": m * chunk_sum("a2a", crit),
        "local_experts": ctx.model.moe.num_experts // key.expert if ctx.model.moe else 0,
    }
