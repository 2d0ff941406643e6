"""Liveness and database check."""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy import text

from app import __version__
from app.api.deps import SessionDep
from app.db.session import database_kind
from app.schemas import HealthPublic

router = APIRouter(tags=["health"])


@router.get("/v1/health", response_model=HealthPublic)
def read_health(session: SessionDep, request: Request) -> HealthPublic:
    """Service status, version, database kind and the state of the search worker pool."""
    session.exec(text("SELECT 1"))  # type: ignore[call-overload]
    bind = session.get_bind()
    runner = getattr(request.app.state, "runner", None)
    return HealthPublic(
        version=__version__,
        database=database_kind(bind.engine),
        pool=runner.pool_state() if runner is not None else None,
    )
