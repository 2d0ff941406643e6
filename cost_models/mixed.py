"""Training plans whose pipeline stages run on different hardware: priced by composing the
homogeneous cost model's per-rank figures, pool by pool.

A mixed cluster is a set of device pools (`ResolvedCluster.pools`: node groups of identical
hardware). A mixed plan names the pool of every pipeline stage (`TrainingPlan.stage_groups`);
the context and data degrees are the same on every stage, and so is the tensor degree
unless the plan gives one per stage (`stage_tensor`, HexiScale's per-stage layouts), so
stage j is `tensor_j × context × data` GPUs of its pool and talks to its neighbours by
pipeline send / receives only.

How it is priced. For each (pool, tensor degree) the plan's stages use, the homogeneous
cost model evaluates the same plan (same degrees but that tensor degree on every stage,
same micro-batch, recompute, split) on a *virtual* cluster of that pool's nodes holding
that job's GPUs (`pool_problem`): every layer, every stage's data-parallel reduction,
optimizer step and memory priced on that hardware, its own fabric carrying the stage's
collectives. Rank j of the mixed plan then takes rank j's figures from the evaluation of
its pool at its degree:

- work per micro-batch `W_j` (layers, embedding / LM head, exposed send / receives): the
  pool's `rank_work_s[j]`; a stage boundary between two pools sends the boundary
  activation over the link between them (`ResolvedCluster.inter_pool_bandwidth_gb_s` ×
  the slower pool's scale-out efficiency) instead of the pool's own fabric: each of the two
  ranks pays the difference once per micro-batch when its framework exposes send / receives,
  and fill and drain pay it once each way when it overlaps them;
- the schedule over the composed `W_j` (`pipeline_step`, the homogeneous formula on uneven
  stages);
- data-parallel communication: the homogeneous rule on per-rank figures (the largest exposed
  part plus the interference share of the largest raw part), each rank's from its pool;
  the optimizer step: the slowest rank's; FP8 weight casts: the slowest pool's;
- stragglers, per-step overhead: the homogeneous factors (they depend on the GPU count);
- memory: rank j's stage memory from its pool's evaluation, against that pool's usable
  memory (a `memory` violation names the stage and the pool); the summary (`peak_gib`,
  `capacity_gib`) is the stage with the least headroom on its own GPUs;
- MFU: model FLOPs per second over the sum of the used GPUs' dense peaks.

With every stage on one pool this reproduces the homogeneous estimate (tests check it). The
time breakdown takes the critical rank's pool breakdown for the intra-layer parts and the
composed figures for the bubble, data-parallel, pipeline and optimizer parts; `compute`
takes what is left of the step, so the parts add up to it.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from cost_models.analytical.schedule import pipeline_step
from cost_models.analytical.schedules import StageTimes
from cost_models.analytical.training.profile import boundary_activation_bytes
from cost_models.base import LayerProfile, TrainingCostModel, TrainingEstimate, TrainingProblem
from hardware_catalog.schema import ResolvedCluster
from specs.errors import InfeasiblePlan
from specs.plan import (
    MemoryReport,
    TimeBreakdown,
    TrainingMetrics,
    TrainingPlan,
    Violation,
)

GIB = 1024**3


def field_refusal(detail: str, field: str, rule: str, value: Any) -> InfeasiblePlan:
    """A 422 naming the plan field, the rule and the value."""
    return InfeasiblePlan(
        "topology",
        detail,
        errors=[{"field": field, "rule": rule, "value": value, "message": detail}],
    )


def stage_gpus(plan: TrainingPlan) -> int:
    """GPUs of one pipeline stage: tensor × context × data (the widest stage's with
    `stage_tensor`)."""
    p = plan.parallelism
    return p.tensor * p.context * p.data


def gpus_of_stages(plan: TrainingPlan) -> list[int]:
    """GPUs of every pipeline stage: its tensor degree (`stage_tensor_degrees`) × context ×
    data."""
    p = plan.parallelism
    return [t * p.context * p.data for t in plan.stage_tensor_degrees()]


def at_tensor(plan: TrainingPlan, tensor: int) -> TrainingPlan:
    """`plan` with every stage at tensor degree `tensor`, without stage groups or per-stage
    degrees: what the homogeneous cost model prices a stage of that degree with (sequence
    parallelism kept where the plan has it and the degree allows it)."""
    p = plan.parallelism
    dims = p.model_copy(
        update={"tensor": tensor, "sequence_parallel": p.sequence_parallel and tensor > 1}
    )
    return plan.model_copy(update={"parallelism": dims, "stage_groups": None, "stage_tensor": None})


def stage_setups(plan: TrainingPlan, names: list[str]) -> list[tuple[str, int]]:
    """(pool, tensor degree) of every stage: the homogeneous evaluations a mixed plan is
    composed from, one per distinct pair."""
    return list(zip(names, plan.stage_tensor_degrees(), strict=True))


def setup_gpus(plan: TrainingPlan, tensor: int) -> int:
    """GPUs of the virtual homogeneous job that prices the stages of degree `tensor`: every
    stage at that degree."""
    p = plan.parallelism
    return tensor * p.context * p.data * p.pipeline


def plan_pools(plan: TrainingPlan) -> set[str]:
    """The pools (or node groups) a plan's stages and data shares name; empty for a plan
    of a homogeneous cluster."""
    return set(plan.stage_groups or ()) | {share.group for share in plan.data_shares or ()}


def node_shapes(cluster: ResolvedCluster, pools: Sequence[str]) -> set[tuple[int, str]]:
    """The (GPUs per node, vendor) of each named pool: one torchrun job runs as many
    processes on every node, of one vendor, so a plan across pools launches as one job only
    when this holds a single shape (`app.exports.base.plan_node_layout`)."""
    by_name = cluster.pools()
    return {(by_name[n].gpus_per_node, by_name[n].groups[0].accelerator.vendor) for n in pools}


def pool_names(
    cluster: ResolvedCluster, names: list[str], field: str = "plan.stage_groups.{}"
) -> list[str]:
    """The pool of every stage: a name is a pool's name or the name of any of its groups.

    Raises:
        InfeasiblePlan: ("topology") a name that is no group of the cluster (`field` with
            the entry's index).
    """
    pools = cluster.pools()
    by_group: dict[str, str] = {}
    for pool_name, pool in pools.items():
        by_group[pool_name] = pool_name
        for group in pool.groups:
            if group.name is not None:
                by_group.setdefault(group.name, pool_name)
    out = []
    for j, name in enumerate(names):
        if name not in by_group:
            where = field.format(j)
            raise field_refusal(
                f"{where} = {name!r} names no node group of the cluster "
                f"(groups: {', '.join(sorted(by_group))})",
                where,
                "must name a node group",
                name,
            )
        out.append(by_group[name])
    return out


_POOL_PROBLEMS: dict[tuple[int, str, int], tuple[TrainingProblem, TrainingProblem]] = {}
_MAX_POOL_PROBLEMS = 256


def pool_problem(problem: TrainingProblem, pool: ResolvedCluster, gpus: int) -> TrainingProblem:
    """`_pool_problem`, the same object for the same request (so the cost model's caches,
    which live with the problem object, are shared by every candidate of a search)."""
    key = (id(problem), pool.groups[0].name or pool.groups[0].accelerator.id, gpus)
    hit = _POOL_PROBLEMS.get(key)
    if hit is not None and hit[0] is problem:
        return hit[1]
    if len(_POOL_PROBLEMS) >= _MAX_POOL_PROBLEMS:
        _POOL_PROBLEMS.clear()
    sub = _pool_problem(problem, pool, gpus)
    _POOL_PROBLEMS[key] = (problem, sub)
    return sub


def _pool_problem(problem: TrainingProblem, pool: ResolvedCluster, gpus: int) -> TrainingProblem:
    """The problem on a virtual cluster of `pool`'s nodes holding `gpus` GPUs: whole nodes;
    part of one node when `gpus` is less than a node; otherwise nodes of gcd(gpus, node size)
    GPUs (pipeline hand-offs between them then go over the scale-out fabric, which can only
    overstate them)."""
    group = pool.groups[0]
    node = group.gpus_per_node
    if gpus % node == 0:
        virtual = group.model_copy(update={"num_nodes": gpus // node})
    else:
        # part of one node, or nodes of the largest size dividing both (a stage whose GPUs
        # divide the node still lies inside one of them)
        size = gpus if gpus < node else math.gcd(gpus, node)
        domain = group.scale_up_domain_gpus
        virtual = group.model_copy(
            update={
                "num_nodes": gpus // size,
                "gpus_per_node": size,
                "scale_up_domain_gpus": domain if domain % size == 0 else size,
            }
        )
    cluster = ResolvedCluster(groups=[virtual], fabric=pool.fabric)
    return dataclasses.replace(problem, cluster=cluster)


def hand_off_s(
    problem: TrainingProblem,
    plan: TrainingPlan,
    a: str,
    b: str,
    tensor: int | None = None,
) -> float:
    """One boundary send / receive between stages on pools `a` and `b` (0 on one pool).

    `tensor`: the narrower of the two stages' tensor degrees (default the plan's). Between
    stages of different degrees each GPU of the narrower stage holds the larger shard of
    the boundary activation, 1/t of it with sequence parallelism, and its link carries it:
    the hand-off is priced at that shard."""
    if a == b:
        return 0.0
    p = plan.parallelism
    t = p.tensor if tensor is None else tensor
    size = boundary_activation_bytes(
        problem.model.hidden_size,
        problem.workload.sequence_length,
        plan.micro_batch_size,
        t,
        p.context,
        p.sequence_parallel and t > 1,
    )
    pools = problem.cluster.pools()
    return size / problem.cluster.inter_pool_bytes_per_s(pools[a], pools[b])


def boundary_extra_s(
    problem: TrainingProblem,
    plan: TrainingPlan,
    stage_pools: list[str],
    profiles: list[LayerProfile],
) -> list[float]:
    """Per stage, the time per micro-batch its hand-offs to other pools add over its own
    fabric's exposed send / receives (`profiles[j].p2p_time_s`; nothing when its framework
    overlaps them): the constant the mixed split adds to the stage, as `evaluate_mixed` adds
    it to the rank's work."""
    extra = [0.0] * len(stage_pools)
    degrees = plan.stage_tensor_degrees()
    for j in range(len(stage_pools) - 1):
        if stage_pools[j] == stage_pools[j + 1]:
            continue
        narrower = min(degrees[j], degrees[j + 1])
        cross = hand_off_s(problem, plan, stage_pools[j], stage_pools[j + 1], narrower)
        if cross == 0.0:
            continue
        for r in (j, j + 1):
            own = profiles[r].p2p_time_s
            if own > 0.0:
                extra[r] += max(0.0, cross - own)
    return extra


