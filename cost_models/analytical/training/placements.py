"""Where a plan's communication groups sit on the cluster (cached per problem), and the
busiest expert-parallel rank's routed load."""

from __future__ import annotations

from cost_models.analytical.moe import ExpertLoad, busiest_rank_load
from cost_models.analytical.placement import (
    ExpertGroups,
    ParallelGroups,
    place_expert_groups,
    place_groups,
)
from cost_models.analytical.training.context import ProblemContext
from specs.errors import InfeasiblePlan


def parallel_groups(ctx: ProblemContext, t: int, c: int, d: int, pp: int) -> ParallelGroups:
    """Placements of the tensor, context, data, data×context and pipeline groups."""
    key = (t, c, d, pp)
    hit = ctx.groups.get(key)
    if hit is None:
        hit = ctx.groups[key] = place_groups(t, c, d, pp, ctx.domain_gpus, ctx.leaf_gpus)
    return hit


def expert_groups(ctx: ProblemContext, e: int, etp: int, dct: int) -> ExpertGroups:
    """Placements of the expert-tensor, expert and expert-data groups carved out of the
    `dct` = data·context·tensor GPUs of a pipeline stage."""
    key = (e, etp, dct)
    hit = ctx.expert_groups.get(key)
    if hit is None:
        hit = ctx.expert_groups[key] = place_expert_groups(
            e, etp, dct, ctx.domain_gpus, ctx.leaf_gpus
        )
    return hit


def expert_load(ctx: ProblemContext, e: int) -> ExpertLoad:
    """The busiest EP rank's routed load for expert degree `e` (cached per problem)."""
    hit = ctx.expert_loads.get(e)
    if hit is None:
        moe = ctx.model.moe
        assert moe is not None
        try:
            hit = busiest_rank_load(moe.num_experts, e, ctx.problem.workload.moe_routing)
        except ValueError as exc:  # a histogram of the wrong length (check() reports it)
            raise InfeasiblePlan("expert", str(exc)) from exc
        ctx.expert_loads[e] = hit
    return hit
