"""Golden figures of the serving benchmark (`bench/serving_vs_peers.py`): our serving cost
model and search against NVIDIA AIConfigurator's measured-kernel estimates and against
published measured serving runs (`bench/data/*.json`, each row with its source and quote).

Pinned (issue 5 targets, with the figures `python bench/serving_vs_peers.py` prints):
- dense H100 cases (Llama-3.1-8B on one H100 at batch 1 and 16, 1024/256 tokens): our TPOT
  and per-request prefill within 25 % of every AIConfigurator backend (today: within 11 %);
- Llama-3.1-70B on 8 H100 under TTFT ≤ 1000 ms / TPOT ≤ 50 ms: our best plan's goodput per GPU
  is at least that of AIConfigurator's recommended plan (trtllm) priced by our own model, and
  the explanation names why it differs;
- published measured rows: each headline figure within the pinned error of today (a
  regression guard), and at least 60 % of all figures we estimate within 20 % (today 22 of
  34, 65 %; the issue asks for all within 20 %: the misses are listed below).
"""

from __future__ import annotations

from typing import Any

import pytest

from bench import serving_vs_peers as svp
from bench.serving_ours import our_estimate

AIC_TOLERANCE = 0.25
PUBLISHED_TOLERANCE = 0.20
PUBLISHED_SHARE_MIN = 0.60

HEADLINE_ERROR_MAX: dict[tuple[str, str], float] = {
    # (row id, measured key): |error| pinned a little above today's
    ("trtllm-perf-overview-llama3.1-8b-1xh100-fp8-1000-1000", "throughput_tokens_per_s"): 0.22,
    ("trtllm-perf-overview-llama3.1-8b-1xh200-fp8-1000-1000", "throughput_tokens_per_s"): 0.13,
    ("trtllm-perf-overview-llama3.3-70b-2xh100-fp8-1000-1000", "throughput_tokens_per_s"): 0.06,
    ("trtllm-perf-overview-qwen3-235b-a22b-8xh200-fp8-1000-1000", "throughput_tokens_per_s"): 0.29,
    ("trtllm-perf-overview-qwen3-235b-a22b-8xh100-fp8-1000-1000", "throughput_tokens_per_s"): 0.07,
    ("nim-1.8.0-llama3.3-70b-2xh100-fp8-5000-500-c1", "ttft_ms"): 0.09,
    ("nim-1.8.0-llama3.3-70b-2xh100-fp8-5000-500-c1", "itl_ms"): 0.09,
    ("nim-1.8.0-llama3.3-70b-2xh100-fp8-5000-500-c25", "itl_ms"): 0.09,
    ("nim-1.8.0-llama3.3-70b-2xh100-fp8-5000-500-c25", "throughput_tokens_per_s"): 0.07,
    ("vllm-ci-llama3.1-8b-1xh200-32-128-b8-latency", "e2e_latency_ms_mean"): 0.23,
    ("vllm-ci-llama3-70b-4xh200-32-128-b8-latency", "e2e_latency_ms_mean"): 0.24,
    ("lmdeploy-a100-80g-llama2-7b-tp1-b1-128-128", "token_latency_ms_p50"): 0.10,
    ("lmdeploy-a100-80g-llama2-70b-tp4-b1-128-128", "token_latency_ms_p50"): 0.19,
    ("lmdeploy-a100-80g-llama2-70b-tp4-b16-128-128", "token_latency_ms_p50"): 0.18,
    ("musgrave-vllm0.23-llama3.1-8b-a100-40gb-1024-128-c1", "tpot_ms_approx"): 0.05,
}
"""Known misses, not pinned as headlines: TTFT of short prompts (LMDeploy 128-token rows,
-25 % to -58 %: per-request scheduling and API overheads the model leaves out) and the NIM
concurrency-25 TTFT (-42 %: our open-loop approximation of a closed loop)."""


@pytest.fixture(scope="module")
def cases() -> dict[str, svp.Case]:
    return {c.id: c for c in svp.load_cases()}


def _peer(case: svp.Case, tool: str, variant: str) -> dict[str, Any]:
    for p in case.raw["peers"]:
        if p["tool"] == tool and p["variant"] == variant:
            return dict(p)
    raise KeyError(variant)


