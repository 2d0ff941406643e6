"""Prometheus metrics (`GET /metrics`, prometheus-client's text exposition format).

- `meshplan_http_request_duration_seconds` (histogram): by route template (`/v1/searches/
  {search_id}`, never the raw path, so ids do not multiply series; `unmatched` for paths no
  route serves), method and status.
- `meshplan_http_problems_total` (counter): problem responses by problem type slug
  (`invalid-input`, `not-found`, `internal-error`, ...) and status.
- `meshplan_search_duration_seconds` (histogram): searches finished in this process, by
  final status, from `started_at` to `finished_at`.
- `meshplan_searches` (gauge): stored searches by status `queued` / `running`, counted in
  the database at most every `QUEUE_CACHE_S` (a scrape reuses the last count meanwhile).
- `meshplan_search_workers` (gauge): the worker pool by `state` (`configured`, `warm`,
  `busy`); `meshplan_search_pool_warm` 1 once every worker is warm.

Each app has its own registry (`app.state.metrics`), so several apps in one process (tests)
do not share series.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlmodel import Session, col
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.problems import PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_BASE
from app.db.models import SearchRecord, SearchStatus

QUEUE_CACHE_S = 2.0
"""Longest age of the queued/running counts a scrape answers."""
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SEARCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_PROBLEM_BODY_LIMIT = 64 * 1024


class ServiceCollector(Collector):
    """Queue depth (cached database counts) and worker pool state (from the runner)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._read_at = -float("inf")

    def _queue_counts(self) -> dict[str, int]:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= QUEUE_CACHE_S:
                engine = getattr(self.app.state, "engine", None)
                if engine is None:
                    return {}
                statuses = [SearchStatus.QUEUED.value, SearchStatus.RUNNING.value]
                with Session(engine) as session:
                    status_column = col(SearchRecord.status)
                    rows = session.execute(
                        select(status_column, func.count())
                        .where(status_column.in_(statuses))
                        .group_by(status_column)
                    ).all()
                self._counts = dict.fromkeys(statuses, 0) | {str(s): int(n) for s, n in rows}
                self._read_at = now
            return dict(self._counts)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        searches = GaugeMetricFamily(
            "meshplan_searches", "Stored searches by status (queued, running)", labels=["status"]
        )
        try:
            counts = self._queue_counts()
        except Exception:  # an unreachable database must not break the scrape
            counts = {}
        for status, count in sorted(counts.items()):
            searches.add_metric([status], count)
        yield searches
        runner = getattr(self.app.state, "runner", None)
        workers = GaugeMetricFamily(
            "meshplan_search_workers", "Search worker pool by state", labels=["state"]
        )
        warm = GaugeMetricFamily("meshplan_search_pool_warm", "1 once every worker is warm")
        if runner is not None:
            state = runner.pool_state()
            workers.add_metric(["configured"], state["workers"])
            workers.add_metric(["warm"], state["warm_workers"])
            workers.add_metric(["busy"], state["active"])
            warm.add_metric([], 1.0 if state["warm"] else 0.0)
        yield workers
        yield warm


class Metrics:
    """The registry and instruments of one app."""

    def __init__(self, app: Any) -> None:
        self.registry = CollectorRegistry()
        self.request_duration = Histogram(
            "meshplan_http_request_duration_seconds",
            "HTTP request latency by route template, method and status",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.problems = Counter(
            "meshplan_http_problems",
            "Problem (RFC 9457) responses by problem type and status",
            ["type", "status"],
            registry=self.registry,
        )
        self.search_duration = Histogram(
            "meshplan_search_duration_seconds",
            "Run time of searches finished in this process, by final status",
            ["status"],
            buckets=SEARCH_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(ServiceCollector(app))

    def observe_search(self, status: str, seconds: float) -> None:
        self.search_duration.labels(status=status).observe(max(seconds, 0.0))


def search_finished_listener(metrics: Metrics, engine: Any) -> Any:
    """A runner listener that reads a finished search's times and observes its duration."""
    from app.db import crud

    def listener(search_id: str) -> None:
        with Session(engine) as session:
            record = crud.get_search(session=session, search_id=search_id)
        if record is None or record.started_at is None or record.finished_at is None:
            return
        metrics.observe_search(
            record.status, (record.finished_at - record.started_at).total_seconds()
        )

    return listener


class MetricsMiddleware:
    """Times every HTTP request and counts problem responses by type."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500
        problem: bytearray | None = None

        async def send_and_watch(message: Message) -> None:
            nonlocal status, problem
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for key, value in message.get("headers", []):
                    if key.lower() == b"content-type" and value.startswith(
                        PROBLEM_CONTENT_TYPE.encode()
                    ):
                        problem = bytearray()
            elif message["type"] == "http.response.body" and problem is not None:
                if len(problem) < _PROBLEM_BODY_LIMIT:
                    problem.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.request_duration.labels(
                route=template, method=scope.get("method", ""), status=str(status)
            ).observe(time.perf_counter() - began)
            if problem is not None:
                self.metrics.problems.labels(
                    type=_problem_slug(bytes(problem)), status=str(status)
                ).inc()


def _problem_slug(body: bytes) -> str:
    try:
        kind = json.loads(body).get("type", "")
    except (ValueError, AttributeError):
        return "unknown"
    if isinstance(kind, str) and kind.startswith(PROBLEM_TYPE_BASE):
        return kind[len(PROBLEM_TYPE_BASE) :][:80]
    return "other"


router = APIRouter(tags=["operations"])


@router.get("/metrics", response_class=Response, include_in_schema=True)
async def read_metrics(request: Request) -> Response:
    """Prometheus metrics in the text exposition format."""
    metrics: Metrics = request.app.state.metrics
    body = await anyio.to_thread.run_sync(generate_latest, metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
