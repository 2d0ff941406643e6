"""Error bars: empirical quantiles and the interval every estimate carries."""

from __future__ import annotations

import math

import pytest

from cost_models.base import TrainingProblem
from cost_models.error_bars import (
    ResidualQuantiles,
    empirical_quantile,
    quantiles_from_residuals,
    stored_quantiles,
)
from cost_models.registry import build_cost_model
from solver import estimate_plan
from specs.plan import ParallelDims, TrainingPlan


def test_empirical_quantile_interpolates_linearly() -> None:
    values = [0.0, 1.0, 2.0, 3.0, 4.0]
    assert empirical_quantile(values, 0.0) == 0.0
    assert empirical_quantile(values, 1.0) == 4.0
    assert empirical_quantile(values, 0.5) == 2.0
    # position (5 − 1) × 0.1 = 0.4 → 0.4 of the way from 0 to 1
    assert empirical_quantile([3.0, 0.0, 1.0, 4.0, 2.0], 0.1) == pytest.approx(0.4)


def test_interval_scales_the_prediction_by_the_residual_quantiles() -> None:
    q = ResidualQuantiles("x", 10, math.log(0.9), math.log(1.2))
    low, high = q.interval(10.0)
    assert low == pytest.approx(9.0)
    assert high == pytest.approx(12.0)
    fitted = quantiles_from_residuals("x", [math.log(v) for v in (0.8, 0.9, 1.0, 1.1, 1.2)])
    assert fitted.num_rows == 5
    assert math.exp(fitted.q_low) == pytest.approx(0.8 * (0.9 / 0.8) ** 0.4)


def test_estimates_carry_the_shipped_interval(llama_problem: TrainingProblem) -> None:
    stored = stored_quantiles("analytical")
    assert stored is not None and stored.q_low < 0 < stored.q_high
    plan = TrainingPlan(
        parallelism=ParallelDims(data=2, tensor=8, pipeline=4, sequence_parallel=True),
        micro_batch_size=1,
        zero_stage=1,
        recompute="selective",
    )
    est = estimate_plan(llama_problem, build_cost_model("analytical"), plan)
    m = est.metrics
    assert m.step_time_s_low == pytest.approx(m.step_time_s * math.exp(stored.q_low))
    assert m.step_time_s_high == pytest.approx(m.step_time_s * math.exp(stored.q_high))
    assert m.step_time_s_low < m.step_time_s < m.step_time_s_high
