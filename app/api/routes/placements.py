"""MoE expert placement: which experts (and redundant copies) each expert-parallel rank holds."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.api.auth import Reader
from app.api.offload import run_in_worker
from specs.placement import ExpertPlacementAnswer, ExpertPlacementRequest

router = APIRouter(tags=["expert-placements"])


@router.post("/v1/expert-placements", response_model=ExpertPlacementAnswer)
async def create_expert_placement(
    body: ExpertPlacementRequest, request: Request, _principal: Reader
) -> dict[str, Any]:
    """Place experts and redundant copies on ranks to balance token load (CP-SAT).

    The solver runs in a request worker (`app.services.offload`), bounded in time and memory."""
    answer: dict[str, Any] = await run_in_worker(request, "expert_placement", body)
    return answer
