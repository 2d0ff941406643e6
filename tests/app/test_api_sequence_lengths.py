"""`workload.sequence_lengths` over HTTP (issue 15 point 5): an estimate reports the mix,
a search stores and echoes it, and bad mixes are RFC 9457 422 problems naming the field,
the rule and the value."""

from __future__ import annotations

from typing import Any

import pytest
from app_support import assert_problem

PLAN = {"parallelism": {"data": 2, "pipeline": 2}, "micro_batch_size": 1}
MIX = {"histogram": [{"length": 64, "count": 3}, {"length": 512, "count": 1}]}
"""3 of 4 documents 64 tokens, 1 of 4 a whole 512-token sequence."""


def _with(tiny: dict[str, Any], lengths: Any) -> dict[str, Any]:
    return {**tiny, "workload": {**tiny["workload"], "sequence_lengths": lengths}}


def test_estimate_reports_the_mix(client: Any, tiny: dict[str, Any]) -> None:
    fixed = client.post("/v1/estimate", json={**tiny, "plan": PLAN}).json()
    assert "sequence_lengths" not in fixed["details"]
    pad = client.post(
        "/v1/estimate", json={**_with(tiny, {**MIX, "packing": "pad"}), "plan": PLAN}
    ).json()
    lengths = pad["details"]["sequence_lengths"]
    # mean (3·64 + 512)/4 = 176 tokens of 512: 65.625 % padding
    assert lengths["mean_length"] == 176
    assert lengths["padding_waste_fraction"] == pytest.approx(1 - 176 / 512)
    assert pad["metrics"]["step_time_s"] == fixed["metrics"]["step_time_s"]
    assert pad["metrics"]["tokens_per_s"] == pytest.approx(
        8 * 176 / pad["metrics"]["step_time_s"], rel=1e-9
    )
    pack = client.post("/v1/estimate", json={**_with(tiny, MIX), "plan": PLAN}).json()
    # packed: ρ = E[s²]/(μ·S) = ((3·64² + 512²)/4) / (176·512) = 68608 / 90112
    assert pack["details"]["sequence_lengths"]["attention_factor"] == pytest.approx(
        68608 / 90112, rel=1e-12
    )
    # this tiny model is bound by kernel launches (the host), so less attention work does
    # not shorten its step; its model FLOPs (per-document attention) fall
    assert pack["metrics"]["step_time_s"] <= fixed["metrics"]["step_time_s"]
    assert pack["metrics"]["model_tflops_per_gpu"] < fixed["metrics"]["model_tflops_per_gpu"]
    assert pack["metrics"]["tokens_per_s"] == pytest.approx(
        8 * 512 / pack["metrics"]["step_time_s"], rel=1e-9
    )


def test_search_round_trip(client: Any, tiny: dict[str, Any]) -> None:
    body = _with(tiny, {"samples": [64, 64, 128, 512], "packing": "concat"})
    response = client.post("/v1/searches?wait=30", json=body)
    assert response.status_code == 201, response.text
    search = response.json()
    plans = client.get(f"/v1/searches/{search['id']}/plans?limit=1").json()
    assert plans["items"], plans
    plan = plans["items"][0]
    assert plan["metrics"]["tokens_per_s"] == pytest.approx(
        8 * 512 / plan["metrics"]["step_time_s"], rel=1e-6
    )
    # the stored problem keeps the mix: the export writes Megatron's document masking
    export = client.get(f"/v1/plans/{plan['id']}/export/megatron")
    assert export.status_code == 200, export.text
    args = export.json()["args"]
    for flag in ("--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"):
        assert flag in args
    assert any("packing concat" in n for n in export.json()["notes"])


def _error(client: Any, tiny: dict[str, Any], lengths: Any) -> dict[str, Any]:
    body = assert_problem(
        client.post("/v1/estimate", json={**_with(tiny, lengths), "plan": PLAN}), 422
    )
    return body


