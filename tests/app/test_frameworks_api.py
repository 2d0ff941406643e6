"""Training framework profiles at the HTTP boundary: `GET /v1/frameworks[/{name}]`, a 422
problem naming the field, the rule and the value for an unknown framework wherever a request
names one, an estimate pinned to a framework that cannot run its plan answered infeasible
(not refused), and plans and explanations that say which framework they were priced for."""

from __future__ import annotations

from typing import Any

import pytest
from app_support import assert_problem, error_fields

RULE = "must name a registered framework (GET /v1/frameworks)"
"""The rule an unknown framework name breaks (the same wherever it is named)."""
FRAMEWORKS = ["deepspeed", "fsdp", "megatron_core", "megatron_lm", "torchtitan"]

# What each profile's module documents (cost_models/frameworks/*.py docstrings and
# app/exports): ZeRO stages implemented, MoE support, which export launches it, and the order
# an estimate tries frameworks for a plan that names none.
EXPECTED = {
    "megatron_core": ([0, 1, 2, 3], True, ["megatron"], 1),
    "torchtitan": ([0, 2, 3], True, ["torchtitan"], 2),
    "deepspeed": ([0, 1, 2, 3], True, ["deepspeed"], 3),
    "fsdp": ([0, 2, 3], True, [], 4),
    "megatron_lm": ([0, 1], False, ["megatron"], 5),
}


def _estimate(client: Any, tiny: dict[str, Any], plan: dict[str, Any], **extra: Any) -> Any:
    return client.post("/v1/estimate", json={**tiny, "plan": plan, **extra})


# ---- GET /v1/frameworks ---------------------------------------------------------------------
def test_frameworks_list_every_profile_with_its_rules_and_launchers(client: Any) -> None:
    response = client.get("/v1/frameworks")
    assert response.status_code == 200
    items = response.json()["items"]
    assert [f["name"] for f in items] == FRAMEWORKS
    for item in items:
        zero_stages, moe, launchers, rank = EXPECTED[item["name"]]
        assert item["zero_stages"] == zero_stages, item["name"]
        assert item["supports_moe"] is moe, item["name"]
        assert item["launchers"] == launchers, item["name"]
        # a launcher's plans can also be wrapped in a Slurm or Kubernetes job
        wrapped = [*launchers, "slurm", "kubernetes"] if launchers else []
        assert item["export_formats"] == wrapped, item["name"]
        assert item["preference_rank"] == rank, item["name"]
        # searches price under Megatron-Core unless the request names frameworks
        assert item["default_for_search"] is (item["name"] == "megatron_core")
        assert item["label"] and item["description"]
    # the combination rules, in words, one per rule the profile checks
    rules = {f["name"]: f["rules"] for f in items}
    assert len(rules["deepspeed"]) == 3 and any("interleaved" in r for r in rules["deepspeed"])
    assert any("only as ulysses" in r for r in rules["deepspeed"])
    # the context-parallel algorithms each framework runs (issue 15)
    assert rules["torchtitan"] == [
        "context parallelism as ring (rotate method alltoall) or all_gather (allgather)"
    ]
    assert len(rules["fsdp"]) == 2 and "no expert parallelism" in rules["fsdp"][0]
    assert "ring or all_gather" in rules["fsdp"][1]
    assert any("a2a+p2p" in r for r in rules["megatron_core"])
    labels = {f["name"]: f["label"] for f in items}
    assert labels["megatron_core"] == "Megatron-Core"
    assert labels["fsdp"] == "PyTorch FSDP"


