"""Measured runs: POST/GET /v1/plans/{id}/measurements (one validation rule per test, each a
problem+json naming the field), GET /v1/calibration, and the feedback loop: measurements
posted back move the `calibrated` cost model's predictions toward them."""

from __future__ import annotations

from typing import Any

import pytest
from app_support import assert_problem, error_fields
from sqlalchemy import text

TOKENS_PER_STEP = 8 * 512
"""The tiny workload: global_batch_size 8 × sequence_length 512."""
H100_MEMORY_GIB = 81559 / 1024
"""Catalog capacity of h100-sxm: nvidia-smi's 81559 MiB = 79.647 GiB (checked below)."""


def _search(client: Any, tiny: dict[str, Any], **extra: Any) -> dict[str, Any]:
    response = client.post("/v1/searches?wait=30", json={**tiny, "top_k": 5, **extra})
    assert response.status_code == 201, response.text
    return dict(response.json())


def _plans(client: Any, tiny: dict[str, Any]) -> list[dict[str, Any]]:
    search = _search(client, tiny)
    items: list[dict[str, Any]] = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    assert len(items) >= 3
    return items


def _post(client: Any, plan_id: str, body: dict[str, Any]) -> Any:
    return client.post(f"/v1/plans/{plan_id}/measurements", json=body)


def test_step_time_is_stored_with_the_prediction_error(client: Any, tiny: dict[str, Any]) -> None:
    plan = _plans(client, tiny)[0]
    predicted = plan["metrics"]["step_time_s"]
    response = _post(client, plan["id"], {"step_time_s": 1.25 * predicted, "notes": "n1"})
    assert response.status_code == 201, response.text
    body = response.json()
    assert response.headers["location"] == f"/v1/plans/{plan['id']}/measurements/{body['id']}"
    assert body["plan_id"] == plan["id"] and body["search_id"] == plan["search_id"]
    assert body["accelerator_id"] == "h100-sxm"
    assert body["predicted_step_time_s"] == pytest.approx(predicted, rel=1e-12)
    assert body["error"] == pytest.approx(0.25, rel=1e-9)  # 1.25 × predicted / predicted − 1
    assert body["tokens_per_s"] == pytest.approx(TOKENS_PER_STEP / (1.25 * predicted), rel=1e-9)
    assert body["notes"] == "n1" and body["created_at"]
    assert client.get(response.headers["location"]).json() == body


def test_tokens_per_s_alone_is_converted_to_step_time(client: Any, tiny: dict[str, Any]) -> None:
    plan = _plans(client, tiny)[0]
    # 4096 tokens per step at 8192 tokens/s: half a second per step
    body = _post(client, plan["id"], {"tokens_per_s": 8192.0}).json()
    assert body["step_time_s"] == pytest.approx(0.5, rel=1e-12)
    assert body["tokens_per_s"] == 8192.0


def test_both_rates_within_5_percent_are_accepted(client: Any, tiny: dict[str, Any]) -> None:
    plan = _plans(client, tiny)[0]
    # 0.5 s × 8519.68 tokens/s = 4259.84 tokens = 1.04 × 4096
    response = _post(client, plan["id"], {"step_time_s": 0.5, "tokens_per_s": 8192 * 1.04})
    assert response.status_code == 201, response.text
    assert response.json()["step_time_s"] == 0.5


def test_disagreeing_rates_name_both_fields(client: Any, tiny: dict[str, Any]) -> None:
    plan = _plans(client, tiny)[0]
    # 0.5 s × 8683.52 tokens/s = 1.06 × 4096 tokens: 6 % off
    response = _post(client, plan["id"], {"step_time_s": 0.5, "tokens_per_s": 8192 * 1.06})
    body = assert_problem(response, 422)
    assert sorted(error_fields(body)) == ["step_time_s", "tokens_per_s"]
    assert "4096" in body["detail"]


