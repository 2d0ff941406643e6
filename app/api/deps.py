"""FastAPI dependencies: settings, database session and the search runner of the app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.core.config import Settings
from app.services.runner import SearchRunner


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def get_runner(request: Request) -> SearchRunner:
    runner: SearchRunner = request.app.state.runner
    return runner


async def get_session(engine: Annotated[Engine, Depends(get_engine)]) -> AsyncIterator[Session]:
    """A session for one request. Async, so that its close (which returns the connection to
    the pool) runs on the event loop: a sync dependency's teardown needs a free worker
    thread, and with every thread waiting for a connection none is returned (FastAPI
    issue #3205). The session connects lazily, at its first query, in the handler's thread."""
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
    finally:
        session.close()


SettingsDep = Annotated[Settings, Depends(get_settings)]
EngineDep = Annotated[Engine, Depends(get_engine)]
RunnerDep = Annotated[SearchRunner, Depends(get_runner)]
SessionDep = Annotated[Session, Depends(get_session)]

MAX_OFFSET = 1_000_000_000
"""Largest `?offset=` of a list (and plan rank in a cursor): far beyond any stored list, and
well inside the 64-bit integers SQLite and PostgreSQL bind (a larger value was a 500)."""
OffsetQuery = Annotated[
    int, Query(ge=0, le=MAX_OFFSET, description=f"Items to skip (0..{MAX_OFFSET}).")
]
