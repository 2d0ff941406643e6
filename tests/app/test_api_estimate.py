"""POST /v1/estimate: the contract shape, stage_layers filled in, infeasibility as an answer
(200 with violations) or a 422 problem, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from app_support import assert_problem, error_fields

STAGE_FIELDS = (
    "weights_gib",
    "gradients_gib",
    "optimizer_gib",
    "activations_gib",
    "other_gib",
    "total_gib",
)


def test_estimate_shape_and_identities(client: Any, tiny: dict[str, Any]) -> None:
    plan = {"parallelism": {"data": 2, "pipeline": 2}, "micro_batch_size": 1}
    response = client.post("/v1/estimate", json={**tiny, "plan": plan})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["feasible"] is True and body["violations"] == []
    metrics = body["metrics"]
    for member in (
        "step_time_s",
        "tokens_per_s",
        "model_tflops_per_gpu",
        "mfu",
        "peak_memory_gib",
        "bubble_fraction",
        "time_breakdown_s",
    ):
        assert member in metrics
    # 8 sequences × 512 tokens per step
    assert metrics["tokens_per_s"] == pytest.approx(8 * 512 / metrics["step_time_s"], rel=1e-6)
    # mfu = achieved model TFLOP/s per GPU over the H100's 989.4 dense BF16 TFLOP/s
    assert metrics["mfu"] == pytest.approx(metrics["model_tflops_per_gpu"] / 989.4, rel=1e-3)
    memory = body["memory"]
    assert len(memory["by_stage"]) == 2  # one entry per pipeline rank
    for stage in memory["by_stage"]:
        assert set(STAGE_FIELDS) <= set(stage)
        parts = sum(stage[f] for f in STAGE_FIELDS[:-1])
        assert stage["total_gib"] == pytest.approx(parts, rel=1e-6)
    assert memory["peak_gib"] == pytest.approx(max(s["total_gib"] for s in memory["by_stage"]))
    # the service chose a split of the 4 layers over 2 stages
    assert sum(body["plan"]["stage_layers"]) == 4
    assert len(body["plan"]["stage_layers"]) == 2


def test_estimate_keeps_a_given_split(client: Any, tiny: dict[str, Any]) -> None:
    plan = {"parallelism": {"data": 2, "pipeline": 2}, "stage_layers": [1, 3]}
    body = client.post("/v1/estimate", json={**tiny, "plan": plan}).json()
    assert body["plan"]["stage_layers"] == [1, 3]


def test_headroom_lowers_usable_memory(client: Any, tiny: dict[str, Any]) -> None:
    plan = {"parallelism": {"data": 4}}
    body = client.post(
        "/v1/estimate", json={**tiny, "plan": plan, "constraints": {"memory_headroom_gib": 10}}
    ).json()
    assert body["memory"]["usable_gib"] == pytest.approx(body["memory"]["capacity_gib"] - 10)


def test_a_plan_that_does_not_fit_is_an_answer(client: Any, tiny: dict[str, Any]) -> None:
    # llama3-70b with plain data parallelism over 4 GPUs: every GPU holds 70e9 bf16 weights
    # (~131 GiB) alone, far above 80 GB
    body = {**tiny, "model": {"preset": "llama3-70b"}, "plan": {"parallelism": {"data": 4}}}
    response = client.post("/v1/estimate", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["feasible"] is False
    assert "memory" in [v["kind"] for v in result["violations"]]
    assert result["memory"]["peak_gib"] > result["memory"]["usable_gib"]


def test_gpu_count_mismatch_is_a_422(client: Any, tiny: dict[str, Any]) -> None:
    body = {**tiny, "plan": {"parallelism": {"data": 8}}}
    problem = assert_problem(client.post("/v1/estimate", json=body), 422, path="/v1/estimate")
    assert "4 GPUs" in problem["detail"]
    # the rule names its field and the value given, as every 422 does
    (error,) = problem["errors"]
    assert error["field"] == "plan.parallelism" and error["rule"] == "divisibility"
    assert error["value"]["data"] == 8 and "4 GPUs" in error["message"]
    assert problem["violations"][0]["field"] == "plan.parallelism"


def test_each_broken_rule_names_its_field(client: Any, tiny: dict[str, Any]) -> None:
    # tensor 4 over a 2-GPU node: heads divide, the scale-up domain does not hold it
    tiny["cluster"]["node_groups"][0].update({"num_nodes": 2, "gpus_per_node": 2})
    body = {**tiny, "plan": {"parallelism": {"tensor": 4}}}
    problem = assert_problem(client.post("/v1/estimate", json=body), 422)
    fields = {(e["field"], e["rule"], e["value"]) for e in problem["errors"]}
    assert ("plan.parallelism.tensor", "topology", 4) in fields


def test_stage_layers_must_sum_to_the_layers(client: Any, tiny: dict[str, Any]) -> None:
    body = {**tiny, "plan": {"parallelism": {"data": 2, "pipeline": 2}, "stage_layers": [2, 3]}}
    problem = assert_problem(client.post("/v1/estimate", json=body), 422)
    assert "plan.stage_layers" in error_fields(problem)


def test_interleaved_schedule_needs_virtual_stages(client: Any, tiny: dict[str, Any]) -> None:
    plan = {"parallelism": {"data": 2, "pipeline": 2}, "pipeline_schedule": "interleaved_1f1b"}
    problem = assert_problem(client.post("/v1/estimate", json={**tiny, "plan": plan}), 422)
    assert "plan" in error_fields(problem)


def test_estimate_unknown_accelerator(client: Any, tiny: dict[str, Any]) -> None:
    tiny["cluster"]["node_groups"][0]["accelerator"] = "tpu-v99"
    body = {**tiny, "plan": {"parallelism": {"data": 4}}}
    problem = assert_problem(client.post("/v1/estimate", json=body), 422)
    assert "cluster.node_groups.0.accelerator" in error_fields(problem)


def test_estimate_bad_cost_model_config(client: Any, tiny: dict[str, Any]) -> None:
    body = {
        **tiny,
        "plan": {"parallelism": {"data": 4}},
        "cost_model": {"name": "analytical", "config": {"no_such_option": 1}},
    }
    problem = assert_problem(client.post("/v1/estimate", json=body), 422)
    assert any(f.startswith("cost_model.config") for f in error_fields(problem))
