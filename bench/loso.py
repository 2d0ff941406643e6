"""Leave-one-source-out validation of the analytical model's fitted parameter.

Everything in the analytical model is physical (peaks, bandwidths and measured efficiency
curves from hardware documentation and microbenchmarks, framework behaviour from the
frameworks' code) except one parameter fitted to published runs: the straggler spread σ
(`AnalyticalConfig.straggler_sigma`). σ multiplies a plan's step time by 1 + σ·z with
z = sqrt(2·ln N) for N GPUs, the same for every plan of a problem, so the search's choice
does not depend on it and one pass of predictions at σ = 0 ("typical" step times) serves
every fit.

`fit_sigma` minimises the mean absolute log error |ln(predicted / measured)| (a symmetric
relative error, Tofallis 2015, J. Oper. Res. Soc. 66(8)) over the samples it is given, a
bounded one-dimensional problem (Brent's method, scipy `minimize_scalar`).
`leave_one_source_out` fits σ without each source in turn and predicts that source with
it: the held-out figure never sees the rows it is scored on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.optimize import minimize_scalar

SIGMA_BOUNDS = (0.0, 0.1)
"""Physically plausible spread of per-GPU step speed (0–10 %)."""


@dataclass(frozen=True)
class Sample:
    """One measured run and the model's prediction without stragglers."""

    source: str
    typical_step_s: float
    """Predicted step time at σ = 0."""
    straggler_z: float
    """sqrt(2·ln N) for the run's N GPUs (0 for one GPU)."""
    measured_step_s: float

    def predicted_s(self, sigma: float) -> float:
        return self.typical_step_s * (1.0 + sigma * self.straggler_z)


def _loss(samples: Sequence[Sample], sigma: float) -> float:
    return statistics.fmean(
        abs(math.log(s.predicted_s(sigma) / s.measured_step_s)) for s in samples
    )


def fit_sigma(samples: Sequence[Sample]) -> float:
    """σ minimising the mean absolute log error over `samples`, within SIGMA_BOUNDS."""
    if not samples:
        raise ValueError("fit_sigma needs at least one sample")
    result = minimize_scalar(
        lambda sigma: _loss(samples, sigma),
        bounds=SIGMA_BOUNDS,
        method="bounded",
        options={"xatol": 1e-5},
    )
    return float(result.x)


@dataclass(frozen=True)
class HeldOut:
    """The fit without one source and its predictions of that source."""

    source: str
    sigma: float
    """σ fitted on every other source."""
    predictions_s: tuple[float, ...]
    """Predicted step times of the source's samples, in order."""


def leave_one_source_out(samples: Sequence[Sample]) -> dict[str, HeldOut]:
    """For each source: σ fitted on the other sources and that source's predictions."""
    out: dict[str, HeldOut] = {}
    for source in sorted({s.source for s in samples}):
        train = [s for s in samples if s.source != source]
        test = [s for s in samples if s.source == source]
        sigma = fit_sigma(train) if train else 0.0
        out[source] = HeldOut(source, sigma, tuple(s.predicted_s(sigma) for s in test))
    return out
