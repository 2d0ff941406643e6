"""Mixed clusters over HTTP: a plan across node groups priced by `POST /v1/estimate`, and a
search that uses both kinds of GPU when that is faster."""

from __future__ import annotations

import re
from typing import Any

from app_support import error_fields

H100 = {"accelerator": "h100-sxm", "num_nodes": 2, "gpus_per_node": 8}
A100 = {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 8, "name": "old"}
BODY: dict[str, Any] = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"node_groups": [H100, A100]},
    "workload": {"kind": "training", "global_batch_size": 256, "sequence_length": 4096},
}


def test_estimate_prices_a_plan_across_groups_and_splits_it(client: Any) -> None:
    plan = {
        "parallelism": {"data": 1, "tensor": 8, "pipeline": 3, "sequence_parallel": True},
        "stage_groups": ["old", "h100-sxm", "h100-sxm"],
    }
    response = client.post("/v1/estimate", json={**BODY, "plan": plan})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["feasible"] is True
    split = body["plan"]["stage_layers"]
    assert sum(split) == 32 and split[0] < min(split[1:])  # the A100 stage takes fewest
    assert body["plan"]["stage_groups"] == ["old", "h100-sxm", "h100-sxm"]
    assert body["details"]["stage_pools"] == ["old", "h100-sxm", "h100-sxm"]
    assert body["details"]["pools"]["old"]["gpus_used"] == 8
    # the same plan with every stage's layers given back prices the same
    again = client.post(
        "/v1/estimate", json={**BODY, "plan": {**plan, "stage_layers": split}}
    ).json()
    assert again["metrics"]["step_time_s"] == body["metrics"]["step_time_s"]


def test_bad_group_inputs_name_their_field(client: Any) -> None:
    plan = {"parallelism": {"data": 1, "tensor": 8, "pipeline": 3}, "stage_groups": ["old"]}
    response = client.post("/v1/estimate", json={**BODY, "plan": plan})
    assert response.status_code == 422
    assert "plan.stage_groups" in error_fields(response.json())
    twice = {"node_groups": [{**H100, "name": "old"}, A100]}  # both named "old"
    plan = {**plan, "stage_groups": ["old", "old", "old"]}
    response = client.post("/v1/estimate", json={**BODY, "cluster": twice, "plan": plan})
    assert response.status_code == 422
    assert "cluster.node_groups" in error_fields(response.json())


def test_a_plan_on_a_mixed_cluster_names_its_groups(client: Any) -> None:
    plan = {"parallelism": {"data": 1, "tensor": 8, "pipeline": 3}}
    response = client.post("/v1/estimate", json={**BODY, "plan": plan})
    assert response.status_code == 422
    assert "plan.stage_groups" in error_fields(response.json())
    plan = {**plan, "stage_groups": ["old", "h100-sxm", "v100"]}
    response = client.post("/v1/estimate", json={**BODY, "plan": plan})
    assert response.status_code == 422
    assert "plan.stage_groups.2" in error_fields(response.json())


def test_a_search_uses_both_kinds_when_that_is_faster(client: Any) -> None:
    mixed = client.post("/v1/searches?wait=60", json={**BODY, "top_k": 3})
    assert mixed.status_code == 201, mixed.text
    assert mixed.json()["status"] == "succeeded", mixed.json()
    plans = client.get(f"/v1/searches/{mixed.json()['id']}/plans").json()["items"]
    best = plans[0]
    h100_only = {**BODY, "cluster": {"node_groups": [H100]}, "top_k": 1}
    alone = client.post("/v1/searches?wait=60", json=h100_only)
    assert alone.status_code == 201, alone.text
    alone_best = client.get(f"/v1/searches/{alone.json()['id']}/plans").json()["items"][0]
    # the A100 node can carry whole stages: the mixed plan is strictly faster
    assert best["metrics"]["step_time_s"] < alone_best["metrics"]["step_time_s"]
    used = set(best["stage_groups"] or []) | {x["group"] for x in best["data_shares"] or []}
    assert used == {"h100-sxm", "old"}
    assert "old" in best["explanation"] and "h100-sxm" in best["explanation"]


