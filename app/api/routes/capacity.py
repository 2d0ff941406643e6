"""How many nodes a training run needs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.api.auth import Reader
from app.api.offload import run_in_worker
from app.schemas import CapacityPublic, CapacityRequest

router = APIRouter(tags=["capacity"])


@router.post("/v1/capacity", response_model=CapacityPublic)
async def create_capacity(body: CapacityRequest, request: Request, _principal: Reader) -> Any:
    """The fastest plan at each cluster size of each node type, the smallest size meeting a
    throughput, deadline or budget, and the nearest size that fits when none does.

    Every size is an exact search of its own (`solver.capacity`); the question runs in a
    request worker (`app.services.offload`), bounded by `constraints.time_limit_s` (at most
    `max_search_time_limit_s`), 64 sizes and the worker's time and memory limits."""
    settings = request.app.state.settings
    answer: dict[str, Any] = await run_in_worker(
        request, "capacity", (body, settings.max_search_time_limit_s)
    )
    return answer
