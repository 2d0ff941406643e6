"""State lives in the database: plans survive a restart, a search left queued or running by
a dead process is resumed (or failed with a reason after too many attempts), a clean
shutdown puts running searches back in the queue, and the process-pool runner works."""

from __future__ import annotations

import time
from typing import Any

import pytest
from app_support import wait_for
from sqlmodel import Session

from app.db import crud, migrate
from app.db.models import SearchRecord
from app.db.session import make_engine
from app.main import create_app
from app.schemas import SearchCreate
from app.services import planning
from tests.support import TestClient


def _store(settings: Any, body: dict[str, Any], *, status: str, attempts: int) -> str:
    """Store a search as a crashed process would have left it."""
    engine = make_engine(settings.database_url)
    migrate.upgrade(engine)
    prepared = planning.prepare_search(SearchCreate.model_validate(body), settings)
    with Session(engine, expire_on_commit=False) as session:
        record = SearchRecord(
            status=status,
            attempts=attempts,
            request=prepared.request,
            problem=prepared.problem,
            request_hash=prepared.request_hash,
            cost_model_name=prepared.cost_model_name,
            cost_model_version=prepared.cost_model_version,
        )
        session.add(record)
        session.commit()
        search_id = record.id
    engine.dispose()
    return search_id


def test_plans_survive_a_restart(settings_factory: Any, tiny: dict[str, Any]) -> None:
    settings = settings_factory()
    with TestClient(create_app(settings)) as client:
        search = client.post("/v1/searches?wait=30", json=tiny).json()
        plans = client.get(f"/v1/searches/{search['id']}/plans").json()
    assert search["status"] == "succeeded" and plans["total"] >= 1
    with TestClient(create_app(settings)) as client:
        again = client.get(f"/v1/searches/{search['id']}").json()
        assert again["status"] == "succeeded"
        assert again["finished_at"] == search["finished_at"]
        assert client.get(f"/v1/searches/{search['id']}/plans").json() == plans


def test_interrupted_searches_are_recovered(settings_factory: Any, tiny: dict[str, Any]) -> None:
    settings = settings_factory()
    queued = _store(settings, tiny, status="queued", attempts=0)
    crashed_once = _store(settings, tiny, status="running", attempts=1)
    crashed_twice = _store(settings, tiny, status="running", attempts=2)
    with TestClient(create_app(settings)) as client:
        first = wait_for(client, queued)
        assert first["status"] == "succeeded" and first["attempts"] == 1
        second = wait_for(client, crashed_once)
        assert second["status"] == "succeeded" and second["attempts"] == 2
        assert client.get(f"/v1/searches/{crashed_once}/plans").json()["total"] >= 1
        third = client.get(f"/v1/searches/{crashed_twice}").json()
        assert third["status"] == "failed"
        assert third["error"]["reason"] == "interrupted by a service restart"
        assert third["error"]["status"] == 500
        assert third["finished_at"] is not None


@pytest.mark.usefixtures("slow_solver")
def test_a_clean_shutdown_requeues_running_searches(
    settings_factory: Any, tiny: dict[str, Any]
) -> None:
    settings = settings_factory()
    big = {
        "model": {"preset": "llama3-405b"},
        "cluster": {
            "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 128, "gpus_per_node": 8}]
        },
        "workload": {"kind": "training", "global_batch_size": 2048, "sequence_length": 8192},
        "constraints": {"time_limit_s": 30},
    }
    with TestClient(create_app(settings)) as client:
        search_id = client.post("/v1/searches", json=big).json()["id"]
        deadline = time.monotonic() + 10
        while client.get(f"/v1/searches/{search_id}").json()["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        started = time.monotonic()
    assert time.monotonic() - started < 10  # shutdown stopped the solver promptly
    engine = make_engine(settings.database_url)
    with Session(engine) as session:
        record = crud.get_search(session=session, search_id=search_id)
        assert record is not None
        assert record.status == "queued" and record.attempts == 0
    engine.dispose()
    with TestClient(create_app(settings)) as client:
        # recovered at start-up: running again, then cancelled by us
        assert client.get(f"/v1/searches/{search_id}").json()["status"] in ("queued", "running")
        assert client.post(f"/v1/searches/{search_id}/cancel").json()["status"] == "cancelled"


def test_process_pool_runner(settings_factory: Any, tiny: dict[str, Any]) -> None:
    settings = settings_factory(search_executor="process", search_workers=1)
    with TestClient(create_app(settings)) as client:
        response = client.post("/v1/searches?wait=60", json=tiny)
        assert response.status_code == 201, response.text
        search = response.json()
        assert search["status"] == "succeeded"
        assert client.get(f"/v1/searches/{search['id']}/plans").json()["total"] >= 1
