"""The database going away answers 503 problems with Retry-After and recovers by itself;
a full disk answers a clear 507 problem."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.db.session import make_engine
from app.main import create_app
from tests.app.app_support import assert_problem
from tests.app.test_database import _pg_admin_url


@pytest.fixture()
def pg_database() -> Iterator[tuple[str, Any]]:
    """A fresh database of its own (dropped after the test) and an admin engine."""
    admin = _pg_admin_url()
    if admin is None:
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    name = f"i13_faults_{uuid.uuid4().hex[:10]}"
    engine = make_engine(admin).execution_options(isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin.rsplit("/", 1)[0] + "/" + name, (engine, name)
    finally:
        with engine.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        engine.dispose()


@pytest.mark.postgres
def test_postgresql_going_away_answers_503_then_recovers(
    pg_database: tuple[str, Any], settings_factory: Any
) -> None:
    url, (admin, name) = pg_database
    with TestClient(create_app(settings_factory(database_url=url))) as client:
        assert client.get("/v1/searches").status_code == 200
        with admin.connect() as conn:  # the database refuses connections; existing ones die
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
                {"n": name},
            )
        for path in ("/v1/searches", "/v1/calibration?accelerator=h100-sxm"):
            response = client.get(path)
            body = assert_problem(response, 503, path=path.split("?")[0])
            assert body["type"].endswith("/database-unavailable")
            assert response.headers["retry-after"] == "2"
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        # no restart: the pool reconnects on the next request
        assert client.get("/v1/searches").status_code == 200
        assert client.get("/v1/calibration?accelerator=h100-sxm").status_code == 200


def test_a_full_disk_answers_507(settings_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.app.app_support import TINY_SEARCH

    with TestClient(create_app(settings_factory())) as client:
        from sqlalchemy.orm import Session as OrmSession

        real_commit = OrmSession.commit

        def full_commit(self: OrmSession) -> None:
            if self.new:  # writes fail; reads still work
                raise _sqlalchemy_error(sqlite3.OperationalError("database or disk is full"))
            real_commit(self)

        monkeypatch.setattr(OrmSession, "commit", full_commit)
        response = client.post("/v1/searches", json=TINY_SEARCH)
        body = assert_problem(response, 507, path="/v1/searches")
        assert body["type"].endswith("/storage-full")
        assert "disk is full" in body["detail"]
        monkeypatch.setattr(OrmSession, "commit", real_commit)
        assert client.post("/v1/searches", json=TINY_SEARCH).status_code in (201, 202)


def _sqlalchemy_error(orig: Exception) -> Exception:
    from sqlalchemy.exc import OperationalError

    return OperationalError("INSERT INTO searches ...", {}, orig)
