"""Price one plan."""

from __future__ import annotations

import functools
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Body, Request
from sqlmodel import Session

from app.api.auth import Reader
from app.api.deps import SessionDep
from app.api.offload import run_in_worker
from app.examples import ESTIMATE_EXAMPLES
from app.schemas import EstimatePublic, EstimateRequest
from app.services import planning
from app.services.offload import needs_worker

router = APIRouter(tags=["estimate"])


@router.post("/v1/estimate", response_model=EstimatePublic)
async def create_estimate(
    body: Annotated[EstimateRequest, Body(openapi_examples=ESTIMATE_EXAMPLES)],
    session: SessionDep,
    request: Request,
    principal: Reader,
) -> Any:
    """Estimate step time, throughput and memory of one plan.

    Serving estimates and estimates that place experts run in a request worker; closed-form
    training estimates run here (`app.services.offload.needs_worker`), at most
    `api_compute_threads` at once."""
    return await run_estimate(request, body, session, principal.tenant)


async def run_estimate(
    request: Request, body: EstimateRequest, session: Session, tenant: str
) -> Any:
    """`planning.estimate(body)` where the service runs estimates: a request worker for those
    that need one, else a compute slot (`api_compute_threads`) of the API process."""
    if needs_worker(body):
        return await run_in_worker(request, "estimate", body)
    work = functools.partial(planning.estimate, body, session, tenant=tenant)
    return await anyio.to_thread.run_sync(work, limiter=request.app.state.compute_limiter)
