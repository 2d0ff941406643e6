"""Error bars on predicted step times, from the residuals on published measured runs.

`bench/accuracy.py --write-residuals` runs every representable row of
`bench/data/calibration/published_runs.jsonl` through the search and stores the empirical
quantiles of r = ln(measured / predicted) step time in `cost_models/data/residuals.json`
(a golden test recomputes them, so the file cannot go stale silently). A prediction T then
carries the interval [T·e^{q_low}, T·e^{q_high}]: with q at the 10th and 90th percentiles,
an 80 % prediction interval under the assumption that a new run's error is drawn like the
published ones (an empirical-quantile interval; Hyndman & Athanasopoulos, "Forecasting:
Principles and Practice", §5.5, bootstrapped/empirical prediction intervals).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

RESIDUALS_FILE = "residuals.json"
LOW_QUANTILE = 0.10
HIGH_QUANTILE = 0.90


@dataclass(frozen=True)
class ResidualQuantiles:
    """ln(measured / predicted) quantiles of one cost model on the calibration rows."""

    cost_model: str
    num_rows: int
    q_low: float
    q_high: float

    def interval(self, step_time_s: float) -> tuple[float, float]:
        """(low, high) step time for a prediction."""
        return step_time_s * math.exp(self.q_low), step_time_s * math.exp(self.q_high)


def empirical_quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile (type 7 of Hyndman & Fan 1996) of a non-empty list."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def quantiles_from_residuals(cost_model: str, log_residuals: list[float]) -> ResidualQuantiles:
    return ResidualQuantiles(
        cost_model=cost_model,
        num_rows=len(log_residuals),
        q_low=empirical_quantile(log_residuals, LOW_QUANTILE),
        q_high=empirical_quantile(log_residuals, HIGH_QUANTILE),
    )


@cache
def stored_quantiles(cost_model: str = "analytical") -> ResidualQuantiles | None:
    """The quantiles shipped for a cost model, or None when none were computed."""
    text = resources.files("cost_models").joinpath("data", RESIDUALS_FILE).read_text()
    entry = json.loads(text).get(cost_model)
    if entry is None:
        return None
    return ResidualQuantiles(cost_model, entry["num_rows"], entry["q_low"], entry["q_high"])