def test_framework_config_lists_each_option_with_its_meaning_and_default(client: Any) -> None:
    megatron = client.get("/v1/frameworks/megatron_core").json()
    deepspeed = client.get("/v1/frameworks/deepspeed").json()
    assert megatron["name"] == "megatron_core"
    assert set(megatron["config"]) == set(deepspeed["config"])
    for name in ("grad_reduce_bytes", "overlap_grad_reduce", "zero3_prefetch", "p2p_overlap"):
        assert name in megatron["config"]
    for option in megatron["config"].values():
        assert option["description"] and "\n" not in option["description"]
    # an option means the same for every framework; the defaults differ, with the reason
    mc, ds = megatron["config"]["grad_reduce_bytes"], deepspeed["config"]["grad_reduce_bytes"]
    assert mc["description"] == ds["description"]
    assert "fp32" in mc["description"] and "bf16" in mc["description"]
    # Megatron-Core reduces fp32 gradients (4 bytes); DeepSpeed communicates bf16 (2 bytes)
    assert (mc["default"], ds["default"]) == (4.0, 2.0)
    assert mc["default_note"] is None and "bf16" in ds["default_note"]
    # a byte count on the wire: a number above zero
    assert (mc["json_schema"]["type"], mc["json_schema"]["exclusiveMinimum"]) == ("number", 0)
    # DeepSpeed's reduce_bucket_size 5e8; legacy Megatron-LM reduces after the backward
    assert deepspeed["config"]["grad_bucket_elements"]["default"] == 5e8
    legacy = client.get("/v1/frameworks/megatron_lm").json()
    assert legacy["config"]["overlap_grad_reduce"]["default"] is False
    assert megatron["config"]["p2p_overlap"]["json_schema"]["enum"] == [
        "none",
        "interleaved",
        "always",
    ]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_listed_defaults_are_what_the_cost_model_prices(
    client: Any, tiny: dict[str, Any], framework: str
) -> None:
    options = client.get(f"/v1/frameworks/{framework}").json()["config"]
    defaults = {name: option["default"] for name, option in options.items()}
    plan = {"parallelism": {"data": 4}, "zero_stage": 0, "framework": framework}
    plain = _estimate(client, tiny, plan).json()
    assert plain["feasible"], plain["violations"]

    def priced(overrides: dict[str, Any]) -> dict[str, Any]:
        config = {"frameworks": {framework: overrides}}
        response = _estimate(
            client, tiny, plan, cost_model={"name": "analytical", "config": config}
        )
        assert response.status_code == 200, response.text
        metrics: dict[str, Any] = response.json()["metrics"]
        return metrics

    # sending back every listed default changes nothing ...
    assert priced(defaults) == plain["metrics"]
    # ... while the options are live: half the bytes on the wire, less gradient reduction
    halved = priced({"grad_reduce_bytes": defaults["grad_reduce_bytes"] / 2})
    dp = plain["metrics"]["time_breakdown_s"]["data_parallel_comm"]
    assert 0 < halved["time_breakdown_s"]["data_parallel_comm"] < dp


def test_unknown_framework_is_a_404_problem_listing_the_registered_ones(client: Any) -> None:
    body = assert_problem(client.get("/v1/frameworks/jax"), 404, path="/v1/frameworks/jax")
    assert body["type"].endswith("/unknown-catalog-entry")
    assert "'jax'" in body["detail"]
    for name in FRAMEWORKS:
        assert name in body["detail"]


def test_openapi_lists_the_framework_endpoints(client: Any) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert paths["/v1/frameworks"]["get"]["summary"] == (
        "List the training framework profiles plans are priced for"
    )
    one = paths["/v1/frameworks/{name}"]["get"]
    assert one["summary"].startswith("Read one training framework profile")
    schema = one["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/FrameworkPublic")


# ---- unknown names in request bodies: 422 naming the field, rule and value -----------------
@pytest.mark.parametrize("stage_layers", [None, [1, 1, 1, 1]])
def test_estimate_with_an_unknown_plan_framework_is_a_422(
    client: Any, tiny: dict[str, Any], stage_layers: list[int] | None
) -> None:
    plan = {"parallelism": {"data": 1, "pipeline": 4}, "framework": "colossalai"}
    if stage_layers:
        plan["stage_layers"] = stage_layers
    body = assert_problem(_estimate(client, tiny, plan), 422, path="/v1/estimate")
    assert body["type"].endswith("/invalid-input")
    assert [(e["field"], e["rule"], e["value"]) for e in body["errors"]] == [
        ("plan.framework", RULE, "colossalai")
    ]
    assert "megatron_core" in body["detail"]  # the registered names are listed


