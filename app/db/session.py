"""Engine and session management for SQLite (default) and PostgreSQL.

SQLite runs in WAL mode with `check_same_thread=False`, so API threads and search workers
can share one file; PostgreSQL uses the psycopg 3 driver (`postgresql+psycopg://`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlmodel import Session, create_engine


def normalize_database_url(url: str) -> str:
    """Accept `postgres://` and `postgresql://` as the psycopg 3 driver."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def make_engine(
    database_url: str, *, pool_size: int = 10, max_overflow: int = 10, pool_timeout_s: float = 30.0
) -> Engine:
    """An engine for `database_url`; creates the directory of a SQLite file if needed.

    The API process sizes the pool to its threads (`Settings.api_threads`): a handler
    that waited for a connection while holding a thread could wait for its own pool
    (issue 13: 40 threads, 15 connections, 30 s waits and 500s at 64 clients)."""
    url = make_url(normalize_database_url(database_url))
    if url.get_backend_name() == "sqlite":
        database = url.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_timeout=pool_timeout_s,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=pool_timeout_s,
    )


def database_kind(engine: Engine) -> str:
    """`sqlite` or `postgresql`."""
    return "postgresql" if engine.dialect.name == "postgresql" else engine.dialect.name


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
