"""Price one plan."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.auth import Reader
from app.api.deps import SessionDep
from app.schemas import EstimatePublic, EstimateRequest
from app.services import planning

router = APIRouter(tags=["estimate"])


@router.post("/v1/estimate", response_model=EstimatePublic)
def create_estimate(
    body: EstimateRequest, session: SessionDep, principal: Reader
) -> dict[str, Any]:
    """Estimate step time, throughput and memory of one plan."""
    return planning.estimate(body, session, tenant=principal.tenant)
