"""Published long-context comparisons of context parallelism, reproduced as a relative figure.

`bench/data/published_context_parallel.json` carries NVIDIA NeMo's Long Sequence Performance
table for LLaMA2-7B in FP8 on DGX-H100 (4K to 1024K tokens): TFLOP/s per GPU of the best
configuration without context parallelism and of a stated one with it (TP, PP, DP, CP), on
the same GPUs and global batch. The published figure compared is the speedup
with-CP / without-CP; meshplan's is

    speedup = step(best plan with context = 1) / step(the stated CP degrees, best rest)

(model FLOPs per step are the same on both sides, so the TFLOP/s ratio is the inverse
step-time ratio). Both sides are searched by the planner with the analytical cost model at
σ = 0, Megatron-Core, ring context parallelism (Megatron-Core's default `--cp-comm-type
p2p`); the with-CP side fixes the published degrees, the rest (micro-batch size,
recomputation) is the planner's, as NeMo's tuned recipes were NeMo's. Nothing is fitted.
A side with no feasible plan is reported as such, never dropped.

Only CP against no CP is compared here; ring vs Ulysses vs hybrid (the USP report's Tables
5-7) is compared in `bench/published_cp_variants.py`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from bench.published_tables import PublishedFile, cluster_of
from cost_models.base import TrainingEstimate, TrainingProblem
from cost_models.registry import build_cost_model
from solver import search
from specs import SearchConstraints, TrainingWorkload
from specs.model_input import resolve_model

DATA = Path(__file__).resolve().parent / "data" / "published_context_parallel.json"

REQUIRED_ASSUMPTIONS = ("precision", "context_parallel_algorithm", "framework", "basis")
REQUIRED_TABLE_FIELDS = ("id", "source", "locator", "model_preset", "accelerator", "rows")


FILE = PublishedFile(
    DATA, "published context-parallel tables", REQUIRED_TABLE_FIELDS, REQUIRED_ASSUMPTIONS
)
load = FILE.load
"""The data file (a missing file is an error, never an empty comparison)."""
provenance_gaps = FILE.gaps
"""Every provenance field a table, its source or the assumptions lack (empty: complete)."""


@dataclass(frozen=True)
class Row:
    table: str
    sequence_k: int
    gpus: int
    global_batch_size: int
    degrees: tuple[int, int, int, int]
    """The with-CP (tensor, pipeline, data, context)."""
    published: float | None
    """Published speedup with-CP / without-CP (None: no run without CP)."""
    with_cp: TrainingEstimate | None
    without_cp: TrainingEstimate | None

    @property
    def predicted(self) -> float | None:
        if self.with_cp is None or self.without_cp is None:
            return None
        return self.without_cp.metrics.step_time_s / self.with_cp.metrics.step_time_s

    @property
    def error(self) -> float | None:
        """Relative error of the predicted speedup."""
        if self.predicted is None or self.published is None:
            return None
        return (self.predicted - self.published) / self.published


def best_plan(
    preset: str,
    accelerator: str,
    gpus: int,
    sequence_k: int,
    global_batch_size: int,
    fixed: tuple[tuple[str, Any], ...],
    precision: str = "fp8",
) -> TrainingEstimate | None:
    """The planner's best feasible plan under `fixed` (None: none fits)."""
    problem = TrainingProblem(
        model=resolve_model({"preset": preset}),
        cluster=cluster_of(accelerator, gpus),
        workload=TrainingWorkload.model_validate(
            {
                "global_batch_size": global_batch_size,
                "sequence_length": sequence_k * 1024,
                "precision": precision,
            }
        ),
        memory_headroom_gib=0.0,
    )
    constraints = SearchConstraints.model_validate(
        {"fixed": {"framework": "megatron_core", **dict(fixed)}, "memory_headroom_gib": 0.0}
    )
    cost_model = build_cost_model("analytical", {"straggler_sigma": 0.0})
    result = search(problem, cost_model, constraints, top_k=1)
    if not result.plans or not result.plans[0].estimate.feasible:
        return None
    return result.plans[0].estimate


_best_plan = lru_cache(maxsize=256)(best_plan)


def compare(data: dict[str, Any] | None = None) -> list[Row]:
    """Every published row against the planner's two searches."""
    data = load() if data is None else data
    algorithm = data["assumptions"]["context_parallel_algorithm"].split()[0]
    precision = data["assumptions"]["precision"].split()[0]
    out: list[Row] = []
    for table in data["tables"]:
        for r in table["rows"]:
            cp = r["with_cp"]
            degrees = (cp["tensor"], cp["pipeline"], cp["data"], cp["context"])
            fixed = {"tensor": degrees[0], "pipeline": degrees[1], "data": degrees[2]}
            fixed["context"] = degrees[3]
            args = (table["model_preset"], table["accelerator"], r["gpus"], r["sequence_k"])
            with_fixed = tuple(fixed.items())
            if degrees[3] > 1:
                with_fixed += (("context_parallel_algorithm", algorithm),)
            out.append(
                Row(
                    table["id"],
                    r["sequence_k"],
                    r["gpus"],
                    r["global_batch_size"],
                    degrees,
                    r["speedup"],
                    _best_plan(*args, r["global_batch_size"], with_fixed, precision),
                    _best_plan(*args, r["global_batch_size"], (("context", 1),), precision),
                )
            )
    return out


def _plan(e: TrainingEstimate | None) -> str:
    if e is None:
        return "no feasible plan"
    p = e.plan
    par = p.parallelism
    return (
        f"tp{par.tensor} pp{par.pipeline} dp{par.data} cp{par.context} "
        f"mbs{p.micro_batch_size} {p.recompute}"
    )


def summary(rows: list[Row]) -> dict[str, float]:
    errors = [abs(r.error) for r in rows if r.error is not None]
    return {
        "rows": len(errors),
        "mean_abs_error": statistics.fmean(errors) if errors else math.nan,
        "max_abs_error": max(errors) if errors else math.nan,
    }


def report(rows: list[Row] | None = None) -> str:
    rows = compare() if rows is None else rows
    data = load()
    lines = [
        "Published context-parallel speedups at long context (NeMo Long Sequence Performance, "
        "bench/data/published_context_parallel.json), with-CP / without-CP, nothing fitted:",
        f"{'table':20} {'seq':>6} {'GPUs':>5} {'GBS':>5} {'published':>9} {'predicted':>9} "
        f"{'error':>8}  with CP (planner)              without CP (planner)",
    ]
    for r in rows:
        pub = f"{r.published:9.2f}" if r.published is not None else f"{'-':>9}"
        pred = f"{r.predicted:9.2f}" if r.predicted is not None else f"{'-':>9}"
        err = f"{r.error:+8.1%}" if r.error is not None else f"{'-':>8}"
        lines.append(
            f"{r.table:20} {str(r.sequence_k) + 'K':>6} {r.gpus:>5} {r.global_batch_size:>5} "
            f"{pub} {pred} {err}  {_plan(r.with_cp):30} {_plan(r.without_cp)}"
        )
    s = summary(rows)
    lines.append(
        f"Mean |error| of the speedup: {s['mean_abs_error']:.1%} over {s['rows']:.0f} rows "
        f"(max {s['max_abs_error']:.1%})"
    )
    lines.append("Not compared:")
    for key, why in {**data.get("excluded", {}), **data.get("sources_not_found", {})}.items():
        lines.append(f"  {key}: {why}")
    return "\n".join(lines)
