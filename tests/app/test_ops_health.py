"""Liveness never touches the database; readiness checks it, reports the worker pool's
warm-up and answers a 503 problem when not ready; a search submitted while the process
pool warms up runs at once on a thread (issue 13, point 4)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import event

from app.services.runner import SearchRunner
from tests.app.app_support import assert_problem
from tests.support import TestClient


def _break_database(engine: Any) -> None:
    """Every new connection fails from now on (the listener first, then the pooled
    connections go, so none checked in meanwhile survives)."""

    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("database is gone (test)")

    event.listen(engine, "do_connect", refuse)
    engine.pool.dispose()


def test_liveness_answers_without_the_database(client) -> None:
    before = client.get("/v1/health")
    assert before.status_code == 200
    assert {k: v for k, v in before.json().items() if k != "pool"} == {
        "status": "ok",
        "version": before.json()["version"],
        "database": "sqlite",
    }
    assert before.json()["pool"]["state"] == "ok"
    _break_database(client.app.state.engine)
    r = client.get("/v1/health")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ok" and r.json()["database"] == "sqlite"
    ready = client.get("/v1/health/ready")
    body = assert_problem(ready, 503, path="/v1/health/ready")
    assert body["type"].endswith("/not-ready")
    assert body["checks"]["database"]["ok"] is False
    assert "database is gone" in body["checks"]["database"]["error"]
    assert ready.headers["retry-after"] == "1"


def test_readiness_reports_database_workers_and_pool(client) -> None:
    r = client.get("/v1/health/ready")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ready" and body["database"] == "sqlite"
    checks = body["checks"]
    assert checks["database"]["ok"] is True and checks["database"]["error"] is None
    expected = {
        "executor": "thread",
        "workers": 2,
        "warm_workers": 2,
        "warm": True,
        "active": 0,
        "stopping": False,
    }
    assert {k: checks["workers"][k] for k in expected} == expected
    # the pool is sized to the API threads (Settings.api_threads, default 128)
    assert checks["database_pool"]["size"] == 128


def test_readiness_is_503_while_workers_warm_up(client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SearchRunner, "warm", property(lambda self: False))
    body = assert_problem(client.get("/v1/health/ready"), 503)
    assert body["checks"]["workers"]["warm"] is False
    assert "warming up" in body["detail"]
    assert client.get("/v1/health").status_code == 200


def test_readiness_times_out_on_a_slow_database(settings_factory) -> None:
    from app.main import create_app

    app = create_app(settings_factory(readiness_timeout_s=0.2))
    with TestClient(app) as c:
        engine = c.app.state.engine

        def slow(*_args: Any, **_kwargs: Any) -> None:
            time.sleep(1.0)  # every statement, on pooled connections too

        event.listen(engine, "before_cursor_execute", slow)
        body = assert_problem(c.get("/v1/health/ready"), 503)
        assert body["checks"]["database"]["error"] == "no answer within 0.2 s"


def test_search_during_warm_up_runs_on_a_thread(settings_factory, tiny) -> None:
    """The process pool's workers import the solver for seconds; a search submitted
    meanwhile must not wait for them."""
    from app.main import create_app

    app = create_app(settings_factory(search_executor="process", search_workers=1))
    with TestClient(app) as c:
        runner = c.app.state.runner
        assert runner.warm is False  # a spawned worker is still importing
        assert c.get("/v1/health/ready").status_code == 503
        r = c.post("/v1/searches?wait=20", json=tiny)
        assert r.status_code == 201, r.text
        assert r.json()["status"] == "succeeded"
        finished_while_warming = runner.warm is False
        deadline = time.monotonic() + 60
        while not runner.warm and time.monotonic() < deadline:
            time.sleep(0.1)
        assert runner.warm
        ready = c.get("/v1/health/ready").json()
        assert ready["checks"]["workers"]["warm_workers"] == 1
    assert finished_while_warming


def test_liveness_is_answered_before_routing(client) -> None:
    """The probe skips FastAPI's routing and dependencies (`LivenessMiddleware`): with the
    engine dependency failing, every routed endpoint answers 500, the probe still answers
    the documented body, carries its request id and counts under its route template."""
    from app.api.deps import get_engine

    def broken_engine() -> None:
        raise RuntimeError("routing was used (test)")

    client.app.dependency_overrides[get_engine] = broken_engine
    try:
        r = client.get("/v1/health?probe=1", headers={"X-Request-ID": "probe-7"})
        assert r.status_code == 200, r.text
        assert r.headers["x-request-id"] == "probe-7"
        assert r.headers["cache-control"] == "no-store"
        assert r.json()["status"] == "ok" and r.json()["pool"]["state"] == "ok"
        assert client.get("/v1/health/ready").status_code == 500  # routed: the override bites
    finally:
        client.app.dependency_overrides.clear()
    metrics = client.get("/metrics").text
    assert 'route="/v1/health",status="200"' in metrics