def _pool_details(
    pools: dict[str, ResolvedCluster], names: list[str], per_stage: list[int]
) -> dict[str, Any]:
    """Per pool: its accelerator, GPUs, GPUs the plan uses and the stages it runs
    (`per_stage`: every stage's GPUs)."""
    return {
        name: {
            "accelerator": pools[name].groups[0].accelerator.id,
            "gpus": pools[name].num_gpus,
            "gpus_used": sum(g for n, g in zip(names, per_stage, strict=True) if n == name),
            "stages": [j for j in range(len(names)) if names[j] == name],
        }
        for name in pools
    }


def _tied_embedding_sync_s(
    problem: TrainingProblem, names: list[str], details: list[dict[str, Any]]
) -> float:
    """The tied-embedding gradient all-reduce between the first and the last stage
    (`data_parallel.tied_embedding_sync_s`): the last stage's pool evaluation when both
    stages share a pool; across pools a two-rank ring, which moves the whole shard each
    way once (the larger of the two stages' shards: the narrower tensor degree's), over
    the link between them."""
    if names[0] == names[-1]:
        return float(details[-1].get("tied_embedding_sync_s", 0.0))
    shard = max(float(details[j].get("tied_embedding_bytes", 0.0)) for j in (0, -1))
    if shard == 0.0:
        return 0.0
    pools = problem.cluster.pools()
    return shard / problem.cluster.inter_pool_bytes_per_s(pools[names[0]], pools[names[-1]])


