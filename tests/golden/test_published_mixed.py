"""Golden figures of the outside check on a mixed cluster (`bench/published_mixed.py`): AMP's
measured trials of GPT-2 on 3 V100 nodes + 1 T4 node, each with AMP's own prediction, priced
by meshplan with the catalog's p3.8xlarge and g4dn.12xlarge as they are.

Today: 24 of the 43 trials are plans of stages on one kind of GPU each (pipeline ≥ 4) and
are priced; meshplan's |error| is 29.0 % mean / 24.3 % median against AMP's 71.2 % / 31.6 %
on the same trials; its rank correlation with the measured times is lower (Spearman 0.24
against AMP's 0.66: it prices tensor-parallel trials too fast); both predict the same best
trial (measured 1.47 s; the fastest measured is 1.28 s). The tied-embedding gradient sync
(`data_parallel.tied_embedding_sync_s`) was added after this check showed every trial
priced far too fast (40.9 % / 39.5 %); it is the frameworks' documented all-reduce, not a
fitted figure, and it moved the calibration set's held-out error by at most 0.2 points.
Pinned: the absolute errors stay below AMP's own and near today's; the ranking figure is
pinned where it is, so that a change that moves it is seen.
"""

from __future__ import annotations

import pytest

from bench.published_mixed import Summary, dataset, price_all, summarise


@pytest.fixture(scope="module")
def summary() -> Summary:
    priced, skipped = price_all()
    return summarise(priced, len(skipped))


def test_every_trial_carries_its_source() -> None:
    data = dataset()
    assert "arXiv 2210.07297" in data["source"]["paper"]
    assert len(data["runs"]) == 43
    for run in data["runs"]:
        assert "r_cost" in run["quote"] and run["measured_iteration_s"] > 0


def test_absolute_error_below_the_planners_own(summary: Summary) -> None:
    assert summary.trials == 24 and summary.left_out == 19
    assert summary.ours_mean_ape < summary.amp_mean_ape
    assert summary.ours_median_ape < summary.amp_median_ape
    assert summary.ours_mean_ape == pytest.approx(0.290, abs=0.03)
    assert summary.ours_median_ape == pytest.approx(0.243, abs=0.03)


def test_ranking_and_best_pick_as_today(summary: Summary) -> None:
    assert summary.ours_spearman == pytest.approx(0.24, abs=0.08)
    assert summary.amp_spearman == pytest.approx(0.66, abs=0.01)
    assert summary.ours_best_measured_s == summary.amp_best_measured_s == 1.47
