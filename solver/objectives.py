"""Training searches for objectives other than throughput on the GPUs given: the cheapest,
the least energy, the soonest done, the fewest GPUs (issue 16, point 1), each free to leave
GPUs idle when that serves it.

Objectives (`TRAINING_OBJECTIVES`; smaller score is better, ties by step time then plan key):

- `max_throughput` (default): the fastest step on all the GPUs (`solver.search`);
- `min_cost`: `cost_per_million_tokens` (`cost_models.economics`: the request's
  `price_per_gpu_hour` or the catalog's default);
- `min_energy`: `energy_per_token_j` (GPU board energy);
- `min_time_to_train`: `time_to_train_days` (`workload.train_tokens` / tokens per second;
  fewer GPUs first on a tie);
- `min_gpus`: the fewest GPUs whose plan reaches `workload.target_tokens_per_s` (or
  `train_tokens` within `deadline_days`), the fastest first among them.

**Sizes.** On a homogeneous cluster of N nodes of g GPUs the search runs on every *size* it
may leave the rest idle at (`candidate_sizes`): 1, 2, 4, ... GPUs of one node (the divisors
of g), and 1..N whole nodes (above `MAX_WHOLE_NODE_SIZES` node counts: 1..16 nodes, the
powers of two and N). A size's plans are priced on the first GPUs of the cluster
(`cost_models.mixed.pool_problem`), and `metrics.gpus_used` says how many they use.

**Why the merged top-k is exact** (over the sizes searched, each searched completely):

- `min_cost`, `min_time_to_train`: on one size the score is the step time times a constant
  of the size (GPUs × price / tokens per step; train_tokens / tokens per step), so the size's
  exact top-k by step time (`solver.search`) is its top-k by score, and the k best of the
  sizes' top-k lists are the k best overall.
- `min_energy`: on one size the energy per token is increasing in the step time T and in the
  recomputed FLOPs, and at least `economics.energy_floor_j(T)` (module docstring there). A
  size is searched for its top-k' by step time with k' = k, 4k, 16k, ... until the floor at
  the k'-th plan's step time is at least the k-th smallest energy found: every plan not
  found has a step time at least that (the search's order), so an energy no smaller, and the
  k found are the size's top-k by energy. Folded plans (`solver.search.diverse`) compare
  energy too, so none is better than the plan it is folded under. At most `MAX_DEEPENING`
  plans per size: beyond it the size's list is marked inexact (`stats.status`).
- `min_gpus`: sizes are searched from the smallest; the plans reaching the target rank by
  GPUs, so once k of them are found no larger size can rank before them.

**Mixed clusters.** The sizes are every pool alone at each of its sizes (`candidate_sizes`
of the pool's nodes), searched by the homogeneous search on the pool's first GPUs and
carried onto the cluster as plans with every stage on that pool (`stage_groups`, priced by
`cost_models.mixed.evaluate_mixed`: the same estimate), so the argument above holds per
(pool, size); and, last, the plans across pools (a pipeline over several pools, data
shares on several): the mixed search's (`run`) top-k by step time, kept where they use two
pools or more. Those are the fastest cross-pool plans, ranked by the objective among
themselves and the rest, not every cross-pool plan (their GPU counts differ, so the
objective is no constant multiple of the step time among them): their explanation says so.
For `min_gpus` they are searched only when the pools alone give fewer than k plans that
reach the target.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import get_args

from cost_models.base import TrainingCostModel, TrainingEstimate, TrainingProblem
from cost_models.economics import energy_floor_j, with_economics
from cost_models.mixed import evaluate_mixed, plan_pools, pool_problem
from hardware_catalog.schema import ResolvedCluster
from solver.base import RankedPlan, SearchResult, SearchStats
from solver.search.branch_and_bound import search
from specs.constraints import Objective, SearchConstraints
from specs.errors import NoFeasiblePlan, SpecError

TRAINING_OBJECTIVES: tuple[str, ...] = get_args(Objective)
MAX_WHOLE_NODE_SIZES = 64
"""Clusters of up to this many nodes are searched at every node count."""
MAX_DEEPENING = 256
"""Most plans a `min_energy` search lists on one size to prove its top-k."""

SearchFn = Callable[..., SearchResult]


def candidate_sizes(gpus_per_node: int, num_nodes: int) -> list[int]:
    """GPU counts a search may leave the rest of a homogeneous cluster idle at, ascending
    (module docstring)."""
    sizes = {d for d in range(1, gpus_per_node + 1) if gpus_per_node % d == 0}
    if num_nodes <= MAX_WHOLE_NODE_SIZES:
        nodes = set(range(1, num_nodes + 1))
    else:
        nodes = set(range(1, 17)) | {num_nodes}
        power = 32
        while power < num_nodes:
            nodes.add(power)
            power *= 2
    sizes |= {n * gpus_per_node for n in nodes}
    return sorted(sizes)


def check_objective(problem: TrainingProblem, objective: str) -> None:
    """The inputs `objective` needs, or a SpecError naming the field."""
    if objective not in TRAINING_OBJECTIVES:
        raise SpecError("objective", f"one of {', '.join(TRAINING_OBJECTIVES)}", objective)
    if objective == "max_throughput":
        return
    cluster = problem.cluster
    workload = problem.workload
    if objective == "min_cost":
        missing = [
            i
            for i, g in enumerate(cluster.groups)
            if g.price_per_gpu_hour is None and g.accelerator.price_per_gpu_hour is None
        ]
        if missing:
            raise SpecError(
                f"cluster.node_groups.{missing[0]}.price_per_gpu_hour",
                "required by objective min_cost",
                None,
                f"objective min_cost needs a price: the catalog has no default price for "
                f"{cluster.groups[missing[0]].accelerator.id}; give price_per_gpu_hour on "
                "the node group",
            )
    no_tdp = [i for i, g in enumerate(cluster.groups) if g.accelerator.tdp_w is None]
    if objective == "min_energy" and no_tdp:
        accelerator = cluster.groups[no_tdp[0]].accelerator.id
        raise SpecError(
            f"cluster.node_groups.{no_tdp[0]}.accelerator",
            "a sourced TDP, required by objective min_energy",
            accelerator,
            f"objective min_energy needs the accelerator's board power; the catalog has no "
            f"TDP for {accelerator}",
        )
    if objective == "min_time_to_train" and workload.train_tokens is None:
        raise SpecError(
            "workload.train_tokens",
            "required by objective min_time_to_train",
            None,
            "objective min_time_to_train needs workload.train_tokens (the run's tokens)",
        )
    if objective == "min_gpus" and workload.required_tokens_per_s is None:
        raise SpecError(
            "workload.target_tokens_per_s",
            "required by objective min_gpus (or train_tokens with deadline_days)",
            None,
            "objective min_gpus needs workload.target_tokens_per_s, or workload.train_tokens "
            "with workload.deadline_days",
        )


def score(objective: str, est: TrainingEstimate) -> tuple[float, ...]:
    """The rank key of a plan under `objective` (smaller first)."""
    m = est.metrics
    gpus = float(m.gpus_used or est.plan.num_gpus)
    if objective == "min_cost":
        assert m.cost_per_million_tokens is not None
        return (m.cost_per_million_tokens, m.step_time_s)
    if objective == "min_energy":
        assert m.energy_per_token_j is not None
        return (m.energy_per_token_j, m.step_time_s)
    if objective == "min_time_to_train":
        return (1.0 / m.tokens_per_s, gpus)
    if objective == "min_gpus":
        return (gpus, m.step_time_s)
    return (m.step_time_s,)


@dataclasses.dataclass
class _Group:
    """A non-dominated plan of one size's search and the plans folded under it."""

    lead: RankedPlan
    folded: list[RankedPlan]
    size: int
    """The GPUs its plans use."""
    pool: str | None = None
    """The pool a mixed cluster's size is on; `CROSS_POOLS` for plans across pools."""


