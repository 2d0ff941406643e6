"""`GET /v1/searches/{id}/pareto` (issue 16, point 2) over HTTP: the front's plans beat each
other on no figure, none of the search's ranked plans beats a front plan, the fastest ranked
plan is on the front with its id, and searches without a front answer 409 / 404. (The front
against brute force on small spaces: tests/solver/test_pareto.py.)"""

from __future__ import annotations

from typing import Any

from tests.support import MIXED_PRICED_CLUSTER, TINY_MODEL

FIGURES = [
    "tokens_per_s",
    "gpus_used",
    "cost_per_million_tokens",
    "energy_per_token_j",
    "peak_memory_gib",
]


def _vector(metrics: dict[str, Any]) -> tuple[float, ...]:
    return (
        -metrics["tokens_per_s"],
        metrics["gpus_used"],
        metrics["cost_per_million_tokens"],
        metrics["energy_per_token_j"],
        metrics["peak_memory_gib"],
    )


def _beats(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def _search_and_front(client: Any, cluster: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A min_cost search of the tiny model on `cluster` and its front document."""
    body = {
        "model": dict(TINY_MODEL),
        "cluster": cluster,
        "workload": {"kind": "training", "global_batch_size": 16, "sequence_length": 2048},
        "objective": "min_cost",
        "top_k": 5,
    }
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    response = client.get(f"/v1/searches/{search['id']}/pareto")
    assert response.status_code == 200, response.text
    return search["id"], response.json()


def _mutually_non_dominated(vectors: list[tuple[float, ...]]) -> None:
    for i, a in enumerate(vectors):
        assert not any(_beats(b, a) for j, b in enumerate(vectors) if j != i)


def test_the_front_of_a_search_over_http(client: Any) -> None:
    search_id, front = _search_and_front(
        client, {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4}]}
    )
    search = {"id": search_id}
    assert front["figures"] == FIGURES and front["complete"] is True
    plans = front["plans"]
    assert plans
    vectors = [_vector(p["metrics"]) for p in plans]
    for i, a in enumerate(vectors):
        assert not any(_beats(b, a) for j, b in enumerate(vectors) if j != i)
    ranked = client.get(f"/v1/searches/{search['id']}/plans?include_dominated=true").json()["items"]
    for p in ranked:
        assert not any(_beats(_vector(p["metrics"]), v) for v in vectors)
    # the fastest plan of the space is on the front; the stored ones carry their ids
    fastest = max(ranked, key=lambda p: p["metrics"]["tokens_per_s"])
    assert max(p["metrics"]["tokens_per_s"] for p in plans) >= fastest["metrics"]["tokens_per_s"]
    stored = {p["id"] for p in ranked}
    assert all(p["id"] is None or p["id"] in stored for p in plans)
    # min_cost covers the sizes that leave GPUs idle: the front trades GPUs too
    assert len({p["metrics"]["gpus_used"] for p in plans}) >= 2


def test_a_serving_search_or_an_unknown_one_has_no_front(client: Any) -> None:
    assert client.get("/v1/searches/00000000-0000-0000-0000-000000000000/pareto").status_code == 404
    body = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2}]},
        "workload": {"kind": "serving", "prompt_tokens": 128, "output_tokens": 32,
                     "slo": {"ttft_ms": 500, "tpot_ms": 50}, "num_requests": 50},
        "top_k": 1,
    }  # fmt: skip
    search = client.post("/v1/searches?wait=30", json=body).json()
    response = client.get(f"/v1/searches/{search['id']}/pareto")
    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith("application/problem+json")


def test_the_front_of_a_mixed_cluster_search_covers_each_pool_and_the_plans_across(
    client: Any,
) -> None:
    search_id, front = _search_and_front(client, MIXED_PRICED_CLUSTER)
    search = {"id": search_id}
    assert front["complete"] is True
    vectors = [_vector(p["metrics"]) for p in front["plans"]]
    _mutually_non_dominated(vectors)
    # every plan names the pools it runs on; both pools hold front plans
    pools = [set(p["plan"]["stage_groups"] or [s["group"] for s in p["plan"]["data_shares"]])
             for p in front["plans"]]  # fmt: skip
    assert all(pools) and {"h100-sxm", "a100-80gb"} <= set().union(*pools)
    # none of the search's ranked plans (pools alone and across) beats a front plan, and the
    # cheapest of them is on the front with its id
    ranked = client.get(f"/v1/searches/{search['id']}/plans?include_dominated=true").json()["items"]
    for p in ranked:
        assert not any(_beats(_vector(p["metrics"]), v) for v in vectors)
    cheapest = ranked[0]
    ids = {p["id"] for p in front["plans"]}
    assert cheapest["id"] in ids


def test_a_complete_front_is_kept_with_the_search_and_answered_from_there(client: Any) -> None:
    from sqlmodel import Session

    from app.db.models import SearchRecord

    search_id, front = _search_and_front(
        client, {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4}]}
    )
    assert front["complete"] is True
    engine = client.app.state.engine
    with Session(engine) as session:
        record = session.get(SearchRecord, search_id)
        assert record is not None and record.pareto == front
        # what is kept is what the next request answers (mark it to tell it from a new one)
        record.pareto = {**front, "stats": {**front["stats"], "marker": 1}}
        session.add(record)
        session.commit()
    again = client.get(f"/v1/searches/{search_id}/pareto")
    assert again.status_code == 200
    assert again.json()["stats"]["marker"] == 1
    assert {k: v for k, v in again.json().items() if k != "stats"} == {
        k: v for k, v in front.items() if k != "stats"
    }


def test_concurrent_first_requests_share_one_computation(client: Any) -> None:
    """Callers asking for a front not computed yet wait for the one computation and answer
    with the front it kept (each used to compute the whole front again, in turn)."""
    import concurrent.futures

    body = {
        "model": dict(TINY_MODEL),
        "cluster": {
            "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 2, "gpus_per_node": 4}]
        },
        "workload": {"kind": "training", "global_batch_size": 16, "sequence_length": 2048},
        "objective": "min_cost",
    }
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    url = f"/v1/searches/{search['id']}/pareto"
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: client.get(url), range(4)))
    assert all(a.status_code == 200 for a in answers)
    fronts = [a.json() for a in answers]
    assert fronts[0]["complete"] is True
    # one computation: the same document, its own wall time included, for every caller
    assert all(f == fronts[0] for f in fronts), [f["stats"]["wall_time_s"] for f in fronts]
