"""Measurements against physics: a step faster than the plan's compute floor is a 422 with
the floor; a calibration fit that would leave its bounds is refused (served with the base
values and the reason), never a 500; measurements can be deleted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from app_support import assert_problem, error_fields
from fastapi.testclient import TestClient
from sqlmodel import Session

import hardware_catalog
from app.core.config import Settings
from app.db import crud
from app.db.session import make_engine
from app.main import create_app

SEARCH = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1}]},
    "workload": {"kind": "training", "global_batch_size": 64, "sequence_length": 2048},
    "top_k": 4,
    "constraints": {"time_limit_s": 20},
}
TOKENS_PER_STEP = 64 * 2048


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str, list]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('physics') / 'm.db'}"
    settings = Settings(database_url=url, search_executor="thread")
    with TestClient(create_app(settings)) as client:
        search = client.post("/v1/searches?wait=30", json=SEARCH).json()
        assert search["status"] == "succeeded", search
        plans = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
        yield client, url, plans


def floor_of(plan: dict[str, Any]) -> float:
    """Independently: model FLOPs per GPU per step at the H100's dense BF16 peak."""
    peak = hardware_catalog.get_accelerator("h100-sxm").peak_tflops["bf16"] * 1e12
    metrics = plan["metrics"]
    return metrics["model_tflops_per_gpu"] * 1e12 * metrics["step_time_s"] / peak


def test_a_step_below_the_compute_floor_is_a_422(setup: Any) -> None:
    client, _url, plans = setup
    plan = plans[0]
    floor = floor_of(plan)
    assert 0.1 < floor < plan["metrics"]["step_time_s"]
    url = f"/v1/plans/{plan['id']}/measurements"
    problem = assert_problem(client.post(url, json={"step_time_s": 0.001}), 422)
    assert error_fields(problem) == ["step_time_s"]
    assert problem["compute_floor_s"] == pytest.approx(floor, rel=1e-9)
    rate = TOKENS_PER_STEP / (0.9 * floor)
    problem = assert_problem(client.post(url, json={"tokens_per_s": rate}), 422)
    assert error_fields(problem) == ["tokens_per_s"]
    assert problem["max_tokens_per_s"] == pytest.approx(TOKENS_PER_STEP / floor, rel=1e-9)
    ok = client.post(url, json={"step_time_s": 1.05 * floor})
    assert ok.status_code == 201, ok.text
    assert client.delete(f"/v1/measurements/{ok.json()['id']}").status_code == 204


def test_a_fit_that_would_leave_its_bounds_is_refused_not_a_500(setup: Any) -> None:
    """Rows stored before the floor check (or by hand): four 1 ms steps on plans of 1.4 s."""
    client, url, plans = setup
    engine = make_engine(url)
    ids = []
    with Session(engine) as session:
        for row in plans:
            plan = crud.get_plan(session=session, plan_id=row["id"])
            assert plan is not None
            ids.append(
                crud.create_measurement(
                    session=session,
                    plan=plan,
                    accelerator_id="h100-sxm",
                    step_time_s=0.001,
                    tokens_per_s=TOKENS_PER_STEP / 0.001,
                    predicted_step_time_s=float(plan.metrics["step_time_s"]),
                ).id
            )
    try:
        calibration = client.get("/v1/calibration?accelerator=h100-sxm")
        assert calibration.status_code == 200, calibration.text
        body = calibration.json()
        assert body["refused"] is not None and "bounds" in body["refused"]
        assert body["parameters"] == {} and body["num_samples"] == len(plans)
        assert "refused" in body["detail"]
        estimate = client.post(
            "/v1/searches?wait=30&dedupe=false",
            json={**SEARCH, "cost_model": {"name": "calibrated"}},
        )
        assert estimate.status_code == 201, estimate.text
        assert estimate.json()["status"] == "succeeded"
    finally:
        for measurement_id in ids:
            assert client.delete(f"/v1/measurements/{measurement_id}").status_code == 204
    assert client.get("/v1/calibration?accelerator=h100-sxm").json()["refused"] is None


def test_measurements_can_be_deleted(setup: Any) -> None:
    client, _url, plans = setup
    plan = plans[0]
    base = f"/v1/plans/{plan['id']}/measurements"
    created = client.post(base, json={"step_time_s": plan["metrics"]["step_time_s"] * 1.1})
    assert created.status_code == 201, created.text
    mid = created.json()["id"]
    assert client.get("/v1/calibration?accelerator=h100-sxm").json()["num_samples"] == 1
    assert client.delete(f"/v1/measurements/{mid}").status_code == 204
    assert_problem(client.get(f"{base}/{mid}"), 404)
    assert_problem(client.delete(f"/v1/measurements/{mid}"), 404)
    assert_problem(client.delete(f"{base}/{mid}"), 404)
    assert client.get("/v1/calibration?accelerator=h100-sxm").json()["num_samples"] == 0
    again = client.post(base, json={"step_time_s": plan["metrics"]["step_time_s"] * 1.2}).json()
    assert client.delete(f"{base}/{again['id']}").status_code == 204
    assert client.get(base).json()["total"] == 0
