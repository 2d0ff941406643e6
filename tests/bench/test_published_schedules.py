"""The published pipeline-schedule comparison (bench/published_schedules.py): its data file
carries complete provenance, and a row's predicted figures are what the cost model's own
per-rank times give under the schedules' closed forms (Qi et al. 2024 Table 1, worked out here
by hand), not the paper's numbers."""

from __future__ import annotations

import pytest

from bench.published_schedules import (
    COLUMNS,
    Setup,
    compare,
    load,
    problem_and_plan,
    provenance_gaps,
    stage_layers,
)
from cost_models.base import TrainingEstimate
from cost_models.registry import build_cost_model

SETUP = Setup("1.5B", pipeline=8, micro_batch_size=6, microbatches=24)
"""Table 3's 1.5B model on 8 pipeline ranks, 24 micro-batches of 6 (Tables 4 and 5)."""


def _estimate(schedule: str) -> TrainingEstimate:
    problem, plan = problem_and_plan(load(), SETUP, schedule)
    return build_cost_model("analytical", {"straggler_sigma": 0.0}).evaluate(problem, plan)


def _hand_bubble(est: TrainingEstimate, a_w: float) -> float:
    """Σ over the ranks but the critical one of max(F, F + B + a_w·W): 1F1B a_w = 1, ZB-H1
    a_w = −1 (Qi et al. 2024 Table 1: (p−1)(F+B+W) and (p−1)(F+B−W) for identical stages)."""
    d = est.details
    work = d["rank_work_s"]
    crit = max(range(len(work)), key=work.__getitem__)
    total: float = sum(
        max(float(f), f + b + a_w * w)
        for j, (f, b, w) in enumerate(
            zip(d["stage_forward_s"], d["rank_input_grad_s"], d["rank_weight_grad_s"], strict=True)
        )
        if j != crit
    )
    return total


def test_the_data_file_has_complete_provenance() -> None:
    data = load()
    assert provenance_gaps(data) == []
    assert {t["id"] for t in data["tables"]} == {
        "qi2024-table4",
        "qi2024-table5",
        "qi2024-table6",
        "qi2024-table8",
    }
    for table in data["tables"]:
        assert table["rows"], table["id"]
        for row in table["rows"]:
            assert row["model"] in data["models"]
            figures = row.get("bubble_rate") or row["samples_per_gpu_s"]
            assert set(figures) <= set(table["columns"]), table["id"]


def test_a_missing_provenance_field_is_reported() -> None:
    data = load()
    del data["sources"]["qi2024"]["transcription"]
    data["assumptions"].pop("vocab_size")
    assert provenance_gaps(data) == ["sources.qi2024.transcription", "assumptions.vocab_size"]


def test_the_paper_layout_puts_one_layer_fewer_on_the_end_stages() -> None:
    assert stage_layers(22, 8) == [2, 3, 3, 3, 3, 3, 3, 2]
    assert stage_layers(62, 32) == [1] + [2] * 30 + [1]
    with pytest.raises(ValueError):
        stage_layers(23, 8)


def test_the_predicted_bubble_rate_is_the_closed_form_over_the_models_rank_times() -> None:
    rows = {
        (r.table, r.column): r for r in compare() if r.setup == SETUP and r.metric == "bubble rate"
    }
    m = SETUP.microbatches
    for column, a_w in (("1f1b", 1.0), ("zb_h1", -1.0)):
        est = _estimate(COLUMNS[column][0])
        bubble = _hand_bubble(est, a_w)
        steady = m * max(est.details["rank_work_s"])
        assert rows["qi2024-table5", column].predicted == pytest.approx(bubble / (steady + bubble))
    # ZB-H1 hides W in the bubble: strictly below 1F1B's
    assert rows["qi2024-table5", "zb_h1"].predicted < rows["qi2024-table5", "1f1b"].predicted


def test_the_predicted_throughput_ratio_differs_from_one_by_the_bubble_alone() -> None:
    """1F1B and ZB-H1 run the same work; only the bubble differs (Table 1), so
    step(1F1B) − step(ZB-H1) = Σ_{j≠c} [(F+B+W) − max(F, F+B−W)] and the ratio follows."""
    one, zb = _estimate("1f1b"), _estimate("zero_bubble_h1")
    gap = _hand_bubble(one, 1.0) - _hand_bubble(zb, -1.0)
    assert one.metrics.step_time_s - zb.metrics.step_time_s == pytest.approx(gap)
    (row,) = [
        r
        for r in compare()
        if r.table == "qi2024-table4"
        and r.setup == SETUP
        and r.column == "zb_1p"
        and r.metric == "throughput ratio"
    ]
    assert row.schedule == "zero_bubble_h1"
    assert row.predicted == pytest.approx((zb.metrics.step_time_s + gap) / zb.metrics.step_time_s)
    assert row.published == pytest.approx(12.9 / 11.8)  # Table 4, 1.5B, 24 micro-batches
