"""Busiest-rank load factors of solved expert placements, for the MoE cost model.

A search whose workload carries a measured per-expert histogram and
`moe_routing.optimize_placement` prices each expert-parallel degree e at the load of the
busiest rank of the placement the expert-placement solver finds for that histogram on e ranks
(no redundant copies; `solver.formulations.expert_placement`), instead of the contiguous
placement in expert order. λ(e) = max rank load / mean rank load.
"""

from __future__ import annotations

from dataclasses import replace

from cost_models.base import TrainingProblem
from solver.formulations.expert_placement import solve_expert_placement
from specs.placement import ExpertPlacementRequest

PLACEMENT_TIME_LIMIT_S = 1.0
"""Per expert degree; a time-limited solve still returns at least the greedy placement."""


def placement_load_factors(
    problem: TrainingProblem, degrees: list[int], *, time_limit_s: float = PLACEMENT_TIME_LIMIT_S
) -> dict[int, float]:
    """λ per expert degree in `degrees` (degrees that do not divide the experts are skipped)."""
    routing = problem.workload.moe_routing
    moe = problem.model.moe
    if routing is None or routing.expert_loads is None or moe is None:
        return {}
    gpn = problem.cluster.gpus_per_node
    out: dict[int, float] = {}
    for e in sorted(set(degrees)):
        if e < 1 or moe.num_experts % e:
            continue
        if e == 1:
            out[e] = 1.0
            continue
        per_node = gpn if e % gpn == 0 else e
        request = ExpertPlacementRequest(
            loads=[list(routing.expert_loads)],
            num_ranks=e,
            ranks_per_node=per_node,
            num_redundant=0,
            time_limit_s=time_limit_s,
        )
        result = solve_expert_placement(request, num_workers=1, random_seed=0)
        out[e] = result.layers[0].imbalance
    return out


def with_placement_load_factors(problem: TrainingProblem, degrees: list[int]) -> TrainingProblem:
    """The problem with `moe_routing.rank_load_factors` filled in when it asks for optimised
    placement; unchanged otherwise."""
    routing = problem.workload.moe_routing
    if routing is None or not routing.optimize_placement:
        return problem
    factors = placement_load_factors(problem, degrees)
    workload = problem.workload.model_copy(
        update={"moe_routing": routing.model_copy(update={"rank_load_factors": factors})}
    )
    return replace(problem, workload=workload)
