"""Exact branch-and-bound search over the declared plan space (no sampling).

1. Screen every candidate of `solver.space` (check, profile, memory lower bound) and compute
   its step-time lower bound (`solver.search.steps`).
2. Sort by (lower bound, canonical plan key) and evaluate in that order: partition program →
   plan with `stage_layers` → `cost_model.evaluate`, keeping the k best feasible plans by
   (step time, key).
3. Stop when the next lower bound exceeds the k-th best step time (everything after it is
   counted as `throughput_bound`); a candidate whose bound equals the k-th time is skipped
   only if its key sorts after the k-th plan's, so ties resolve exactly as in the exhaustive
   search. The result is the exhaustive search's top-k whenever the bounds are true bounds.

Time limit and cancellation stop the search with the best plans so far (`status`
`time_limit` / `cancelled`); unreached candidates are counted as `not_reached`.
"""

from __future__ import annotations

from collections.abc import Callable

from cost_models.base import TrainingCostModel, TrainingProblem
from solver.base import SearchResult, SearchStats
from solver.formulations.stage_partition import PartitionSolver, default_solver
from solver.search.steps import (
    Monitor,
    Stopped,
    TopK,
    evaluate_screened,
    finish,
    screen,
    total_candidates,
)
from specs.constraints import SearchConstraints
from specs.errors import SpecError


def clear_caches() -> None:
    """Forget every cached partition (benchmarks measure cold searches)."""
    default_solver().clear()


def search(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    *,
    top_k: int = 10,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    solver: PartitionSolver | None = None,
) -> SearchResult:
    """The `top_k` fastest feasible plans, exact over the declared space.

    Args:
        problem: the resolved problem (its `memory_headroom_gib` sets the memory limit).
        cost_model: prices plans (`check`, `profile`, `evaluate`).
        constraints: the space (fixed fields, micro-batch sizes, max virtual pipeline,
            tensor across nodes) and `time_limit_s`.
        top_k: plans to return (≥ 1).
        progress: called with (candidates done, candidates total) now and then.
        should_stop: polled; True cancels the search (status `cancelled`).
        solver: partition solver and cache (default: the process-wide one).
    Returns:
        SearchResult with plans best first (empty when nothing fits; see `stats.pruned`).
    """
    if top_k < 1:
        raise SpecError("top_k", "must be at least 1", top_k)
    solver = solver or default_solver()
    stats = SearchStats()
    monitor = Monitor(constraints.time_limit_s, progress, should_stop,
                      total_candidates(problem, constraints))
    top = TopK(top_k)
    try:
        screened = screen(problem, cost_model, constraints, stats, monitor, memory_bound=True)
        screened.sort(key=lambda s: (s.step_lower_bound_s, s.key))
        for i, item in enumerate(screened):
            monitor.poll(report=True)
            if top.full:
                worst_time, worst_key = top.worst()
                if item.step_lower_bound_s > worst_time:
                    stats.add_pruned("throughput_bound", len(screened) - i)
                    monitor.done += len(screened) - i
                    break
                if item.step_lower_bound_s == worst_time and item.key > worst_key:
                    stats.add_pruned("throughput_bound")
                    monitor.done += 1
                    continue
            est = evaluate_screened(problem, cost_model, item, solver, stats, monitor)
            monitor.done += 1
            if est is not None:
                top.push(item.key, est)
    except Stopped as stop:
        stats.status = "time_limit" if stop.status == "time_limit" else "cancelled"
        stats.add_pruned("not_reached", monitor.total - monitor.done)
    return finish(top, stats, monitor)
