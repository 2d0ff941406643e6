"""Offload over HTTP: a search that fits nowhere without offload answers offload plans
(stored and read back with `offload`), `constraints.offload: "never"` answers the
no-feasible-plan problem with computed suggestions, `/v1/estimate` prices
`time_breakdown_s.offload`, and the exports carry the frameworks' offload settings or
refuse by rule."""

from __future__ import annotations

from typing import Any

import pytest

from app.exports import deepspeed as ds_export
from app.exports import megatron as mg_export
from app.exports import torchtitan as tt_export
from app.exports.base import parse_flags

# Llama-3-8B on 2 H100 with 40 GiB kept free per GPU (37.65 GiB usable): its 16 B × 8.03e9
# = 128 GB of weights, gradients and Adam states do not fit on 2 × 37.65 GiB = 81 GB under
# any ZeRO stage; with the optimizer states on the CPU (6 B per parameter on the GPU) it does.
BODY: dict[str, Any] = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2}]},
    "workload": {"kind": "training", "global_batch_size": 16, "sequence_length": 2048},
    "constraints": {"memory_headroom_gib": 40, "time_limit_s": 30},
    "top_k": 3,
}


def _search(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/searches?wait=60", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_a_search_that_fits_only_with_offload_returns_offload_plans(client: Any) -> None:
    search = _search(client, BODY)
    assert search["status"] == "succeeded", search
    assert search["stats"]["offload_searched"] is True
    plans = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    assert plans
    for plan in plans:
        assert plan["offload"]["optimizer"] == "cpu", plan
        assert plan["metrics"]["time_breakdown_s"]["offload"] > 0
        assert plan["metrics"]["time_breakdown_s"]["optimizer"] == 0
    one = client.get(f"/v1/plans/{plans[0]['id']}").json()
    assert one["offload"] == plans[0]["offload"]
    # the stored plan estimates to the same step time (round trip of the plan fields)
    plan_fields = {
        k: one[k]
        for k in (
            "parallelism",
            "micro_batch_size",
            "zero_stage",
            "recompute",
            "pipeline_schedule",
            "stage_layers",
            "framework",
            "offload",
        )
    }
    est = client.post(
        "/v1/estimate",
        json={
            "model": BODY["model"],
            "cluster": BODY["cluster"],
            "workload": BODY["workload"],
            "plan": plan_fields,
            "constraints": {"memory_headroom_gib": 40},
        },
    )
    assert est.status_code == 200, est.text
    assert est.json()["metrics"]["step_time_s"] == pytest.approx(
        one["metrics"]["step_time_s"], rel=1e-9
    )


def test_offload_never_fails_with_computed_suggestions(client: Any) -> None:
    body = {**BODY, "constraints": {**BODY["constraints"], "offload": "never"}}
    search = _search(client, body)
    assert search["status"] == "failed", search
    error = search["error"]
    assert error["status"] == 422 and error["type"].endswith("/no-feasible-plan")
    tips = error["suggestions"]
    assert tips["offload"]["offload"]["optimizer"] in ("cpu", "nvme")
    assert tips["offload"]["step_time_s"] > 0 and tips["offload"]["offload_s"] > 0
    # the memory lower bound: ⌈16 × 8.03e9 / (37.65 GiB)⌉ = 4 GPUs = 2 nodes of 2
    assert tips["num_nodes"]["min_gpus_by_memory"] == 4
    assert tips["num_nodes"]["num_nodes"] >= 2
    assert "offload" not in tips["num_nodes"]["plan"]  # fits without offload there
    # the states do not fit at any length: no sequence length helps
    assert tips["sequence_length"] is None


def _problem_row(plan: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    from app.services import planning
    from specs.cluster import ClusterSpec
    from specs.presets import get_preset

    cluster = planning.resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}]}
        )
    )
    problem = {
        "model": get_preset("llama3-70b").model_dump(mode="json"),
        "cluster": cluster.model_dump(mode="json"),
        "workload": {"kind": "training", "global_batch_size": 8, "sequence_length": 4096},
    }
    return problem, {"id": "offload", "plan": plan}