@pytest.mark.parametrize(
    ("spelled", "name"),
    [
        ("Megatron-Core", "megatron_core"),
        ("mcore", "megatron_core"),
        ("FSDP2", "fsdp"),
        ("PyTorch FSDP", "fsdp"),
        ("DeepSpeed", "deepspeed"),
        ("Megatron-LM", "megatron_lm"),
    ],
)
def test_framework_names_are_read_as_people_write_them(
    client: Any, tiny: dict[str, Any], spelled: str, name: str
) -> None:
    plan = {"parallelism": {"data": 1, "pipeline": 4}, "framework": spelled}
    response = _estimate(client, tiny, plan)
    assert response.status_code == 200, response.text
    assert response.json()["plan"]["framework"] == name


def test_estimate_with_a_non_string_framework_is_a_422(client: Any, tiny: dict[str, Any]) -> None:
    body = assert_problem(
        _estimate(client, tiny, {"parallelism": {"data": 4}, "framework": 7}), 422
    )
    assert error_fields(body) == ["plan.framework"]


def test_search_with_unknown_frameworks_is_refused_before_it_is_stored(
    client: Any, tiny: dict[str, Any]
) -> None:
    body = {**tiny, "constraints": {"frameworks": ["fsdp", "jax", "fsdp", "colossalai"]}}
    problem = assert_problem(client.post("/v1/searches?wait=10", json=body), 422)
    assert problem["type"].endswith("/invalid-input")
    # every unknown entry, at its index in the request (duplicates do not shift them)
    assert [(e["field"], e["rule"], e["value"]) for e in problem["errors"]] == [
        ("constraints.frameworks.1", RULE, "jax"),
        ("constraints.frameworks.3", RULE, "colossalai"),
    ]
    assert client.get("/v1/searches").json()["total"] == 0


@pytest.mark.parametrize(("value", "rule"), [("jax", RULE), (3, "must be a framework name")])
def test_search_with_an_unknown_fixed_framework_is_a_422(
    client: Any, tiny: dict[str, Any], value: Any, rule: str
) -> None:
    body = {**tiny, "constraints": {"fixed": {"framework": value}}}
    problem = assert_problem(client.post("/v1/searches?wait=10", json=body), 422)
    assert [(e["field"], e["rule"], e["value"]) for e in problem["errors"]] == [
        ("constraints.fixed.framework", rule, value)
    ]
    assert client.get("/v1/searches").json()["total"] == 0


def test_serving_search_with_an_unknown_framework_is_a_422(client: Any) -> None:
    body = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1}]},
        "workload": {
            "kind": "serving",
            "prompt_tokens": 512,
            "output_tokens": 128,
            "slo": {"ttft_ms": 1000, "tpot_ms": 50},
        },
        "constraints": {"frameworks": ["vllm"]},
    }
    problem = assert_problem(client.post("/v1/searches?wait=10", json=body), 422)
    assert error_fields(problem) == ["constraints.frameworks.0"]


@pytest.mark.parametrize(
    ("cost_model", "fields"),
    [
        (
            {"name": "analytical", "config": {"frameworks": {"jax": {}, "fsdp": {}}}},
            [("cost_model.config.frameworks.jax", RULE, "jax")],
        ),
        (
            {
                "name": "analytical",
                "config": {"frameworks": {"jax": {}, "fsdp": {"grad_reduce_bytes": -1}}},
            },
            [
                ("cost_model.config.frameworks.jax", RULE, "jax"),
                (
                    "cost_model.config.frameworks.fsdp.grad_reduce_bytes",
                    "Input should be greater than 0",
                    -1,
                ),
            ],
        ),
        (
            {"name": "calibrated", "config": {"base": {"frameworks": {"deep_speed": {}}}}},
            [("cost_model.config.base.frameworks.deep_speed", RULE, "deep_speed")],
        ),
    ],
)
@pytest.mark.parametrize("endpoint", ["/v1/estimate", "/v1/searches"])
def test_unknown_framework_overrides_in_the_cost_model_config_are_a_422(
    client: Any,
    tiny: dict[str, Any],
    cost_model: dict[str, Any],
    fields: list[tuple[str, str, Any]],
    endpoint: str,
) -> None:
    body: dict[str, Any] = {**tiny, "cost_model": cost_model}
    if endpoint == "/v1/estimate":
        body["plan"] = {"parallelism": {"data": 4}}
    problem = assert_problem(client.post(endpoint, json=body), 422, path=endpoint)
    assert problem["type"].endswith("/invalid-input")
    assert [(e["field"], e["rule"], e["value"]) for e in problem["errors"]] == fields