def test_a_rate_is_required(client: Any, tiny: dict[str, Any]) -> None:
    plan = _plans(client, tiny)[0]
    body = assert_problem(_post(client, plan["id"], {"notes": "no numbers"}), 422)
    assert sorted(error_fields(body)) == ["step_time_s", "tokens_per_s"]


def test_step_time_must_be_positive(client: Any, tiny: dict[str, Any]) -> None:
    plan = _plans(client, tiny)[0]
    body = assert_problem(_post(client, plan["id"], {"step_time_s": 0}), 422)
    assert error_fields(body) == ["step_time_s"]


def test_notes_are_at_most_4000_characters(client: Any, tiny: dict[str, Any]) -> None:
    plan = _plans(client, tiny)[0]
    assert _post(client, plan["id"], {"step_time_s": 1.0, "notes": "x" * 4000}).status_code == 201
    body = assert_problem(_post(client, plan["id"], {"step_time_s": 1.0, "notes": "x" * 4001}), 422)
    assert error_fields(body) == ["notes"]


def test_peak_memory_above_capacity_is_rejected(client: Any, tiny: dict[str, Any]) -> None:
    assert client.get("/v1/hardware/h100-sxm").json()["memory_gib"] == H100_MEMORY_GIB
    plan = _plans(client, tiny)[0]
    limit = H100_MEMORY_GIB * 1.05  # 83.63 GiB
    ok = _post(client, plan["id"], {"step_time_s": 1.0, "peak_memory_gib": limit - 0.01})
    assert ok.status_code == 201, ok.text
    body = assert_problem(
        _post(client, plan["id"], {"step_time_s": 1.0, "peak_memory_gib": limit + 0.01}), 422
    )
    assert error_fields(body) == ["peak_memory_gib"]


def test_peak_memory_per_rank_names_the_rank(client: Any, tiny: dict[str, Any]) -> None:
    plans = _plans(client, tiny)
    plan = max(plans, key=lambda p: p["parallelism"]["pipeline"])
    ranks = plan["parallelism"]["pipeline"]
    values = [10.0] * ranks
    values[-1] = 90.0  # above 1.05 × 79.65 = 83.63 GiB
    body = assert_problem(
        _post(client, plan["id"], {"step_time_s": 1.0, "peak_memory_gib": values}), 422
    )
    assert error_fields(body) == [f"peak_memory_gib.{ranks - 1}"]
    ok = _post(client, plan["id"], {"step_time_s": 1.0, "peak_memory_gib": [10.0] * ranks})
    assert ok.status_code == 201 and ok.json()["peak_memory_gib"] == [10.0] * ranks


def test_peak_memory_must_be_positive(client: Any, tiny: dict[str, Any]) -> None:
    plan = _plans(client, tiny)[0]
    for value in (0, -1.0, [1.0, -1.0], "a lot"):
        body = assert_problem(
            _post(client, plan["id"], {"step_time_s": 1.0, "peak_memory_gib": value}), 422
        )
        assert error_fields(body) == ["peak_memory_gib"]


def test_peak_memory_list_needs_one_value_per_rank(client: Any, tiny: dict[str, Any]) -> None:
    plan = _plans(client, tiny)[0]
    ranks = plan["parallelism"]["pipeline"]
    body = assert_problem(
        _post(client, plan["id"], {"step_time_s": 1.0, "peak_memory_gib": [1.0] * (ranks + 1)}), 422
    )
    assert error_fields(body) == ["peak_memory_gib"]


def test_unknown_plan_is_a_404_problem(client: Any) -> None:
    path = "/v1/plans/no-such-plan/measurements"
    assert_problem(client.post(path, json={"step_time_s": 1.0}), 404, path=path)
    assert_problem(client.get(path), 404, path=path)


def test_listing_is_oldest_first_with_total(client: Any, tiny: dict[str, Any]) -> None:
    plans = _plans(client, tiny)
    first = _post(client, plans[0]["id"], {"step_time_s": 1.0}).json()
    second = _post(client, plans[0]["id"], {"step_time_s": 2.0}).json()
    _post(client, plans[1]["id"], {"step_time_s": 3.0})  # another plan's: not listed
    body = client.get(f"/v1/plans/{plans[0]['id']}/measurements").json()
    assert body["total"] == 2
    assert [m["id"] for m in body["items"]] == [first["id"], second["id"]]
    assert [m["step_time_s"] for m in body["items"]] == [1.0, 2.0]


