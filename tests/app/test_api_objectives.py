"""Training objectives over HTTP (issue 16, point 1): `objective` on `POST /v1/searches`,
the cost figures on every plan and estimate, and the 422s that name what an objective
needs. The figures are checked against the formulas worked from the request's price."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import MIXED_PRICED_CLUSTER, TINY_MODEL


def _body(objective: str, **workload: Any) -> dict[str, Any]:
    return {
        "model": dict(TINY_MODEL),
        "cluster": {
            "node_groups": [
                {
                    "accelerator": "h100-sxm",
                    "num_nodes": 2,
                    "gpus_per_node": 4,
                    "price_per_gpu_hour": 3,
                }
            ]
        },
        "workload": {
            "kind": "training",
            "global_batch_size": 16,
            "sequence_length": 512,
            **workload,
        },
        "objective": objective,
        "top_k": 3,
    }


def _plans(client: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    return client.get(f"/v1/searches/{search['id']}/plans").json()["items"]


def test_min_cost_over_http_reports_cost_and_may_leave_gpus_idle(client: Any) -> None:
    fastest = _plans(client, _body("max_throughput"))
    cheapest = _plans(client, _body("min_cost"))
    for plan in fastest + cheapest:
        m = plan["metrics"]
        tokens = 16 * 512
        assert m["price_per_gpu_hour"] == 3.0
        expected = m["gpus_used"] * 3 / 3600 * m["step_time_s"] / tokens * 1e6
        assert m["cost_per_million_tokens"] == pytest.approx(expected, rel=1e-9)
        assert m["energy_per_token_j"] > 0
    assert all(p["metrics"]["gpus_used"] == 8 for p in fastest)
    costs = [p["metrics"]["cost_per_million_tokens"] for p in cheapest]
    assert costs == sorted(costs)
    assert costs[0] <= min(p["metrics"]["cost_per_million_tokens"] for p in fastest)
    # a tiny model runs cheapest on fewer GPUs than the cluster has
    assert cheapest[0]["metrics"]["gpus_used"] < 8
    assert "idle" in cheapest[0]["explanation"]


def test_min_gpus_over_http_reaches_the_target_with_fewer_gpus(client: Any) -> None:
    fastest = _plans(client, _body("max_throughput"))
    target = fastest[0]["metrics"]["tokens_per_s"] / 4
    plans = _plans(client, _body("min_gpus", target_tokens_per_s=target))
    assert plans[0]["metrics"]["tokens_per_s"] >= target
    assert plans[0]["metrics"]["gpus_used"] < 8


@pytest.mark.parametrize(
    ("objective", "workload", "field"),
    [
        ("min_time_to_train", {}, "workload.train_tokens"),
        ("min_gpus", {}, "workload.target_tokens_per_s"),
        ("min_price", {}, "objective"),
    ],
)
def test_objectives_without_their_inputs_are_422_naming_the_field(
    client: Any, objective: str, workload: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/searches", json=_body(objective, **workload))
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    fields = [e.get("field") for e in response.json().get("errors", [])]
    assert any(f is not None and f.endswith(field) for f in fields), response.json()


def test_a_serving_search_refuses_a_training_objective(client: Any) -> None:
    body = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1}]},
        "workload": {"kind": "serving", "prompt_tokens": 128, "output_tokens": 32,
                     "slo": {"ttft_ms": 500}},
        "objective": "min_cost",
    }  # fmt: skip
    response = client.post("/v1/searches", json=body)
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == ["objective"]


def test_an_estimate_reports_days_to_train_and_energy(client: Any) -> None:
    body = {
        "model": dict(TINY_MODEL),
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4}]},
        "workload": {"kind": "training", "global_batch_size": 16, "sequence_length": 512,
                     "train_tokens": 1e9},
        "plan": {"parallelism": {"data": 4}},
    }  # fmt: skip
    response = client.post("/v1/estimate", json=body)
    assert response.status_code == 200, response.text
    m = response.json()["metrics"]
    assert m["time_to_train_days"] == pytest.approx(1e9 / m["tokens_per_s"] / 86400, rel=1e-9)
    assert m["gpus_used"] == 4
    # 4.916 $/GPU-hour: the catalog's H100 default (no price in the request)
    assert m["price_per_gpu_hour"] == pytest.approx(4.916)


def test_min_cost_on_a_mixed_cluster_over_http_runs_on_one_pool_and_exports(client: Any) -> None:
    body = _body("min_cost")
    body["cluster"] = MIXED_PRICED_CLUSTER
    plans = _plans(client, body)
    costs = [p["metrics"]["cost_per_million_tokens"] for p in plans]
    assert costs == sorted(costs)
    top = plans[0]
    # at a sixth of the price per hour, the A100 pool is cheaper per token
    assert set(top["stage_groups"]) == {"a100-80gb"}
    m = top["metrics"]
    assert m["price_per_gpu_hour"] == 0.5
    expected = m["gpus_used"] * 0.5 / 3600 * m["step_time_s"] / (16 * 512) * 1e6
    assert m["cost_per_million_tokens"] == pytest.approx(expected, rel=1e-9)
    assert "pool a100-80gb" in top["explanation"]
    exported = client.get(f"/v1/plans/{top['id']}/export/megatron")
    assert exported.status_code == 200, exported.json()
