"""Training search on a cluster of mixed hardware (several device pools).

The space (exact over it: every candidate is priced, none is pruned by a heuristic):

1. **One pool alone**: the homogeneous search (`branch_and_bound.search`) on each pool's
   own GPUs, its plans carried over with every stage on that pool (the other pools idle).
   So the result is never worse than the best plan of any single pool.
2. **A pipeline across pools**: an ordering of two or more pools along the pipeline (each
   pool one contiguous block of stages), uniform tensor `t` and data `d` degrees (context 1,
   expert 1, one chunk per stage, 1F1B: what Megatron-Core runs with
   `--pipeline-model-parallel-layout`), each pool contributing every whole stage of `t·d`
   GPUs it holds (`⌊GPUs / (t·d)⌋`, at least one; the rest of the pool idles), and the
   micro-batch sizes, recompute modes, ZeRO stages and frameworks of the constraints. For
   each, the per-pool layer profiles (the cost model's `profile` on that pool's hardware)
   feed the exact mixed split (`solve_mixed_partition`: the slowest stage per micro-batch
   minimised within every stage's memory, hand-offs between pools included), and
   `cost_models.mixed.evaluate_mixed` prices the result.

`t` divides the attention heads, KV heads and FFN width and fits in every used pool's
scale-up domain; `t·d` is a divisor or a multiple of every used pool's node size; the total
stage count is at most the layer count; `d · micro-batch` divides the global batch. Fixed
fields of the constraints restrict each choice.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

from cost_models.base import TrainingCostModel, TrainingEstimate, TrainingProblem
from cost_models.mixed import evaluate_mixed, pool_problem
from hardware_catalog.schema import ResolvedCluster
from solver.base import SearchResult, SearchStats
from solver.estimate import MixedViolations, mixed_split
from solver.search.branch_and_bound import search as homogeneous_search
from solver.search.steps import Monitor, Stopped, TopK, finish
from solver.space import divisors, framework_options, micro_batch_options, validated_fixed
from specs.constraints import SearchConstraints
from specs.errors import PlannerError
from specs.plan import TrainingPlan

RECOMPUTE_MODES = ("none", "selective", "full")
ZERO_STAGES = (1,)
"""ZeRO stages tried across pools (Megatron-Core's distributed optimizer) unless fixed."""


def _tensor_options(problem: TrainingProblem, pools: list[ResolvedCluster]) -> list[int]:
    m = problem.model
    top = min(min(p.scale_up_domain_gpus, p.gpus_per_node) for p in pools)
    return [
        t
        for t in divisors(top)
        if m.num_attention_heads % t == 0
        and (m.mla is not None or m.kv_heads % t == 0)
        and m.ffn_hidden_size % t == 0
    ]


def _fits_nodes(stage: int, pools: list[ResolvedCluster]) -> bool:
    return all(stage % p.gpus_per_node == 0 or p.gpus_per_node % stage == 0 for p in pools)


def _candidates(
    problem: TrainingProblem, constraints: SearchConstraints, names: list[str]
) -> list[tuple[list[str], TrainingPlan]]:
    """Every cross-pool candidate (module docstring), as (stage pools, plan without split)."""
    fixed = validated_fixed(constraints)
    pools = problem.cluster.pools()
    wl, layers = problem.workload, problem.model.num_layers
    frameworks, _ = framework_options(constraints)
    out: list[tuple[list[str], TrainingPlan]] = []
    for count in range(2, len(names) + 1):
        for order in itertools.permutations(names, count):
            used = [pools[n] for n in order]
            for t in _tensor_options(problem, used):
                if "tensor" in fixed and fixed["tensor"] != t:
                    continue
                for d in divisors(wl.global_batch_size):
                    if "data" in fixed and fixed["data"] != d:
                        continue
                    stage = t * d
                    counts = [p.num_gpus // stage for p in used]
                    if min(counts) < 1 or not _fits_nodes(stage, used):
                        continue
                    pp = sum(counts)
                    if pp > layers or ("pipeline" in fixed and fixed["pipeline"] != pp):
                        continue
                    stage_pools = [n for n, k in zip(order, counts, strict=True) for _ in range(k)]
                    sizes = micro_batch_options(
                        wl.global_batch_size, d, constraints.micro_batch_sizes
                    )
                    for mb, rc, zero, fw in itertools.product(
                        sizes, RECOMPUTE_MODES, ZERO_STAGES, frameworks
                    ):
                        if fixed.get("micro_batch_size", mb) != mb:
                            continue
                        if fixed.get("recompute", rc) != rc:
                            continue
                        zero = int(fixed.get("zero_stage", zero))
                        plan = TrainingPlan.model_validate(
                            {
                                "parallelism": {
                                    "data": d,
                                    "tensor": t,
                                    "pipeline": pp,
                                    "sequence_parallel": t > 1,
                                },
                                "micro_batch_size": mb,
                                "zero_stage": zero,
                                "recompute": rc,
                                "framework": fw.name,
                            }
                        )
                        out.append((stage_pools, plan))
    return out


@dataclasses.dataclass(frozen=True)
class _Split:
    """A cross-pool candidate with its best split and a lower bound on its step time."""

    lower_bound_s: float
    """m × the slowest stage's work per micro-batch (the pipeline runs every micro-batch
    through it)."""
    plan: TrainingPlan
    """With stage_layers and stage_groups."""


def _split(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    stage_pools: list[str],
    plan: TrainingPlan,
    stats: SearchStats,
) -> _Split | None:
    """The best split of one cross-pool candidate; None when it breaks a rule or does not
    fit (counted in `stats.pruned`)."""
    try:
        mixed = mixed_split(problem, cost_model, plan, stage_pools)
    except PlannerError:
        stats.add_pruned("rule:topology")
        return None
    if isinstance(mixed, MixedViolations):
        stats.rule_rejected += 1
        stats.add_pruned(f"rule:{mixed.violations[0].kind}")
        return None
    if mixed.split is None:
        stats.add_pruned("memory")
        return None
    m = mixed.profiles[0].num_microbatches
    full = plan.model_copy(
        update={"stage_layers": mixed.split.stage_layers, "stage_groups": stage_pools}
    )
    return _Split(m * mixed.split.bottleneck_s, full)


def mixed_search(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    *,
    top_k: int = 10,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SearchResult:
    """The `top_k` fastest feasible plans over the mixed space (module docstring)."""
    pools = problem.cluster.pools()
    names = list(pools)
    candidates = _candidates(problem, constraints, names)
    stats = SearchStats()
    monitor = Monitor(constraints.time_limit_s, progress, should_stop, len(candidates) + len(names))
    top = TopK(top_k)
    try:
        for name in names:
            monitor.poll(report=True)
            alone = homogeneous_search(
                pool_problem(problem, pools[name], pools[name].num_gpus),
                cost_model,
                constraints.model_copy(update={"time_limit_s": max(1e-3, monitor.remaining_s())}),
                top_k=top_k,
            )
            stats.enumerated += alone.stats.enumerated
            if not alone.stats.complete:
                stats.status = alone.stats.status
            for ranked in alone.plans:
                plan = ranked.estimate.plan
                pp = plan.parallelism.pipeline
                carried = plan.model_copy(update={"stage_groups": [name] * pp})
                stats.evaluated += 1
                top.push(carried.key(), evaluate_mixed(cost_model, problem, carried))
            monitor.done += 1
        splits = []
        for stage_pools, plan in candidates:
            monitor.poll(report=True)
            stats.enumerated += 1
            found = _split(problem, cost_model, stage_pools, plan, stats)
            if found is not None:
                splits.append(found)
        splits.sort(key=lambda x: x.lower_bound_s)
        for i, item in enumerate(splits):
            monitor.poll(report=True)
            if top.full and item.lower_bound_s > top.worst()[0]:
                stats.add_pruned("throughput_bound", len(splits) - i)
                break
            est = evaluate_mixed(cost_model, problem, item.plan)
            stats.evaluated += 1
            if not est.feasible:
                stats.add_pruned(est.violations[0].kind)
                continue
            stats.feasible += 1
            top.push(est.plan.key(), est)
        monitor.done = monitor.total
    except Stopped as stop:
        stats.status = "time_limit" if stop.status == "time_limit" else "cancelled"
        stats.add_pruned("not_reached", monitor.total - monitor.done)
    result = finish(top, stats, monitor, problem=problem)
    best_with = _best_step_with_each_pool(top, names)
    plans = [
        dataclasses.replace(
            ranked,
            explanation=f"{ranked.explanation} {_groups_sentence(problem, ranked.estimate, best_with)}",
        )
        for ranked in result.plans
    ]
    return dataclasses.replace(result, plans=plans)


def _best_step_with_each_pool(top: TopK, names: list[str]) -> dict[str, float]:
    """The fastest kept plan that uses each pool (pools no kept plan uses are absent)."""
    best: dict[str, float] = {}
    for est in top.estimates():
        for name in set(est.plan.stage_groups or ()):
            step = est.metrics.step_time_s
            best[name] = min(best.get(name, step), step)
    return {n: best[n] for n in names if n in best}


def _groups_sentence(
    problem: TrainingProblem, est: TrainingEstimate, best_with: dict[str, float]
) -> str:
    """What each pool does in the plan, and why the idle ones idle."""
    plan = est.plan
    stage_pools = plan.stage_groups or []
    chunks = plan.stage_layers or []
    pp = plan.parallelism.pipeline
    layers = [sum(chunks[c] for c in range(j, len(chunks), pp)) for j in range(pp)]
    per_stage = plan.parallelism.tensor * plan.parallelism.context * plan.parallelism.data
    pools = problem.cluster.pools()
    parts = []
    for name, pool in pools.items():
        stages = [j for j, n in enumerate(stage_pools) if n == name]
        acc = pool.groups[0].accelerator.id
        if stages:
            span = f"{stages[0]}" if len(stages) == 1 else f"{stages[0]}-{stages[-1]}"
            parts.append(
                f"{name} ({len(stages) * per_stage} of {pool.num_gpus} {acc}) runs stage "
                f"{span} with {sum(layers[j] for j in stages)} layers"
            )
        elif name in best_with:
            slower = best_with[name] / est.metrics.step_time_s - 1.0
            parts.append(
                f"{name} ({pool.num_gpus} {acc}) idles: the best plan using it is "
                f"{slower:.1%} slower"
            )
        else:
            parts.append(
                f"{name} ({pool.num_gpus} {acc}) idles: no plan in the top list uses it (its "
                "GPUs hold no whole stage of these degrees, or the plans that use it are "
                "slower)"
            )
    return "Groups: " + "; ".join(parts) + "."