def evaluate_mixed(
    model: TrainingCostModel, problem: TrainingProblem, plan: TrainingPlan
) -> TrainingEstimate:
    """The estimate of a plan with `stage_groups` (module docstring).

    Raises:
        InfeasiblePlan: ("topology") an unknown group, a pool without the GPUs its stages
            need, or stages that do not fill whole nodes; or whatever the homogeneous
            evaluation of a pool raises.
    """
    assert plan.stage_groups is not None
    cluster = problem.cluster
    pools = cluster.pools()
    names = pool_names(cluster, plan.stage_groups)
    per_stage = gpus_of_stages(plan)
    degrees = plan.stage_tensor_degrees()
    p = plan.parallelism
    pp, world = p.pipeline, plan.num_gpus
    for pool_name, stages in Counter(names).items():
        need = sum(g for n, g in zip(names, per_stage, strict=True) if n == pool_name)
        have = pools[pool_name].num_gpus
        if need > have:
            raise field_refusal(
                f"{stages} stages of {per_stage[names.index(pool_name)]} GPUs need {need} GPUs "
                f"of {pool_name}; it has {have}",
                "plan.stage_groups",
                f"at most {have} GPUs of {pool_name}",
                need,
            )
    setups = stage_setups(plan, names)
    if len(set(setups)) == 1:  # one pool, one degree: the homogeneous estimate (any schedule)
        base = plan.model_copy(update={"stage_groups": None, "stage_tensor": None})
        alone = model.evaluate(pool_problem(problem, pools[names[0]], world), base)
        one_pool: dict[str, Any] = {**alone.details, "stage_pools": names}
        one_pool["pool_boundaries"] = []
        one_pool["pools"] = _pool_details(pools, names, per_stage)
        return dataclasses.replace(
            alone, plan=_with_framework(plan, alone.plan.framework), details=one_pool
        )
    estimates = {
        (name, t): model.evaluate(
            pool_problem(problem, pools[name], setup_gpus(plan, t)), at_tensor(plan, t)
        )
        for name, t in dict.fromkeys(setups)
    }
    at = [estimates[setups[j]] for j in range(pp)]
    details = [e.details for e in at]
    m = int(details[0]["num_microbatches"])
    work = [float(details[j]["rank_work_s"][j]) for j in range(pp)]
    own_work = list(work)
    extra_fill = 0.0
    boundaries = []
    for j in range(pp - 1):
        if names[j] == names[j + 1]:
            continue
        cross = hand_off_s(problem, plan, names[j], names[j + 1], min(degrees[j], degrees[j + 1]))
        boundaries.append({"after_stage": j, "from": names[j], "to": names[j + 1], "s": cross})
        for r in (j, j + 1):
            own = float(details[r].get("p2p_time_s", 0.0))
            if details[r].get("p2p_overlapped"):
                extra_fill = max(extra_fill, 2 * max(0.0, cross - own))
            else:
                work[r] += max(0.0, cross - own)
    # the schedule plug-in on each stage's own F / B / W (B takes the extra hand-off time)
    forward = [float(details[j]["stage_forward_s"][j]) for j in range(pp)]
    wgrad = [float(details[j]["rank_weight_grad_s"][j]) for j in range(pp)]
    times = StageTimes(
        tuple(forward),
        tuple(t - f - w for t, f, w in zip(work, forward, wgrad, strict=True)),
        tuple(wgrad),
        tuple(work),
    )
    sched = pipeline_step(times, m, plan.parallelism.virtual_pipeline, plan.pipeline_schedule)
    crit = max(range(pp), key=lambda j: work[j])

    def per_rank(name: str) -> list[float]:
        return [float(details[j][name][j]) for j in range(pp)]

    dp_exposed_max = max(per_rank("rank_data_parallel_exposed_s"))
    dp_raw_max = max(per_rank("rank_data_parallel_raw_s"))
    interference = max(float(d["dp_interference"]) for d in details)
    dp = dp_exposed_max + interference * max(0.0, dp_raw_max - dp_exposed_max)
    optimizer = max(per_rank("rank_optimizer_s"))
    fill_drain = max(float(d["fill_drain_s"]) for d in details) + extra_fill
    fp8 = max(float(d["fp8_weight_casts_s"]) for d in details)
    tied = _tied_embedding_sync_s(problem, names, details)
    typical = sched.step_s + fill_drain + dp + tied + optimizer + fp8
    straggler = max(float(d["straggler_factor"]) for d in details)
    stragglers = typical * (straggler - 1.0)
    overhead = float(details[0]["step_overhead_s"])
    step = typical + stragglers + overhead

    violations: list[Violation] = []
    seen: set[str] = set()
    for est in estimates.values():
        for v in est.violations:
            if v.kind != "memory" and v.detail not in seen:
                seen.add(v.detail)
                violations.append(v)
    by_stage = []
    tightest = 0  # the stage with the least headroom on its own GPUs
    for j in range(pp):
        stage = at[j].memory.by_stage[j]
        by_stage.append(stage)
        usable = at[j].memory.usable_gib
        room = usable - stage.total_gib
        if room < at[tightest].memory.usable_gib - by_stage[tightest].total_gib:
            tightest = j
        if stage.total_gib > usable:
            violations.append(
                Violation(
                    kind="memory",
                    detail=(
                        f"stage {j} on {names[j]} needs {stage.total_gib:.1f} GiB per GPU; "
                        f"{usable:.1f} GiB usable"
                    ),
                    field="plan.stage_layers",
                )
            )
    # the summary is the tightest stage's: its peak against its own GPUs' memory, so that
    # capacity − peak is the plan's least headroom (by_stage has every stage)
    peak = by_stage[tightest].total_gib
    memory = MemoryReport(
        peak_gib=peak,
        capacity_gib=at[tightest].memory.capacity_gib,
        usable_gib=at[tightest].memory.usable_gib,
        by_stage=by_stage,
    )

    flops = float(details[0]["model_flops_per_step"])
    rc_flops = float(details[0]["recompute_flops_per_step"])
    precision = problem.workload.precision
    peak_flops = sum(
        per_stage[j] * pools[names[j]].groups[0].accelerator.peak_flops(precision)
        for j in range(pp)
    )
    crit_breakdown = at[crit].metrics.time_breakdown_s
    # the pool's breakdown is its own critical rank's: scale its intra-layer parts to the
    # rank that is critical here (same hardware, other layers)
    pool_work = details[crit]["rank_work_s"]
    own_crit = float(pool_work[int(details[crit]["critical_rank"])])
    scale = float(pool_work[crit]) / own_crit if own_crit > 0 else 1.0
    parts = {
        "tensor_parallel_comm": crit_breakdown.tensor_parallel_comm * scale,
        "context_parallel_comm": crit_breakdown.context_parallel_comm * scale,
        "expert_parallel_comm": crit_breakdown.expert_parallel_comm * scale,
        "data_parallel_comm": dp + tied,
        "pipeline_comm": crit_breakdown.pipeline_comm
        + fill_drain
        - float(details[crit]["fill_drain_s"])
        + m * (work[crit] - own_work[crit]),  # hand-offs to other pools on this rank
        "bubble": sched.bubble_s,
        "optimizer": optimizer,
        "overhead": overhead + stragglers + fp8,
    }
    excess = sum(parts.values()) - step
    intra = ("tensor_parallel_comm", "context_parallel_comm", "expert_parallel_comm")
    intra_sum = sum(parts[k] for k in intra)
    if excess > 0 and intra_sum > 0:  # never more than the step: trim the scaled parts
        keep = max(0.0, 1.0 - excess / intra_sum)
        for k in intra:
            parts[k] *= keep
    breakdown = TimeBreakdown(
        compute=max(0.0, step - sum(parts.values())),
        recompute=min(crit_breakdown.recompute * scale, max(0.0, step - sum(parts.values()))),
        **parts,
    )
    tokens = problem.workload.real_tokens_per_step  # padding excluded
    metrics = TrainingMetrics(
        step_time_s=step,
        tokens_per_s=tokens / step,
        model_tflops_per_gpu=flops / step / world / 1e12,
        mfu=flops / step / peak_flops,
        peak_memory_gib=peak,
        bubble_fraction=sched.bubble_s / step,
        time_breakdown_s=breakdown,
        hardware_tflops_per_gpu=(flops + rc_flops) / step / world / 1e12,
        **_error_bars_like(at[crit].metrics, step),
    )
    mixed_details: dict[str, Any] = {
        "num_microbatches": m,
        "rank_work_s": work,
        "rank_forward_s": [float(details[j]["rank_forward_s"][j]) for j in range(pp)],
        "stage_forward_s": list(times.forward_s),
        "rank_input_grad_s": list(times.input_grad_s),
        "rank_weight_grad_s": list(times.weight_grad_s),
        "pipeline_schedule": plan.pipeline_schedule,
        "critical_rank": crit,
        "stage_pools": names,
        "pool_boundaries": boundaries,
        "pools": _pool_details(pools, names, per_stage),
        "stage_tensor": degrees,
        "framework": details[0].get("framework"),
    }
    return TrainingEstimate(
        plan=_with_framework(plan, details[0].get("framework")),
        feasible=not violations,
        violations=violations,
        metrics=metrics,
        memory=memory,
        details=mixed_details,
    )