def test_serving_instances_of_two_groups_behind_one_router(client: Any) -> None:
    body = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "name": "new"},
                                    {"accelerator": "a100-80gb", "num_nodes": 1, "name": "old"}]},
        "workload": {"kind": "serving", "prompt_tokens": 1024, "output_tokens": 256,
                     "slo": {"ttft_ms": 1000, "tpot_ms": 50}},
    }  # fmt: skip
    inst = {"role": "both", "count": 8, "max_batch_size": 128, "chunk_size": 2048}

    def goodput(groups: list[str]) -> float:
        plan = {"mode": "colocated", "instances": [{**inst, "group": g} for g in groups]}
        answer = client.post("/v1/estimate", json={**body, "plan": plan})
        assert answer.status_code == 200, answer.text
        assert answer.json()["feasible"], answer.json()["violations"]
        return float(answer.json()["metrics"]["goodput_rps"])

    new, old, both = goodput(["new"]), goodput(["old"]), goodput(["new", "old"])
    assert old < new
    # capacity-weighted routing: the set serves about what its parts serve alone
    assert 0.9 * (new + old) <= both <= 1.05 * (new + old)
    # on a mixed cluster every instance names its group
    plan = {"mode": "colocated", "instances": [inst]}
    answer = client.post("/v1/estimate", json={**body, "plan": plan}).json()
    assert answer["feasible"] is False
    assert answer["violations"][0]["field"] == "plan.instances.0.group"
    # a serving search across groups: each group alone and the groups together
    response = client.post("/v1/searches?wait=60", json={**body, "top_k": 3})
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "succeeded", response.json()
    plans = client.get(f"/v1/searches/{response.json()['id']}/plans").json()["items"]
    # every instance names its group, or the groups of its stages when it spans both
    for instance in (i for p in plans for i in p["instances"]):
        spans = instance.get("stage_groups") or []
        assert instance.get("group") in ("new", "old") or (
            spans and set(spans) <= {"new", "old"}
        ), instance
    assert "Groups: " in plans[0]["explanation"]


def test_a_mixed_plan_that_fits_nowhere_is_infeasible_not_an_error(client: Any) -> None:
    body = {
        "model": {"preset": "llama3-70b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8},
                                    {"accelerator": "a100-80gb", "num_nodes": 8}]},
        "workload": {"kind": "training", "global_batch_size": 512, "sequence_length": 4096},
        "plan": {"parallelism": {"data": 16, "tensor": 1, "pipeline": 8},
                 "stage_groups": ["a100-80gb"] * 4 + ["h100-sxm"] * 4},
    }  # fmt: skip
    response = client.post("/v1/estimate", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["feasible"] is False
    assert {v["kind"] for v in answer["violations"]} == {"memory"}
    assert sum(answer["plan"]["stage_layers"]) == 80
    # the memory summary is the tightest stage against its own GPUs
    stages = answer["memory"]["by_stage"]
    assert answer["memory"]["peak_gib"] in [s["total_gib"] for s in stages]


MIXED_SERVING: dict[str, Any] = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "name": "new"},
                                {"accelerator": "a100-80gb", "num_nodes": 1, "name": "old"}]},
    # more than the H100 node carries alone (~363 requests/s): only a mix serves it
    "workload": {"kind": "serving", "prompt_tokens": 1024, "output_tokens": 256,
                 "slo": {"ttft_ms": 1000, "tpot_ms": 50}, "objective": "min_gpus",
                 "arrival_rate_rps": 420},
}  # fmt: skip
"""Llama-3-8B at 420 requests/s on one H100 node and one A100 node (serving on both)."""


def test_a_serving_set_across_groups_exports_one_launch_per_group_and_a_router(client: Any) -> None:
    body = {
        **MIXED_SERVING,
        "top_k": 5,
    }  # fmt: skip
    search = client.post("/v1/searches?wait=60", json=body).json()
    assert search["status"] == "succeeded", search
    plans = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    across = [p for p in plans if len({i["group"] for i in p["instances"]}) > 1]
    assert across, "the all-groups plan is among the top plans"
    plan = across[0]
    groups = [i["group"] for i in plan["instances"]]
    counts = {i["group"]: i["count"] for i in plan["instances"]}
    for fmt in ("vllm", "slurm", "kubernetes"):
        response = client.get(f"/v1/plans/{plan['id']}/export/{fmt}")
        assert response.status_code == 200, (fmt, response.text)
        body = response.json()
        assert list(body["groups"]) == groups, fmt
        servers = re.findall(r"server .+? weight=(\d+);  # group ([^,:]+)", body["content"])
        if fmt == "kubernetes":  # one Service per group, weighing its replicas together
            assert [g for _, g in servers] == groups
            continue
        # every replica listed, the fastest kind of replica weighing 1000
        assert [g for _, g in servers] == [g for g in groups for _ in range(counts[g])]
        weight = {g: int(w) for w, g in servers}
        assert max(weight.values()) == 1000 and len(set(weight.values())) == len(groups)


