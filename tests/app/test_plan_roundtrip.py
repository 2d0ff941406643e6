"""A stored plan as `GET /v1/plans/{id}` shows it carries every field of the plan: posted
back to `POST /v1/estimate` it prices to the stored figures (the context-parallel
algorithm, its head degree and vocabulary parallelism were left out of the listing, and
the top plan of the README's quick start, vocabulary-parallel, re-priced 22 % slower)."""

from __future__ import annotations

from typing import Any

import pytest

from specs.plan import TrainingPlan

BODY = {
    "model": {"preset": "llama3-70b"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8}]},
    "workload": {"kind": "training", "global_batch_size": 1024, "sequence_length": 4096},
    "constraints": {"research_forks": True},
    "top_k": 3,
}


def test_a_stored_plan_posted_back_prices_to_its_stored_figures(client: Any) -> None:
    search = client.post("/v1/searches?wait=30", json=BODY).json()
    assert search["status"] == "succeeded", search
    listed = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    assert any(p["vocab_parallel"] for p in listed)  # the case tests the field
    for item in listed:
        shown = client.get(f"/v1/plans/{item['id']}").json()
        assert shown == item
        plan = {k: v for k, v in shown.items() if k in TrainingPlan.model_fields}
        assert set(plan) == set(TrainingPlan.model_fields)
        answer = client.post(
            "/v1/estimate", json={**{k: BODY[k] for k in ("model", "cluster", "workload")},
                                  "plan": plan},
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        stored, again = item["metrics"], answer.json()["metrics"]
        assert again["step_time_s"] == pytest.approx(stored["step_time_s"], rel=1e-9)
        assert again["peak_memory_gib"] == pytest.approx(stored["peak_memory_gib"], rel=1e-9)
