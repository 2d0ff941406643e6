"""Golden figures of the accuracy report (`bench/accuracy.py`): every representable row of
`bench/data/calibration/published_runs.jsonl` through the search with the source's parallel
settings and framework fixed, compared with the measured step time.

Every figure pinned here is **held out by source**: the one fitted parameter (the straggler
spread σ, `bench/loso.py`) is fitted without the source a row is scored on; peaks,
bandwidths and efficiencies come from hardware documentation and microbenchmarks
(`hardware_catalog/data`), not from these rows. Today (`python bench/accuracy.py`):

- dense rows (39): held-out mean absolute step-time error 5.1 % (in-sample 4.6 %), pinned at
  ≤ 7 % (the issue's target is 10 %); worst row 25.3 % (GPT-3 175B, ZeRO-3 on 384 A100 under
  DeepSpeed), pinned ≤ 30 %; every memory verdict right; the measured plan orderings
  reproduced in 9 of 9 groups (pinned ≥ 80 %).
- MoE rows (Liu et al. 2025, "MoE Parallel Folding", 18 measured + 2 OOM): held-out mean
  8.8 %, pinned at ≤ 10 % (the issue's target is 12 %); worst row 24.7 % (Qwen2-57B-A14B
  FSDP, under-predicted: its ZeRO-3 gathers overlap worse than the model assumes), pinned
  ≤ 30 %; the eight Megatron-Core rows within 25 % each (worst 20.6 %); the five-strategy
  orderings of all four models reproduced. Row 98 (TP + EP + DP) is out of memory as
  measured; row 96 (Llama3-8x70B FSDP) still fits in the model (~37 GiB per GPU: ZeRO-3
  over 256 GPUs with the transcribed TP8 CP8 DP4, whose column alignment the source
  transcription marks unverified; pinned as a strict xfail).
"""

from __future__ import annotations

import statistics

import pytest

from bench.accuracy import (
    MOE_SOURCES,
    Fit,
    RowResult,
    fit,
    ordering_reproduced,
    plan_groups,
    run,
    summarise,
)

MEAN_ABS_ERROR_MAX = 0.07
ROW_ABS_ERROR_MAX = 0.30
ORDERINGS_MIN = 0.80
MOE_MEAN_ABS_ERROR_MAX = 0.10
MOE_ROW_ABS_ERROR_MAX = 0.30
MCORE_ROW_ABS_ERROR_MAX = 0.25
QWEN2_FSDP_ROW_ABS_ERROR_MAX = 0.30


@pytest.fixture(scope="module")
def fitted() -> tuple[list[RowResult], Fit]:
    results, _ = run()  # raises when the calibration set is missing: an error, never a skip
    assert results, "no representable row in bench/data/calibration/published_runs.jsonl"
    return results, fit(results)


@pytest.fixture(scope="module")
def full_report(fitted: tuple[list[RowResult], Fit]) -> list[RowResult]:
    return fitted[0]


@pytest.fixture(scope="module")
def report(full_report: list[RowResult]) -> list[RowResult]:
    """The dense rows."""
    return [r for r in full_report if r.case.source not in MOE_SOURCES]


@pytest.fixture(scope="module")
def moe_report(full_report: list[RowResult]) -> list[RowResult]:
    return [r for r in full_report if r.case.source in MOE_SOURCES]


def test_every_dense_source_is_represented(report: list[RowResult]) -> None:
    sources = {r.case.source for r in report}
    assert {"narayanan2021", "korthikanti2022", "megatron_core_readme"} <= sources
    # 10 Narayanan Table 1 + 12 Table 2 + 9 Megatron-Core + 8 Korthikanti rows.
    assert len(report) == 39


def test_memory_verdicts_match_what_ran(report: list[RowResult]) -> None:
    wrong = [r.case.row_id for r in report if not r.memory_verdict_ok]
    assert wrong == []


def test_step_time_errors_stay_within_the_pinned_bounds(report: list[RowResult]) -> None:
    errors = {r.case.row_id: r.step_error for r in report}
    assert all(e is not None for e in errors.values()), errors
    worst = max(errors, key=lambda k: abs(errors[k] or 0.0))
    assert abs(errors[worst] or 0.0) <= ROW_ABS_ERROR_MAX, f"row {worst}: {errors[worst]:+.1%}"
    mean = statistics.fmean(abs(e or 0.0) for e in errors.values())
    assert mean <= MEAN_ABS_ERROR_MAX, f"mean absolute error {mean:.1%}"


