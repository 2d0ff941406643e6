"""Diverse serving top-k: a serving plan that a better-ranked plan of the same layout matches
or beats on every reported metric is folded under it (issue 14, point 7; the training rule is
`solver.search.diverse`, whose definitions this follows).

Layout and tuning knobs. A serving plan's *layout* is its mode, engine, engine options and,
per instance, its role, count, parallel degrees, weight format and placement (node group,
stage groups and stage layers). The *tuning knobs* (`TUNING_KNOBS`) are each instance's
`max_batch_size` (the scheduler's batch cap) and `chunk_size` (the chunked-prefill budget):
the same GPUs serve the same requests with the same engine; only when each request's tokens
are scheduled changes (Agrawal et al. 2024, Sarathi-Serve §4), so a setting no better on any
reported figure offers nothing the better-ranked one does not.

Reported metrics (`dominance_metrics`), oriented so that smaller is better: TTFT and TPOT at
p50 / p90 / p99, end-to-end latency at p50 / p90, GPUs used, the price per hour when priced,
preemptions; negated: throughput, goodput, goodput per GPU and SLO attainment. Not compared:
KV-cache size and capacity, weights, the maximum concurrency and the arrival rate (they
describe the plan rather than serve an objective). Values are rounded to
`solver.search.diverse.SIGNIFICANT_DIGITS` significant digits (ties are ties).

Scope. The serving search keeps its k best plans by the objective's score (`search`); the
folding runs over those k, so a search answers the k best with the dominated ones folded
under their best-ranked dominator (fewer than k non-dominated plans when some fold), not k
non-dominated plans: the simulated latencies that decide dominance are computed for the
final k only. Folding is one level deep for the reason given in the training module
(dominance is transitive; a dominator is never itself dominated by a better-ranked plan).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from solver.search.diverse import round_metric
from specs.serving import ServingMetrics, ServingPlan

TUNING_KNOBS: tuple[str, ...] = ("max_batch_size", "chunk_size")
"""Per-instance fields that may differ between a plan and the plan it is folded under."""

_LABEL = {"max_batch_size": "max batch", "chunk_size": "chunk size"}
_LOWER = (
    "ttft_ms_p50",
    "ttft_ms_p90",
    "ttft_ms_p99",
    "tpot_ms_p50",
    "tpot_ms_p90",
    "tpot_ms_p99",
    "e2e_latency_s_p50",
    "e2e_latency_s_p90",
    "gpus_used",
    "price_per_hour",
    "preemptions",
    "restart_lost_requests",
)
"""(`restart_lost_requests`: re-planned plans only, so that a plan that keeps running is not
folded under one that must restart first.)"""
_HIGHER = ("throughput_tokens_per_s", "goodput_rps", "goodput_rps_per_gpu", "slo_attainment")
_SHOWN = {
    "ttft_ms_p90": "TTFT p90",
    "tpot_ms_p90": "TPOT p90",
    "goodput_rps": "goodput",
    "gpus_used": "GPUs",
}


def layout_of(plan: ServingPlan) -> str:
    """Every plan field but the tuning knobs, as canonical text (hashable, comparable)."""
    data = plan.model_dump(mode="json")
    for instance in data.get("instances", []):
        for knob in TUNING_KNOBS:
            instance.pop(knob, None)
    return repr(sorted(_flatten(data)))


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in _flatten(v, f"{prefix}.{k}")]
    if isinstance(value, list):
        return [kv for i, v in enumerate(value) for kv in _flatten(v, f"{prefix}[{i}]")]
    return [(prefix, repr(value))]


def dominance_metrics(metrics: ServingMetrics) -> dict[str, float]:
    """The compared metrics, rounded, smaller is better (optional ones only when given)."""
    out: dict[str, float] = {}
    for name in _LOWER:
        value = getattr(metrics, name)
        if value is not None:
            out[name] = round_metric(float(value))
    for name in _HIGHER:
        out[name] = -round_metric(float(getattr(metrics, name)))
    return out


def dominates(a: dict[str, float], b: dict[str, float]) -> bool:
    """`a` is no worse than `b` on every metric both report."""
    return all(a[k] <= b[k] for k in a.keys() & b.keys())


@dataclass(frozen=True)
class Fold:
    """One plan of the ranked list: the rank (0-based position) of the plan it is folded
    under and why, or None for a non-dominated plan."""

    dominated_by: int | None
    reason: str | None


def fold(ranked: Sequence[tuple[ServingPlan, ServingMetrics | None]]) -> list[Fold]:
    """For plans in rank order, which are folded under which (module docstring); a plan
    without metrics neither folds nor is folded."""
    layouts = [layout_of(plan) for plan, _ in ranked]
    metrics = [None if m is None else dominance_metrics(m) for _, m in ranked]
    out: list[Fold] = []
    for j, (_, mj) in enumerate(ranked):
        under = None
        if metrics[j] is not None:
            under = next(
                (
                    i
                    for i in range(j)
                    if out[i].dominated_by is None
                    and metrics[i] is not None
                    and layouts[i] == layouts[j]
                    and dominates(metrics[i], metrics[j])  # type: ignore[arg-type]
                ),
                None,
            )
        if under is None:
            out.append(Fold(None, None))
        else:
            better, worse = ranked[under], ranked[j]
            assert better[1] is not None and mj is not None
            out.append(Fold(under, _reason((better[0], better[1]), (worse[0], mj))))
    return out


def _reason(
    better: tuple[ServingPlan, ServingMetrics], worse: tuple[ServingPlan, ServingMetrics]
) -> str:
    knobs = []
    for a, b in zip(better[0].instances, worse[0].instances, strict=True):
        for knob in TUNING_KNOBS:
            va, vb = getattr(a, knob), getattr(b, knob)
            if va != vb:
                knobs.append(f"{a.role} {_LABEL[knob]} {vb} instead of {va}")
    metrics = ", ".join(
        f"{label} {getattr(worse[1], name):.4g} vs {getattr(better[1], name):.4g}"
        for name, label in _SHOWN.items()
    )
    what = "; ".join(knobs) or "the same plan"
    return f"{what}; no better on any reported metric ({metrics})"