def test_bad_mixes_are_422_problems(client: Any, tiny: dict[str, Any]) -> None:
    body = _error(client, tiny, {"histogram": [{"length": 1024, "count": 1}]})
    (error,) = body["errors"]
    assert error["field"] == "workload.sequence_lengths"
    assert error["rule"] == "length_above_sequence_length"
    assert "histogram.0.length = 1024" in error["message"] and "512" in error["message"]

    body = _error(client, tiny, {"histogram": [{"length": 64, "count": -1}]})
    by_field = {e["field"]: e for e in body["errors"]}
    error = by_field["workload.sequence_lengths.histogram.0.count"]
    assert error["rule"] == "greater_than_equal" and error["value"] == -1

    body = _error(client, tiny, {"samples": [64, 0]})
    error = next(e for e in body["errors"] if e["field"] == "workload.sequence_lengths.samples.1")
    assert error["rule"] == "greater_than_equal" and error["value"] == 0

    body = _error(client, tiny, {"samples": [64] * 65_537})
    error = next(e for e in body["errors"] if e["field"] == "workload.sequence_lengths.samples")
    assert error["rule"] == "too_long"

    body = _error(client, tiny, {"samples": [64], "histogram": [{"length": 64, "count": 1}]})
    assert body["errors"][0]["rule"] == "sequence_lengths_form"

    body = _error(client, tiny, {"histogram": [{"length": 64, "count": 0}]})
    assert body["errors"][0]["rule"] == "sequence_lengths_empty"

    body = _error(client, tiny, {"samples": [64], "packing": "stuff"})
    error = next(e for e in body["errors"] if e["field"] == "workload.sequence_lengths.packing")
    assert error["rule"] == "literal_error" and error["value"] == "stuff"


def test_torchtitan_export_names_the_varlen_model_arguments(tiny: dict[str, Any]) -> None:
    from app.exports.torchtitan import build_config
    from specs.model import ModelSpec
    from specs.plan import TrainingPlan
    from specs.workload import TrainingWorkload

    workload = TrainingWorkload.model_validate({**tiny["workload"], "sequence_lengths": MIX})
    plan = TrainingPlan.model_validate(
        {"parallelism": {"data": 4}, "zero_stage": 2, "framework": "torchtitan"}
    )
    model = ModelSpec.model_validate(tiny["model"])
    _cfg, notes = build_config(model, plan, workload, world_size=4, description="t")
    (note,) = [n for n in notes if "sequence_lengths" in n]
    assert 'attn_type = "varlen"' in note and 'attn_mask_type = "block_causal"' in note
    fixed = TrainingWorkload.model_validate(tiny["workload"])
    _cfg, notes = build_config(model, plan, fixed, world_size=4, description="t")
    assert not [n for n in notes if "sequence_lengths" in n]


def test_megatron_export_of_a_packed_mix_with_context_parallelism(tiny: dict[str, Any]) -> None:
    """Masking flags for pack / concat, none for pad; with context 2 and micro-batch 1 a
    note gives `--max-seqlen-per-dp-cp-rank` 512 / 2 = 256 for per-document degrees."""
    from app.exports.megatron import build_args
    from specs.model import ModelSpec
    from specs.plan import TrainingPlan
    from specs.workload import TrainingWorkload

    model = ModelSpec.model_validate(tiny["model"])
    plan = TrainingPlan.model_validate(
        {"parallelism": {"data": 2, "context": 2}, "micro_batch_size": 1, "stage_layers": [4]}
    )
    masks = ["--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"]
    for packing, flagged in (("pack", True), ("concat", True), ("pad", False)):
        workload = TrainingWorkload.model_validate(
            {**tiny["workload"], "sequence_lengths": {**MIX, "packing": packing}}
        )
        args, _env, notes = build_args(model, plan, workload)
        assert all((m in args) == flagged for m in masks), packing
        hybrid = [n for n in notes if "--hybrid-context-parallel" in n]
        assert bool(hybrid) == flagged, packing
        if flagged:
            assert "--max-seqlen-per-dp-cp-rank 256" in hybrid[0]
    args, _env, notes = build_args(model, plan, TrainingWorkload.model_validate(tiny["workload"]))
    assert not any(m in args for m in masks)


def test_measurements_of_a_padded_mix_count_real_tokens(client: Any, tiny: dict[str, Any]) -> None:
    """A `pad` plan's tokens_per_s counts the documents' 8 × 176 tokens per step, and so
    does a measurement of it: tokens_per_s alone converts with 1408 tokens per step."""
    body = _with(tiny, {**MIX, "packing": "pad"})
    search = client.post("/v1/searches?wait=30", json=body).json()
    plan = client.get(f"/v1/searches/{search['id']}/plans?limit=1").json()["items"][0]
    response = client.post(f"/v1/plans/{plan['id']}/measurements", json={"tokens_per_s": 2816.0})
    assert response.status_code == 201, response.text
    assert response.json()["step_time_s"] == pytest.approx(8 * 176 / 2816.0, rel=1e-12)
    both = {"step_time_s": 1.0, "tokens_per_s": 8 * 512.0}  # counts the padding: refused
    problem = assert_problem(client.post(f"/v1/plans/{plan['id']}/measurements", json=both), 422)
    assert "a step of this plan is 1408.0 tokens" in problem["detail"]