def test_per_stage_tensor_degrees_over_http(client: Any) -> None:
    """An H100 node beside two PCIe L40S nodes, Llama-3-8B: `constraints.per_stage_tensor`
    lets each group's stages take their own tensor degree; the estimate prices such a plan
    as given; every export refuses it by rule (no launcher runs two degrees)."""
    l40s = {"accelerator": "l40s", "num_nodes": 2, "gpus_per_node": 8, "name": "l40s"}
    body = {
        **BODY,
        "cluster": {"node_groups": [{**H100, "num_nodes": 1, "name": "h100"}, l40s]},
        "workload": {"kind": "training", "global_batch_size": 128, "sequence_length": 4096},
        "constraints": {"per_stage_tensor": True},
        "top_k": 10,
    }
    search = client.post("/v1/searches?wait=60", json=body)
    assert search.status_code == 201, search.text
    assert search.json()["status"] == "succeeded", search.json()
    plans = client.get(f"/v1/searches/{search.json()['id']}/plans").json()["items"]
    own = [p for p in plans if p.get("stage_tensor")]
    assert own, "a plan with per-stage degrees is among the top ten"
    plan = own[0]
    degrees, groups = plan["stage_tensor"], plan["stage_groups"]
    assert len(degrees) == len(groups) == plan["parallelism"]["pipeline"]
    assert max(degrees) == plan["parallelism"]["tensor"] and len(set(degrees)) > 1
    assert "at tensor" in plan["explanation"]
    # the estimate of the same plan, split left open, gives the stored split and price back
    given = {k: plan[k] for k in ("parallelism", "micro_batch_size", "recompute", "zero_stage",
                                  "stage_groups", "stage_tensor")}  # fmt: skip
    problem = {k: body[k] for k in ("model", "cluster", "workload")}
    answer = client.post("/v1/estimate", json={**problem, "plan": given})
    assert answer.status_code == 200, answer.text
    assert answer.json()["plan"]["stage_layers"] == plan["stage_layers"]
    assert answer.json()["metrics"]["step_time_s"] == plan["metrics"]["step_time_s"]
    for fmt in ("megatron", "slurm", "kubernetes"):
        response = client.get(f"/v1/plans/{plan['id']}/export/{fmt}")
        assert response.status_code == 422, (fmt, response.text)
        assert response.json()["rule"] == "per-stage-tensor"
    # a serving format says it serves, not why a training launcher would refuse
    response = client.get(f"/v1/plans/{plan['id']}/export/vllm")
    assert response.status_code == 422
    assert response.json()["rule"] == "serving-format-needs-serving-plan"
    # a bad stage_tensor names its field
    bad = {**given, "stage_tensor": [1] * len(groups)}
    response = client.post("/v1/estimate", json={**problem, "plan": bad})
    assert response.status_code == 422
    assert any(f.startswith("plan") for f in error_fields(response.json()))


def test_the_calibrated_cost_model_is_refused_on_a_mixed_cluster(client: Any) -> None:
    """One calibration fits one accelerator: on a cluster of H100 and A100 nodes it would
    price both with the H100's fit, so it is a 422 naming the cost model."""
    plan = {
        "parallelism": {"data": 1, "tensor": 8, "pipeline": 3, "sequence_parallel": True},
        "stage_groups": ["old", "h100-sxm", "h100-sxm"],
    }
    body = {**BODY, "plan": plan, "cost_model": {"name": "calibrated"}}
    response = client.post("/v1/estimate", json=body)
    assert response.status_code == 422, response.text
    assert "cost_model.name" in error_fields(response.json())
    assert "one accelerator" in response.text


def test_a_plan_on_one_group_warns_as_on_that_group_alone(client: Any) -> None:
    """The same H100-only plan, estimated on the H100 nodes alone and on the mixed cluster
    (every stage on the H100 group): the same warnings (none about the idle A100s, and the
    MFU record of the H100 applies), the same price; a plan across both groups carries error
    bars around its step and names the framework it was priced with."""
    plan = {"parallelism": {"data": 2, "tensor": 8, "pipeline": 1, "sequence_parallel": True},
            "micro_batch_size": 1, "recompute": "none"}  # fmt: skip
    alone = client.post(
        "/v1/estimate", json={**BODY, "cluster": {"node_groups": [H100]}, "plan": plan}
    )
    assert alone.status_code == 200, alone.text
    on_mixed = client.post(
        "/v1/estimate", json={**BODY, "plan": {**plan, "stage_groups": ["h100-sxm"]}}
    )
    assert on_mixed.status_code == 200, on_mixed.text
    codes = sorted(w["code"] for w in alone.json()["warnings"])
    assert sorted(w["code"] for w in on_mixed.json()["warnings"]) == codes
    details = [w["detail"] for w in on_mixed.json()["warnings"]]
    assert not any("a100" in d for d in details), details
    assert on_mixed.json()["metrics"]["step_time_s"] == alone.json()["metrics"]["step_time_s"]
    across = {
        "parallelism": {"data": 1, "tensor": 8, "pipeline": 3, "sequence_parallel": True},
        "stage_groups": ["old", "h100-sxm", "h100-sxm"],
    }
    answer = client.post("/v1/estimate", json={**BODY, "plan": across}).json()
    metrics = answer["metrics"]
    assert metrics["step_time_s_low"] < metrics["step_time_s"] < metrics["step_time_s_high"]
    assert answer["plan"]["framework"] == "megatron_core"


