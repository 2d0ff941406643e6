"""Warnings over HTTP: every estimate and every stored plan (training and serving) carries
`warnings: [{"code", "detail"}]`; plans keep them across a restart; plan rows stored before
migration 0004 read as no warnings (SQLite and PostgreSQL); the Python client reads them."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from test_database import pg_url  # noqa: F401  (the fixture)

from app.db import migrate
from app.db.session import make_engine
from app.main import create_app
from meshplan_client import MeshplanClient
from meshplan_client.models import Estimate, Plan, PlanWarning
from tests.support import TestClient

TINY_PLAN = {"parallelism": {"data": 2, "pipeline": 2}, "micro_batch_size": 1}


def _codes(body: dict[str, Any]) -> list[str]:
    return [w["code"] for w in body["warnings"]]


def test_an_estimate_always_has_warnings(client: Any, tiny: dict[str, Any]) -> None:
    body = client.post("/v1/estimate", json={**tiny, "plan": TINY_PLAN}).json()
    # the tiny model on 4 H100s at 512 tokens lies outside the H100 rows (48-6144 GPUs,
    # 4096 tokens); nothing else applies
    assert _codes(body) == ["outside_validated_range"]
    assert set(body["warnings"][0]) == {"code", "detail"}
    detail = body["warnings"][0]["detail"]
    assert "4 GPUs is outside the validated 48–6144" in detail
    assert "sequence length 512" in detail


def test_estimate_warnings_name_the_slips(client: Any, tiny: dict[str, Any]) -> None:
    tiny["cluster"]["node_groups"][0]["inter_node_bandwidth_gb_s"] = 400  # Gbit/s typed
    tiny["workload"]["global_batch_size"] = 65_536  # 128 × 512: a token count?
    tiny["workload"]["sequence_length"] = 512
    response = client.post("/v1/estimate", json={**tiny, "plan": TINY_PLAN})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["feasible"] is True  # warnings never make a plan infeasible
    assert _codes(body) == [
        "batch_looks_like_tokens",
        "bandwidth_out_of_range",
        "outside_validated_range",
    ]
    details = {w["code"]: w["detail"] for w in body["warnings"]}
    assert "128 sequences of 512 tokens" in details["batch_looks_like_tokens"]
    assert "it is 50 GB/s" in details["bandwidth_out_of_range"]


def test_hf_config_positions_reach_the_warning(client: Any, tiny: dict[str, Any]) -> None:
    hf = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "num_hidden_layers": 4,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "max_position_embeddings": 256,
    }
    resolved = client.post("/v1/models/resolve", json={"model": {"hf_config": hf}}).json()
    assert resolved["max_position_embeddings"] == 256
    body = client.post(
        "/v1/estimate", json={**tiny, "model": {"hf_config": hf}, "plan": TINY_PLAN}
    ).json()
    assert "sequence_beyond_max_positions" in _codes(body)
    detail = next(w["detail"] for w in body["warnings"] if w["code"].startswith("sequence"))
    assert "sequence_length 512" in detail and "(256)" in detail


def test_stored_plans_carry_their_warnings(settings_factory: Any, tiny: dict[str, Any]) -> None:
    settings = settings_factory()
    with TestClient(create_app(settings)) as client:
        search = client.post("/v1/searches?wait=30", json=tiny).json()
        assert search["status"] == "succeeded"
        plans = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
        assert plans
        for plan in plans:
            assert _codes(plan) == ["outside_validated_range"]
            one = client.get(f"/v1/plans/{plan['id']}").json()
            assert one["warnings"] == plan["warnings"]
            # the same plan through /v1/estimate gets the same warnings (every plan field:
            # the diverse top-10 reaches an interleaved plan, whose schedule must be given)
            names = ("parallelism", "micro_batch_size", "zero_stage", "recompute")
            names += ("pipeline_schedule", "stage_layers", "flash_attention", "framework")
            fields = {k: plan[k] for k in names}
            estimate = client.post("/v1/estimate", json={**tiny, "plan": fields}).json()
            assert estimate["warnings"] == plan["warnings"]
    with TestClient(create_app(settings)) as client:  # stored, not recomputed
        again = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
        assert [p["warnings"] for p in again] == [p["warnings"] for p in plans]


def _old_plan_row(url: str) -> str:
    """A search and a plan row written at revision 0003 (no warnings column); the app's
    start-up migrates to head."""
    engine = make_engine(url)
    try:
        migrate.upgrade(engine, "0003_scheduler_api")
        plan = {"parallelism": {"data": 4}, "micro_batch_size": 1, "stage_layers": [4]}
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO searches (id, status, request, problem, request_hash, "
                    "cost_model_name, cost_model_version, progress_evaluated, created_at, "
                    "attempts) VALUES ('s-old', 'succeeded', :req, :prob, :hash, 'analytical', "
                    "'1', 0, CURRENT_TIMESTAMP, 1)"
                ),
                {"req": "{}", "prob": "{}", "hash": "h" * 64},
            )
            conn.execute(
                text(
                    "INSERT INTO plans (id, search_id, rank, plan, metrics, memory, "
                    "explanation, feasible, violations) VALUES ('p-old', 's-old', 1, :plan, "
                    "'{}', '{}', 'old', :feasible, '[]')"
                ),
                {"plan": json.dumps(plan), "feasible": True},
            )
    finally:
        engine.dispose()
    return "p-old"


def _check_old_rows(settings: Any) -> None:
    plan_id = _old_plan_row(settings.database_url)
    with TestClient(create_app(settings)) as client:
        body = client.get(f"/v1/plans/{plan_id}").json()
        assert body["explanation"] == "old"
        assert body["warnings"] == []
        listed = client.get("/v1/searches/s-old/plans").json()["items"]
        assert listed[0]["warnings"] == []


def test_plans_stored_before_0004_read_as_no_warnings(settings_factory: Any) -> None:
    _check_old_rows(settings_factory())


@pytest.mark.postgres
def test_plans_stored_before_0004_on_postgresql(
    settings_factory: Any,
    pg_url: str,  # noqa: F811
) -> None:
    _check_old_rows(settings_factory(database_url=pg_url))


# ---- serving ------------------------------------------------------------------------------
SERVING: dict[str, Any] = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2}]},
    "workload": {
        "kind": "serving",
        "prompt_tokens": 512,
        "output_tokens": 128,
        "slo": {"ttft_ms": 300, "tpot_ms": 30, "percentile": 90},
        "num_requests": 100,
    },
}
SERVING_PLAN: dict[str, Any] = {
    "mode": "colocated",
    "instances": [{"role": "both", "count": 2, "max_batch_size": 128, "chunk_size": 2048}],
}


def test_serving_estimates_and_plans_carry_warnings(client: Any) -> None:
    body = client.post("/v1/estimate", json={**SERVING, "plan": SERVING_PLAN}).json()
    # bf16 weights and 640-token requests: the published H100 serving rows are fp8 and
    # 1318-5500 tokens
    assert _codes(body) == ["outside_validated_range"]
    assert "bf16 was never validated on h100-sxm (fp8 only)" in body["warnings"][0]["detail"]
    fp8 = {**SERVING, "workload": {**SERVING["workload"], "precision": "fp8"}}
    fp8["workload"].update(prompt_tokens=1500, output_tokens=200)
    assert client.post("/v1/estimate", json={**fp8, "plan": SERVING_PLAN}).json()["warnings"] == []
    search = client.post("/v1/searches?wait=60", json={**SERVING, "top_k": 2}).json()
    assert search["status"] == "succeeded", search
    plans = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    assert plans and all(_codes(p) == ["outside_validated_range"] for p in plans)
    assert client.get(f"/v1/plans/{plans[0]['id']}").json()["warnings"] == plans[0]["warnings"]


# ---- the client -------------------------------------------------------------------------
def test_client_reads_warnings_and_keeps_unknown_members() -> None:
    warning = {"code": "mfu_above_measured", "detail": "above 47 %", "severity": "info"}
    estimate = {"feasible": True, "warnings": [warning]}
    plan = {"id": "p1", "warnings": [warning]}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/estimate":
            return httpx.Response(200, json=estimate)
        return httpx.Response(200, json=plan)

    with MeshplanClient("http://meshplan.test", transport=httpx.MockTransport(handler)) as mp:
        got = mp.estimate("llama3-8b", {"node_groups": []}, {}, {})
        assert isinstance(got, Estimate)
        assert [type(w) for w in got.warnings] == [PlanWarning]
        assert (got.warnings[0].code, got.warnings[0].detail) == (
            "mfu_above_measured",
            "above 47 %",
        )
        assert got.warnings[0].model_dump()["severity"] == "info"  # unknown member kept
        one = mp.get_plan("p1")
        assert isinstance(one, Plan) and one.warnings[0].code == "mfu_above_measured"
    # an older service sends none: an empty list, never missing
    assert Estimate.model_validate({"feasible": True}).warnings == []
    assert Plan.model_validate({"id": "p"}).warnings == []
