"""Serving workloads over HTTP: `POST /v1/estimate` and `POST /v1/searches` select the
serving path by `workload.kind`, answer the metric names of API.md ("Serving"), store and
list serving plans like training ones, and answer bad serving inputs with 422 problems
naming the field (no union tag in the path)."""

from __future__ import annotations

from typing import Any

import pytest
from app_support import assert_problem, error_fields

SERVING_METRICS = (
    "ttft_ms_p50",
    "ttft_ms_p90",
    "ttft_ms_p99",
    "tpot_ms_p50",
    "tpot_ms_p90",
    "tpot_ms_p99",
    "throughput_tokens_per_s",
    "goodput_rps",
    "goodput_rps_per_gpu",
    "gpus_used",
    "kv_cache_gib",
    "max_concurrent_sequences",
)
"""The serving metrics API.md lists."""


@pytest.fixture
def serving() -> dict[str, Any]:
    """Llama-3-8B on one node of 2 H100s, 512/128 tokens, 100 simulated requests."""
    return {
        "model": {"preset": "llama3-8b"},
        "cluster": {
            "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2}]
        },
        "workload": {
            "kind": "serving",
            "prompt_tokens": 512,
            "output_tokens": 128,
            "slo": {"ttft_ms": 300, "tpot_ms": 30, "percentile": 90},
            "num_requests": 100,
        },
    }


COLOCATED = {
    "mode": "colocated",
    "instances": [
        {
            "role": "both",
            "count": 2,
            "parallelism": {"tensor": 1, "pipeline": 1, "expert": 1},
            "max_batch_size": 128,
            "chunk_size": 2048,
        }
    ],
}
DISAGGREGATED = {
    "mode": "disaggregated",
    "instances": [
        {"role": "prefill", "count": 1, "parallelism": {"tensor": 1}},
        {"role": "decode", "count": 1, "parallelism": {"tensor": 1}, "max_batch_size": 256},
    ],
}


# ---- estimate ------------------------------------------------------------------------------
def test_estimate_answers_every_serving_metric(client: Any, serving: dict[str, Any]) -> None:
    response = client.post("/v1/estimate", json={**serving, "plan": COLOCATED})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["feasible"] is True and body["violations"] == []
    metrics = body["metrics"]
    for name in SERVING_METRICS:
        assert name in metrics, name
    assert metrics["gpus_used"] == 2
    assert metrics["goodput_rps"] > 0
    assert metrics["goodput_rps_per_gpu"] == pytest.approx(metrics["goodput_rps"] / 2)
    # no rate given: measured at the goodput, where the P90 targets hold
    assert metrics["arrival_rate_rps"] == pytest.approx(metrics["goodput_rps"])
    assert metrics["ttft_ms_p90"] <= 300 and metrics["tpot_ms_p90"] <= 30
    assert metrics["ttft_ms_p50"] <= metrics["ttft_ms_p90"] <= metrics["ttft_ms_p99"]
    assert body["plan"]["mode"] == "colocated"
    assert body["plan"]["instances"][0]["count"] == 2
    memory = body["memory"]["instances"][0]
    assert memory["role"] == "both"
    assert memory["kv_cache_gib"] == pytest.approx(metrics["kv_cache_gib"])
    assert body["cost_model"]["name"] == "analytical"


def test_estimate_of_a_disaggregated_plan(client: Any, serving: dict[str, Any]) -> None:
    response = client.post("/v1/estimate", json={**serving, "plan": DISAGGREGATED})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["metrics"]["gpus_used"] == 2
    assert [i["role"] for i in body["memory"]["instances"]] == ["prefill", "decode"]
    assert body["details"]["kv_transfer_tier"] == "intra"  # both instances in one node


def test_estimate_at_a_rate_the_plan_cannot_carry(client: Any, serving: dict[str, Any]) -> None:
    serving["workload"]["arrival_rate_rps"] = 5000
    body = client.post("/v1/estimate", json={**serving, "plan": COLOCATED}).json()
    assert body["feasible"] is False
    assert [v["kind"] for v in body["violations"]] == ["slo"]
    assert body["metrics"]["arrival_rate_rps"] == 5000


