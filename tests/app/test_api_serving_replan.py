"""`POST /v1/plans/{id}/replan` of a serving plan (issue 16, point 4) over HTTP: a serving
search on two nodes of 4 H100s, then one node fails. The re-planned search ranks the plan
keeping the old instance layouts (counts re-fitted) with a fresh search's plans; every plan
reports what restarts and what it costs, the keep plan's goodput and counts match separate
estimates of the plans, the search links the plan it re-plans, and its plans export to
vLLM and SGLang like any other."""

from __future__ import annotations

from typing import Any

import pytest
from app_support import assert_problem, error_fields
from sqlmodel import Session

from app.db.models import SearchRecord

LLAMA3_8B_BF16_BYTES = 2 * 8_030_261_248
"""Meta-Llama-3-8B in bf16 (Hugging Face safetensors: 16,060,522,496 bytes)."""
DGX_H100_NVME_BYTES_S = 52.0e9
"""The catalog's local NVMe read rate of a DGX H100 node."""
OVERHEAD_S = 120.0
"""`restart_overhead_s` default."""

CLUSTER = {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 2, "gpus_per_node": 4}]}
WORKLOAD = {
    "kind": "serving",
    "prompt_tokens": 512,
    "output_tokens": 128,
    "slo": {"ttft_ms": 300, "tpot_ms": 30, "percentile": 90},
    "num_requests": 100,
}


def _original(client: Any, **fixed: Any) -> dict[str, Any]:
    body = {
        "model": {"preset": "llama3-8b"},
        "cluster": CLUSTER,
        "workload": WORKLOAD,
        "constraints": {"fixed": {"tensor": 1, "pipeline": 1, **fixed}},
        "top_k": 3,
    }
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    return client.get(f"/v1/searches/{search['id']}/plans").json()["items"][0]


def _replan(client: Any, plan_id: str, body: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    response = client.post(f"/v1/plans/{plan_id}/replan?wait=30", json=body)
    assert response.status_code == 201, response.text
    search = response.json()
    assert search["status"] == "succeeded", search
    plans = client.get(f"/v1/searches/{search['id']}/plans?include_dominated=true").json()
    return search, plans["items"]


def _estimate(client: Any, plan: dict[str, Any], lost_gpus: int) -> float:
    """The goodput of `plan` estimated on the cluster left (POST /v1/estimate)."""
    group = {**CLUSTER["node_groups"][0], "unavailable_gpus": lost_gpus}
    body = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"node_groups": [group]},
        "workload": WORKLOAD,
        "plan": plan,
    }
    response = client.post("/v1/estimate", json=body)
    assert response.status_code == 200, response.text
    return float(response.json()["metrics"]["goodput_rps"])


