"""Pipeline schedules reproduce Narayanan et al. 2021's bubble formulas."""

from __future__ import annotations

import pytest

from cost_models.analytical.schedule import (
    interleaved_one_f_one_b,
    one_f_one_b,
    pipeline_step,
)


@pytest.mark.parametrize(("p", "m"), [(1, 1), (4, 8), (8, 64), (3, 5)])
def test_uniform_1f1b_is_m_plus_p_minus_1(p: int, m: int) -> None:
    w = 0.37
    r = one_f_one_b([w] * p, m)
    assert r.step_s == pytest.approx((m + p - 1) * w)
    assert r.bubble_s / (m * w) == pytest.approx((p - 1) / m)


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 2), (8, 64, 4), (2, 4, 3)])
def test_uniform_interleaved(p: int, m: int, v: int) -> None:
    w = 0.25
    r = interleaved_one_f_one_b([w] * p, m, v)
    assert r.step_s == pytest.approx(m * w + (p - 1) * w / v)
    assert r.bubble_s / (m * w) == pytest.approx((p - 1) / (v * m))


def test_uneven_stages_slowest_sets_the_pace() -> None:
    r = one_f_one_b([1.0, 2.0, 1.0], 10)
    assert r.step_s == 9 * 2.0 + 4.0
    assert r.bubble_fraction == pytest.approx((22.0 - 20.0) / 22.0)
    assert pipeline_step([1.0, 2.0], 4, 1, "1f1b").step_s == 3 * 2.0 + 3.0
    assert pipeline_step([1.0, 2.0], 4, 2, "interleaved_1f1b").step_s == 4 * 2.0 + 0.5
