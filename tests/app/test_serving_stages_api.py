"""One serving instance whose pipeline stages run on different node groups, over HTTP and in
the exports: the estimate fills and prices the split, bad fields are 422s naming them, vLLM
launches it with VLLM_PP_LAYER_PARTITION and the other serving formats refuse it by rule."""

from __future__ import annotations

from typing import Any

import pytest
from app_support import error_fields

from app.exports import export_plan
from app.exports.base import UnexpressiblePlan
from app.services import planning
from specs.cluster import ClusterSpec
from specs.presets import get_preset
from specs.serving import ServingWorkload

CLUSTER = {
    "node_groups": [
        {"accelerator": "h100-sxm", "num_nodes": 1, "name": "h100"},
        {"accelerator": "a100-80gb", "num_nodes": 1, "name": "a100"},
    ]
}
WORKLOAD = {
    "kind": "serving",
    "prompt_tokens": 1024,
    "output_tokens": 256,
    "slo": {"ttft_ms": 1000, "tpot_ms": 50},
    "num_requests": 200,
}
INSTANCE = {
    "parallelism": {"tensor": 1, "pipeline": 2},
    "max_batch_size": 64,
    "stage_groups": ["h100", "a100"],
}
BODY: dict[str, Any] = {
    "model": {"preset": "llama3-8b"},
    "cluster": CLUSTER,
    "workload": WORKLOAD,
    "plan": {"mode": "colocated", "instances": [INSTANCE]},
}


def test_estimate_prices_an_instance_across_groups_and_fills_its_split(client: Any) -> None:
    response = client.post("/v1/estimate", json=BODY)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["feasible"] is True, body["violations"]
    inst = body["plan"]["instances"][0]
    # the split of tests/solver/test_serving_stages.py at a decode batch of 64, context
    # 1024 + 256 / 2: the H100 takes 20 layers, the A100 12
    assert inst["stage_layers"] == [20, 12]
    assert "group" not in inst
    details = body["details"]["instances"][0]
    assert details["stage_split"] == (
        "layers 0-19 on h100 (h100-sxm); layers 20-31 on a100 (a100-80gb)"
    )
    assert [s["group"] for s in details["stages"]] == ["h100", "a100"]
    assert body["metrics"]["gpus_used"] == 2
    # given back with its split, the plan prices the same
    given = {**INSTANCE, "stage_layers": [20, 12]}
    again = client.post(
        "/v1/estimate", json={**BODY, "plan": {"mode": "colocated", "instances": [given]}}
    ).json()
    assert again["metrics"]["goodput_rps"] == body["metrics"]["goodput_rps"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"stage_groups": ["h100", "v100"]}, "plan.instances.0.stage_groups.1"),
        ({"stage_groups": ["h100"]}, "plan.instances.0.stage_groups"),
        ({"stage_layers": [10, 10]}, "plan.instances.0.stage_layers"),
    ],
)
def test_bad_stage_fields_are_422s_naming_the_field(
    client: Any, change: dict[str, Any], field: str
) -> None:
    plan = {"mode": "colocated", "instances": [{**INSTANCE, **change}]}
    response = client.post("/v1/estimate", json={**BODY, "plan": plan})
    assert response.status_code == 422, response.text
    assert field in error_fields(response.json())


def _problem_and_row() -> tuple[dict[str, Any], dict[str, Any]]:
    cluster = planning.resolve_cluster(ClusterSpec.model_validate(CLUSTER))
    problem = {
        "model": get_preset("llama3-8b").model_dump(mode="json"),
        "cluster": cluster.model_dump(mode="json"),
        "workload": ServingWorkload.model_validate(WORKLOAD).model_dump(mode="json"),
    }
    plan = {"mode": "colocated", "instances": [{**INSTANCE, "stage_layers": [20, 12]}]}
    return problem, {"id": "p1", "plan": plan}


def test_vllm_launches_it_with_the_uneven_split() -> None:
    problem, row = _problem_and_row()
    result = export_plan(row, problem, "vllm")
    assert result.env["VLLM_PP_LAYER_PARTITION"] == "20,12"
    args = result.args
    assert args[args.index("--pipeline-parallel-size") + 1] == "2"
    assert args[args.index("--tensor-parallel-size") + 1] == "1"
    assert args[args.index("--distributed-executor-backend") + 1] == "ray"
    assert "export VLLM_PP_LAYER_PARTITION=20,12" in result.content
    assert "stage 0: 20 layers on h100; stage 1: 12 layers on a100" in result.notes[1]


@pytest.mark.parametrize("fmt", ["sglang", "trtllm", "slurm", "kubernetes"])
def test_other_serving_formats_refuse_it_by_rule(fmt: str) -> None:
    problem, row = _problem_and_row()
    with pytest.raises(UnexpressiblePlan) as info:
        export_plan(row, problem, fmt)
    assert info.value.status == 422
    assert info.value.rule == "serving-stages-across-groups"
    assert "stage 0 on h100 (20 layers), stage 1 on a100 (12 layers)" in str(info.value)
