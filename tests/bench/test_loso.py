"""The leave-one-source-out fit (`bench/loso.py`) on synthetic data with a known σ."""

from __future__ import annotations

import math
import random

import pytest

from bench.loso import Sample, fit_sigma, leave_one_source_out
from cost_models.analytical.training.context import straggler_factor, straggler_z


def _synthetic(sigma: float, sources: dict[str, float], seed: int = 7) -> list[Sample]:
    """Samples whose measured times are typical × (1 + σ·z) × a source bias × small noise."""
    rng = random.Random(seed)
    out = []
    for source, bias in sources.items():
        for _ in range(12):
            n = rng.choice([8, 64, 512, 4096])
            typical = rng.uniform(1.0, 50.0)
            z = straggler_z(n)
            measured = typical * (1 + sigma * z) * bias * math.exp(rng.gauss(0, 0.01))
            out.append(Sample(source, typical, z, measured))
    return out


def test_straggler_z_is_the_gumbel_limit() -> None:
    assert straggler_z(1) == 0.0
    assert straggler_z(1024) == pytest.approx(math.sqrt(2 * math.log(1024)))
    # the cost model's factor is the same z: 1 + σ·z, and 1 without spread or on one GPU
    assert straggler_factor(0.02, 1024) == pytest.approx(1 + 0.02 * math.sqrt(2 * math.log(1024)))
    assert straggler_factor(0.0, 1024) == straggler_factor(0.02, 1) == 1.0


def test_fit_recovers_a_known_sigma() -> None:
    samples = _synthetic(0.03, {"a": 1.0, "b": 1.0, "c": 1.0})
    assert fit_sigma(samples) == pytest.approx(0.03, abs=0.004)


def test_held_out_fit_never_sees_its_source() -> None:
    """A source measured 15 % slow pulls the in-sample σ up; held out, its own σ comes from
    the other sources alone (≈ the true 0.02), and its predictions are therefore worse."""
    samples = _synthetic(0.02, {"a": 1.0, "b": 1.0, "slow": 1.15})
    in_sample = fit_sigma(samples)
    folds = leave_one_source_out(samples)
    assert folds["slow"].sigma == pytest.approx(0.02, abs=0.004)
    assert in_sample > folds["slow"].sigma
    slow = [s for s in samples if s.source == "slow"]
    held = [
        abs(math.log(p / s.measured_step_s))
        for p, s in zip(folds["slow"].predictions_s, slow, strict=True)
    ]
    fitted = [abs(math.log(s.predicted_s(in_sample) / s.measured_step_s)) for s in slow]
    assert sum(held) > sum(fitted)


def test_fit_stays_within_physical_bounds() -> None:
    samples = _synthetic(0.0, {"a": 0.7})  # measured far faster than predicted
    assert fit_sigma(samples) == pytest.approx(0.0, abs=1e-4)
