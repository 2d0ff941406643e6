"""Price one plan."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from app.api.auth import Reader
from app.api.deps import SessionDep
from app.api.offload import run_in_worker
from app.schemas import EstimatePublic, EstimateRequest
from app.services import planning
from app.services.offload import needs_worker

router = APIRouter(tags=["estimate"])


@router.post("/v1/estimate", response_model=EstimatePublic)
async def create_estimate(
    body: EstimateRequest, session: SessionDep, request: Request, principal: Reader
) -> Any:
    """Estimate step time, throughput and memory of one plan.

    Serving estimates and estimates that place experts run in a request worker; closed-form
    training estimates run here (`app.services.offload.needs_worker`)."""
    if needs_worker(body):
        return await run_in_worker(request, "estimate", body)
    return await run_in_threadpool(planning.estimate, body, session, tenant=principal.tenant)
