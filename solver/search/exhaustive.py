"""Exhaustive reference search: the branch-and-bound enumeration without bounds pruning.

Every candidate that passes `check()` is split by the partition program and evaluated; the
k best feasible non-dominated plans by (step time, canonical key) are returned, with the
plans folded under them (`solver.search.diverse`; `fold=False`: the k best plans). Slow by design: the tests
use it as the oracle of `search()`.
"""

from __future__ import annotations

from collections.abc import Callable

from cost_models.base import TrainingCostModel, TrainingProblem
from solver.base import SearchResult, SearchStats
from solver.formulations.stage_partition import PartitionSolver, default_solver
from solver.search.diverse import MAX_FOLDED
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


def exhaustive_search(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    *,
    top_k: int = 10,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    solver: PartitionSolver | None = None,
    fold: bool = True,
    max_folded: int = MAX_FOLDED,
) -> SearchResult:
    """Same contract as `solver.search.branch_and_bound.search`, evaluating everything.
    `fold=False` keeps the k fastest plans, dominated or not (no folding,
    `solver.search.diverse`)."""
    if top_k < 1:
        raise SpecError("top_k", "must be at least 1", top_k)
    solver = solver or default_solver()
    stats = SearchStats()
    monitor = Monitor(
        constraints.time_limit_s, progress, should_stop, total_candidates(problem, constraints)
    )
    top = TopK(top_k, fold=fold, max_folded=max_folded)
    try:
        screened = screen(problem, cost_model, constraints, stats, monitor, memory_bound=False)
        for item in screened:
            monitor.poll(report=True)
            est = evaluate_screened(problem, cost_model, item, solver, stats, monitor)
            monitor.done += 1
            if est is not None:
                top.push(item.key, est)
    except Stopped as stop:
        stats.status = "time_limit" if stop.status == "time_limit" else "cancelled"
        stats.add_pruned("not_reached", monitor.total - monitor.done)
    return finish(top, stats, monitor, problem=problem)