def test_held_out_figures_are_held_out(fitted: tuple[list[RowResult], Fit]) -> None:
    """Each source's σ is fitted without it: the folds differ from the in-sample fit, and
    every row's held-out prediction uses its own source's fold."""
    results, fits = fitted
    sources = {r.case.source for r in results if r.sample() is not None}
    assert set(fits.held_out) == sources
    assert any(abs(f.sigma - fits.in_sample_sigma) > 1e-4 for f in fits.held_out.values())
    for r in results:
        if r.typical_step_s is None or r.predicted_step_s is None:
            continue
        sigma = fits.held_out[r.case.source].sigma
        assert r.predicted_step_s == pytest.approx(
            r.typical_step_s * (1.0 + sigma * r.straggler_z), rel=1e-12
        )


def test_summary_reports_in_sample_beside_held_out(full_report: list[RowResult]) -> None:
    table = summarise(full_report)
    dense = table["all dense"]
    assert dense["rows"] == 39
    assert dense["held_out_mean_abs_error"] <= MEAN_ABS_ERROR_MAX
    assert dense["in_sample_mean_abs_error"] <= dense["held_out_mean_abs_error"] + 0.01
    assert table["all moe"]["held_out_mean_abs_error"] <= MOE_MEAN_ABS_ERROR_MAX
    by_framework = summarise(full_report, by="framework")
    assert {"megatron_lm", "megatron_core", "deepspeed"} <= set(by_framework)


def test_measured_plan_orderings_are_reproduced(report: list[RowResult]) -> None:
    groups = plan_groups(report)
    # Narayanan Table 2: PTD-P vs ZeRO-3 at 5 GPU counts; Korthikanti: 4 recompute pairs.
    assert len(groups) == 9
    share = sum(ordering_reproduced(g) for g in groups) / len(groups)
    assert share >= ORDERINGS_MIN


def test_shipped_error_bars_match_the_current_residuals(report: list[RowResult]) -> None:
    """cost_models/data/residuals.json must be regenerated (`python bench/accuracy.py
    --write-residuals`) whenever the cost model's predictions change."""
    from bench.accuracy import log_residuals
    from cost_models.error_bars import quantiles_from_residuals, stored_quantiles

    stored = stored_quantiles("analytical")
    assert stored is not None
    fresh = quantiles_from_residuals("analytical", log_residuals(report))
    assert stored.num_rows == fresh.num_rows
    assert stored.q_low == pytest.approx(fresh.q_low, abs=1e-6)
    assert stored.q_high == pytest.approx(fresh.q_high, abs=1e-6)
    # an 80 % interval: about 10 % of the rows on either side of it
    below = sum(r < fresh.q_low for r in log_residuals(report))
    above = sum(r > fresh.q_high for r in log_residuals(report))
    assert below <= 0.15 * len(report) and above <= 0.15 * len(report)


def test_every_moe_row_is_represented(moe_report: list[RowResult]) -> None:
    # rows 81-100: four models × five strategies, two of them OOM in the paper
    assert sorted(r.case.row_id for r in moe_report) == list(range(81, 101))
    assert sum(r.case.status == "OOM" for r in moe_report) == 2


def test_moe_step_time_errors_stay_within_the_pinned_bounds(moe_report: list[RowResult]) -> None:
    errors = {r.case.row_id: r.step_error for r in moe_report if r.case.status != "OOM"}
    assert len(errors) == 18
    assert all(e is not None for e in errors.values()), errors
    mean = statistics.fmean(abs(e or 0.0) for e in errors.values())
    assert mean <= MOE_MEAN_ABS_ERROR_MAX, f"MoE mean absolute error {mean:.1%}"
    worst = max(errors, key=lambda k: abs(errors[k] or 0.0))
    assert abs(errors[worst] or 0.0) <= MOE_ROW_ABS_ERROR_MAX, f"row {worst}: {errors[worst]:+.1%}"
    mcore = {r.case.row_id: r.step_error for r in moe_report if "[MCore" in r.case.label}
    assert len(mcore) == 8
    worst = max(mcore, key=lambda k: abs(mcore[k] or 0.0))
    assert abs(mcore[worst] or 0.0) <= MCORE_ROW_ABS_ERROR_MAX, f"row {worst}: {mcore[worst]:+.1%}"


