"""The FastAPI application: `create_app(settings)` wires routers, RFC 9457 problem handlers,
middlewares and a lifespan that migrates the database, loads cost-model plug-ins, starts the
search runner and recovers unfinished searches. `uvicorn app.main:app` serves it."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from app import __version__
from app.api.etag import ETagMiddleware
from app.api.problems import (
    BodyLimitMiddleware,
    RequestContextMiddleware,
    document_problems,
    install_problem_handlers,
)
from app.api.routes import (
    calibration,
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
from app.db import migrate
from app.db.session import make_engine
from app.services import planning
from app.services.runner import SearchRunner
from app.services.webhooks import WebhookDispatcher

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
        engine = make_engine(settings.database_url)
        try:
            if settings.run_migrations:
                migrate.upgrade(engine)
            app.state.plugins = planning.load_plugins(settings.plugin_allowlist)
            runner = SearchRunner(settings, engine)
            runner.start()
            webhooks = WebhookDispatcher(settings, engine, searches.webhook_search_view)
            runner.add_listener(webhooks.notify)
            app.state.engine = engine
            app.state.runner = runner
            app.state.webhooks = webhooks
            runner.recover()
            webhooks.start()  # resumes deliveries left pending by a previous process
            try:
                yield
            finally:
                runner.shutdown()
                webhooks.stop()
        finally:
            engine.dispose()

    app = FastAPI(
        title="meshplan",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    install_problem_handlers(app)
    app.add_middleware(ETagMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_request_bytes)
    app.add_middleware(RequestContextMiddleware, header=settings.request_id_header)
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
    ):
        _docstring_summaries(module.router)
        app.include_router(module.router)
    document_problems(app)
    return app


def _docstring_summaries(router: APIRouter) -> None:
    """Each route's one-line docstring becomes its OpenAPI summary."""
    for route in router.routes:
        if isinstance(route, APIRoute) and route.summary is None:
            doc = inspect.getdoc(route.endpoint) or ""
            if doc:
                route.summary = doc.splitlines()[0].rstrip(".")


app = create_app()
