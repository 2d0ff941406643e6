"""Database layer: the Alembic migration builds exactly the SQLModel schema (SQLite and
PostgreSQL), conditional state changes have one winner, and the whole API runs on
PostgreSQL (each test in its own schema, dropped afterwards)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text
from sqlmodel import Session

from app.db import crud, migrate
from app.db.models import PlanRecord, SearchStatus
from app.db.session import make_engine, normalize_database_url
from app.main import create_app
from tests.support import TestClient

PG_HOST = "127.0.0.1:5432"
PG_DB = "test"


def _pg_admin_url() -> str | None:
    try:
        import psycopg
    except ImportError:
        return None
    for user in ("postgres", "root"):
        try:
            with psycopg.connect(f"postgresql://{user}@{PG_HOST}/{PG_DB}", connect_timeout=2):
                return f"postgresql+psycopg://{user}@{PG_HOST}/{PG_DB}"
        except psycopg.Error:
            continue
    return None


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A URL whose search_path is a fresh schema (dropped after the test)."""
    admin = _pg_admin_url()
    if admin is None:
        pytest.skip(f"PostgreSQL is not reachable at {PG_HOST}/{PG_DB} as postgres or root")
    schema = f"meshplan_test_{uuid.uuid4().hex[:12]}"
    engine = make_engine(admin)
    with engine.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{admin}?options=-csearch_path%3D{schema}"
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


def _store(session: Session) -> str:
    record = crud.create_search(
        session=session,
        request={"r": 1},
        problem={"p": 1},
        request_hash="h" * 64,
        cost_model_name="analytical",
        cost_model_version="1",
    )
    return record.id


def _check_migration(url: str) -> None:
    engine = make_engine(url)
    try:
        migrate.upgrade(engine)
        assert migrate.schema_differences(engine) == []
        tables = set(inspect(engine).get_table_names())
        assert {"searches", "plans", "alembic_version"} <= tables
        migrate.downgrade(engine)
        assert not {"searches", "plans"} & set(inspect(engine).get_table_names())
        # after a downgrade the comparison sees the missing tables: it can fail
        assert migrate.schema_differences(engine) != []
        migrate.upgrade(engine)
        assert migrate.schema_differences(engine) == []
    finally:
        engine.dispose()


def test_migration_matches_the_models_on_sqlite(tmp_path: Path) -> None:
    _check_migration(f"sqlite:///{tmp_path / 'm.db'}")


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'sub' / 'w.db'}")  # creates sub/
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
    engine.dispose()


def test_database_url_normalisation() -> None:
    assert normalize_database_url("postgres://u@h/d") == "postgresql+psycopg://u@h/d"
    assert normalize_database_url("postgresql://u@h/d") == "postgresql+psycopg://u@h/d"
    assert normalize_database_url("sqlite:///x.db") == "sqlite:///x.db"


def _check_state_changes(url: str) -> None:
    engine = make_engine(url)
    migrate.upgrade(engine)
    try:
        with Session(engine, expire_on_commit=False) as session:
            search_id = _store(session)
            assert crud.start_search(session=session, search_id=search_id)
            assert not crud.start_search(session=session, search_id=search_id)  # not queued
            assert crud.cancel_search(session=session, search_id=search_id)
            # the worker's final write loses to the cancel but keeps its plans
            plan = PlanRecord(search_id=search_id, rank=1, plan={}, metrics={}, memory={})
            final = crud.finish_search(
                session=session,
                search_id=search_id,
                status=SearchStatus.SUCCEEDED,
                stats={"n": 1},
                plans=[plan],
            )
            assert final == "cancelled"
            assert crud.list_plans(session=session, search_id=search_id, limit=10)[1] == 1
            assert not crud.cancel_search(session=session, search_id=search_id)
            record = crud.get_search(session=session, search_id=search_id)
            assert record is not None and record.attempts == 1
            assert record.stats == {"n": 1} and record.finished_at is not None
            other = _store(session)
            assert crud.fail_search(session=session, search_id=other, error={"status": 500})
            assert not crud.start_search(session=session, search_id=other)
    finally:
        engine.dispose()


def test_state_changes_have_one_winner_on_sqlite(tmp_path: Path) -> None:
    _check_state_changes(f"sqlite:///{tmp_path / 's.db'}")


@pytest.mark.postgres
def test_migration_matches_the_models_on_postgresql(pg_url: str) -> None:
    _check_migration(pg_url)


@pytest.mark.postgres
def test_state_changes_have_one_winner_on_postgresql(pg_url: str) -> None:
    _check_state_changes(pg_url)


@pytest.mark.postgres
def test_the_api_on_postgresql(pg_url: str, settings_factory: Any, tiny: dict[str, Any]) -> None:
    settings = settings_factory(database_url=pg_url)
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/health").json()["database"] == "postgresql"
        response = client.post("/v1/searches?wait=30", json=tiny)
        assert response.status_code == 201, response.text
        search = response.json()
        assert search["status"] == "succeeded"
        plans = client.get(f"/v1/searches/{search['id']}/plans").json()
    with TestClient(create_app(settings)) as client:  # a restart on the same database
        assert client.get(f"/v1/searches/{search['id']}/plans").json() == plans
        assert client.get("/v1/searches").json()["total"] == 1