@pytest.mark.parametrize(
    "case_id", ["llama3.1-8b_1xh100_b1_1024-256", "llama3.1-8b_1xh100_b16_1024-256"]
)
def test_dense_h100_fixed_batches_are_within_25_percent_of_aiconfigurator(
    cases: dict[str, svp.Case], case_id: str
) -> None:
    case = cases[case_id]
    ours = our_estimate(case)
    assert ours is not None
    checked = 0
    for _, label, ref in svp.peer_figures(case):
        if not label.startswith("aiconfigurator"):
            continue
        for key in (
            "tpot_ms",
            "decode_step_ms",
            "prefill_one_request_ms",
            "prefill_whole_batch_ms",
        ):
            if ref.get(key):
                err = svp.rel_diff(ours[key], ref[key])
                assert err is not None and abs(err) <= AIC_TOLERANCE, (label, key, err)
                checked += 1
    assert checked >= 6


def test_70b_search_beats_aiconfigurators_plan_under_our_model(cases: dict[str, svp.Case]) -> None:
    case = cases["llama3.1-70b_8xh100_slo_ttft1000_tpot50_1024-256"]
    ours = our_estimate(case)
    assert ours is not None
    theirs = ours["peer_plan_under_our_model_tokens_per_s_per_gpu"]
    assert theirs > 0
    assert ours["tokens_per_s_per_gpu"] >= theirs * (1 - 1e-9)
    assert "AIConfigurator's plan" in ours["why"] and "goodput" in ours["why"]
    # and our operating point meets the SLO it was searched for
    assert ours["ttft_ms"] <= 1000 and ours["tpot_ms"] <= 50
    # same order of magnitude as AIConfigurator's own figure for its plan (trtllm: 530)
    aic = _peer(case, "aiconfigurator", "default trtllm isl1024 osl256")
    aic_rate = aic["recommended"]["tokens_per_s_per_gpu"]
    assert abs(svp.rel_diff(theirs, aic_rate) or 0) <= AIC_TOLERANCE


def test_published_rows(cases: dict[str, svp.Case]) -> None:
    within = total = 0
    seen = set()
    for case in cases.values():
        if case.origin != "published":
            continue
        ours = our_estimate(case)
        if ours is None:
            continue
        for key, measured in case.raw["measured"].items():
            if key not in ours or not isinstance(measured, int | float) or not measured:
                continue
            err = svp.rel_diff(ours[key], measured)
            assert err is not None
            total += 1
            within += abs(err) <= PUBLISHED_TOLERANCE
            bound = HEADLINE_ERROR_MAX.get((case.id, key))
            if bound is not None:
                seen.add((case.id, key))
                assert abs(err) <= bound, (case.id, key, err)
    assert seen == set(HEADLINE_ERROR_MAX)
    assert total >= 25
    assert within / total >= PUBLISHED_SHARE_MIN, (within, total)


def test_published_summary_by_family_and_engine(cases: dict[str, svp.Case]) -> None:
    """The summary `serving_vs_peers.py` prints (each row priced with its engine's profile,
    closed-loop rows with the simulator's concurrency cap; nothing fitted to the rows): today
    15.4 % MAPE over 23 row-metrics; mean signed error TTFT −26 % (5), TPOT −5 % (6), batch
    latency −20 % (2), throughput −1 % (10). Pinned as a regression guard; the issue's target
    (MAPE ≤ 20 % and no family biased beyond 10 %) holds for TPOT and throughput, not yet for
    TTFT (the LMDeploy rows) and the static-batch latency."""
    errors = svp.published_errors(list(cases.values()))
    assert len(errors) == 23
    mape = sum(abs(e.error) for e in errors) / len(errors)
    assert mape <= 0.165
    bias = {
        family: sum(e.error for e in errors if e.family == family)
        / sum(1 for e in errors if e.family == family)
        for family, _ in svp.FAMILIES
    }
    assert abs(bias["TPOT"]) <= 0.06 and abs(bias["throughput"]) <= 0.03
    assert -0.30 <= bias["TTFT"] < 0 and -0.22 <= bias["batch latency"] < 0
    # every TensorRT-LLM / NIM row is priced with the TensorRT-LLM profile, the vLLM rows
    # with vLLM's
    from bench.serving_ours import engine_of

    engines = {c.id: engine_of(c) for c in cases.values() if c.origin == "published"}
    assert engines["nim-1.8.0-llama3.3-70b-2xh100-fp8-5000-500-c25"] == "tensorrt_llm"
    assert engines["vllm-ci-llama3.1-8b-1xh200-32-128-b8-latency"] == "vllm"
    assert engines["lmdeploy-a100-80g-llama2-7b-tp1-b1-128-128"] is None