def test_measurements_go_with_their_search(client: Any, tiny: dict[str, Any]) -> None:
    plan = _plans(client, tiny)[0]
    _post(client, plan["id"], {"step_time_s": 1.0})
    engine = client.app.state.engine
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM searches WHERE id = :id"), {"id": plan["search_id"]})
        assert conn.execute(text("SELECT count(*) FROM measurements")).scalar() == 0


def test_calibration_without_measurements_is_the_analytical_model(
    client: Any, tiny: dict[str, Any]
) -> None:
    body = client.get("/v1/calibration?accelerator=h100-sxm").json()
    assert body["num_samples"] == 0 and body["parameters"] == {}
    assert body["error_before"] is None and body["error_after"] is None
    plan = {"parallelism": {"data": 2, "pipeline": 2}, "stage_layers": [2, 2]}
    plain = client.post("/v1/estimate", json={**tiny, "plan": plan}).json()
    calibrated = client.post(
        "/v1/estimate", json={**tiny, "plan": plan, "cost_model": {"name": "calibrated"}}
    ).json()
    assert calibrated["metrics"] == plain["metrics"]
    assert calibrated["calibration"]["num_samples"] == 0
    assert plain["calibration"] is None


def test_calibration_of_an_unknown_accelerator_is_a_422(client: Any) -> None:
    body = assert_problem(client.get("/v1/calibration?accelerator=no-such-gpu"), 422)
    assert error_fields(body) == ["accelerator"]


def test_measured_runs_move_the_calibrated_predictions(client: Any, tiny: dict[str, Any]) -> None:
    plans = _plans(client, tiny)[:3]
    for plan in plans:  # every run 20 % slower than predicted
        response = _post(client, plan["id"], {"step_time_s": 1.2 * plan["metrics"]["step_time_s"]})
        assert response.status_code == 201, response.text

    fit = client.get("/v1/calibration?accelerator=H100-SXM").json()
    assert fit["accelerator"] == "h100-sxm" and fit["num_samples"] == 3
    # before: every prediction is 1/1.2 of the measurement, |1/1.2 − 1| = 1/6
    assert fit["error_before"]["mean"] == pytest.approx(1 / 6, rel=1e-6)
    assert fit["error_after"]["mean"] < fit["error_before"]["mean"] / 2
    assert {s["plan_id"] for s in fit["samples"]} == {p["id"] for p in plans}

    for plan in plans:
        fields = {
            k: plan[k]
            for k in (
                "parallelism",
                "micro_batch_size",
                "zero_stage",
                "recompute",
                "pipeline_schedule",
                "stage_layers",
            )
        }
        body = client.post(
            "/v1/estimate", json={**tiny, "plan": fields, "cost_model": {"name": "calibrated"}}
        ).json()
        calibration = body["calibration"]
        assert calibration["num_samples"] == 3
        assert calibration["error_after"]["mean"] < calibration["error_before"]["mean"]
        measured = 1.2 * plan["metrics"]["step_time_s"]
        predicted = body["metrics"]["step_time_s"]
        assert abs(predicted / measured - 1) < abs(plan["metrics"]["step_time_s"] / measured - 1)

    # a new search with the calibrated model stores the fitted parameters (reproducible)
    search = _search(client, tiny, cost_model={"name": "calibrated"})
    assert search["calibration"]["num_samples"] == 3
    assert search["cost_model"]["config"]["parameters"] == fit["parameters"]
    assert search["cost_model"]["version"] == fit["cost_model"]["version"]
    best = client.get(f"/v1/searches/{search['id']}/plans?limit=1").json()["items"][0]
    assert best["metrics"]["step_time_s"] > min(p["metrics"]["step_time_s"] for p in plans)