CROSS_POOLS = "*"
"""The `_Group.pool` of plans across the pools of a mixed cluster."""


@dataclasses.dataclass(frozen=True)
class _Size:
    """One sub-cluster the objective search runs on: `gpus` GPUs of `pool` (None: a
    homogeneous cluster's first GPUs; `CROSS_POOLS`: the whole mixed cluster)."""

    gpus: int
    pool: str | None = None


def search_sizes(cluster: ResolvedCluster) -> list[_Size]:
    """The sizes of the module docstring, by GPUs ascending (a mixed cluster's plans across
    pools last)."""
    if cluster.is_homogeneous:
        return [_Size(n) for n in candidate_sizes(cluster.gpus_per_node, cluster.num_nodes)]
    sizes = [
        _Size(n, name)
        for name, pool in cluster.pools().items()
        for n in candidate_sizes(pool.gpus_per_node, pool.num_nodes)
    ]
    sizes.sort(key=lambda size: size.gpus)  # stable: pools in order on a tie
    return [*sizes, _Size(cluster.num_gpus, CROSS_POOLS)]


def _groups(result: SearchResult, size: int, pool: str | None = None) -> list[_Group]:
    groups: list[_Group] = []
    by_rank: dict[int, _Group] = {}
    for ranked in result.ranked(include_dominated=True):
        if ranked.dominated_by is None:
            group = _Group(ranked, [], size, pool)
            groups.append(group)
            by_rank[ranked.rank] = group
        else:
            by_rank[ranked.dominated_by].folded.append(ranked)
    return groups


