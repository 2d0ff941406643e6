"""Golden figures of the accuracy report (`bench/accuracy.py`): every representable row of
`shared/calibration/published_runs.jsonl` through the search with the source's parallel
settings fixed, compared with the measured step time.

The bounds pin today's figures (printed by `python bench/accuracy.py`) with a little slack, so a
change that makes the cost model worse fails here: mean absolute step-time error 6.0 % (pinned
at the issue's target, ≤ 7 %), worst row 16.0 % (GPT-1.7B on 48 H100; pinned at the target,
≤ 20 %), every measured-feasible row feasible and every OOM row infeasible, measured plan
orderings reproduced in 9 of 9 groups (pinned ≥ 80 %, the issue's target).

MoE rows (Liu et al. 2025, "MoE Parallel Folding", Table 1 + Appendix Table 3; 18 measured
+ 2 OOM) are pinned apart, read with the source's framework settings
(`bench.published_runs.MOE_FOLDING_*`: micro-batch 1, no recompute, FSDP collectives on
NCCL's per-NIC rings): mean absolute error 8.3 % (the issue's target 15 %; pinned ≤ 10 %),
worst row 21.4 % (Mixtral-8x22B-G8T8 FSDP, pinned ≤ 25 %), the eight Megatron-Core rows
within 20 % each (worst 18.9 %), the FSDP rows of Qwen2-57B-A14B within 15 % (they were
over-predicted 2.2× and 1.7× under the flat-ring ZeRO-3 gathers), the five-strategy orderings
of Mixtral-8x22B, Mixtral-8x22B-G8T8 and Llama3-8x70B reproduced, Qwen2's except the pair
FSDP + EP vs TP + EP + DP (measured 9 % apart, predicted 6 % the other way). Row 98 (Llama3
TP + EP + DP) is out of memory as measured; row 96 (Llama3 FSDP) still fits in the model
(~37 GiB per GPU: ZeRO-3 over 256 GPUs; pinned as a strict xfail).
"""

from __future__ import annotations

import statistics

import pytest

from bench.accuracy import MOE_SOURCES, RowResult, ordering_reproduced, plan_groups, run

MEAN_ABS_ERROR_MAX = 0.07
ROW_ABS_ERROR_MAX = 0.20
ORDERINGS_MIN = 0.80
MOE_MEAN_ABS_ERROR_MAX = 0.10
MOE_ROW_ABS_ERROR_MAX = 0.25
MCORE_ROW_ABS_ERROR_MAX = 0.20
QWEN2_FSDP_ROW_ABS_ERROR_MAX = 0.15


@pytest.fixture(scope="module")
def full_report() -> list[RowResult]:
    results, _ = run()
    if not results:
        pytest.skip("shared/calibration/published_runs.jsonl not found beside the repo")
    return results


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
    on all their NICs. Priced as one flat ring (the DeepSpeed 2021 reading) they came out
    +117 % and +68 %."""
    by = {r.case.row_id: r for r in moe_report}
    for row in (86, 87):
        err = by[row].step_error
        assert err is not None and abs(err) <= QWEN2_FSDP_ROW_ABS_ERROR_MAX, (row, err)
    # the flat ring stays the default of the cost model: the same rows priced that way
    from bench.accuracy import evaluate_case

    flat = evaluate_case(by[86].case, cost_model_config={"zero3_flat_ring": True})
    assert flat.step_error is not None and flat.step_error > 1.0


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
