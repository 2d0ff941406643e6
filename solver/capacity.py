"""How many nodes (issue 16, point 3): for one model and workload and one or more node types,
the fastest plan at each cluster size of a range, the smallest size that meets a throughput,
a deadline or a budget, and, when nothing in the range fits, the nearest size that does.

Each size is its own exact search (`solver.search`, the fastest plan on exactly that many
GPUs: `cost_models.mixed.pool_problem` of the node type at that node count), so the answer
at every size is what a separate search on a cluster of that size answers.

- **Target** (`required_tokens_per_s`): `workload.target_tokens_per_s`, or
  `train_tokens / deadline_days`. A size *meets* it when its fastest plan reaches it.
- **Budget** (`budget`, currency for the whole run, needs `train_tokens`): a size is
  *within* it when train_tokens × its plan's `cost_per_million_tokens` / 10⁶ is at most
  the budget.
- **Recommendation**: over every node type, the smallest GPU count that meets the target and
  the budget (the cheapest run among equal counts); with neither given, the cheapest run
  (cost per token) when prices are known, else the fastest size.
- **Nearest fit**: when no size of a node type fits in memory, the node count is doubled
  past the range (up to `MAX_DOUBLINGS` times) until one does.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from cost_models.base import TrainingCostModel, TrainingEstimate, TrainingProblem
from cost_models.mixed import pool_problem
from solver.base import SearchResult
from solver.search.branch_and_bound import search
from specs.constraints import SearchConstraints

MAX_SIZES = 64
"""Most sizes one capacity question searches (over every node type)."""
MAX_DOUBLINGS = 4
"""How far past the range the nearest fit looks: 2⁴ = 16 × the largest size."""


@dataclasses.dataclass(frozen=True)
class SizeAnswer:
    """The fastest plan at one size, or why there is none."""

    num_nodes: int
    gpus: int
    estimate: TrainingEstimate | None
    reason: str | None = None
    """Why no plan (nothing fits in memory, the time limit, ...), null with a plan."""
    complete: bool = True
    meets_target: bool | None = None
    run_cost: float | None = None
    """train_tokens × cost per token (currency), null without train_tokens or a price."""
    within_budget: bool | None = None


@dataclasses.dataclass(frozen=True)
class NodeTypeAnswer:
    """Every searched size of one node type, smallest first."""

    index: int
    sizes: list[SizeAnswer]
    smallest_meeting: int | None
    """The smallest node count meeting the target and budget; null when none does (or
    neither is given)."""
    nearest_fit: SizeAnswer | None = None
    """When no size of the range fits: the first doubling past it that does."""


@dataclasses.dataclass(frozen=True)
class CapacityAnswer:
    node_types: list[NodeTypeAnswer]
    recommendation: tuple[int, SizeAnswer] | None
    """(node type index, size) recommended (module docstring); null when nothing fits."""
    target_tokens_per_s: float | None
    budget: float | None


def node_counts(min_nodes: int, max_nodes: int, explicit: Sequence[int] | None) -> list[int]:
    """The node counts to search: the explicit list, else every count of the range (above 16
    counts: 1..16 of it, then powers of two, and the largest)."""
    if explicit:
        return sorted({n for n in explicit if min_nodes <= n <= max_nodes})
    counts = list(range(min_nodes, max_nodes + 1))
    if len(counts) <= 16:
        return counts
    out = set(counts[:16]) | {max_nodes}
    power = 1
    while power < max_nodes:
        if power >= min_nodes:
            out.add(power)
        power *= 2
    return sorted(out)


def _size(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    nodes: int,
    run: Callable[..., SearchResult],
    should_stop: Callable[[], bool] | None,
) -> SizeAnswer:
    """The fastest plan on `nodes` nodes of the problem's (one-group) cluster."""
    gpus = nodes * problem.cluster.gpus_per_node
    sub = pool_problem(problem, problem.cluster, gpus)
    result = run(sub, cost_model, constraints, top_k=1, should_stop=should_stop)
    complete = result.stats.complete
    if not result.plans:
        pruned = result.stats.pruned
        if not complete:
            reason = f"the search stopped ({result.stats.status}) before finding a plan"
        elif pruned:
            worst = max(pruned, key=lambda k: pruned[k])
            reason = f"no plan fits: {worst} pruned {pruned[worst]} of the candidates"
        else:
            reason = "no candidate in the searched space"
        return SizeAnswer(nodes, gpus, None, reason, complete)
    return SizeAnswer(nodes, gpus, result.plans[0].estimate, None, complete)


