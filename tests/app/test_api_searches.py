"""Search life cycle over HTTP: create (202 + Location, or 201 with ?wait), read, list,
plans, plan, cancel (and 409 once finished), and synchronous 422s for bad inputs."""

from __future__ import annotations

import time
from typing import Any

import pytest
from app_support import assert_problem, error_fields, wait_for

BIG = {
    "model": {"preset": "llama3-405b"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 128, "gpus_per_node": 8}]},
    "workload": {"kind": "training", "global_batch_size": 2048, "sequence_length": 8192},
    "constraints": {"time_limit_s": 30},
}


def test_create_answers_202_with_location_then_succeeds(client: Any, tiny: dict[str, Any]) -> None:
    response = client.post("/v1/searches", json={**tiny, "top_k": 3})
    assert response.status_code == 202, response.text
    body = response.json()
    assert response.headers["location"] == f"/v1/searches/{body['id']}"
    assert body["status"] in ("queued", "running", "succeeded")
    for member in ("id", "status", "progress", "stats", "error", "created_at", "finished_at"):
        assert member in body
    done = wait_for(client, body["id"])
    assert done["status"] == "succeeded", done
    assert done["error"] is None
    assert done["finished_at"] is not None
    assert done["stats"]["wall_time_s"] >= 0
    assert done["progress"]["evaluated"] == done["progress"]["total"] > 0
    assert done["top_k"] == 3 and done["num_gpus"] == 4 and done["model_name"] == "tiny"


def test_wait_answers_201_with_the_finished_search(client: Any, tiny: dict[str, Any]) -> None:
    response = client.post("/v1/searches?wait=30", json=tiny)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "succeeded"
    assert response.headers["location"] == f"/v1/searches/{body['id']}"
    assert body["num_plans"] >= 1


@pytest.mark.usefixtures("slow_solver")
def test_wait_too_short_answers_202(client: Any) -> None:
    response = client.post("/v1/searches?wait=0.05", json=BIG)
    assert response.status_code == 202, response.text
    assert response.json()["status"] in ("queued", "running")
    client.post(f"/v1/searches/{response.json()['id']}/cancel")


def test_plans_are_ranked_best_first_with_the_contract_fields(
    client: Any, tiny: dict[str, Any]
) -> None:
    search = client.post("/v1/searches?wait=30", json={**tiny, "top_k": 5}).json()
    listing = client.get(f"/v1/searches/{search['id']}/plans").json()
    items = listing["items"]
    assert listing["total"] == len(items) == search["num_plans"]
    assert 1 <= len(items) <= 5
    assert [p["rank"] for p in items] == list(range(1, len(items) + 1))
    for plan in items:
        for member in (
            "id",
            "search_id",
            "rank",
            "parallelism",
            "micro_batch_size",
            "zero_stage",
            "recompute",
            "pipeline_schedule",
            "stage_layers",
            "flash_attention",
            "metrics",
            "memory",
            "explanation",
        ):
            assert member in plan, member
        par = plan["parallelism"]
        assert par["data"] * par["tensor"] * par["pipeline"] * par["context"] == 4
        assert sum(plan["stage_layers"]) == 4
        assert len(plan["stage_layers"]) == par["pipeline"] * par["virtual_pipeline"]
        metrics = plan["metrics"]
        # tokens/s is the global batch's tokens over the step time: 8 × 512 / step_time_s
        assert metrics["tokens_per_s"] == pytest.approx(8 * 512 / metrics["step_time_s"], rel=1e-6)
        assert plan["memory"]["peak_gib"] <= plan["memory"]["capacity_gib"]
        assert plan["search_id"] == search["id"]
        assert plan["explanation"]
    steps = [p["metrics"]["step_time_s"] for p in items]
    assert steps == sorted(steps)  # best (fastest) first
    limited = client.get(f"/v1/searches/{search['id']}/plans?limit=1").json()
    assert limited["total"] == len(items) and len(limited["items"]) == 1
    one = client.get(f"/v1/plans/{items[0]['id']}").json()
    assert one == items[0]


