"""Pages of the plan explorer, its static files and the one JSON read it adds.

Auth (`MESHPLAN_AUTH=on`): the pages themselves are shells holding no tenant data, so they
answer without a key; their scripts read `/v1/…` with `fetch`, sending the key the person
typed once into the page's key form (kept in `sessionStorage`, so it lasts the tab and is
never written to disk by the service) as `Authorization: Bearer <key>`. A 401 shows the
form again. The live progress reads `GET /v1/searches/{id}/events` with `fetch` too
(`EventSource` cannot send a header).

`GET /ui/data/plans/{id}/schedule` prices the stored training plan again with
`POST /v1/estimate`'s code and rebuilds its pipeline timeline (`cost_models.analytical.schedule_timeline`); it
needs the `read` scope like every plan read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from app import __version__
from app.api.auth import Reader
from app.api.deps import SessionDep
from app.api.routes.estimate import run_estimate
from app.db import crud
from app.exports import FORMATS
from app.schemas import EstimateRequest
from app.services.planning import InputError
from cost_models.analytical.schedule_timeline import timeline
from specs.errors import NotFound

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
STATIC_FILES: dict[str, tuple[Path, str]] = {
    "ui.css": (STATIC / "ui.css", "text/css"),
    "ui.js": (STATIC / "ui.js", "text/javascript"),
    "index.js": (STATIC / "index.js", "text/javascript"),
    "search.js": (STATIC / "search.js", "text/javascript"),
    "plan.js": (STATIC / "plan.js", "text/javascript"),
    "compare.js": (STATIC / "compare.js", "text/javascript"),
    "chart.umd.min.js": (STATIC / "vendor" / "chartjs" / "chart.umd.min.js", "text/javascript"),
}
"""Every file the pages load, by the name in `/ui/static/<name>` (a fixed table: no path
from the request reaches the file system)."""

templates = Jinja2Templates(directory=str(HERE / "templates"))
router = APIRouter(include_in_schema=False)


def _page(request: Request, name: str, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(
        request, name, {"version": __version__, "auth": request.app.state.settings.auth, **context}
    )


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui")
def ui_slash() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui/", response_class=HTMLResponse)
def index_page(request: Request) -> HTMLResponse:
    return _page(request, "index.html", title="Searches")


@router.get("/ui/searches/{search_id}", response_class=HTMLResponse)
def search_page(request: Request, search_id: str) -> HTMLResponse:
    return _page(request, "search.html", title="Search", search_id=search_id)


@router.get("/ui/plans/{plan_id}", response_class=HTMLResponse)
def plan_page(request: Request, plan_id: str) -> HTMLResponse:
    return _page(request, "plan.html", title="Plan", plan_id=plan_id, formats=list(FORMATS))


@router.get("/ui/compare", response_class=HTMLResponse)
def compare_page(request: Request, plans: str = "") -> HTMLResponse:
    ids = [p.strip() for p in plans.split(",") if p.strip()]
    return _page(request, "compare.html", title="Compare", plan_ids=ids)


@router.get("/ui/static/{name}")
def static_file(name: str) -> FileResponse:
    entry = STATIC_FILES.get(name)
    if entry is None:
        raise NotFound(f"no static file {name!r}", id=name)
    path, media_type = entry
    return FileResponse(path, media_type=media_type, headers={"Cache-Control": "max-age=3600"})


def _stored_estimate(session: Session, plan_id: str, tenant: str) -> tuple[Any, EstimateRequest]:
    """A stored training plan and the estimate request that prices it again."""
    record = crud.get_plan(session=session, plan_id=plan_id, tenant=tenant)
    if record is None:
        raise NotFound(f"no plan with id {plan_id!r}", id=plan_id)
    search = crud.get_search(session=session, search_id=record.search_id)
    if search is None:
        raise NotFound(f"plan {plan_id!r} has no search", id=plan_id)
    request = search.request or {}
    if (request.get("workload") or {}).get("kind", "training") != "training":
        raise InputError("only training plans have a pipeline schedule", [])
    body = EstimateRequest.model_validate(
        {
            "model": request["model"],
            "cluster": request["cluster"],
            "workload": request["workload"],
            "plan": record.plan,
            **({"cost_model": request["cost_model"]} if request.get("cost_model") else {}),
        }
    )
    return record, body


@router.get("/ui/data/plans/{plan_id}/schedule")
async def plan_schedule(
    plan_id: str, request: Request, session: SessionDep, principal: Reader
) -> dict[str, Any]:
    """The stored training plan priced again, where `POST /v1/estimate` prices it, and its
    pipeline timeline (`cost_models.analytical.schedule_timeline`)."""
    record, body = await run_in_threadpool(_stored_estimate, session, plan_id, principal.tenant)
    estimate = await run_estimate(request, body, session, principal.tenant)
    details = estimate.get("details") or {}
    if "rank_work_s" not in details:
        raise InputError("this cost model reports no per-rank schedule", [])
    parallelism = record.plan.get("parallelism") or {}
    return {
        "plan_id": plan_id,
        "step_time_s": estimate["metrics"]["step_time_s"],
        "details": {k: details[k] for k in ("num_microbatches", "rank_work_s", "rank_forward_s")},
        "timeline": timeline(
            details,
            int(parallelism.get("virtual_pipeline", 1)),
            str(record.plan.get("pipeline_schedule", "1f1b")),
        ),
    }