def objective_search(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    *,
    objective: str,
    top_k: int = 10,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    run: SearchFn = search,
) -> SearchResult:
    """The `top_k` plans for `objective` (module docstring); `max_throughput` is `run`
    itself on all the GPUs."""
    check_objective(problem, objective)
    if objective == "max_throughput":
        return run(
            problem,
            cost_model,
            constraints,
            top_k=top_k,
            progress=progress,
            should_stop=should_stop,
        )
    started = time.perf_counter()
    cluster = problem.cluster
    sizes = search_sizes(cluster)
    deadline = time.monotonic() + constraints.time_limit_s
    stats = SearchStats()
    found: list[_Group] = []
    target = problem.workload.required_tokens_per_s
    done = 0
    for size in sizes:
        if should_stop is not None and should_stop():
            stats.status = "cancelled"
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            stats.status = "time_limit"
            break
        if size.pool == CROSS_POOLS and objective == "min_gpus" and len(found) >= top_k:
            break
        limited = constraints.model_copy(update={"time_limit_s": remaining})

        def size_progress(d: int, total: int, base: int = done) -> None:
            if progress is not None:
                progress(base + d, base + total)

        if size.pool == CROSS_POOLS:
            result = run(
                problem,
                cost_model,
                limited,
                top_k=top_k,
                progress=size_progress,
                should_stop=should_stop,
            )
            groups = [  # each with the GPUs its plan uses (the rest of the cluster idles)
                dataclasses.replace(g, size=int(g.lead.estimate.metrics.gpus_used or size.gpus))
                for g in _groups(result, size.gpus, CROSS_POOLS)
                if _across_pools(g)
            ]
            size_stats = result.stats
        elif size.pool is None:
            sub = (
                problem
                if size.gpus == cluster.num_gpus
                else pool_problem(problem, cluster, size.gpus)
            )
            groups, size_stats = _search_size(
                sub, cost_model, limited, objective, top_k, run, size_progress, should_stop
            )
        else:
            sub = pool_problem(problem, cluster.pools()[size.pool], size.gpus)
            groups, size_stats = _search_size(
                sub, cost_model, limited, objective, top_k, search, size_progress, should_stop
            )
            groups = [_on_pool(problem, cost_model, g, size.pool) for g in groups]
        stats.merge(size_stats)
        done += size_stats.enumerated
        if objective == "min_gpus":
            assert target is not None
            groups = [g for g in groups if g.lead.estimate.metrics.tokens_per_s >= target]
        found.extend(groups)
        if objective == "min_gpus" and len(found) >= top_k:
            break
    found.sort(key=lambda g: (score(objective, g.lead.estimate), g.lead.estimate.plan.key()))
    kept = found[:top_k]
    if not kept and objective == "min_gpus" and stats.complete and stats.feasible:
        raise NoFeasiblePlan(
            f"no plan reaches {target:,.0f} tokens/s on up to {cluster.num_gpus} GPUs "
            f"(workload.target_tokens_per_s or train_tokens / deadline_days): more GPUs, a "
            "faster accelerator or a later deadline",
            reasons=stats.pruned,
        )
    best = min((g.lead.estimate.metrics.step_time_s for g in kept), default=None)
    stats.best_step_time_s = best
    stats.wall_time_s = time.perf_counter() - started
    return _ranked(kept, objective, cluster.num_gpus, stats)


def _search_size(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    objective: str,
    top_k: int,
    run: SearchFn,
    progress: Callable[[int, int], None],
    should_stop: Callable[[], bool] | None,
) -> tuple[list[_Group], SearchStats]:
    """One size's top-k for `objective`, deepened for `min_energy` (module docstring)."""
    k = top_k
    while True:
        result = run(
            problem,
            cost_model,
            constraints,
            top_k=k,
            progress=progress,
            should_stop=should_stop,
        )
        groups = _groups(result, problem.num_gpus)
        if objective != "min_energy" or len(groups) < k or not result.stats.complete:
            return groups, result.stats
        if _energy_proven(problem, groups, top_k):
            return groups, result.stats
        if k >= MAX_DEEPENING:
            result.stats.status = "time_limit"  # the size's list is not proven
            return groups, result.stats
        k = min(4 * k, MAX_DEEPENING)


