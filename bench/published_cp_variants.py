"""Published context-parallel variants against each other at long context: ring, Ulysses and
their hybrid (USP), reproduced as throughput ratios.

`bench/data/published_cp_variants.json` carries Tables 5, 6 and 7 of the USP report (Fang &
Zhao 2024, arXiv 2405.07719, section 5): FLOPS per GPU of LLaMA2-7B on one 8x A800 node and
LLaMA3-8B on two, end to end in Megatron-LM, for tensor degree x Ulysses degree u x ring
degree r at 30K to 208K tokens. Rows with the same table, sequence, global batch and tensor
degree form a group that differs only in how its context ranks split into u x r; the figure
compared is each variant's throughput over the group's pure ring (u = 1):

    published ratio = FLOPS/GPU(variant) / FLOPS/GPU(ring)
    predicted ratio = model TFLOP/s per GPU(variant) / model TFLOP/s per GPU(ring)
                    = step(ring) / step(variant)

(the same model FLOPs on both sides, so the formula behind the published FLOPS cancels). That
ratio is what a planner must get right to pick the variant. Each row is priced by the
planner's search with the analytical model at sigma = 0 and the published degrees fixed:
u = 1 is `ring`, r = 1 `ulysses`, both > 1 `hybrid` with `context_parallel_heads` = u;
micro-batch = global batch / data (the report uses no gradient accumulation); recomputation
and ZeRO stage are the planner's. Nothing is fitted to these rows. A row with no feasible
plan is reported as such, never dropped.

Also reported: the order of each group (pairs of rows whose published figures differ by less
than the data file's `tie_tolerance` are ties and not scored), and for each table and
sequence the configuration the model ranks first among every published one (TP-only rows
included) with the share of the published best throughput that pick reached.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from bench.published_context_parallel import _best_plan
from bench.published_tables import PublishedFile
from cost_models.base import TrainingEstimate

DATA = Path(__file__).resolve().parent / "data" / "published_cp_variants.json"

REQUIRED_ASSUMPTIONS = ("precision", "framework", "algorithm", "basis", "tie_tolerance")
REQUIRED_TABLE_FIELDS = ("id", "source", "locator", "model_preset", "accelerator", "gpus", "rows")

FILE = PublishedFile(
    DATA, "published context-parallel variant tables", REQUIRED_TABLE_FIELDS, REQUIRED_ASSUMPTIONS
)
load = FILE.load
"""The data file (a missing file is an error, never an empty comparison)."""
provenance_gaps = FILE.gaps
"""Every provenance field a table, its source or the assumptions lack (empty: complete)."""


def algorithm_of(ulysses: int, ring: int) -> str:
    """The plan's `context_parallel_algorithm` for a published u x r split ("" without
    context parallelism)."""
    if ulysses > 1 and ring > 1:
        return "hybrid"
    if ulysses > 1:
        return "ulysses"
    return "ring" if ring > 1 else ""


def fixed_fields(gpus: int, gbs: int, tensor: int, ulysses: int, ring: int) -> dict[str, Any]:
    """The plan fields a published row fixes (module docstring); a split that does not use
    the row's GPUs whole is an error of the transcription."""
    context = ulysses * ring
    data, rest = divmod(gpus, tensor * context)
    if rest or data < 1 or gbs % data:
        raise ValueError(
            f"tensor {tensor} x ulysses {ulysses} x ring {ring} does not split {gpus} GPUs "
            f"into data ranks that divide the global batch {gbs}"
        )
    fixed: dict[str, Any] = {
        "tensor": tensor,
        "pipeline": 1,
        "data": data,
        "context": context,
        "micro_batch_size": gbs // data,
    }
    algorithm = algorithm_of(ulysses, ring)
    if algorithm:
        fixed["context_parallel_algorithm"] = algorithm
    if algorithm == "hybrid":
        fixed["context_parallel_heads"] = ulysses
    return fixed


@dataclass(frozen=True)
class Config:
    """One published row and the planner's estimate of it."""

    table: str
    sequence_k: int
    global_batch_size: int
    tensor: int
    ulysses: int
    ring: int
    published_tflops: float
    estimate: TrainingEstimate | None

    @property
    def label(self) -> str:
        return f"tp{self.tensor} u{self.ulysses}xr{self.ring}"

    @property
    def predicted_tflops(self) -> float | None:
        """Model TFLOP/s per GPU of the estimate (None: no feasible plan)."""
        return None if self.estimate is None else self.estimate.metrics.model_tflops_per_gpu


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, None when either is missing."""
    if numerator is None or denominator is None:
        return None
    return numerator / denominator


def relative_error(predicted: float | None, published: float | None) -> float | None:
    if predicted is None or published is None:
        return None
    return (predicted - published) / published


@dataclass(frozen=True)
class Comparison:
    """One variant of a group against the group's pure ring."""

    variant: Config
    ring: Config

    @property
    def published(self) -> float:
        p = ratio(self.variant.published_tflops, self.ring.published_tflops)
        assert p is not None
        return p

    @property
    def predicted(self) -> float | None:
        return ratio(self.variant.predicted_tflops, self.ring.predicted_tflops)

    @property
    def error(self) -> float | None:
        return relative_error(self.predicted, self.published)