def test_a_stage_degree_that_breaks_a_rule_names_its_stage(client: Any) -> None:
    """Tensor 3 does not divide Llama-3-8B's 32 heads: with one degree per stage the 422
    names the stage that has it (`plan.stage_tensor.1`, value 3), not the widest degree."""
    plan = {
        "parallelism": {"data": 1, "tensor": 8, "pipeline": 3, "sequence_parallel": True},
        "stage_groups": ["old", "h100-sxm", "h100-sxm"],
        "stage_tensor": [8, 3, 3],
    }
    response = client.post("/v1/estimate", json={**BODY, "plan": plan})
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert {"field": "plan.stage_tensor.1", "value": 3} in [
        {"field": e["field"], "value": e["value"]} for e in errors
    ], errors


def test_fixed_degrees_no_plan_can_have_are_refused_before_a_mixed_search(client: Any) -> None:
    """On a mixed cluster a plan may leave GPUs idle, so fixed degrees need not divide the
    GPU count; but a tensor degree that does not divide the 32 heads, or degrees that take
    more GPUs than the 24 there are, admit no plan at all: 422 at their field, before any
    search is stored."""
    for fixed, field in (
        ({"tensor": 3}, "constraints.fixed.tensor"),
        ({"pipeline": 1000}, "constraints.fixed"),
    ):
        body = {**BODY, "constraints": {"fixed": fixed}}
        response = client.post("/v1/searches", json=body)
        assert response.status_code == 422, (fixed, response.text)
        assert field in error_fields(response.json())


def test_an_implausible_link_between_groups_is_flagged(client: Any) -> None:
    """1e-9 GB/s between the groups (a unit slip) prices the hand-off in years: the answer
    says so with `bandwidth_out_of_range`, naming the field and the plausible range; the
    default (the slower group's NIC rate) raises nothing."""
    plan = {
        "parallelism": {"data": 1, "tensor": 8, "pipeline": 3, "sequence_parallel": True},
        "stage_groups": ["old", "h100-sxm", "h100-sxm"],
    }
    slow = {**BODY["cluster"], "inter_group_bandwidth_gb_s": 1e-9}
    answer = client.post("/v1/estimate", json={**BODY, "cluster": slow, "plan": plan}).json()
    (warning,) = [w for w in answer["warnings"] if w["code"] == "bandwidth_out_of_range"]
    assert "cluster.inter_group_bandwidth_gb_s" in warning["detail"]
    plain = client.post("/v1/estimate", json={**BODY, "plan": plan}).json()
    assert "bandwidth_out_of_range" not in [w["code"] for w in plain["warnings"]]


def test_a_bad_split_names_the_stage_layers_field(client: Any) -> None:
    """Zero, negative or too few entries in stage_layers: the 422 names
    `plan.stage_layers` with its value, not the whole plan."""
    for layers in ([0, 16, 16], [-1, 17, 16], [16, 16]):
        plan = {
            "parallelism": {"data": 1, "tensor": 8, "pipeline": 3},
            "stage_groups": ["old", "h100-sxm", "h100-sxm"],
            "stage_layers": layers,
        }
        response = client.post("/v1/estimate", json={**BODY, "plan": plan})
        assert response.status_code == 422, response.text
        errors = response.json()["errors"]
        assert [e["field"] for e in errors] == ["plan.stage_layers"], errors
        assert errors[0]["value"] == layers


def test_a_mixed_serving_search_stopped_before_any_plan_says_so(client: Any) -> None:
    """Stopped by its time limit before it priced a plan, a serving search on a mixed
    cluster fails with a no-feasible-plan problem naming the time limit (its message read
    one accelerator of the cluster and raised: an internal error)."""
    body = {
        **MIXED_SERVING,
        "constraints": {"time_limit_s": 0.01},
    }  # fmt: skip
    search = client.post("/v1/searches?wait=30&dedupe=false", json=body).json()
    assert search["status"] == "failed", search
    error = search["error"]
    assert error["type"].endswith("/no-feasible-plan"), error
    assert "time_limit" in error["detail"] and "8 × h100-sxm + 8 × a100-80gb" in error["detail"]