def test_an_estimate_needs_no_slo(client: Any, serving: dict[str, Any]) -> None:
    """At a given rate the latencies do not depend on the SLO (the simulation at the rate
    runs whole whatever the targets): without one they are those with one, every finished
    request meets it (attainment 1), and the goodput is the plan's capacity bound (the SLO
    holds there: nothing limits it but capacity)."""
    serving["workload"]["arrival_rate_rps"] = 4.0
    with_slo = client.post("/v1/estimate", json={**serving, "plan": COLOCATED}).json()
    serving["workload"]["slo"] = {}
    response = client.post("/v1/estimate", json={**serving, "plan": COLOCATED})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["feasible"] is True and body["violations"] == []
    metrics, reference = body["metrics"], with_slo["metrics"]
    for name in ("ttft_ms_p50", "ttft_ms_p90", "tpot_ms_p90", "e2e_latency_s_p90"):
        assert metrics[name] == reference[name] > 0
    assert metrics["arrival_rate_rps"] == 4.0 and metrics["slo_attainment"] == 1.0
    assert body["details"]["goodput_limited_by"] == "capacity_bound"
    assert metrics["goodput_rps"] == pytest.approx(body["details"]["capacity_upper_bound_rps"])


def test_estimate_of_weights_that_do_not_fit(client: Any, serving: dict[str, Any]) -> None:
    serving["model"] = {"preset": "llama3-70b"}
    response = client.post("/v1/estimate", json={**serving, "plan": COLOCATED})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["feasible"] is False and body["metrics"] is None
    assert [v["kind"] for v in body["violations"]] == ["memory"]


def test_a_training_plan_with_a_serving_workload_is_a_422(
    client: Any, serving: dict[str, Any]
) -> None:
    plan = {"parallelism": {"data": 2}, "micro_batch_size": 1}
    problem = assert_problem(client.post("/v1/estimate", json={**serving, "plan": plan}), 422)
    assert error_fields(problem) == ["plan"]


def test_a_serving_plan_with_a_training_workload_is_a_422(
    client: Any, tiny: dict[str, Any]
) -> None:
    problem = assert_problem(client.post("/v1/estimate", json={**tiny, "plan": COLOCATED}), 422)
    assert error_fields(problem) == ["plan"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b["workload"]["slo"].update(ttft_ms=-5), "workload.slo.ttft_ms"),
        (lambda b: b["workload"]["slo"].update(percentile=20), "workload.slo.percentile"),
        (lambda b: b["workload"].update(num_requests=10), "workload.num_requests"),
        (lambda b: b["workload"].update(precision="fp4"), "workload.precision"),
        (
            lambda b: b["plan"]["instances"][0].update(max_batch_size=0),
            "plan.instances.0.max_batch_size",
        ),
        (
            lambda b: b["plan"]["instances"][0]["parallelism"].update(tensor=0),
            "plan.instances.0.parallelism.tensor",
        ),
    ],
)
def test_bad_serving_fields_are_named(
    client: Any, serving: dict[str, Any], change: Any, field: str
) -> None:
    body = {
        **serving,
        "plan": {
            "mode": "colocated",
            "instances": [{"role": "both", "count": 1, "parallelism": {"tensor": 1}}],
        },
    }
    change(body)
    problem = assert_problem(client.post("/v1/estimate", json=body), 422)
    assert field in error_fields(problem), problem["errors"]
    for name in error_fields(problem):
        assert ".serving" not in name and ".training" not in name


def test_a_colocated_plan_with_two_roles_is_a_422(client: Any, serving: dict[str, Any]) -> None:
    plan = {"mode": "colocated", "instances": DISAGGREGATED["instances"]}
    problem = assert_problem(client.post("/v1/estimate", json={**serving, "plan": plan}), 422)
    assert error_fields(problem) == ["plan"]


def test_a_trace_arriving_at_once_is_priced(client: Any, serving: dict[str, Any]) -> None:
    workload = serving["workload"]
    del workload["prompt_tokens"], workload["output_tokens"]
    workload["trace"] = [[0.0, 512, 128]] * 50
    response = client.post("/v1/estimate", json={**serving, "plan": COLOCATED})
    assert response.status_code == 200, response.text
    assert response.json()["metrics"]["goodput_rps"] > 0