# ---- a framework that cannot run the plan: infeasible, priced -------------------------------
@pytest.mark.parametrize(
    ("framework", "plan", "rule"),
    [
        # DeepSpeed's PipelineEngine runs plain 1F1B only
        (
            "deepspeed",
            {
                "parallelism": {"data": 1, "pipeline": 2, "virtual_pipeline": 2, "tensor": 2},
                "pipeline_schedule": "interleaved_1f1b",
            },
            "no interleaved schedule",
        ),
        # FSDP has no ZeRO-1 (NO_SHARD, SHARD_GRAD_OP, FULL_SHARD)
        ("fsdp", {"parallelism": {"data": 2, "tensor": 2}, "zero_stage": 1}, "zero_stage 0, 2, 3"),
        # Megatron-Core's ZeRO-3 goes through FSDP, which needs pipeline = 1
        ("megatron_core", {"parallelism": {"data": 2, "pipeline": 2}, "zero_stage": 3}, "FSDP"),
    ],
)
def test_an_estimate_pinned_to_a_framework_that_cannot_run_the_plan_is_infeasible(
    client: Any, tiny: dict[str, Any], framework: str, plan: dict[str, Any], rule: str
) -> None:
    response = _estimate(client, tiny, {**plan, "framework": framework})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["feasible"] is False
    assert [v["kind"] for v in body["violations"]] == ["framework"]
    assert rule in body["violations"][0]["detail"]
    priced = body["plan"]
    assert priced["framework"] == framework
    assert sum(priced["stage_layers"]) == tiny["model"]["num_layers"]
    assert body["metrics"]["step_time_s"] > 0
    # the same plan with the split it was given prices the same
    again = _estimate(client, tiny, priced).json()
    assert again["metrics"] == body["metrics"] and again["violations"] == body["violations"]


def test_other_broken_rules_still_mean_there_is_nothing_to_price(
    client: Any, tiny: dict[str, Any]
) -> None:
    # 8 sequences cannot be cut into micro-batches of 3 per data-parallel rank
    plan = {"parallelism": {"data": 4}, "micro_batch_size": 3, "framework": "fsdp"}
    body = assert_problem(_estimate(client, tiny, plan), 422)
    assert body["type"].endswith("/infeasible-plan")
    assert "micro_batch_size" in body["detail"]


# ---- which framework a plan was priced for -------------------------------------------------
@pytest.mark.parametrize(
    ("zero_stage", "expected"),
    [
        (1, "megatron_core"),
        # Megatron-Core does not combine ZeRO-3 with pipelining; torchtitan (FSDP2) does
        (3, "torchtitan"),
    ],
)
def test_an_estimate_echoes_the_framework_it_picked(
    client: Any, tiny: dict[str, Any], zero_stage: int, expected: str
) -> None:
    plan = {"parallelism": {"data": 2, "pipeline": 2}, "zero_stage": zero_stage}
    body = _estimate(client, tiny, plan).json()
    assert body["feasible"], body["violations"]
    assert body["plan"]["framework"] == expected


@pytest.mark.parametrize(
    ("constraints", "framework", "label"),
    [
        ({}, "megatron_core", "Megatron-Core"),
        ({"fixed": {"framework": "torchtitan"}}, "torchtitan", "torchtitan"),
        ({"frameworks": ["fsdp"]}, "fsdp", "PyTorch FSDP"),
    ],
)
def test_plans_and_explanations_name_their_framework(
    client: Any,
    tiny: dict[str, Any],
    constraints: dict[str, Any],
    framework: str,
    label: str,
) -> None:
    body = {**tiny, "top_k": 3, "constraints": constraints}
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    plans = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    assert plans
    for plan in plans:
        assert plan["framework"] == framework
        assert f"MFU with {label};" in plan["explanation"]
        assert client.get(f"/v1/plans/{plan['id']}").json()["framework"] == framework