def _error_bars_like(priced: TrainingMetrics, step_s: float) -> dict[str, float]:
    """`step_time_s_low` / `_high` of a composed step: the relative interval of the pool
    estimate it is composed around (the cost model's error bars scale with the step), or
    nothing when that estimate has none."""
    low, high = priced.step_time_s_low, priced.step_time_s_high
    if low is None or high is None or priced.step_time_s <= 0:
        return {}
    ratio = step_s / priced.step_time_s
    return {"step_time_s_low": low * ratio, "step_time_s_high": high * ratio}


def _with_framework(plan: TrainingPlan, framework: Any) -> TrainingPlan:
    """The plan naming the framework it was priced with (as the homogeneous estimate
    does), when it named none."""
    if plan.framework is not None or not isinstance(framework, str) or not framework:
        return plan
    return plan.model_copy(update={"framework": framework})


def check_data_shares(problem: TrainingProblem, plan: TrainingPlan) -> list[str]:
    """The pool of every share, after the rules a `data_shares` plan must meet: known
    groups, sequences adding to the global batch and each a multiple of the micro-batch,
    every group with the GPUs its replicas take.

    Raises:
        InfeasiblePlan: ("topology") naming the share's field.
    """
    shares = plan.data_shares
    assert shares is not None
    cluster, wl = problem.cluster, problem.workload
    pools = cluster.pools()
    names = pool_names(cluster, [x.group for x in shares], "plan.data_shares.{}.group")
    total = sum(x.replicas * x.sequences for x in shares)
    if total != wl.global_batch_size:
        raise field_refusal(
            f"data_shares carry {total} sequences per step; global_batch_size is "
            f"{wl.global_batch_size}",
            "plan.data_shares",
            f"replicas × sequences must add to {wl.global_batch_size}",
            total,
        )
    p = plan.parallelism
    per_replica = p.tensor * p.pipeline * p.context
    for j, (share, name) in enumerate(zip(shares, names, strict=True)):
        if share.sequences % plan.micro_batch_size:
            raise field_refusal(
                f"data_shares[{j}] gives each replica {share.sequences} sequences, not a "
                f"multiple of micro_batch_size {plan.micro_batch_size}",
                f"plan.data_shares.{j}.sequences",
                f"a multiple of {plan.micro_batch_size}",
                share.sequences,
            )
        gpus = share.replicas * per_replica
        if gpus > pools[name].num_gpus:
            raise field_refusal(
                f"{share.replicas} replicas of {per_replica} GPUs need {gpus} GPUs of {name}; "
                f"it has {pools[name].num_gpus}",
                f"plan.data_shares.{j}.replicas",
                f"at most {pools[name].num_gpus // per_replica} replicas",
                share.replicas,
            )
    return names