def test_list_searches_newest_first(client: Any, tiny: dict[str, Any]) -> None:
    first = client.post("/v1/searches?wait=30", json=tiny).json()
    second = client.post("/v1/searches?wait=30", json={**tiny, "top_k": 2}).json()
    listing = client.get("/v1/searches").json()
    assert listing["total"] == 2
    assert [s["id"] for s in listing["items"]] == [second["id"], first["id"]]
    page = client.get("/v1/searches?limit=1&offset=1").json()
    assert [s["id"] for s in page["items"]] == [first["id"]]
    only = client.get("/v1/searches?status=succeeded").json()
    assert only["total"] == 2
    # the list carries each search's plan count, the count its own plans listing gives
    for item in listing["items"]:
        plans_total = client.get(f"/v1/searches/{item['id']}/plans").json()["total"]
        assert item["num_plans"] == plans_total >= 1
    assert listing["items"][0]["num_plans"] <= 2  # top_k 2


@pytest.mark.usefixtures("slow_solver")
def test_cancel_a_running_search(client: Any) -> None:
    created = client.post("/v1/searches", json=BIG).json()
    deadline = time.monotonic() + 10
    while client.get(f"/v1/searches/{created['id']}").json()["status"] == "queued":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    response = client.post(f"/v1/searches/{created['id']}/cancel")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "cancelled"
    started = time.monotonic()
    while client.get(f"/v1/searches/{created['id']}").json()["finished_at"] is None:
        assert time.monotonic() - started < 10, "the worker did not stop"
        time.sleep(0.05)
    final = client.get(f"/v1/searches/{created['id']}").json()
    assert final["status"] == "cancelled"
    # the solver stopped early: it had not finished the space it was given
    assert final["stats"].get("status") in ("cancelled", None)
    again = client.post(f"/v1/searches/{created['id']}/cancel")
    assert_problem(again, 409, path=f"/v1/searches/{created['id']}/cancel")


def test_cancel_a_finished_search_is_a_409(client: Any, tiny: dict[str, Any]) -> None:
    search = client.post("/v1/searches?wait=30", json=tiny).json()
    body = assert_problem(client.post(f"/v1/searches/{search['id']}/cancel"), 409)
    assert body["type"].endswith("/conflict")
    assert client.get(f"/v1/searches/{search['id']}").json()["status"] == "succeeded"


def test_fixed_fields_are_honoured(client: Any, tiny: dict[str, Any]) -> None:
    body = {**tiny, "constraints": {"fixed": {"tensor": 2, "zero_stage": 0}}}
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    plans = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    assert plans
    assert all(p["parallelism"]["tensor"] == 2 and p["zero_stage"] == 0 for p in plans)


# ---- bad inputs: 422 before anything is stored -------------------------------------------
def _assert_rejected(
    client: Any, body: dict[str, Any], field: str, url: str = "/v1/searches", status: int = 422
) -> dict[str, Any]:
    problem = assert_problem(client.post(url, json=body), status)
    assert field in error_fields(problem), (field, problem)
    assert client.get("/v1/searches").json()["total"] == 0
    return problem


def test_unknown_accelerator(client: Any, tiny: dict[str, Any]) -> None:
    tiny["cluster"]["node_groups"][0]["accelerator"] = "h900-sxm"
    _assert_rejected(client, tiny, "cluster.node_groups.0.accelerator")


def test_unknown_preset(client: Any, tiny: dict[str, Any]) -> None:
    _assert_rejected(client, {**tiny, "model": {"preset": "llama3-71b"}}, "model.preset")


def test_kv_heads_not_dividing_heads(client: Any, tiny: dict[str, Any]) -> None:
    tiny["model"]["num_kv_heads"] = 3
    problem = _assert_rejected(client, tiny, "model")
    assert "divisible by num_kv_heads" in problem["detail"]


def test_bad_fixed_field_name(client: Any, tiny: dict[str, Any]) -> None:
    _assert_rejected(client, {**tiny, "constraints": {"fixed": {"tensr": 2}}}, "constraints.fixed")


def test_bad_fixed_field_value(client: Any, tiny: dict[str, Any]) -> None:
    body = {**tiny, "constraints": {"fixed": {"recompute": "sometimes"}}}
    _assert_rejected(client, body, "constraints.fixed.recompute")


