"""The Pareto front of a training search (issue 16, point 2): the plans no other plan beats on
every one of throughput, GPUs used, cost per token, energy per token and peak memory.

**Which plans.** Every candidate of the search's space (`solver.space`) with the split the
partition program gives it (the fastest split that fits), on every size the search covers:
all the GPUs for `max_throughput`, every size `solver.objectives.candidate_sizes` lists for
the objectives that may leave GPUs idle. Plan A *dominates* B when A is at least as good on
all five figures and better on one (`dominates`); a figure a plan does not report (no price,
no TDP) is equal for all.

**Exact, with pruning.** Sizes are taken from the smallest and candidates in order of their
step-time lower bound (`steps.screen`). A candidate is evaluated unless a plan already found
is at least as good on every figure as the candidate's *bound vector*: the throughput its
step-time bound allows, its GPUs, the cost per token at that bound (cost is the step time
times a constant of the size), the energy floor at that bound
(`cost_models.economics.energy_floor_j`, with the size's model FLOPs per GPU once one plan of
the size is priced, zero before), and its peak-memory lower bound
(`stage_partition.memory_lower_bound_bytes`, over every split; zero with a fixed split).
Every figure of the candidate is no better than its bound, so such a candidate is dominated
or ties a found plan on every figure: it is not on the front (a tie keeps the plan found
first). The front is then exact over the space whenever the search completes
(`stats.status`); a time limit leaves the candidates not reached unpriced.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

from cost_models.base import TrainingCostModel, TrainingEstimate, TrainingProblem
from cost_models.economics import energy_floor_j, group_price
from solver.base import SearchStats
from solver.formulations.stage_partition import (
    PartitionSolver,
    default_solver,
    memory_lower_bound_bytes,
)
from solver.search.steps import (
    Monitor,
    Stopped,
    evaluate_screened,
    screen,
    total_candidates,
)
from specs.constraints import SearchConstraints

GIB = 1024**3
PARETO_FIGURES: tuple[str, ...] = (
    "tokens_per_s",
    "gpus_used",
    "cost_per_million_tokens",
    "energy_per_token_j",
    "peak_memory_gib",
)
"""The figures the front trades (throughput higher is better, the rest lower)."""

Vector = tuple[float, float, float, float, float]


def vector(est: TrainingEstimate) -> Vector:
    """The five figures of a priced plan, each oriented so that smaller is better."""
    m = est.metrics
    return (
        -m.tokens_per_s,
        float(m.gpus_used or est.plan.num_gpus),
        m.cost_per_million_tokens if m.cost_per_million_tokens is not None else 0.0,
        m.energy_per_token_j if m.energy_per_token_j is not None else 0.0,
        est.memory.peak_gib,
    )


def covers(a: Vector, b: Vector) -> bool:
    """`a` at least as good as `b` on every figure."""
    return all(x <= y for x, y in zip(a, b, strict=True))


def dominates(a: Vector, b: Vector) -> bool:
    """`a` at least as good as `b` on every figure and better on one."""
    return covers(a, b) and a != b


@dataclasses.dataclass
class ParetoResult:
    """The front (fastest first) and what the search did."""

    plans: list[TrainingEstimate]
    stats: SearchStats


class _Front:
    """The non-dominated plans found so far."""

    def __init__(self) -> None:
        self.items: list[tuple[Vector, TrainingEstimate]] = []

    def covers(self, bound: Vector) -> bool:
        return any(covers(v, bound) for v, _ in self.items)

    def add(self, est: TrainingEstimate) -> None:
        v = vector(est)
        if self.covers(v):
            return  # dominated by, or equal to, a plan found first
        self.items = [(w, e) for w, e in self.items if not dominates(v, w)]
        self.items.append((v, est))


def pareto_front(
    sizes: Sequence[TrainingProblem],
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    *,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    solver: PartitionSolver | None = None,
    seed: Sequence[TrainingEstimate] = (),
    carry: Callable[[int, TrainingEstimate], TrainingEstimate] | None = None,
) -> ParetoResult:
    """The exact front over the candidates of every problem in `sizes` (module docstring)
    and the priced plans of `seed` (taken first; they prune like any plan found).
    `carry(i, estimate)` restates a plan of `sizes[i]` before it joins the front (a pool's
    plan as a plan of the mixed cluster): its five figures must not change."""
    solver = solver or default_solver()
    stats = SearchStats()
    total = sum(total_candidates(p, constraints) for p in sizes)
    monitor = Monitor(constraints.time_limit_s, progress, should_stop, total)
    front = _Front()
    for est in seed:
        front.add(est)
    try:
        for i, problem in sorted(enumerate(sizes), key=lambda item: item[1].num_gpus):
            restate = (lambda est, i=i: carry(i, est)) if carry is not None else None
            _one_size(problem, cost_model, constraints, front, solver, stats, monitor, restate)
    except Stopped as stop:
        stats.status = "time_limit" if stop.status == "time_limit" else "cancelled"
        stats.add_pruned("not_reached", max(0, monitor.total - monitor.done))
    plans = sorted(
        (e for _, e in front.items), key=lambda e: (-e.metrics.tokens_per_s, e.plan.key())
    )
    stats.best_step_time_s = min((e.metrics.step_time_s for e in plans), default=None)
    stats.wall_time_s = time.perf_counter() - monitor.start
    return ParetoResult(plans, stats)


def _one_size(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    front: _Front,
    solver: PartitionSolver,
    stats: SearchStats,
    monitor: Monitor,
    restate: Callable[[TrainingEstimate], TrainingEstimate] | None = None,
) -> None:
    items = screen(problem, cost_model, constraints, stats, monitor, memory_bound=True)
    items.sort(key=lambda item: (item.step_lower_bound_s, item.key))
    gpus = float(problem.num_gpus)
    tokens = problem.workload.real_tokens_per_step  # as economics() counts them
    group = problem.cluster.groups[0]
    price = group_price(group)
    tdp = group.accelerator.tdp_w
    model_share_s: float | None = None  # model FLOPs per GPU / peak: the same for every plan
    for item in items:
        monitor.poll(report=True)
        t = item.step_lower_bound_s
        if item.key.stage_layers:
            memory_gib = 0.0
        else:
            memory_gib = (
                memory_lower_bound_bytes(item.profile, item.key.pipeline, item.key.virtual_pipeline)
                / GIB
            )
        energy = 0.0
        if tdp is not None:
            share = model_share_s if model_share_s is not None else 0.0
            energy = energy_floor_j(problem.num_gpus, tdp, t, share) / tokens
        cost = gpus * price / 3600.0 * t / tokens * 1e6 if price is not None else 0.0
        bound: Vector = (-tokens / t if t > 0 else -math.inf, gpus, cost, energy, memory_gib)
        if front.covers(bound):
            stats.add_pruned("pareto_bound")
            monitor.done += 1
            continue
        est = evaluate_screened(problem, cost_model, item, solver, stats, monitor)
        monitor.done += 1
        if est is None:
            continue
        if model_share_s is None:
            model_share_s = est.metrics.mfu * est.metrics.step_time_s
        front.add(restate(est) if restate is not None else est)
