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
   micro-batch sizes, recompute modes, ZeRO stages and frameworks of the constraints. With
   `constraints.per_stage_tensor` each pool's stages take their own degree (every degree
   the pool's nodes allow; `plan.stage_tensor`). For each, the per-pool layer profiles
   (the cost model's `profile` on that pool's hardware at its degree) give a lower bound
   on the step (`time_lower_bounds`); candidates are taken best bound first, bounded
   again with every stage's memory (`work_lower_bounds`), then split exactly
   (`solve_mixed_partition`: the slowest stage per micro-batch minimised within every
   stage's memory, hand-offs between pools included), and `evaluate_mixed` prices the
   result; the walk stops at the first bound above the k-th best step, so the answer is
   the exhaustive one.

3. **Data across groups** (`share_data`): the layouts of the plans kept from 1 as
   data-parallel replicas on every pool that holds one, the batch shared by speed
   (`TrainingPlan.data_shares`, priced by `cost_models.mixed.evaluate_data_shares`); the
   shares start proportional to each pool's measured rate and move a micro-batch at a
   time while the step shortens — a local optimum, outside the exact space above.

`t` divides the attention heads, KV heads and FFN width and fits in every used pool's
scale-up domain; `t·d` is a divisor or a multiple of every used pool's node size; the total
stage count is at most the layer count; `d · micro-batch` divides the global batch. Fixed
fields of the constraints restrict each choice.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator

from cost_models.analytical.schedule import one_f_one_b
from cost_models.base import TrainingCostModel, TrainingEstimate, TrainingProblem
from cost_models.economics import with_economics
from cost_models.mixed import evaluate_mixed, gpus_of_stages, pool_problem
from hardware_catalog.schema import ResolvedCluster
from solver.base import RankedPlan, SearchResult, SearchStats
from solver.estimate import MixedProfiles, MixedViolations, estimate_plan, mixed_profiles
from solver.formulations.mixed_partition import (
    solve_mixed_partition,
    time_lower_bounds,
    work_lower_bounds,
)
from solver.search.branch_and_bound import search as homogeneous_search
from solver.search.steps import BOUND_SAFETY, Monitor, Stopped, TopK, finish
from solver.space import divisors, framework_options, micro_batch_options, validated_fixed
from specs.constraints import OffloadConstraints, SearchConstraints
from specs.errors import PlannerError
from specs.plan import TrainingPlan

RECOMPUTE_MODES = ("none", "selective", "full")
MAX_PER_STAGE_POOLS = 3
"""Most pools along one pipeline in the space of a tensor degree per pool: the degree
assignments grow as (degrees)^pools over pools! orderings."""
_POLL_EVERY = 64
"""Candidates generated between two checks of the deadline and of cancellation."""
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


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Pools, their tensor degrees and stage counts, and the plan (without a split), in one
    canonical order; every ordering of the pools along the pipeline is a candidate."""

    pools: tuple[str, ...]
    degrees: tuple[int, ...]
    counts: tuple[int, ...]
    plan: TrainingPlan

    def ordered(self, order: tuple[int, ...]) -> tuple[list[str], TrainingPlan]:
        """(stage pools, plan) with the pools along the pipeline in `order` (indices)."""
        names = [self.pools[i] for i in order for _ in range(self.counts[i])]
        tensor = [self.degrees[i] for i in order for _ in range(self.counts[i])]
        plan = self.plan.model_copy(
            update={
                "stage_groups": names,
                "stage_tensor": tensor if self.plan.stage_tensor is not None else None,
            }
        )
        return names, plan


def _layouts(
    problem: TrainingProblem,
    constraints: SearchConstraints,
    names: list[str],
    per_stage: bool,
    count: int,
) -> Iterator[_Layout]:
    """Every set of `count` pools with its degrees, data degree and variants (module
    docstring), one at a time. `per_stage`: the pools take different tensor degrees
    (`constraints.per_stage_tensor`); otherwise one degree on every stage."""
    fixed = validated_fixed(constraints)
    pools = problem.cluster.pools()
    wl, layers = problem.workload, problem.model.num_layers
    frameworks, _ = framework_options(constraints)
    for subset in itertools.combinations(names, count):
        used = [pools[n] for n in subset]
        for degrees in _degree_options(problem, used, fixed, per_stage):
            widest = max(degrees)
            for d in divisors(wl.global_batch_size):
                if "data" in fixed and fixed["data"] != d:
                    continue
                counts = [p.num_gpus // (t * d) for p, t in zip(used, degrees, strict=True)]
                fits = all(_fits_nodes(t * d, [p]) for p, t in zip(used, degrees, strict=True))
                if min(counts) < 1 or not fits:
                    continue
                pp = sum(counts)
                if pp > layers or ("pipeline" in fixed and fixed["pipeline"] != pp):
                    continue
                stage_pools = [n for n, k in zip(subset, counts, strict=True) for _ in range(k)]
                stage_tensor = [t for t, k in zip(degrees, counts, strict=True) for _ in range(k)]
                sizes = micro_batch_options(wl.global_batch_size, d, constraints.micro_batch_sizes)
                # the layout validated once; its variants differ in fields that are valid on
                # their own (micro-batch, recompute, ZeRO, framework)
                layout = TrainingPlan.model_validate(
                    {
                        "parallelism": {
                            "data": d,
                            "tensor": widest,
                            "pipeline": pp,
                            "sequence_parallel": widest > 1,
                        },
                        "stage_groups": stage_pools,
                        "stage_tensor": (stage_tensor if len(set(degrees)) > 1 else None),
                    }
                )
                for mb, rc, zero, fw in itertools.product(
                    sizes, RECOMPUTE_MODES, ZERO_STAGES, frameworks
                ):
                    if fixed.get("micro_batch_size", mb) != mb:
                        continue
                    if fixed.get("recompute", rc) != rc:
                        continue
                    zero = int(fixed.get("zero_stage", zero))
                    plan = layout.model_copy(
                        update={
                            "micro_batch_size": mb,
                            "zero_stage": zero,
                            "recompute": rc,
                            "framework": fw.name,
                        }
                    )
                    yield _Layout(subset, degrees, tuple(counts), plan)


def _candidates(
    problem: TrainingProblem,
    constraints: SearchConstraints,
    names: list[str],
    *,
    per_stage: bool = False,
) -> Iterator[tuple[list[str], TrainingPlan]]:
    """Every cross-pool candidate (module docstring) as (stage pools, plan without split):
    each layout of `_layouts` in every ordering of its pools."""
    for count in pool_counts(len(names), per_stage):
        for layout in _layouts(problem, constraints, names, per_stage, count):
            for order in itertools.permutations(range(count)):
                yield layout.ordered(order)


def pool_counts(pools: int, per_stage: bool) -> range:
    """How many pools one pipeline of the space spans: 2 up to every pool, or up to
    `MAX_PER_STAGE_POOLS` with a tensor degree per pool."""
    return range(2, (min(pools, MAX_PER_STAGE_POOLS) if per_stage else pools) + 1)


def _degree_options(
    problem: TrainingProblem,
    used: list[ResolvedCluster],
    fixed: dict[str, object],
    per_stage: bool,
) -> list[tuple[int, ...]]:
    """The tensor degree of each pool's stages along one ordering: one degree for all
    (`_tensor_options` of every pool), or with `per_stage` every assignment of the degrees
    each pool allows on its own (its scale-up domain and node) in which two pools differ,
    as HexiScale searches them (the assignments of one degree are the other space)."""
    if not per_stage:
        return [
            (t,) * len(used) for t in _tensor_options(problem, used) if fixed.get("tensor", t) == t
        ]
    options = itertools.product(*(_tensor_options(problem, [p]) for p in used))
    return [degrees for degrees in options if len(set(degrees)) > 1]


@dataclasses.dataclass(frozen=True)
class _Profiled:
    """A cross-pool candidate with its stage profiles and a lower bound on its step time."""

    lower_bound_s: float
    """The 1F1B schedule of `time_lower_bounds` of its stages: no split makes the step
    shorter (the step adds data-parallel, optimizer and overhead time to the schedule)."""
    stage_pools: list[str]
    plan: TrainingPlan
    """Without stage_layers."""
    profiled: MixedProfiles


def _profiled(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    stage_pools: list[str],
    plan: TrainingPlan,
    stats: SearchStats,
) -> _Profiled | None:
    """One cross-pool candidate profiled and bounded; None when it breaks a rule (counted
    in `stats.pruned`)."""
    try:
        found = mixed_profiles(problem, cost_model, plan, stage_pools)
    except PlannerError:
        stats.add_pruned("rule:topology")
        return None
    if isinstance(found, MixedViolations):
        stats.rule_rejected += 1
        stats.add_pruned(f"rule:{found.violations[0].kind}")
        return None
    m = found.profiles[0].num_microbatches
    bound = time_lower_bounds(found.profiles, found.extra_s).one_f_one_b_s(m)
    return _Profiled(bound, stage_pools, plan, found)


def mixed_search(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    *,
    top_k: int = 10,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    share_data: bool = True,
) -> SearchResult:
    """The `top_k` fastest feasible plans over the mixed space (module docstring);
    `share_data` adds data-parallel replicas on several groups with uneven shares of the
    batch (`_data_across_groups`, a local optimum over the shares)."""
    # offload is priced on one kind of node only: not searched on mixed clusters
    constraints = constraints.model_copy(update={"offload": OffloadConstraints(mode="never")})
    pools = problem.cluster.pools()
    names = list(pools)
    fixed = validated_fixed(constraints)
    spaces = [False, True] if constraints.per_stage_tensor and "tensor" not in fixed else [False]
    stats = SearchStats()
    # progress in steps: each pool alone, the data shares, then each cross-pool space
    monitor = Monitor(constraints.time_limit_s, progress, should_stop, len(names) + 1 + len(spaces))
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
            for ranked in alone.ranked(include_dominated=True):
                plan = ranked.estimate.plan
                pp = plan.parallelism.pipeline
                carried = plan.model_copy(update={"stage_groups": [name] * pp})
                stats.evaluated += 1
                top.push(
                    carried.key(),
                    with_economics(problem, evaluate_mixed(cost_model, problem, carried)),
                )
            monitor.done += 1
        for template in _templates(top) if share_data else []:
            monitor.poll(report=True)
            shared = _data_across_groups(problem, cost_model, template, stats)
            if shared is not None:
                top.push(shared.plan.key(), shared)
        monitor.done += 1
        for per_stage in spaces:
            _cross_pools(problem, cost_model, constraints, names, per_stage, top, stats, monitor)
            monitor.done += 1
        monitor.done = monitor.total
    except Stopped as stop:
        stats.status = "time_limit" if stop.status == "time_limit" else "cancelled"
        stats.add_pruned("not_reached", monitor.total - monitor.done)
    result = finish(top, stats, monitor, problem=problem)

    best_with = _best_step_with_each_pool(top, names)
    complete = stats.status == "complete"

    def with_groups(ranked: RankedPlan) -> RankedPlan:
        return dataclasses.replace(
            ranked,
            explanation=(
                f"{ranked.explanation} "
                f"{_groups_sentence(problem, ranked.estimate, best_with, complete)}"
            ),
        )

    return dataclasses.replace(
        result,
        plans=[with_groups(r) for r in result.plans],
        all_plans=[with_groups(r) for r in result.ranked(include_dominated=True)],
    )


def _cross_pools(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    names: list[str],
    per_stage: bool,
    top: TopK,
    stats: SearchStats,
    monitor: Monitor,
) -> None:
    """One cross-pool space (`_candidates`) into `top`, pipelines over 2 pools first, then 3,
    … (so that a search stopped by its time limit has priced the shorter ones), each count
    best bound first: each candidate is profiled and bounded as it is generated and kept
    only while its bound can still enter the top list (which the pools alone have filled,
    so memory stays bounded); the kept ones are split exactly, bounded again with memory
    and by their split, and priced, until the first bound above the k-th best step."""
    for count in pool_counts(len(names), per_stage):
        _cross_pools_of(
            problem, cost_model, constraints, names, per_stage, count, top, stats, monitor
        )


def _cross_pools_of(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    names: list[str],
    per_stage: bool,
    count: int,
    top: TopK,
    stats: SearchStats,
    monitor: Monitor,
) -> None:
    """`_cross_pools` for the pipelines over `count` pools."""

    def hopeless(bound: float) -> bool:
        # the threshold that only moves earlier (`TopK.safe_worst`): plans are not pushed
        # in the order of one lower bound here
        return bound * (1.0 - BOUND_SAFETY) > top.safe_worst()

    bounded: list[_Profiled] = []
    orders = list(itertools.permutations(range(count)))
    for i, layout in enumerate(_layouts(problem, constraints, names, per_stage, count)):
        if i % _POLL_EVERY == 0:
            monitor.poll(report=True)
        stats.enumerated += len(orders)
        # one bound for every ordering: the stage profiles do not depend on the order
        canonical = list(layout.plan.stage_groups or [])
        try:
            found = mixed_profiles(problem, cost_model, layout.plan, canonical)
        except PlannerError:
            stats.add_pruned("rule:topology", len(orders))
            continue
        if isinstance(found, MixedViolations):
            stats.rule_rejected += len(orders)
            stats.add_pruned(f"rule:{found.violations[0].kind}", len(orders))
            continue
        m = found.profiles[0].num_microbatches
        if hopeless(time_lower_bounds(found.profiles, None, ends=False).one_f_one_b_s(m)):
            stats.add_pruned("throughput_bound", len(orders))
            continue
        for order in orders:
            stage_pools, plan = layout.ordered(order)
            item = _profiled(problem, cost_model, stage_pools, plan, stats)
            if item is None:
                continue
            if hopeless(item.lower_bound_s):
                stats.add_pruned("throughput_bound")
                continue
            bounded.append(item)
    bounded.sort(key=lambda x: x.lower_bound_s)
    for i, item in enumerate(bounded):
        monitor.poll(report=True)
        if hopeless(item.lower_bound_s):
            stats.add_pruned("throughput_bound", len(bounded) - i)
            break
        profiles, extra = item.profiled.profiles, item.profiled.extra_s
        m = profiles[0].num_microbatches
        bound = work_lower_bounds(profiles, extra).one_f_one_b_s(m)  # memory too
        if math.isinf(bound):
            stats.add_pruned("memory")
            continue
        if hopeless(bound):
            stats.add_pruned("throughput_bound")
            continue
        split = solve_mixed_partition(profiles, extra)
        if split is None:
            stats.add_pruned("memory")
            continue
        if hopeless(one_f_one_b(split.stage_time_s, m).step_s):
            stats.add_pruned("throughput_bound")
            continue
        full = item.plan.model_copy(
            update={"stage_layers": split.stage_layers, "stage_groups": item.stage_pools}
        )
        est = evaluate_mixed(cost_model, problem, full)
        stats.evaluated += 1
        if not est.feasible:
            stats.add_pruned(est.violations[0].kind)
            continue
        stats.feasible += 1
        top.push(est.plan.key(), with_economics(problem, est))


def _templates(top: TopK) -> list[TrainingPlan]:
    """Layouts worth sharing data over groups: the plans of one group kept so far (their
    degrees, micro-batch, recompute, schedule), each once; not a vocabulary-parallel one
    (not priced with data shares: `TrainingPlan` refuses the pair)."""
    out: dict[str, TrainingPlan] = {}
    for est in top.estimates():
        plan = est.plan
        if (
            plan.data_shares is None
            and len(set(plan.stage_groups or [])) == 1
            and not plan.vocab_parallel
        ):
            base = plan.model_copy(update={"stage_groups": None, "stage_layers": None})
            out.setdefault(base.model_dump_json(), base)
    return list(out.values())


def _data_across_groups(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    template: TrainingPlan,
    stats: SearchStats,
) -> TrainingEstimate | None:
    """The template's layout as data-parallel replicas on every pool that holds one, with
    the batch shared by speed (`data_shares`): each pool takes all the replicas it holds,
    the sequences per replica start proportional to each pool's measured rate at an even
    share, then move a micro-batch at a time from the slowest pool while that shortens the
    step (a local optimum, not an exhaustive search of the shares)."""
    pools = problem.cluster.pools()
    p = template.parallelism
    per_replica = p.tensor * p.pipeline * p.context
    mb = template.micro_batch_size
    gbs = problem.workload.global_batch_size
    replicas = {n: pool.num_gpus // per_replica for n, pool in pools.items()}
    replicas = {n: r for n, r in replicas.items() if r > 0}
    if len(replicas) < 2 or gbs % mb:
        return None
    units = gbs // mb  # micro-batches per step to share out
    total = sum(replicas.values())
    if units < total:
        return None

    def price(counts: dict[str, int]) -> TrainingEstimate | None:
        shares = [
            {"group": n, "replicas": r, "sequences": counts[n] * mb}
            for n, r in replicas.items()
            if counts[n] > 0
        ]
        data = sum(r for n, r in replicas.items() if counts[n] > 0)
        plan = template.model_copy(
            update={"parallelism": p.model_copy(update={"data": data})}
        ).model_dump(mode="json")
        plan["data_shares"] = shares
        try:
            est = estimate_plan(problem, cost_model, TrainingPlan.model_validate(plan))
        except PlannerError:
            return None
        stats.evaluated += 1
        return est if est.feasible else None

    # an even share (micro-batches per replica), then shares by each pool's rate at it
    even = _exact_counts(replicas, dict.fromkeys(replicas, 1.0), units)
    if even is None:
        return None
    first = price(even)
    if first is None:
        return None
    steps = first.details["data_shares"]
    rate = {n: even[n] / steps[n]["step_time_s"] for n in replicas}
    counts = _exact_counts(replicas, rate, units) or even
    best = price(counts) or first
    for _ in range(16):  # move micro-batches off the slowest group while it helps
        steps = best.details["data_shares"]
        slow = max(steps, key=lambda n: steps[n]["step_time_s"])
        fast = min(steps, key=lambda n: steps[n]["step_time_s"])
        current = {n: steps[n]["sequences_per_replica"] // mb for n in steps}
        moved = dict(current)
        # keep the total: take from every slow replica what fast replicas can absorb
        if replicas[slow] % replicas[fast] or moved[slow] <= 1:
            break
        moved[slow] -= 1
        moved[fast] += replicas[slow] // replicas[fast]
        trial = price(moved)
        if trial is None or trial.metrics.step_time_s >= best.metrics.step_time_s:
            break
        best = trial
    return best


def _exact_counts(
    replicas: dict[str, int], rate: dict[str, float], units: int
) -> dict[str, int] | None:
    """Micro-batches per replica of each pool, proportional to `rate`, adding exactly to
    `units` over all replicas (Σ replicas_g · count_g = units, every count ≥ 1): the
    proportional counts rounded, then the adjustment of at most 3 per pool (every
    combination) that hits the total with the smallest largest count / rate."""
    weight = sum(rate[n] * replicas[n] for n in replicas)
    ideal = {n: units * rate[n] / weight for n in replicas}
    names = list(replicas)
    best: dict[str, int] | None = None
    best_load = math.inf
    for deltas in itertools.product(range(-3, 4), repeat=len(names)):
        counts = {n: int(ideal[n]) + d for n, d in zip(names, deltas, strict=True)}
        if min(counts.values()) < 1:
            continue
        if sum(counts[n] * replicas[n] for n in names) != units:
            continue
        load = max(counts[n] / rate[n] for n in names)
        if load < best_load:
            best, best_load = counts, load
    return best


def _best_step_with_each_pool(top: TopK, names: list[str]) -> dict[str, float]:
    """The fastest kept plan that uses each pool (pools no kept plan uses are absent)."""
    best: dict[str, float] = {}
    for est in top.estimates():
        for name in set(est.plan.stage_groups or ()):
            step = est.metrics.step_time_s
            best[name] = min(best.get(name, step), step)
    return {n: best[n] for n in names if n in best}


def _groups_sentence(
    problem: TrainingProblem,
    est: TrainingEstimate,
    best_with: dict[str, float],
    complete: bool = True,
) -> str:
    """What each pool does in the plan, and why the idle ones idle (`complete`: the search
    saw its whole space; else an idle pool may only not have been reached)."""
    plan = est.plan
    if plan.data_shares is not None:
        return _shares_sentence(problem, est)
    stage_pools = plan.stage_groups or []
    chunks = plan.stage_layers or []
    pp = plan.parallelism.pipeline
    layers = [sum(chunks[c] for c in range(j, len(chunks), pp)) for j in range(pp)]
    per_stage = gpus_of_stages(plan) if stage_pools else []
    degrees = plan.stage_tensor_degrees()
    pools = problem.cluster.pools()
    parts = []
    for name, pool in pools.items():
        stages = [j for j, n in enumerate(stage_pools) if n == name]
        acc = pool.groups[0].accelerator.id
        if stages:
            span = f"{stages[0]}" if len(stages) == 1 else f"{stages[0]}-{stages[-1]}"
            own = sorted({degrees[j] for j in stages})
            tensor = (
                f" at tensor {'/'.join(map(str, own))}" if plan.stage_tensor is not None else ""
            )
            parts.append(
                f"{name} ({sum(per_stage[j] for j in stages)} of {pool.num_gpus} {acc}) runs "
                f"stage {span}{tensor} with {sum(layers[j] for j in stages)} layers"
            )
        elif name in best_with:
            slower = best_with[name] / est.metrics.step_time_s - 1.0
            parts.append(
                f"{name} ({pool.num_gpus} {acc}) idles: the best plan using it is "
                f"{slower:.1%} slower"
            )
        elif not complete:
            parts.append(
                f"{name} ({pool.num_gpus} {acc}) idles: the search stopped (time limit or "
                "cancelled) before it priced every plan that uses it"
            )
        else:
            parts.append(
                f"{name} ({pool.num_gpus} {acc}) idles: no plan in the top list uses it (its "
                "GPUs hold no whole stage of these degrees, or the plans that use it are "
                "slower)"
            )
    return "Groups: " + "; ".join(parts) + "."


def _shares_sentence(problem: TrainingProblem, est: TrainingEstimate) -> str:
    """What each group's replicas take of the batch (a plan with `data_shares`)."""
    pools = problem.cluster.pools()
    shares = est.details.get("data_shares", {})
    parts = []
    for name, pool in pools.items():
        acc = pool.groups[0].accelerator.id
        share = shares.get(name)
        if share is None:
            parts.append(f"{name} ({pool.num_gpus} {acc}) idles")
            continue
        parts.append(
            f"{name} runs {share['replicas']} data-parallel replica(s) of "
            f"{share['sequences_per_replica']} sequences each ({share['step_time_s']:.2f} s)"
        )
    across = float(est.details.get("cross_group_reduction_s", 0.0))
    return (
        "Groups: " + "; ".join(parts) + f"; reducing gradients across the groups adds "
        f"{across * 1e3:.0f} ms. Uneven shares per replica need a data loader that gives "
        "each replica its own batch size: no export here generates one."
    )