def evaluate_data_shares(
    model: TrainingCostModel, problem: TrainingProblem, plan: TrainingPlan
) -> TrainingEstimate:
    """A plan whose data-parallel replicas sit on several pools with uneven shares of the
    batch (`plan.data_shares`, `stage_layers` set).

    Each pool's replicas are priced by the homogeneous cost model as a job of their own
    (its replicas, its share of the batch: `replicas × sequences`), which includes their
    compute, their pipeline and their data-parallel reduction inside the pool. The step is
    the slowest pool's, plus the reduction across pools: after reducing inside each pool,
    every GPU exchanges its 1/r share of its gradients (2 bytes per parameter) with the
    other pools, twice (reduce-scatter and all-gather, a ring's 2·(n−1)/n ≈ 2), r the
    fewest replicas of any pool, at the inter-pool rate (hierarchical all-reduce, as NCCL
    runs it across node groups). Model FLOPs are the pools' sum; MFU is over the sum of the
    used GPUs' peaks; memory per pool against its own GPUs.

    Raises:
        InfeasiblePlan: an unknown group, sequences that do not add to the global batch or
            are not a multiple of the micro-batch, a pool without the GPUs its replicas need.
    """
    names = check_data_shares(problem, plan)
    shares = plan.data_shares
    assert shares is not None
    cluster, wl = problem.cluster, problem.workload
    pools = cluster.pools()
    p = plan.parallelism
    per_replica = p.tensor * p.pipeline * p.context
    estimates: dict[str, TrainingEstimate] = {}
    for share, name in zip(shares, names, strict=True):
        gpus = share.replicas * per_replica
        sub = pool_problem(problem, pools[name], gpus)
        sub = dataclasses.replace(
            sub,
            workload=wl.model_copy(update={"global_batch_size": share.replicas * share.sequences}),
        )
        part = plan.model_copy(
            update={
                "data_shares": None,
                "parallelism": p.model_copy(update={"data": share.replicas}),
            }
        )
        estimates[name] = model.evaluate(sub, part)
    slowest = max(estimates, key=lambda n: estimates[n].metrics.step_time_s)
    params = max(
        max(float(x) for x in est.details.get("rank_params", [0.0])) for est in estimates.values()
    )
    fewest = min(x.replicas for x in shares)
    bandwidth = (
        min(
            cluster.inter_pool_bytes_per_s(pools[a], pools[b])
            for a in estimates
            for b in estimates
            if a != b
        )
        if len(estimates) > 1
        else math.inf
    )
    across = 2 * 2.0 * params / fewest / bandwidth if len(estimates) > 1 else 0.0
    step = estimates[slowest].metrics.step_time_s + across
    flops = sum(float(e.details["model_flops_per_step"]) for e in estimates.values())
    rc = sum(float(e.details["recompute_flops_per_step"]) for e in estimates.values())
    world = p.world_size
    peak_flops = sum(
        x.replicas * per_replica * pools[n].groups[0].accelerator.peak_flops(wl.precision)
        for x, n in zip(shares, names, strict=True)
    )
    violations: list[Violation] = []
    for name, est in estimates.items():
        for v in est.violations:
            detail = f"on {name}: {v.detail}"
            violations.append(v.model_copy(update={"detail": detail}))
    tightest = min(estimates.values(), key=lambda e: e.memory.usable_gib - e.memory.peak_gib)
    base = estimates[slowest].metrics
    breakdown = base.time_breakdown_s.model_copy(
        update={
            "data_parallel_comm": base.time_breakdown_s.data_parallel_comm + across,
        }
    )
    metrics = TrainingMetrics(
        step_time_s=step,
        tokens_per_s=wl.real_tokens_per_step / step,  # padding excluded
        model_tflops_per_gpu=flops / step / world / 1e12,
        mfu=flops / step / peak_flops,
        peak_memory_gib=tightest.memory.peak_gib,
        bubble_fraction=base.time_breakdown_s.bubble / step,
        time_breakdown_s=breakdown,
        hardware_tflops_per_gpu=(flops + rc) / step / world / 1e12,
        **_error_bars_like(base, step),
    )
    details: dict[str, Any] = {
        "data_shares": {
            name: {
                "replicas": x.replicas,
                "sequences_per_replica": x.sequences,
                "step_time_s": estimates[name].metrics.step_time_s,
                "accelerator": pools[name].groups[0].accelerator.id,
            }
            for x, name in zip(shares, names, strict=True)
        },
        "slowest_group": slowest,
        "cross_group_reduction_s": across,
        "framework": estimates[slowest].details.get("framework"),
    }
    return TrainingEstimate(
        plan=_with_framework(plan, details["framework"]),
        feasible=not violations,
        violations=violations,
        metrics=metrics,
        memory=tightest.memory,
        details=details,
    )
