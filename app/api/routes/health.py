"""Liveness (`GET /v1/health`) and readiness (`GET /v1/health/ready`).

Liveness never touches the database or a worker thread: it answers from the event loop
whatever the load (issue 13: behind 64 clients it waited 30 s for a pooled connection and
answered 500). Readiness checks the database with `SELECT 1` under
`Settings.readiness_timeout_s`, on threads of its own (not the API's, which may all be
busy), and reports the search worker pool (warm-up) and the database pool; it answers 503
`not-ready` (a problem with the same checks) until everything is up.

`LivenessMiddleware` answers `GET /v1/health` before routing: FastAPI's routing, dependency
solving and the ETag and body-limit layers cost about 0.7 ms of the 1.1-1.5 ms a liveness
probe took, and 64 clients queue behind one event loop (issue 13: p99 <= 50 ms at 64
clients). It sits inside the request-id and metrics middlewares, so a probe still carries
its `X-Request-ID` and counts in `meshplan_http_request_duration_seconds` under the route
`/v1/health`; the route below stays for the OpenAPI document and answers the same body.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request
from sqlalchemy import text
from sqlalchemy.engine import Engine
from starlette.types import ASGIApp, Receive, Scope, Send

from app import __version__
from app.api.deps import EngineDep, RunnerDep, SettingsDep
from app.api.problems import ProblemResponse, problem_response
from app.core.problems import make_problem
from app.db.session import database_kind
from app.schemas import HealthPublic, ReadinessPublic

router = APIRouter(tags=["health"])

_READY_THREADS = anyio.CapacityLimiter(4)
"""Threads for readiness checks alone: a probe must not queue behind busy API threads."""


LIVENESS_PATH = "/v1/health"


def liveness(state: Any) -> HealthPublic:
    """The liveness answer from the app's state (`engine`, `runner`): no database access."""
    runner = getattr(state, "runner", None)
    return HealthPublic(
        version=__version__,
        database=database_kind(state.engine),
        pool=runner.pool_state() if runner is not None else None,
    )


@router.get(LIVENESS_PATH, response_model=HealthPublic)
async def read_health(request: Request) -> HealthPublic:
    """Liveness: the process answers (no database access); version, database kind and the
    state of the search worker pool (`broken` until a dead worker's pool is rebuilt)."""
    return liveness(request.app.state)


class LivenessMiddleware:
    """Answers `GET /v1/health` (any query string) with `liveness(app.state)` as JSON and
    passes every other request on; `scope["route"]` is set to the documented route so
    metrics label the probe by its template."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._route: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("path") != LIVENESS_PATH
            or scope.get("method") != "GET"
        ):
            await self.app(scope, receive, send)
            return
        if self._route is None:
            self._route = next(
                r for r in router.routes if getattr(r, "path", None) == LIVENESS_PATH
            )
        scope["route"] = self._route
        body = liveness(scope["app"].state).model_dump_json().encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _database_check(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def pool_state(engine: Engine) -> dict[str, Any]:
    """Connections of the SQLAlchemy pool: configured size, checked out, overflow."""
    pool: Any = engine.pool
    state: dict[str, Any] = {"class": type(pool).__name__}
    for name in ("size", "checkedout", "overflow", "checkedin"):
        method = getattr(pool, name, None)
        if callable(method):
            state[name] = int(method())
    return state


async def check_database(engine: Engine, timeout_s: float) -> dict[str, Any]:
    """`{"ok", "latency_ms", "error"}` of a `SELECT 1` bounded by `timeout_s`."""
    began = time.perf_counter()
    error: str | None = None
    with anyio.move_on_after(timeout_s) as scope:
        try:
            await anyio.to_thread.run_sync(
                _database_check, engine, limiter=_READY_THREADS, abandon_on_cancel=True
            )
        except Exception as exc:  # any driver error means: not ready
            error = f"{type(exc).__name__}: {exc}"[:300]
    if scope.cancelled_caught:
        error = f"no answer within {timeout_s} s"
    return {
        "ok": error is None,
        "latency_ms": round((time.perf_counter() - began) * 1000, 2),
        "error": error,
    }


@router.get(
    "/v1/health/ready",
    response_model=ReadinessPublic,
    responses={503: {"description": "not ready: database unreachable or workers warming up"}},
)
async def read_readiness(
    request: Request, settings: SettingsDep, engine: EngineDep, runner: RunnerDep
) -> ReadinessPublic | ProblemResponse:
    """Readiness: database reachable, search workers warm; 503 problem otherwise."""
    database = await check_database(engine, settings.readiness_timeout_s)
    workers = runner.pool_state()
    checks = {"database": database, "workers": workers, "database_pool": pool_state(engine)}
    if database["ok"] and workers["warm"] and workers["state"] != "broken":
        return ReadinessPublic(version=__version__, database=database_kind(engine), checks=checks)
    reasons = []
    if not database["ok"]:
        reasons.append(f"database: {database['error']}")
    if workers["state"] == "broken":
        reasons.append("search worker pool broken (a worker died; it is being rebuilt)")
    if not workers["warm"]:
        reasons.append(
            f"search workers warming up ({workers['warm_workers']} of {workers['workers']} ready)"
        )
    return problem_response(
        make_problem(
            status=503,
            slug="not-ready",
            title="Not ready",
            detail="; ".join(reasons),
            instance=request.url.path,
            checks=checks,
        ),
        headers={"Retry-After": "1"},
    )