def test_unknown_serving_cost_model_is_a_422(client: Any, serving: dict[str, Any]) -> None:
    body = {**serving, "plan": COLOCATED, "cost_model": {"name": "calibrated"}}
    problem = assert_problem(client.post("/v1/estimate", json=body), 422)
    assert error_fields(problem) == ["cost_model.name"]
    search = {**serving, "cost_model": {"name": "no-such-model"}}
    problem = assert_problem(client.post("/v1/searches", json=search), 422)
    assert error_fields(problem) == ["cost_model.name"]


def test_bad_serving_cost_model_config_is_a_422(client: Any, serving: dict[str, Any]) -> None:
    body = {
        **serving,
        "plan": COLOCATED,
        "cost_model": {"name": "analytical", "config": {"no_such_option": 1}},
    }
    problem = assert_problem(client.post("/v1/estimate", json=body), 422)
    assert error_fields(problem) == ["cost_model.config.no_such_option"]


# ---- searches ------------------------------------------------------------------------------
def test_serving_search_ranks_serving_plans(client: Any, serving: dict[str, Any]) -> None:
    response = client.post("/v1/searches?wait=30", json={**serving, "top_k": 3})
    assert response.status_code == 201, response.text
    search = response.json()
    assert search["status"] == "succeeded", search
    assert search["workload"]["kind"] == "serving"
    assert search["num_gpus"] == 2
    assert search["cost_model"]["name"] == "analytical"
    assert search["stats"]["evaluated"] >= 1
    assert search["stats"]["complete"] is True
    listing = client.get(f"/v1/searches/{search['id']}/plans").json()
    items = listing["items"]
    assert 1 <= len(items) <= 3 and listing["total"] == len(items)
    assert [p["rank"] for p in items] == list(range(1, len(items) + 1))
    per_gpu = [p["metrics"]["goodput_rps_per_gpu"] for p in items]
    assert per_gpu == sorted(per_gpu, reverse=True)
    for plan in items:
        assert plan["kind"] == "serving"
        assert plan["mode"] in ("colocated", "disaggregated")
        assert plan["instances"] and plan["parallelism"] is None
        for name in SERVING_METRICS:
            assert name in plan["metrics"], name
        assert plan["metrics"]["gpus_used"] <= 2
        assert "goodput" in plan["explanation"]
        assert "TP" in plan["explanation"]
        assert plan["memory"]["instances"]
    # one plan by id
    one = client.get(f"/v1/plans/{items[0]['id']}")
    assert one.status_code == 200, one.text
    assert one.json() == items[0]


def test_serving_search_with_fixed_mode(client: Any, serving: dict[str, Any]) -> None:
    body = {**serving, "top_k": 2, "constraints": {"fixed": {"mode": "disaggregated"}}}
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    items = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    assert items and all(p["mode"] == "disaggregated" for p in items)
    assert {i["role"] for i in items[0]["instances"]} == {"prefill", "decode"}


def test_serving_search_with_an_unknown_fixed_key_is_a_422(
    client: Any, serving: dict[str, Any]
) -> None:
    body = {**serving, "constraints": {"fixed": {"data": 2}}}
    problem = assert_problem(client.post("/v1/searches", json=body), 422)
    assert error_fields(problem) == ["constraints.fixed.data"]
    assert client.get("/v1/searches").json()["total"] == 0  # nothing stored


def test_min_gpus_search_needs_a_rate(client: Any, serving: dict[str, Any]) -> None:
    serving["workload"]["objective"] = "min_gpus"
    problem = assert_problem(client.post("/v1/searches", json=serving), 422)
    assert error_fields(problem) == ["workload.arrival_rate_rps"]
    assert client.get("/v1/searches").json()["total"] == 0  # nothing stored


