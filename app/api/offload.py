"""Await a request's solver work in a request worker and map what can go wrong to problems.

- past `request_timeout_s` → 504 `solver-timeout` (the worker is killed and replaced);
- the worker died (signal, `RLIMIT_AS` abort) → 503 `worker-died` with `Retry-After`;
- `MemoryError` in the worker (its `worker_max_memory_mb` cap) → 507 `insufficient-memory`.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from app.services.offload import run_job
from app.services.pool import RequestPool, WorkerDied, WorkerTimeout
from specs.errors import PlannerError, SolverTimeout


class ServiceProblem(PlannerError):
    """A problem with its own status, slug and title (`retry_after_s` → `Retry-After`)."""

    def __init__(self, *, status: int, slug: str, title: str, detail: str, **ext: Any) -> None:
        super().__init__(detail, **ext)
        self.status = status
        self.problem_type = slug
        self.title = title


async def run_in_worker(request: Request, job: str, payload: Any) -> Any:
    """The value of `job(payload)` computed in a request worker."""
    pool: RequestPool = request.app.state.request_pool
    settings = request.app.state.settings
    try:
        kind, value = await pool.run(run_job, job, payload, timeout_s=settings.request_timeout_s)
    except WorkerTimeout as exc:
        raise SolverTimeout(
            f"{exc}; the work was stopped", time_limit_s=settings.request_timeout_s
        ) from exc
    except WorkerDied as exc:
        raise ServiceProblem(
            status=503,
            slug="worker-died",
            title="Worker process died",
            detail=f"{exc.reason} while serving the request; try again",
            reason=exc.reason,
            retry_after_s=1,
        ) from exc
    except MemoryError as exc:
        raise ServiceProblem(
            status=507,
            slug="insufficient-memory",
            title="Insufficient memory",
            detail="the work needs more memory than a worker may use "
            f"({settings.worker_max_memory_mb} MiB, MESHPLAN_WORKER_MAX_MEMORY_MB)",
            max_memory_mb=settings.worker_max_memory_mb,
        ) from exc
    if kind == "problem":
        raise ServiceProblem(
            status=int(value["status"]),
            slug=str(value["type"]).rsplit("/", 1)[-1],
            title=str(value["title"]),
            detail=str(value["detail"]),
            **{
                k: v
                for k, v in value.items()
                if k not in ("type", "title", "status", "detail", "instance")
            },
        )
    return value
