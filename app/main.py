"""The FastAPI application: `create_app(settings)` wires routers, RFC 9457 problem handlers,
middlewares and a lifespan that migrates the database, loads cost-model plug-ins, starts the
search runner and recovers unfinished searches. `uvicorn app.main:app` serves it."""

from __future__ import annotations

import gc
import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from app import __version__
from app.api import metrics as service_metrics
from app.api.auth import rate_buckets
from app.api.docs import install_offline_docs
from app.api.etag import ETagMiddleware
from app.api.links import document_links
from app.api.problems import (
    BodyLimitMiddleware,
    RequestContextMiddleware,
    document_problems,
    install_problem_handlers,
)
from app.api.routes import (
    admin,
    calibration,
    capacity,
    catalog,
    estimate,
    exports,
    health,
    measurements,
    placements,
    plans,
    searches,
)
from app.core.config import Settings
from app.core.logs import configure_logging
from app.db import migrate
from app.db.session import make_engine
from app.services import planning
from app.services.pool import RequestPool
from app.services.runner import SearchRunner
from app.services.webhooks import WebhookDispatcher
from app.ui import routes as ui

logger = logging.getLogger(__name__)

DESCRIPTION = (
    "Searches parallel execution plans (data/tensor/pipeline/context/expert parallelism, "
    "micro-batch, ZeRO, recompute, schedule) for training LLMs on GPU clusters. "
    "Errors are RFC 9457 `application/problem+json`."
)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the application (nothing touches the database until the lifespan starts)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # sync handlers run on anyio's worker threads (40 by default); the pool holds a
        # connection for each, so none waits for one (issue 13, app.db.session)
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        engine = make_engine(
            settings.database_url,
            pool_size=settings.api_threads,
            max_overflow=settings.db_pool_overflow,
            pool_timeout_s=settings.db_pool_timeout_s,
        )
        try:
            if settings.run_migrations:
                migrate.upgrade(engine)
            app.state.plugins = planning.load_plugins(settings.plugin_allowlist)
            planning.warm_up()  # before the first requests, which would each load the catalog
            runner = SearchRunner(settings, engine)
            runner.start()
            request_pool = RequestPool(
                workers=settings.request_workers,
                max_tasks=settings.request_worker_max_tasks,
                max_memory_mb=settings.worker_max_memory_mb,
                plugin_allowlist=settings.plugin_allowlist,
                log_level=settings.log_level,
                in_process=settings.search_executor == "thread",
                nice=settings.worker_nice,
            )
            request_pool.start()
            app.state.request_pool = request_pool
            webhooks = WebhookDispatcher(settings, engine, searches.webhook_search_view)
            runner.add_listener(webhooks.notify)
            runner.add_listener(service_metrics.search_finished_listener(app.state.metrics, engine))
            app.state.engine = engine
            app.state.runner = runner
            app.state.webhooks = webhooks
            runner.recover()
            webhooks.start()  # resumes deliveries left pending by a previous process
            # Everything loaded so far (catalog, pydantic schemas, OR-Tools) lives as long as
            # the process: out of the collector's generations, a full collection walks only
            # what requests allocate (it walked it all: 100-250 ms pauses, the liveness
            # p99 at 64 clients)
            gc.collect()
            gc.freeze()
            try:
                yield
            finally:
                runner.shutdown()
                request_pool.stop()
                webhooks.stop()
        finally:
            engine.dispose()

    app = FastAPI(
        title="meshplan",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # the offline pages below replace FastAPI's CDN ones (issue 14)
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = service_metrics.Metrics(app)
    app.state.rate_buckets = rate_buckets(settings)
    app.state.compute_limiter = anyio.CapacityLimiter(settings.api_compute_threads)
    install_problem_handlers(app)
    app.add_middleware(ETagMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_request_bytes)
    app.add_middleware(health.LivenessMiddleware)  # probes skip routing (issue 13)
    app.add_middleware(RequestContextMiddleware, header=settings.request_id_header)
    app.add_middleware(service_metrics.MetricsMiddleware, metrics=app.state.metrics)
    app.include_router(service_metrics.router)
    for module in (
        health,
        catalog,
        estimate,
        searches,
        plans,
        exports,
        measurements,
        calibration,
        placements,
        capacity,
        admin,
    ):
        _docstring_summaries(module.router)
        app.include_router(module.router)
    app.include_router(ui.router)  # the plan explorer, /ui/ (issue 14)
    install_offline_docs(app)
    document_problems(app)
    document_links(app)
    return app


def _docstring_summaries(router: APIRouter) -> None:
    """Each route's first docstring paragraph (its lines joined) becomes its OpenAPI
    summary; the whole docstring stays the description."""
    for route in router.routes:
        if isinstance(route, APIRoute) and route.summary is None:
            doc = inspect.getdoc(route.endpoint) or ""
            if doc:
                first = doc.split("\n\n", 1)[0]
                route.summary = " ".join(first.split()).rstrip(".")


def create_service() -> FastAPI:
    """The app `uvicorn app.main:app` serves: settings from the environment, logs in
    `MESHPLAN_LOG_FORMAT` with request ids."""
    settings = Settings()
    configure_logging(settings.log_format, settings.log_level)
    return create_app(settings)


app = create_service()
