"""Liveness and database check."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from app import __version__
from app.api.deps import SessionDep
from app.db.session import database_kind
from app.schemas import HealthPublic

router = APIRouter(tags=["health"])


@router.get("/v1/health", response_model=HealthPublic)
def read_health(session: SessionDep) -> HealthPublic:
    """Service status, version and database kind."""
    session.exec(text("SELECT 1"))  # type: ignore[call-overload]
    bind = session.get_bind()
    return HealthPublic(version=__version__, database=database_kind(bind.engine))