def test_exports_carry_offload_or_refuse_by_rule() -> None:
    from app.exports import export_plan
    from app.exports.base import UnexpressiblePlan

    mega = {
        "parallelism": {"tensor": 8, "sequence_parallel": True},
        "zero_stage": 1,
        "framework": "megatron_core",
        "stage_layers": [80],
        "offload": {"optimizer": "cpu", "activations": 0.5},
    }
    problem, row = _problem_row(mega)
    flags = parse_flags(export_plan(row, problem, "megatron").args, mg_export.SWITCHES)
    assert flags["--optimizer-cpu-offload"] is True
    assert flags["--optimizer-offload-fraction"] == "1.0"
    assert flags["--cpu-offloading"] is True
    assert flags["--cpu-offloading-num-layers"] == "40"  # 0.5 × 80 layers
    # Megatron-Core has no NVMe offload: the export names the rule
    nvme = {**mega, "offload": {"optimizer": "nvme"}}
    problem, row = _problem_row(nvme)
    with pytest.raises(UnexpressiblePlan) as err:
        export_plan(row, problem, "megatron")
    assert err.value.rule == "megatron.offload"

    ds = {
        "parallelism": {"data": 8},
        "zero_stage": 3,
        "recompute": "full",
        "framework": "deepspeed",
        "stage_layers": [80],
        "offload": {"optimizer": "nvme", "parameters": "cpu", "activations": 1.0},
    }
    problem, row = _problem_row(ds)
    cfg = ds_export.build_config(get_model(problem), _plan(ds), _workload(problem))[0]
    zero = cfg["zero_optimization"]
    assert zero["offload_optimizer"] == {
        "device": "nvme",
        "pin_memory": True,
        "nvme_path": "/local_nvme",
    }
    assert zero["offload_param"] == {"device": "cpu", "pin_memory": True}
    assert cfg["activation_checkpointing"]["cpu_checkpointing"] is True

    tt = {
        "parallelism": {"data": 8},
        "zero_stage": 3,
        "framework": "torchtitan",
        "stage_layers": [80],
        "offload": {"optimizer": "cpu", "parameters": "cpu"},
    }
    problem, row = _problem_row(tt)
    doc = tt_export.build_config(
        get_model(problem), _plan(tt), _workload(problem), world_size=8, description="t"
    )[0]
    assert doc["training"]["enable_cpu_offload"] is True
    half = {**tt, "offload": {"optimizer": "cpu"}}
    problem, row = _problem_row(half)
    with pytest.raises(UnexpressiblePlan) as err:
        export_plan(row, problem, "torchtitan")
    assert err.value.rule == "torchtitan.offload"


def get_model(problem: dict[str, Any]) -> Any:
    from specs.model import ModelSpec

    return ModelSpec.model_validate(problem["model"])


def _plan(plan: dict[str, Any]) -> Any:
    from specs.plan import TrainingPlan

    return TrainingPlan.model_validate(plan)


def _workload(problem: dict[str, Any]) -> Any:
    from specs.workload import TrainingWorkload

    return TrainingWorkload.model_validate(problem["workload"])


def test_an_offload_the_framework_cannot_run_is_a_422_naming_plan_offload(client: Any) -> None:
    body = {
        "model": BODY["model"],
        "cluster": BODY["cluster"],
        "workload": BODY["workload"],
        "plan": {
            "parallelism": {"data": 2},
            "zero_stage": 1,
            "framework": "megatron_core",
            "offload": {"optimizer": "nvme"},
        },
    }
    response = client.post("/v1/estimate", json=body)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert "plan.offload" in response.text
    assert "megatron_core does not offload the optimizer to nvme" in problem["detail"]


def test_frameworks_say_what_they_offload(client: Any) -> None:
    frameworks = {f["name"]: f["offload"] for f in client.get("/v1/frameworks").json()["items"]}
    assert frameworks["megatron_core"] == {
        "optimizer_devices": ["cpu"],
        "parameter_devices": [],
        "activations": "layers",
        "states_together": False,
    }
    assert frameworks["deepspeed"]["optimizer_devices"] == ["cpu", "nvme"]
    assert frameworks["deepspeed"]["activations"] == "checkpoints"
    assert frameworks["torchtitan"]["states_together"] is True