def pairwise_order(
    published: list[float], predicted: list[float | None], tie_tolerance: float
) -> tuple[int, int, int]:
    """(agree, disagree, ties) over every pair of rows: a pair agrees when the model puts the
    published faster row first (strictly faster), ties when the published figures differ by
    less than `tie_tolerance` of the smaller; a pair with a row that has no estimate
    disagrees."""
    agree = disagree = ties = 0
    for i, j in combinations(range(len(published)), 2):
        a, b = published[i], published[j]
        if abs(a - b) < tie_tolerance * min(a, b):
            ties += 1
            continue
        pa, pb = predicted[i], predicted[j]
        if pa is not None and pb is not None and (pa - pb) * (a - b) > 0:
            agree += 1
        else:
            disagree += 1
    return agree, disagree, ties


@dataclass(frozen=True)
class Group:
    """Rows with one table, sequence, global batch and tensor degree (two or more, one of
    them the pure ring)."""

    configs: tuple[Config, ...]
    tie_tolerance: float

    @property
    def ring(self) -> Config:
        return next(c for c in self.configs if c.ulysses == 1)

    @property
    def comparisons(self) -> list[Comparison]:
        return [Comparison(c, self.ring) for c in self.configs if c is not self.ring]

    @property
    def order(self) -> tuple[int, int, int]:
        return pairwise_order(
            [c.published_tflops for c in self.configs],
            [c.predicted_tflops for c in self.configs],
            self.tie_tolerance,
        )

    @property
    def in_order(self) -> bool | None:
        """Every scored pair in the published order (None: every pair is a tie)."""
        agree, disagree, _ = self.order
        return None if agree + disagree == 0 else disagree == 0


@dataclass(frozen=True)
class Pick:
    """For one table and sequence: the published best row and the model's best row."""

    table: str
    sequence_k: int
    published_best: Config
    predicted_best: Config | None

    @property
    def share(self) -> float | None:
        """Published throughput of the model's pick over the published best."""
        if self.predicted_best is None:
            return None
        return self.predicted_best.published_tflops / self.published_best.published_tflops


def price(data: dict[str, Any] | None = None) -> list[Config]:
    """Every published row priced by the planner (module docstring)."""
    data = load() if data is None else data
    precision = data["assumptions"]["precision"].split()[0]
    out: list[Config] = []
    for table in data["tables"]:
        for r in table["rows"]:
            fixed = fixed_fields(
                table["gpus"], r["global_batch_size"], r["tensor"], r["ulysses"], r["ring"]
            )
            estimate = _best_plan(
                table["model_preset"],
                table["accelerator"],
                table["gpus"],
                r["sequence_k"],
                r["global_batch_size"],
                tuple(fixed.items()),
                precision,
            )
            out.append(
                Config(
                    table["id"],
                    r["sequence_k"],
                    r["global_batch_size"],
                    r["tensor"],
                    r["ulysses"],
                    r["ring"],
                    r["tflops_per_gpu"],
                    estimate,
                )
            )
    return out


def groups(configs: list[Config], tie_tolerance: float) -> list[Group]:
    """The groups of context-parallel rows that hold a pure ring and at least one other
    variant, in table order."""
    keyed: dict[tuple[str, int, int, int], list[Config]] = {}
    for c in configs:
        if c.ulysses * c.ring > 1:
            keyed.setdefault((c.table, c.sequence_k, c.global_batch_size, c.tensor), []).append(c)
    return [
        Group(tuple(cs), tie_tolerance)
        for cs in keyed.values()
        if len(cs) > 1 and any(c.ulysses == 1 for c in cs)
    ]


def picks(configs: list[Config]) -> list[Pick]:
    """For each table and sequence with two or more rows: the published best and the model's
    best of the same rows (by TFLOP/s per GPU; rows with no estimate are not picked)."""
    keyed: dict[tuple[str, int], list[Config]] = {}
    for c in configs:
        keyed.setdefault((c.table, c.sequence_k), []).append(c)
    out: list[Pick] = []
    for (table, seq), cs in keyed.items():
        if len(cs) < 2:
            continue
        priced = [c for c in cs if c.predicted_tflops is not None]
        best = max(priced, key=lambda c: c.predicted_tflops or 0.0) if priced else None
        out.append(Pick(table, seq, max(cs, key=lambda c: c.published_tflops), best))
    return out


@dataclass(frozen=True)
class Result:
    configs: list[Config]
    groups: list[Group]
    picks: list[Pick]


def compare(data: dict[str, Any] | None = None) -> Result:
    data = load() if data is None else data
    configs = price(data)
    tol = float(data["assumptions"]["tie_tolerance"])
    return Result(configs, groups(configs, tol), picks(configs))