def _judged(answer: SizeAnswer, problem: TrainingProblem, budget: float | None) -> SizeAnswer:
    if answer.estimate is None:
        return answer
    m = answer.estimate.metrics
    target = problem.workload.required_tokens_per_s
    tokens = problem.workload.train_tokens
    run_cost = (
        tokens * m.cost_per_million_tokens / 1e6
        if tokens is not None and m.cost_per_million_tokens is not None
        else None
    )
    return dataclasses.replace(
        answer,
        meets_target=None if target is None else m.tokens_per_s >= target,
        run_cost=run_cost,
        within_budget=None if budget is None or run_cost is None else run_cost <= budget,
    )


def _meets(answer: SizeAnswer) -> bool:
    return (
        answer.estimate is not None
        and answer.meets_target is not False
        and answer.within_budget is not False
    )


def capacity(
    problems: Sequence[TrainingProblem],
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    *,
    min_nodes: int = 1,
    counts: Sequence[int] | None = None,
    budget: float | None = None,
    run: Callable[..., SearchResult] = search,
    should_stop: Callable[[], bool] | None = None,
) -> CapacityAnswer:
    """The capacity answer (module docstring) for each problem (one per node type, its
    cluster one node group of at most the range's largest node count)."""
    deadline = time.monotonic() + constraints.time_limit_s
    answers: list[NodeTypeAnswer] = []
    for index, problem in enumerate(problems):
        sizes: list[SizeAnswer] = []
        for nodes in node_counts(min_nodes, problem.cluster.num_nodes, counts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                sizes.append(
                    SizeAnswer(nodes, nodes * problem.cluster.gpus_per_node, None,
                               "not searched: the time limit ran out", False)
                )  # fmt: skip
                continue
            limited = constraints.model_copy(update={"time_limit_s": remaining})
            answer = _size(problem, cost_model, limited, nodes, run, should_stop)
            sizes.append(_judged(answer, problem, budget))
        nearest = None
        if sizes and all(s.estimate is None and s.complete for s in sizes):
            nodes = problem.cluster.num_nodes
            for _ in range(MAX_DOUBLINGS):
                nodes *= 2
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                limited = constraints.model_copy(update={"time_limit_s": remaining})
                answer = _size(problem, cost_model, limited, nodes, run, should_stop)
                if answer.estimate is not None:
                    nearest = _judged(answer, problem, budget)
                    break
        goal = problem.workload.required_tokens_per_s is not None or budget is not None
        meeting = [s for s in sizes if _meets(s)] if goal else []
        answers.append(
            NodeTypeAnswer(index, sizes, meeting[0].num_nodes if meeting else None, nearest)
        )
    return CapacityAnswer(
        answers,
        _recommend(answers, problems, budget),
        problems[0].workload.required_tokens_per_s if problems else None,
        budget,
    )


def _recommend(
    answers: Sequence[NodeTypeAnswer], problems: Sequence[TrainingProblem], budget: float | None
) -> tuple[int, SizeAnswer] | None:
    goal = bool(problems) and (
        problems[0].workload.required_tokens_per_s is not None or budget is not None
    )
    options = [
        (a.index, s)
        for a in answers
        for s in a.sizes
        if s.estimate is not None and (not goal or _meets(s))
    ]
    if not options:
        return None

    def cost(s: SizeAnswer) -> float:
        assert s.estimate is not None
        value = s.estimate.metrics.cost_per_million_tokens
        return value if value is not None else float("inf")

    if goal:
        return min(options, key=lambda o: (o[1].gpus, cost(o[1])))
    if all(cost(s) < float("inf") for _, s in options):
        return min(options, key=lambda o: (cost(o[1]), o[1].gpus))
    return min(options, key=lambda o: o[1].estimate.metrics.step_time_s if o[1].estimate else 0.0)