def test_fixed_degrees_must_divide_the_gpus(client: Any, tiny: dict[str, Any]) -> None:
    body = {**tiny, "constraints": {"fixed": {"tensor": 8}}}  # 8 does not divide 4 GPUs
    _assert_rejected(client, body, "constraints.fixed")


def test_top_k_out_of_range(client: Any, tiny: dict[str, Any]) -> None:
    _assert_rejected(client, {**tiny, "top_k": 0}, "top_k")
    _assert_rejected(client, {**tiny, "top_k": 101}, "top_k")


def test_time_limit_above_the_service_maximum(client: Any, tiny: dict[str, Any]) -> None:
    _assert_rejected(
        client, {**tiny, "constraints": {"time_limit_s": 601}}, "constraints.time_limit_s"
    )


def test_unknown_objective(client: Any, tiny: dict[str, Any]) -> None:
    _assert_rejected(client, {**tiny, "objective": "min_price"}, "objective")


def test_unknown_cost_model(client: Any, tiny: dict[str, Any]) -> None:
    _assert_rejected(client, {**tiny, "cost_model": {"name": "oracle"}}, "cost_model.name")


def test_wait_out_of_range(client: Any, tiny: dict[str, Any]) -> None:
    _assert_rejected(client, tiny, "wait", url="/v1/searches?wait=61")
    _assert_rejected(client, tiny, "wait", url="/v1/searches?wait=-1")
    _assert_rejected(client, tiny, "wait", url="/v1/searches?wait=soon")


def test_plans_limit_out_of_range(client: Any, tiny: dict[str, Any]) -> None:
    search = client.post("/v1/searches?wait=30", json=tiny).json()
    problem = assert_problem(client.get(f"/v1/searches/{search['id']}/plans?limit=0"), 422)
    assert error_fields(problem) == ["limit"]


def test_a_search_with_no_feasible_plan_fails_with_a_problem(
    client: Any, tiny: dict[str, Any]
) -> None:
    # llama3-70b needs ~70e9 × 16 bytes = 1.1 TB of weights, gradients and Adam states;
    # 4 × 80 GB cannot hold them under any ZeRO stage
    body = {**tiny, "model": {"preset": "llama3-70b"}, "constraints": {"time_limit_s": 20}}
    response = client.post("/v1/searches?wait=30", json=body)
    assert response.status_code == 201, response.text
    search = response.json()
    assert search["status"] == "failed"
    error = search["error"]
    for member in ("type", "title", "status", "detail", "instance"):
        assert member in error
    assert error["instance"] == f"/v1/searches/{search['id']}"
    assert error["type"].endswith("/no-feasible-plan")
    assert sum(error["reasons"].values()) > 0
    # 70.55e9 parameters × 16 bytes = 1.13 TB; 4 × 79.6 GiB = 4 × 85.5 GB = 0.34 TB
    assert "1.13 TB" in error["detail"] and "0.34 TB" in error["detail"]
    assert client.get(f"/v1/searches/{search['id']}/plans").json()["total"] == 0


def test_a_search_whose_every_candidate_breaks_a_rule_says_which(
    client: Any, tiny: dict[str, Any]
) -> None:
    # MXFP8 needs Blackwell's block-scaled tensor cores: on H100 every candidate breaks the
    # precision rule, and the failure says so instead of blaming memory
    body = {
        **tiny,
        "workload": {**tiny["workload"], "precision": "fp8", "fp8_recipe": "mxfp8"},
        "constraints": {"time_limit_s": 20},
    }
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "failed", search
    error = search["error"]
    assert set(error["reasons"]) == {"rule:precision"}
    assert "breaks a rule: precision" in error["detail"]
    assert "TB" not in error["detail"]


def test_a_pinned_framework_outside_the_listed_ones_is_refused(
    client: Any, tiny: dict[str, Any]
) -> None:
    body = {**tiny, "constraints": {"frameworks": ["fsdp"], "fixed": {"framework": "deepspeed"}}}
    response = client.post("/v1/searches", json=body)
    problem = assert_problem(response, 422)
    assert error_fields(problem) == ["constraints.fixed.framework"]
