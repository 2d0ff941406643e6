"""MoE expert placement: which experts (and redundant copies) each expert-parallel rank holds."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.auth import Reader
from solver.formulations.expert_placement import solve_expert_placement
from specs.placement import ExpertPlacementAnswer, ExpertPlacementRequest

router = APIRouter(tags=["expert-placements"])


@router.post("/v1/expert-placements", response_model=ExpertPlacementAnswer)
def create_expert_placement(body: ExpertPlacementRequest, _principal: Reader) -> dict[str, Any]:
    """Place experts and redundant copies on ranks to balance token load (CP-SAT)."""
    result = solve_expert_placement(body)
    answer = result.to_dict()
    answer.update(
        num_ranks=body.num_ranks,
        ranks_per_node=body.ranks_per_node,
        slots_per_rank=body.slots_per_rank,
    )
    return answer