def test_a_search_ranking_by_goodput_needs_an_slo(client: Any, serving: dict[str, Any]) -> None:
    serving["workload"]["slo"] = {}
    problem = assert_problem(client.post("/v1/searches", json=serving), 422)
    assert error_fields(problem) == ["workload.slo"]
    assert "objective max_goodput_per_gpu needs an SLO" in problem["detail"]
    assert client.get("/v1/searches").json()["total"] == 0


def test_serving_search_no_plan_carries_the_slo(client: Any, serving: dict[str, Any]) -> None:
    serving["workload"]["slo"] = {"ttft_ms": 1, "tpot_ms": 1}
    search = client.post("/v1/searches?wait=30", json=serving).json()
    assert search["status"] == "failed"
    error = search["error"]
    assert error["status"] == 422 and error["type"].endswith("/no-feasible-plan")
    assert "within the SLO (TTFT 1.0 ms, TPOT 1.0 ms at P90)" in error["detail"]
    assert error["reasons"]["slo_unattainable"] >= 1


def test_a_training_search_still_works(client: Any, tiny: dict[str, Any]) -> None:
    search = client.post("/v1/searches?wait=30", json={**tiny, "top_k": 2}).json()
    assert search["status"] == "succeeded", search
    items = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    assert items
    for plan in items:
        assert plan["kind"] == "training"
        assert plan["parallelism"]["data"] * plan["parallelism"]["tensor"] >= 1
        assert plan["mode"] is None and plan["instances"] is None
        assert "step_time_s" in plan["metrics"]


def test_a_training_search_refuses_serving_fixed_keys(client: Any, tiny: dict[str, Any]) -> None:
    body = {**tiny, "constraints": {"fixed": {"mode": "colocated"}}}
    problem = assert_problem(client.post("/v1/searches", json=body), 422)
    assert error_fields(problem) == ["constraints.fixed.mode"]


def test_measuring_a_serving_plan_is_a_422_not_a_500(client: Any, serving: dict[str, Any]) -> None:
    search = client.post("/v1/searches?wait=30", json={**serving, "top_k": 1}).json()
    plan_id = client.get(f"/v1/searches/{search['id']}/plans").json()["items"][0]["id"]
    response = client.post(f"/v1/plans/{plan_id}/measurements", json={"step_time_s": 1.0})
    problem = assert_problem(response, 422)
    assert error_fields(problem) == ["plan_id"]
    assert client.get(f"/v1/plans/{plan_id}/measurements").json()["total"] == 0


def test_min_gpus_with_a_trace_arriving_at_once_is_a_422(
    client: Any, serving: dict[str, Any]
) -> None:
    workload = serving["workload"]
    del workload["prompt_tokens"], workload["output_tokens"]
    workload.update(trace=[[0.0, 512, 128]] * 50, objective="min_gpus")
    problem = assert_problem(client.post("/v1/searches", json=serving), 422)
    assert error_fields(problem) == ["workload.trace"]


def test_a_named_dataset_prices_the_traffic_it_stands_for(
    client: Any, serving: dict[str, Any]
) -> None:
    body = {**serving, "top_k": 1}
    body["workload"] = {
        k: v for k, v in serving["workload"].items() if k not in ("prompt_tokens", "output_tokens")
    }
    body["workload"]["dataset"] = "azure_conversation"
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    assert search["workload"]["dataset"] == "azure_conversation"
    assert "prompt_tokens" not in search["workload"]
    plan = client.get(f"/v1/searches/{search['id']}/plans").json()["items"][0]
    # an estimate of that plan draws its requests from the trace's percentiles: the mean
    # prompt of 1,000 requests is near the trace's 1,155 tokens (1,196 for the
    # piecewise-linear distribution), the mean output near its 211
    workload = {**body["workload"], "num_requests": 1000}
    est = client.post(
        "/v1/estimate",
        json={**serving, "workload": workload, "plan": {k: plan[k] for k in ("mode", "instances")}},
    ).json()
    assert 1050 <= est["details"]["mean_prompt_tokens"] <= 1350
    assert 170 <= est["details"]["mean_output_tokens"] <= 250
    bad = dict(body, workload={**body["workload"], "dataset": "sharegpt"})
    assert "workload.dataset" in error_fields(
        assert_problem(client.post("/v1/searches", json=bad), 422)
    )