def summary(result: Result) -> dict[str, float]:
    comparisons = [c for g in result.groups for c in g.comparisons]
    errors = [abs(e) for c in comparisons if (e := c.error) is not None]
    agree = sum(g.order[0] for g in result.groups)
    disagree = sum(g.order[1] for g in result.groups)
    shares = [s for p in result.picks if (s := p.share) is not None]
    return {
        "ratios": len(errors),
        "unpriced_rows": sum(c.estimate is None for c in result.configs),
        "mean_abs_error": statistics.fmean(errors) if errors else math.nan,
        "max_abs_error": max(errors) if errors else math.nan,
        "pairs_in_order": agree,
        "pairs_out_of_order": disagree,
        "pairs_tied": sum(g.order[2] for g in result.groups),
        "groups": len(result.groups),
        "groups_scored": sum(g.in_order is not None for g in result.groups),
        "groups_in_order": sum(g.in_order is True for g in result.groups),
        "picks_best": sum(p.predicted_best is p.published_best for p in result.picks),
        "picks": len(result.picks),
        "mean_pick_share": statistics.fmean(shares) if shares else math.nan,
        "min_pick_share": min(shares) if shares else math.nan,
    }


def _f(x: float | None, fmt: str) -> str:
    width = fmt.lstrip("+").split(".")[0]
    return format(x, fmt) if x is not None else f"{'-':>{width}}"


def _verdict(in_order: bool | None) -> str:
    return "all tied" if in_order is None else "in order" if in_order else "OUT OF ORDER"


def _plan(e: TrainingEstimate | None) -> str:
    if e is None:
        return "no feasible plan"
    p = e.plan
    return f"mbs{p.micro_batch_size} {p.recompute} z{p.zero_stage}"


def report(result: Result | None = None) -> str:
    result = compare() if result is None else result
    data = load()
    lines = [
        "Published context-parallel variants at long context (USP report, Fang & Zhao 2024, "
        "Tables 5-7, A800, Megatron-LM; bench/data/published_cp_variants.json): throughput "
        "of each u x r split over the pure ring at the same sequence, batch, GPUs and tensor "
        "degree, nothing fitted:",
        f"{'table':26} {'seq':>5} {'GBS':>3} {'variant':12} {'pub TF':>6} {'pred TF':>7} "
        f"{'pub/ring':>8} {'pred/ring':>9} {'error':>7}  planner's rest",
    ]
    for g in result.groups:
        for c in g.configs:
            cmp = next((x for x in g.comparisons if x.variant is c), None)
            lines.append(
                f"{c.table:26} {str(c.sequence_k) + 'K':>5} {c.global_batch_size:>3} "
                f"{c.label:12} {c.published_tflops:6.1f} {_f(c.predicted_tflops, '7.1f')} "
                f"{_f(cmp.published if cmp else 1.0, '8.3f')} "
                f"{_f(cmp.predicted if cmp else 1.0, '9.3f')} "
                f"{_f(cmp.error if cmp else None, '+7.1%')}  {_plan(c.estimate)}"
            )
        a, d, t = g.order
        pub = " > ".join(c.label for c in sorted(g.configs, key=lambda c: -c.published_tflops))
        pred = " > ".join(
            c.label for c in sorted(g.configs, key=lambda c: -(c.predicted_tflops or 0.0))
        )
        lines.append(
            f"  {_verdict(g.in_order)} ({a} pairs agree, {d} disagree, "
            f"{t} tied): published {pub}; predicted {pred}"
        )
    s = summary(result)
    lines.append(
        f"Mean |error| of the variant/ring ratio: {s['mean_abs_error']:.1%} over "
        f"{s['ratios']:.0f} ratios (max {s['max_abs_error']:.1%}); pairs in the published "
        f"order {s['pairs_in_order']:.0f} of {s['pairs_in_order'] + s['pairs_out_of_order']:.0f} "
        f"({s['pairs_tied']:.0f} tied within {data['assumptions']['tie_tolerance']:.0%}); "
        f"groups fully in order {s['groups_in_order']:.0f} of {s['groups_scored']:.0f} "
        f"(and {s['groups'] - s['groups_scored']:.0f} all tied); rows with no feasible plan "
        f"{s['unpriced_rows']:.0f}"
    )
    lines.append("The model's pick among each table's published configurations at one sequence:")
    for p in result.picks:
        pick = p.predicted_best.label if p.predicted_best else "none"
        lines.append(
            f"  {p.table:26} {str(p.sequence_k) + 'K':>5}: published best "
            f"{p.published_best.label} ({p.published_best.published_tflops:.1f}); model's pick "
            f"{pick} reaches {_f(p.share, '.1%')} of it"
        )
    lines.append(
        f"  the model picks the published best in {s['picks_best']:.0f} of {s['picks']:.0f}; "
        f"its picks reach {s['mean_pick_share']:.1%} of the best on average "
        f"(worst {s['min_pick_share']:.1%})"
    )
    lines.append("Not compared:")
    for key, why in {**data.get("excluded", {}), **data.get("sources_not_found", {})}.items():
        lines.append(f"  {key}: {why}")
    return "\n".join(lines)
