"""Plan searches: create (optionally waiting), read, list, cancel and read their plans."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from fastapi.concurrency import run_in_threadpool
from sqlmodel import Session

from app.api.deps import EngineDep, RunnerDep, SessionDep, SettingsDep
from app.api.routes.plans import plan_public
from app.db import crud
from app.db.models import SearchRecord, SearchStatus
from app.schemas import PlanList, SearchCreate, SearchList, SearchPublic
from app.services import planning
from specs.errors import Conflict, NotFound, SpecError

router = APIRouter(tags=["searches"])


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def search_public(record: SearchRecord, *, num_plans: int | None = None) -> dict[str, Any]:
    """A search row as the API shows it."""
    request = record.request or {}
    problem = record.problem or {}
    model = problem.get("model") or {}
    cluster = problem.get("cluster") or {}
    stats = dict(record.stats or {})
    started, finished = _utc(record.started_at), _utc(record.finished_at)
    if "wall_time_s" not in stats:  # queued: 0; running: so far; finished without stats: total
        end = finished or (datetime.now(UTC) if started else None)
        stats["wall_time_s"] = (end - started).total_seconds() if started and end else 0.0
    return {
        "id": record.id,
        "status": record.status,
        "progress": {"evaluated": record.progress_evaluated, "total": record.progress_total},
        "stats": stats,
        "error": record.error,
        "created_at": _utc(record.created_at),
        "started_at": started,
        "finished_at": finished,
        "attempts": record.attempts,
        "objective": problem.get("objective", "max_throughput"),
        "top_k": problem.get("top_k", request.get("top_k", 10)),
        "model": request.get("model", {}),
        "model_name": model.get("name", ""),
        "num_gpus": sum(
            g.get("num_nodes", 0) * g.get("gpus_per_node", 0) for g in cluster.get("groups", [])
        ),
        "cluster": request.get("cluster", {}),
        "workload": problem.get("workload", request.get("workload", {})),
        "constraints": problem.get("constraints", {}),
        "cost_model": {
            "name": record.cost_model_name,
            "version": record.cost_model_version,
            "config": (problem.get("cost_model") or {}).get("config"),
        },
        "num_plans": num_plans,
        "plans_url": f"/v1/searches/{record.id}/plans",
        "calibration": (problem.get("cost_model") or {}).get("calibration"),
    }


def _load(session: Session, search_id: str) -> SearchRecord:
    record = crud.get_search(session=session, search_id=search_id)
    if record is None:
        raise NotFound(f"no search with id {search_id!r}", id=search_id)
    return record


def _public_with_count(session: Session, record: SearchRecord) -> dict[str, Any]:
    count = None
    if record.status in (SearchStatus.SUCCEEDED.value, SearchStatus.CANCELLED.value):
        count = crud.list_plans(session=session, search_id=record.id, limit=0)[1]
    return search_public(record, num_plans=count)


@router.post(
    "/v1/searches",
    response_model=SearchPublic,
    status_code=status.HTTP_202_ACCEPTED,
    responses={201: {"model": SearchPublic, "description": "finished within ?wait"}},
)
async def create_search(
    body: SearchCreate,
    response: Response,
    settings: SettingsDep,
    engine: EngineDep,
    runner: RunnerDep,
    wait: Annotated[
        float, Query(description="Seconds to block for the result (0..max_wait_s).")
    ] = 0.0,
) -> dict[str, Any]:
    """Start a plan search; `?wait=S` blocks up to S seconds for it to finish."""
    if not 0 <= wait <= settings.max_wait_s:
        raise SpecError("wait", f"between 0 and {settings.max_wait_s}", wait,
                        f"wait must be between 0 and {settings.max_wait_s} seconds (got {wait})")
    def prepare() -> planning.PreparedSearch:
        with Session(engine, expire_on_commit=False) as session:
            return planning.prepare_search(body, settings, session)

    prepared = await run_in_threadpool(prepare)

    def store() -> str:
        with Session(engine, expire_on_commit=False) as session:
            record = crud.create_search(
                session=session,
                request=prepared.request,
                problem=prepared.problem,
                request_hash=prepared.request_hash,
                cost_model_name=prepared.cost_model_name,
                cost_model_version=prepared.cost_model_version,
            )
            return record.id

    search_id = await run_in_threadpool(store)
    runner.submit(search_id)
    final = await runner.wait(search_id, wait) if wait > 0 else None

    def load() -> dict[str, Any]:
        with Session(engine, expire_on_commit=False) as session:
            return _public_with_count(session, _load(session, search_id))

    public = await run_in_threadpool(load)
    response.headers["Location"] = f"/v1/searches/{search_id}"
    if final is not None and public["status"] in (
        SearchStatus.SUCCEEDED.value, SearchStatus.FAILED.value, SearchStatus.CANCELLED.value
    ):
        response.status_code = status.HTTP_201_CREATED
    return public


@router.get("/v1/searches", response_model=SearchList)
def list_searches(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
    status_filter: Annotated[
        SearchStatus | None, Query(alias="status", description="Only this status.")
    ] = None,
) -> dict[str, Any]:
    """List searches, newest first."""
    rows, total = crud.list_searches(
        session=session, limit=limit, offset=offset,
        status=status_filter.value if status_filter else None,
    )
    return {"items": [search_public(r) for r in rows], "total": total, "limit": limit,
            "offset": offset}


@router.get("/v1/searches/{search_id}", response_model=SearchPublic)
def read_search(search_id: str, session: SessionDep) -> dict[str, Any]:
    """Read a search: status, progress, stats and error."""
    return _public_with_count(session, _load(session, search_id))


@router.get("/v1/searches/{search_id}/plans", response_model=PlanList)
def list_search_plans(
    search_id: str,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    """List a search's plans, best first."""
    _load(session, search_id)
    rows, total = crud.list_plans(session=session, search_id=search_id, limit=limit,
                                  offset=offset)
    return {"items": [plan_public(r) for r in rows], "total": total}


@router.delete("/v1/searches/{search_id}", response_model=SearchPublic)
def cancel_search(search_id: str, session: SessionDep, runner: RunnerDep) -> dict[str, Any]:
    """Cancel a queued or running search (409 once it has finished)."""
    record = _load(session, search_id)
    if not runner.cancel(search_id):
        session.refresh(record)
        raise Conflict(
            f"search {search_id} has already finished ({record.status}); only queued or "
            "running searches can be cancelled",
            status_value=record.status,
        )
    session.refresh(record)
    return _public_with_count(session, record)
