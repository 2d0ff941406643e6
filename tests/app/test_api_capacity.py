"""`POST /v1/capacity` (issue 16, point 3): each size's plan is what a separate search on a
cluster of that size answers (`POST /v1/searches`, top_k 1), the smallest size meeting a
target is the first whose separate search reaches it, a budget is train_tokens × cost per
token, and a model that fits nowhere in the range gets the nearest size that does."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import TINY_MODEL

WORKLOAD = {"kind": "training", "global_batch_size": 16, "sequence_length": 512}


def _separate(client: Any, nodes: int, model: dict[str, Any], workload: dict[str, Any]) -> Any:
    body = {
        "model": model,
        "cluster": {
            "node_groups": [{"accelerator": "h100-sxm", "num_nodes": nodes, "gpus_per_node": 4}]
        },
        "workload": workload,
        "top_k": 1,
    }
    search = client.post("/v1/searches?wait=30&dedupe=false", json=body).json()
    assert search["status"] == "succeeded", search
    return client.get(f"/v1/searches/{search['id']}/plans").json()["items"][0]


def test_capacity_sizes_agree_with_separate_searches_and_pick_the_smallest_meeting(
    client: Any,
) -> None:
    separate = {n: _separate(client, n, dict(TINY_MODEL), WORKLOAD) for n in (1, 2, 3)}
    speeds = {n: p["metrics"]["tokens_per_s"] for n, p in separate.items()}
    target = (speeds[1] + speeds[3]) / 2  # between the smallest and the largest size
    expected = min(n for n in (1, 2, 3) if speeds[n] >= target)
    body = {
        "model": dict(TINY_MODEL),
        "node_types": [{"accelerator": "h100-sxm", "num_nodes": 3, "gpus_per_node": 4}],
        "workload": {**WORKLOAD, "target_tokens_per_s": target, "train_tokens": 1e9},
        "budget": 1e6,
    }
    response = client.post("/v1/capacity", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    sizes = answer["node_types"][0]["sizes"]
    assert [s["num_nodes"] for s in sizes] == [1, 2, 3]
    for size in sizes:
        alone = separate[size["num_nodes"]]
        assert size["plan"]["parallelism"] == alone["parallelism"]
        assert size["metrics"]["step_time_s"] == pytest.approx(
            alone["metrics"]["step_time_s"], rel=1e-9
        )
        assert size["meets_target"] == (size["metrics"]["tokens_per_s"] >= target)
        run_cost = 1e9 * size["metrics"]["cost_per_million_tokens"] / 1e6
        assert size["run_cost"] == pytest.approx(run_cost, rel=1e-9)
        assert size["within_budget"] is True
    assert answer["node_types"][0]["smallest_meeting"] == expected
    assert answer["recommendation"]["size"]["num_nodes"] == expected
    assert answer["target_tokens_per_s"] == pytest.approx(target)


def test_a_budget_below_every_run_cost_recommends_nothing(client: Any) -> None:
    body = {
        "model": dict(TINY_MODEL),
        "node_types": [{"accelerator": "h100-sxm", "num_nodes": 2, "gpus_per_node": 4}],
        "workload": {**WORKLOAD, "train_tokens": 1e12},
        "budget": 1e-3,
    }
    answer = client.post("/v1/capacity", json=body).json()
    assert all(s["within_budget"] is False for s in answer["node_types"][0]["sizes"])
    assert answer["recommendation"] is None
    assert answer["node_types"][0]["smallest_meeting"] is None


def test_nothing_fits_in_the_range_gives_the_nearest_size_that_does(client: Any) -> None:
    # 24 layers of hidden 4096 with a 128k vocabulary: about 5.9e9 parameters, 94 GB of
    # weights, gradients and Adam states (16 bytes each), more than one GPU of 80 GB holds,
    # within what two do with ZeRO sharding
    model = {**TINY_MODEL, "name": "six-b", "num_layers": 24, "hidden_size": 4096,
             "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336,
             "vocab_size": 128256}  # fmt: skip
    body = {
        "model": model,
        "node_types": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 1}],
        "workload": {"kind": "training", "global_batch_size": 8, "sequence_length": 1024},
    }
    answer = client.post("/v1/capacity", json=body).json()
    node_type = answer["node_types"][0]
    assert node_type["sizes"][0]["plan"] is None
    assert "fits" in node_type["sizes"][0]["reason"]
    nearest = node_type["nearest_fit"]
    assert nearest is not None and nearest["num_nodes"] == 2
    assert nearest["metrics"]["peak_memory_gib"] <= 80


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"budget": 10.0}, "workload.train_tokens"),
        ({"min_nodes": 5}, "min_nodes"),
        ({"constraints": {"time_limit_s": 3000}}, "constraints.time_limit_s"),
        ({"node_types": [{"accelerator": "h100-sxm", "num_nodes": 200}] * 4}, "node_counts"),
        (
            {"node_types": [{"accelerator": "warp-drive", "num_nodes": 2}]},
            "node_types.0.accelerator",
        ),
        # more GPUs than any cluster may hold (was a 500 from the request worker)
        (
            {"node_types": [{"accelerator": "h100-sxm", "num_nodes": 1_000_000}]},
            "node_types.0.num_nodes",
        ),
    ],
)
def test_capacity_questions_it_cannot_answer_are_422_naming_the_field(
    client: Any, change: dict[str, Any], field: str
) -> None:
    body = {
        "model": dict(TINY_MODEL),
        "node_types": [{"accelerator": "h100-sxm", "num_nodes": 2, "gpus_per_node": 4}],
        "workload": dict(WORKLOAD),
        **change,
    }
    response = client.post("/v1/capacity", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert field in [e.get("field") for e in response.json()["errors"]], response.json()
