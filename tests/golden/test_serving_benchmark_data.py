"""The serving benchmark's committed data (`bench/data/serving_peers.json`,
`bench/data/published_serving.json`) and its table code (`bench/serving_vs_peers.py`).

Checks that can fail on a bad transcription or a wrong reading of a peer:

- every golden row names a meshplan model preset and catalog accelerator, quotes its source,
  and its per-GPU throughput is its total divided by its GPU count;
- MLPerf Llama-2-70B rows: tokens/s over samples/s is the mean output length, which the MLPerf
  reference README gives as 294.45 tokens per sample (within 3 %);
- AIConfigurator's TTFT is what our normalisation says it is (0.12.0 source,
  aiconfigurator_core/sdk/backends): trtllm/sglang agg at batch 1 = 1.9 x the prefill (mix)
  step; vLLM agg at batch 1 = prefill step + 0.8 ms x 32 layers; static batch 1 = the same
  prefill step; static TPOT = generation phase / (osl - 1);
- the recommended plan of each SLO search meets the SLO and fills the GPU budget;
- the table shows (ours - peer) / peer once `our_estimate` returns figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import serving_vs_peers as svp
from hardware_catalog import get_accelerator
from specs.presets import list_presets

PEERS = json.loads(svp.PEERS_FILE.read_text())
PUBLISHED = json.loads(svp.PUBLISHED_FILE.read_text())


def _aic(case_id: str, variant: str) -> dict:
    case = next(c for c in PEERS["cases"] if c["id"] == case_id)
    return next(p for p in case["peers"] if p["variant"] == variant)


@pytest.mark.parametrize("row", PUBLISHED["rows"], ids=lambda r: r["id"])
def test_published_row_is_complete_and_consistent(row: dict) -> None:
    presets = set(list_presets())
    assert row["model"] in presets
    get_accelerator(row["accelerator"])  # raises on an unknown id
    assert row["quote"].strip() and row["source"]["url"].startswith("https://")
    assert row["load"]["kind"] in {
        "offline_max_throughput",
        "poisson_server",
        "closed_loop_concurrency",
        "static_batch",
    }
    m = row["measured"]
    if "throughput_tokens_per_s_per_gpu" in m:
        per_gpu = m["throughput_tokens_per_s"] / row["num_gpus"]
        assert m["throughput_tokens_per_s_per_gpu"] == pytest.approx(per_gpu, rel=1e-3)
    for key in ("ttft_ms_p50", "tpot_ms_p50"):
        p90 = key.replace("p50", "p90")
        if key in m and p90 in m:
            assert m[key] <= m[p90]


def test_published_rows_have_unique_ids_and_cover_the_issue_scope() -> None:
    ids = [r["id"] for r in PUBLISHED["rows"]]
    assert len(ids) == len(set(ids))
    accels = {r["accelerator"] for r in PUBLISHED["rows"]}
    assert {"h100-sxm", "h200"} <= accels and accels & {"a100-80gb", "a100-40gb"}
    models = {r["model"] for r in PUBLISHED["rows"]}
    assert {"llama3-8b", "llama3-70b", "qwen3-235b-a22b"} <= models


def test_mlperf_llama2_70b_tokens_per_sample_match_the_reference_mean() -> None:
    rows = [r for r in PUBLISHED["rows"] if r["id"].startswith("mlperf-v4.1-llama2-70b")]
    assert len(rows) == 4
    for r in rows:
        m = r["measured"]
        samples = m.get("samples_per_s", m.get("completed_samples_per_s"))
        assert m["throughput_tokens_per_s"] / samples == pytest.approx(294.45, rel=0.03)


CASE_B1 = "llama3.1-8b_1xh100_b1_1024-256"


@pytest.mark.parametrize("backend", ["trtllm", "sglang"])
def test_aic_agg_ttft_is_prefill_times_queuing_heuristic(backend: str) -> None:
    fig = _aic(CASE_B1, f"estimate agg {backend}")["figures"]
    # base_backend._ttft_queuing_factor at b=1: min(2 + (1 - 3)/20, 4) = 1.9
    assert fig["ttft_ms"] == pytest.approx(1.9 * fig["mix_step_ms"], rel=2e-3)


def test_aic_vllm_agg_ttft_adds_dispatch_overhead() -> None:
    fig = _aic(CASE_B1, "estimate agg vllm")["figures"]
    # vllm_backend: factor 1 at b=1, dispatch 0.8 ms per layer, Llama-3.1-8B has 32 layers
    assert fig["ttft_ms"] == pytest.approx(fig["mix_step_ms"] + 0.8 * 32, rel=2e-3)


@pytest.mark.parametrize("backend", ["trtllm", "vllm", "sglang"])
def test_aic_static_batch1_prefill_equals_agg_prefill_step(backend: str) -> None:
    agg = _aic(CASE_B1, f"estimate agg {backend}")["normalised"]
    static = _aic(CASE_B1, f"estimate static {backend}")["normalised"]
    assert static["prefill_one_request_ms"] == pytest.approx(agg["prefill_one_request_ms"])
    assert static["ttft_ms_reported"] == pytest.approx(static["prefill_one_request_ms"])


def test_aic_static_tpot_is_generation_phase_over_output_minus_one() -> None:
    case = next(c for c in PEERS["cases"] if c["id"] == "llama3.1-8b_1xh100_b16_1024-256")
    fig = _aic(case["id"], "estimate static trtllm")["figures"]
    expected = fig["generation_phase_ms"] / (case["output_tokens"] - 1)
    assert fig["tpot_ms"] == pytest.approx(expected, rel=2e-3)


@pytest.mark.parametrize("case", [c for c in PEERS["cases"] if c["kind"] == "slo_search"])
def test_recommended_plan_meets_slo_and_fills_budget(case: dict) -> None:
    searches = [p for p in case["peers"] if "recommended" in p and p.get("recommended")]
    assert searches, "no successful AIConfigurator search recorded"
    for p in searches:
        rec = p["recommended"]
        assert rec["ttft_ms"] <= case["slo"]["ttft_ms"]
        assert rec["tpot_ms"] <= case["slo"]["tpot_ms"]
        assert rec["replicas"] * rec["gpus_per_replica"] == case["num_gpus"]


def test_cases_load_with_unique_ids() -> None:
    cases = svp.load_cases()
    assert len({c.id for c in cases}) == len(cases) == len(PEERS["cases"]) + len(PUBLISHED["rows"])


def test_report_shows_todo_then_relative_difference() -> None:
    case = next(c for c in svp.load_cases(False) if c.id == CASE_B1)
    assert "meshplan (not representable)" in svp.report([case], estimate=lambda _: None)
    ref = _aic(CASE_B1, "estimate agg trtllm")["normalised"]["tpot_ms"]

    def fake(_: svp.Case) -> dict[str, float]:
        return {"tpot_ms": 1.1 * ref}

    text = svp.report([case], estimate=fake)
    line = next(ln for ln in text.splitlines() if "estimate agg trtllm" in ln)
    assert "(+10%)" in line
    assert svp.rel_diff(9.0, 10.0) == pytest.approx(-0.1)
    assert svp.rel_diff(None, 10.0) is None and svp.rel_diff(1.0, 0.0) is None


def test_data_files_are_where_the_bench_reads_them() -> None:
    assert Path(svp.PEERS_FILE).is_file() and Path(svp.PUBLISHED_FILE).is_file()