def test_qwen2_fsdp_rows_are_not_priced_as_flat_rings(moe_report: list[RowResult]) -> None:
    """Rows 86 (FSDP, TP2 DP32: 4 data-parallel ranks per node) and 87 (FSDP + EP, DP64:
    8 per node) gather over groups with several members per node: NCCL crosses the network
    on all their NICs. Priced as one flat ring (DeepSpeed's measured ZeRO-3 behaviour, the
    `zero3_flat_ring` of its framework profile) they come out +178 % and +87 %."""
    by = {r.case.row_id: r for r in moe_report}
    for row in (86, 87):
        err = by[row].step_error
        assert err is not None and abs(err) <= QWEN2_FSDP_ROW_ABS_ERROR_MAX, (row, err)
    from bench.accuracy import evaluate_case

    flat = evaluate_case(
        by[86].case, cost_model_config={"frameworks": {"megatron_core": {"zero3_flat_ring": True}}}
    )
    assert flat.typical_step_s is not None and by[86].typical_step_s is not None
    assert flat.typical_step_s > 2.5 * by[86].typical_step_s


def test_moe_runs_that_fitted_are_feasible(moe_report: list[RowResult]) -> None:
    wrong = [r.case.row_id for r in moe_report if r.case.status != "OOM" and not r.feasible]
    assert wrong == []


def test_moe_oom_row_without_recompute_is_infeasible(moe_report: list[RowResult]) -> None:
    """Row 98 (Llama3-8x70B TP8 EP8 DP32, ZeRO-1) fits only under activation recompute,
    which the source ran without (Megatron-LM's default)."""
    row98 = next(r for r in moe_report if r.case.row_id == 98)
    assert row98.case.status == "OOM"
    assert row98.case.request is not None
    assert row98.case.request["constraints"]["fixed"]["recompute"] == "none"
    assert not row98.feasible


@pytest.mark.xfail(
    strict=True,
    reason="row 96 (Llama3-8x70B FSDP, TP8 CP8 DP4) OOMs in the "
    "paper but fits in the model: ZeRO-3 over 256 GPUs needs ~37 GiB per GPU",
)
def test_moe_oom_rows_are_infeasible(moe_report: list[RowResult]) -> None:
    oom = [r for r in moe_report if r.case.status == "OOM"]
    assert [r.case.row_id for r in oom if r.feasible] == []


def test_moe_strategy_orderings(moe_report: list[RowResult]) -> None:
    groups = {g[0].case.label.split("[")[0].strip(): g for g in plan_groups(moe_report)}
    assert sorted(groups) == [
        "Llama3-8x70B",
        "Mixtral-8x22B",
        "Mixtral-8x22B-G8T8",
        "Qwen2-57B-A14B",
    ]
    assert all(len(g) == 5 for g in groups.values())
    assert ordering_reproduced(groups["Mixtral-8x22B"])
    assert ordering_reproduced(groups["Mixtral-8x22B-G8T8"])
    assert ordering_reproduced(groups["Llama3-8x70B"])
    # Qwen2: every pair but FSDP + EP (87) vs TP + EP + DP (88)
    qwen = groups["Qwen2-57B-A14B"]
    assert ordering_reproduced([r for r in qwen if r.case.row_id != 87])
    assert ordering_reproduced([r for r in qwen if r.case.row_id != 88])
    # folding beats plain Megatron-Core in every model, as measured
    for g in groups.values():
        by = {r.case.label.split("[")[1].rstrip("]"): r for r in g}
        assert (by["MCore w/ Folding"].predicted_step_s or 0) < (by["MCore"].predicted_step_s or 0)


def test_moe_unverified_rows_are_flagged(moe_report: list[RowResult]) -> None:
    assert all(r.case.unverified_fields for r in moe_report)
    row100 = next(r for r in moe_report if r.case.row_id == 100)
    assert any("etp" in f for f in row100.case.unverified_fields)
