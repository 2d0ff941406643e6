"""`POST /v1/plans/{id}/replan` (issue 16, point 4) over HTTP: a node of a data-parallel job
is lost, the re-planned search runs on what is left, and each plan's restart bytes match
the reshard worked by hand; the baseline keeps the old degrees, break-even follows from the
figures, the search links the plan it re-plans, and its plans export."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import TINY_MODEL

FIXED = {"tensor": 1, "pipeline": 1, "context": 1, "zero_stage": 1}


def _original(client: Any) -> dict[str, Any]:
    body = {
        "model": dict(TINY_MODEL),
        "cluster": {
            "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 2, "gpus_per_node": 4}]
        },
        "workload": {"kind": "training", "global_batch_size": 16, "sequence_length": 512},
        "constraints": {"fixed": FIXED},
        "top_k": 2,
    }
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    return client.get(f"/v1/searches/{search['id']}/plans").json()["items"][0]


def test_losing_a_node_of_a_data_parallel_job(client: Any) -> None:
    old = _original(client)
    assert old["parallelism"]["data"] == 8
    response = client.post(f"/v1/plans/{old['id']}/replan?wait=30", json={"lost_nodes": 1})
    assert response.status_code == 201, response.text
    search = response.json()
    assert search["stats"]["replan"]["replan_of"] == old["id"]
    keep = search["stats"]["replan"]["keep"]
    assert keep["plan"]["parallelism"]["tensor"] == 1 and keep["plan"]["parallelism"]["data"] == 4
    params = client.post("/v1/models/resolve", json={"model": dict(TINY_MODEL)}).json()[
        "num_parameters"
    ]
    # old data rank q held optimizer slice [q/8, (q+1)/8); GPUs 4..7 are gone. New rank r
    # needs [r/4, (r+1)/4): rank 0 fetches 1/8 from GPU 1, rank 1 fetches 2/8 from GPUs 2-3,
    # ranks 2 and 3 need 4/8 that only the lost GPUs held (checkpoint); 12 bytes/parameter
    plans = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    assert plans
    for plan in plans:
        m = plan["metrics"]
        assert plan["parallelism"]["data"] == 4 and m["gpus_used"] == 4
        assert m["restart_peer_bytes"] == pytest.approx(3 / 8 * params * 12)
        assert m["restart_reload_bytes"] == pytest.approx(4 / 8 * params * 12)
        assert m["restart_s"] > 120  # the relaunch overhead and the transfers
        if m["tokens_per_s"] > keep["tokens_per_s"]:
            rate, k_rate = m["tokens_per_s"], keep["tokens_per_s"]
            expected = (rate * m["restart_s"] - k_rate * keep["restart_s"]) / (rate - k_rate)
            assert m["break_even_s"] == pytest.approx(max(expected, m["restart_s"]))
        else:
            assert m["break_even_s"] is None
    export = client.get(f"/v1/plans/{plans[0]['id']}/export/megatron")
    assert export.status_code == 200, export.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, None),
        ({"lost_nodes": 2}, "lost_nodes"),
        ({"lost_nodes": [5]}, "lost_nodes"),
        ({"lost_nodes": 1, "node_group": 3}, "node_group"),
    ],
)
def test_replan_requests_it_cannot_answer_are_422(
    client: Any, body: dict[str, Any], field: str | None
) -> None:
    old = _original(client)
    response = client.post(f"/v1/plans/{old['id']}/replan", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    if field is not None:
        assert field in [e.get("field") for e in response.json()["errors"]]
    if body == {"lost_nodes": 2}:  # every node: the value is the request's, in nodes
        (error,) = response.json()["errors"]
        assert error["value"] == 2 and "nodes" in error["rule"]


def test_replanning_an_unknown_plan_is_404(client: Any) -> None:
    response = client.post(
        "/v1/plans/00000000-0000-0000-0000-000000000000/replan", json={"lost_gpus": 1}
    )
    assert response.status_code == 404