def _check_restart_figures(plan: dict[str, Any], before: float) -> None:
    """Every TP1 replica of Llama-3-8B loads its bf16 weights from the node's NVMe; the
    restarted GPUs fill ceil(GPUs / 4) nodes reading in parallel."""
    m = plan["metrics"]
    assert m["goodput_rps_before"] == pytest.approx(before)
    restarted = m["restart_instances"]
    assert m["restart_gpus"] == restarted
    assert m["restart_reload_bytes"] == restarted * LLAMA3_8B_BF16_BYTES
    assert sum(r["restarted"] for r in m["restart_roles"]) == restarted
    assert sum(r["kept"] for r in m["restart_roles"]) == m["restart_kept_instances"]
    for role in m["restart_roles"]:
        assert role["weight_bytes_per_instance"] == LLAMA3_8B_BF16_BYTES
        assert role["weight_bytes_per_gpu"] == LLAMA3_8B_BF16_BYTES
    if restarted:
        nodes = -(-restarted // 4)
        load = m["restart_reload_bytes"] / (nodes * DGX_H100_NVME_BYTES_S)
        assert m["restart_s"] == pytest.approx(OVERHEAD_S + load)
    else:
        assert m["restart_s"] == 0.0
    lost = (m["goodput_rps"] - m["restart_goodput_rps"]) * m["restart_s"]
    assert m["restart_lost_requests"] == pytest.approx(lost)


def test_a_colocated_plan_losing_a_node_keeps_half_its_replicas(client: Any) -> None:
    old = _original(client, mode="colocated")
    (inst,) = old["instances"]
    assert inst["count"] == 8 and old["metrics"]["gpus_used"] == 8
    before = old["metrics"]["goodput_rps"]
    search, plans = _replan(client, old["id"], {"lost_nodes": 1})
    replan = search["stats"]["replan"]
    assert replan["replan_of"] == old["id"]
    assert (replan["instances_before"], replan["surviving_instances"]) == (8, 4)
    keep = replan["keep"]
    assert keep["plan"]["instances"][0]["count"] == 4
    assert keep["plan"]["instances"][0]["max_batch_size"] == inst["max_batch_size"]
    # 8 replicas on nodes of 4 are two router units of 4; what is left is one of them
    assert keep["goodput_rps"] == pytest.approx(before / 2, rel=1e-9)
    assert keep["goodput_rps"] == pytest.approx(_estimate(client, keep["plan"], 4), rel=1e-9)
    assert (keep["restart_instances"], keep["restart_s"]) == (0, 0.0)
    kept = [p for p in plans if p["metrics"]["replan_keep"]]
    assert len(kept) == 1 and kept[0]["rank"] == keep["rank"]
    assert kept[0]["explanation"].startswith("Keeps the old plan's instance layouts")
    for plan in plans:
        assert plan["metrics"]["gpus_used"] <= 4
        _check_restart_figures(plan, before)
        m = plan["metrics"]
        if plan["metrics"]["replan_keep"]:
            assert m["break_even_s"] is None
        elif m["goodput_rps"] > keep["goodput_rps"]:
            expected = m["restart_lost_requests"] / (m["goodput_rps"] - keep["goodput_rps"])
            assert m["break_even_s"] == pytest.approx(max(expected, m["restart_s"]))
        else:
            assert m["break_even_s"] is None
    assert client.get(f"/v1/plans/{kept[0]['id']}").json()["search_id"] == search["id"]
    export = client.get(f"/v1/plans/{kept[0]['id']}/export/vllm")
    assert export.status_code == 200, export.text
    assert "4 replica(s) of 1 GPU(s)" in export.json()["content"]


def test_a_disaggregated_plan_losing_its_decode_node_refits_the_counts(client: Any) -> None:
    old = _original(client, mode="disaggregated")
    pre, dec = (next(i for i in old["instances"] if i["role"] == r) for r in ("prefill", "decode"))
    # replicas sit in plan order on consecutive TP1 GPUs, the decode ones after the prefill
    # ones; GPUs 0-3 (node 0) survive
    surviving_prefill = min(pre["count"], 4)
    surviving_decode = max(0, min(pre["count"] + dec["count"], 4) - pre["count"])
    assert surviving_decode < dec["count"]  # the change takes decode replicas
    search, plans = _replan(client, old["id"], {"lost_nodes": [1]})
    keep = next(p for p in plans if p["metrics"]["replan_keep"])
    # the keep plan is never folded under another: the default list shows it
    listed = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    assert [p["id"] for p in listed if p["metrics"]["replan_keep"]] == [keep["id"]]
    assert keep["dominated_by"] is None
    counts = {i["role"]: i["count"] for i in keep["instances"]}
    # brute force: every maximal pair of TP1 counts on the 4 GPUs left, estimated
    layouts = {i["role"]: i for i in old["instances"]}
    goodput = {}
    for a, b in [(1, 3), (2, 2), (3, 1)]:
        plan = {
            "mode": "disaggregated",
            "engine": old["engine"],
            "engine_options": old["engine_options"],
            "instances": [{**layouts["prefill"], "count": a}, {**layouts["decode"], "count": b}],
        }
        goodput[(a, b)] = _estimate(client, plan, 4)
    assert keep["metrics"]["goodput_rps"] == pytest.approx(max(goodput.values()), rel=1e-9)
    assert goodput[(counts["prefill"], counts["decode"])] == pytest.approx(max(goodput.values()))
    # the surviving replicas the counts keep run on; the others start on free GPUs
    roles = {r["role"]: r for r in keep["metrics"]["restart_roles"]}
    assert roles["prefill"]["kept"] == min(counts["prefill"], surviving_prefill)
    assert roles["decode"]["kept"] == min(counts["decode"], surviving_decode)
    for plan in plans:
        _check_restart_figures(plan, old["metrics"]["goodput_rps"])
    export = client.get(f"/v1/plans/{keep['id']}/export/vllm")
    assert export.status_code == 200, export.text


def test_an_sglang_plan_replanned_exports_to_sglang(client: Any) -> None:
    old = _original(client, mode="colocated", engine="sglang")
    _, plans = _replan(client, old["id"], {"lost_gpus": 4})
    assert plans
    for plan in plans:
        assert plan["engine"] == "sglang"
        export = client.get(f"/v1/plans/{plan['id']}/export/sglang")
        assert export.status_code == 200, export.text


def test_added_nodes_start_new_replicas_beside_the_surviving_ones(client: Any) -> None:
    old = _original(client, mode="colocated")
    body = {
        "lost_nodes": [0],
        "added_node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4}],
    }
    search, plans = _replan(client, old["id"], body)
    keep = next(p for p in plans if p["metrics"]["replan_keep"])
    m = keep["metrics"]
    assert keep["instances"][0]["count"] == 8
    assert (m["restart_kept_instances"], m["restart_instances"]) == (4, 4)
    # while the four new replicas load, the four on node 1 serve one unit's goodput
    assert m["restart_goodput_rps"] == pytest.approx(m["goodput_rps"] / 2, rel=1e-9)
    assert m["goodput_rps"] == pytest.approx(old["metrics"]["goodput_rps"], rel=1e-9)
    _check_restart_figures(keep, old["metrics"]["goodput_rps"])
    assert search["stats"]["replan"]["keep"]["restart_instances"] == 4


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"lost_nodes": 2}, "lost_nodes"),
        ({"lost_gpus": 8}, "lost_gpus"),
        ({"lost_nodes": [5]}, "lost_nodes"),
        ({"lost_nodes": 1, "node_group": 3}, "node_group"),
    ],
)
def test_serving_replans_it_cannot_answer_are_422(
    client: Any, body: dict[str, Any], field: str
) -> None:
    old = _original(client, mode="colocated")
    problem = assert_problem(client.post(f"/v1/plans/{old['id']}/replan", json=body), 422)
    assert error_fields(problem) == [field]
    error = problem["errors"][0]
    assert error["rule"] and "value" in error


def test_a_plan_of_a_search_not_finished_is_a_409(client: Any) -> None:
    old = _original(client, mode="colocated")
    with Session(client.app.state.engine) as session:
        record = session.get(SearchRecord, old["search_id"])
        assert record is not None
        record.status = "running"
        session.add(record)
        session.commit()
    response = client.post(f"/v1/plans/{old['id']}/replan", json={"lost_nodes": 1})
    problem = assert_problem(response, 409)
    assert "running" in problem["detail"]