def _across_pools(group: _Group) -> bool:
    return len(plan_pools(group.lead.estimate.plan)) > 1


def _on_pool(
    problem: TrainingProblem, cost_model: TrainingCostModel, group: _Group, pool: str
) -> _Group:
    """A pool size's plans carried onto the mixed cluster: every stage on `pool`, priced
    by `evaluate_mixed` (the pool's homogeneous estimate) with the cluster's economics."""

    def carried(ranked: RankedPlan) -> RankedPlan:
        est = onto_pool(problem, cost_model, ranked.estimate, pool)
        return dataclasses.replace(ranked, estimate=est)

    return _Group(carried(group.lead), [carried(f) for f in group.folded], group.size, pool)


def onto_pool(
    problem: TrainingProblem, cost_model: TrainingCostModel, est: TrainingEstimate, pool: str
) -> TrainingEstimate:
    """A plan priced on some GPUs of one pool of a mixed cluster (`pool_problem`) as a plan
    of the whole cluster: every stage on `pool` (`evaluate_mixed`: the same estimate), with
    the cluster's economics."""
    plan = est.plan
    on_pool = plan.model_copy(update={"stage_groups": [pool] * plan.parallelism.pipeline})
    return with_economics(problem, evaluate_mixed(cost_model, problem, on_pool))


def _energy_proven(problem: TrainingProblem, groups: Sequence[_Group], top_k: int) -> bool:
    """Whether every plan slower than the last of `groups` uses more energy than the
    `top_k`-th best of them (module docstring)."""
    energies = sorted(float(g.lead.estimate.metrics.energy_per_token_j or 0.0) for g in groups)
    kth = energies[min(top_k, len(energies)) - 1]
    last = groups[-1].lead.estimate.metrics
    tdp = problem.cluster.groups[0].accelerator.tdp_w
    assert tdp is not None
    # model FLOPs per GPU at peak: mfu × step time (mfu = model FLOP/s per GPU / peak)
    model_share_s = last.mfu * last.step_time_s
    tokens = problem.workload.real_tokens_per_step  # as economics() counts them
    floor = energy_floor_j(problem.num_gpus, tdp, last.step_time_s, model_share_s) / tokens
    return floor >= kth


def _ranked(
    groups: Sequence[_Group], objective: str, cluster_gpus: int, stats: SearchStats
) -> SearchResult:
    """The merged list with consecutive ranks (a group's folded plans right after it)."""
    plans: list[RankedPlan] = []
    everything: list[RankedPlan] = []
    for group in groups:
        lead = dataclasses.replace(
            group.lead,
            rank=len(everything) + 1,
            explanation=_why(objective, group, cluster_gpus) + group.lead.explanation,
        )
        plans.append(dataclasses.replace(lead, rank=len(plans) + 1))
        everything.append(lead)
        for folded in group.folded:
            everything.append(
                dataclasses.replace(folded, rank=len(everything) + 1, dominated_by=lead.rank)
            )
    return SearchResult(plans=plans, stats=stats, all_plans=everything)


def _why(objective: str, group: _Group, cluster_gpus: int) -> str:
    """The objective's figure for a plan, and the GPUs it leaves idle."""
    m = group.lead.estimate.metrics
    idle = cluster_gpus - group.size
    if objective == "min_cost":
        figure = f"{m.cost_per_million_tokens:.4g} per million tokens"
    elif objective == "min_energy":
        figure = f"{m.energy_per_token_j:.4g} J per token"
    elif objective == "min_time_to_train":
        figure = f"{m.time_to_train_days:.4g} days to train"
    else:
        figure = f"{group.size} GPUs reach {m.tokens_per_s:,.0f} tokens/s"
    text = f"{objective}: {figure}"
    if group.pool == CROSS_POOLS:
        text += " across pools (ranked among the fastest plans across pools, not every one of them)"
        if idle > 0:
            text += f", {idle} of the {cluster_gpus} GPUs idle"
    elif idle > 0:
        where = f" (pool {group.pool})" if group.pool is not None else ""
        text += f", on {group.size} of the {cluster_gpus} GPUs{where} ({idle} idle)"
    return text + ". "
