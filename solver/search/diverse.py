"""Diverse top-k: plans that a better-ranked variant of the same layout dominates are folded
under it instead of taking a slot of the top-k (issue 14, point 7).

Definitions (pure functions over `TrainingEstimate`s; nothing here prices anything).

Rank. Plans rank by (step time, canonical plan key), the search's order (`steps.TopK`).

Layout and tuning knobs. A plan's *layout* is every plan field except the tuning knobs:
the parallel degrees (data, tensor, pipeline, virtual pipeline, context, expert, expert
tensor), the pipeline schedule, the framework, and on mixed clusters the node group of
every stage, the stage tensor degrees and the data shares. The *tuning knobs*
(`TUNING_KNOBS`) are

- `recompute` (none / selective / full): re-runs forwards to drop activations;
- `micro_batch_size`: the same global batch in fewer or more micro-batches;
- `zero_stage`: shards optimizer states, gradients, weights over the data group;
- `sequence_parallel`: shards norm/dropout activations over the tensor group;
- `flash_attention`: fused attention without stored score matrices;
- `stage_layers`: the pipeline split (the partition program's answer for the other knobs);
- `context_parallel_algorithm` and `context_parallel_heads`: how the context-parallel ranks
  exchange keys and values (ring, Ulysses all-to-all, all-gather or their hybrid; one
  `--cp-comm-type` flag in Megatron-Core). Exact attention either way (Liu et al. 2023,
  Jacobs et al. 2023): the same context degree over the same GPUs.

Each of them changes only how long a step takes and how much memory a GPU needs: the same
GPUs run the same model on the same batch with the same degrees, schedule and framework
(the training maths is unchanged: recomputation, micro-batching, ZeRO sharding, sequence
parallelism and fused attention are exact reformulations, Korthikanti et al. 2022 §4-5,
Rajbhandari et al. 2020 §5, Dao et al. 2022 §3). So a knob setting that is no better than
another on step time and memory *cannot help* in any way the plan reports: the plan that
uses it offers nothing its dominator does not. A different layout can matter beyond the
reported metrics (another framework to run, another schedule, other GPUs, a smaller
failure domain), so plans of different layouts are never folded, however they compare.

Reported metrics (`dominance_metrics`), each oriented so that smaller is better: step time,
the uncertainty band of the step time when both plans report it (`step_time_s_low`,
`step_time_s_high`), peak memory per GPU (`metrics.peak_memory_gib` and
`memory.peak_gib`), GPUs used (`TrainingPlan.num_gpus`), energy and cost per token when
both plans report them (`cost_models.economics`), and the negated throughput,
model TFLOP/s per GPU and MFU (all three bases). Not compared: `bubble_fraction` and the
time breakdown (shares of the step time, not objectives: a smaller bubble in a longer step
is no gain), `hardware_tflops_per_gpu` (it counts recomputed FLOPs, so it rises with wasted
work), and the advisory warnings (they never change a rank, `solver.warnings`). Metrics are
compared after rounding to `SIGNIFICANT_DIGITS` significant digits, so that float noise in
figures a cost model computes along different paths ("same memory") reads as a tie;
rounding is monotone, so comparing rounded values is still a preorder (transitive).

Dominance. Plan A dominates plan B when they have the same layout and A is at least as good
as B on every compared metric. Plan B is *folded* under A when A dominates B and A ranks
before B; B is then *dominated*. Ties fold too: two plans equal on every metric keep the
better-ranked one (a pure duplicate).

Chains. Dominance is transitive (same layout is an equivalence, and ≤ on each rounded
metric is transitive), so if A dominates B and B dominates C, A dominates C. Every
dominated plan is folded under its *best-ranked* dominator, and that dominator is itself
not dominated: if D dominated it, D would rank before it and dominate the plan too. So
folding is one level deep (C is folded under A, not under B), and the non-dominated plans
are exactly the plans whose layout has no better-ranked plan that dominates them.

Diverse top-k (`fold_ranked`): the first k non-dominated plans in rank order, and under each
of them the dominated plans folded under it that rank before the k-th non-dominated plan,
at most `max_folded` of them (the best-ranked ones). A folded plan never takes a slot.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cost_models.base import TrainingEstimate
from specs.plan import PlanKey, TrainingPlan

TUNING_KNOBS: tuple[str, ...] = (
    "recompute",
    "micro_batch_size",
    "zero_stage",
    "sequence_parallel",
    "flash_attention",
    "stage_layers",
    "context_parallel_algorithm",
    "context_parallel_heads",
)
"""The plan fields that may differ between a plan and the plan it is folded under (module
docstring: why these only)."""

SIGNIFICANT_DIGITS = 9
"""Metrics are compared at this precision (module docstring)."""

MAX_FOLDED = 10
"""Folded plans kept under one non-dominated plan (the default top-k size)."""

_KNOB_LABEL = {
    "recompute": "recompute",
    "micro_batch_size": "micro-batch size",
    "zero_stage": "ZeRO stage",
    "sequence_parallel": "sequence parallelism",
    "flash_attention": "flash attention",
    "stage_layers": "stage split",
    "context_parallel_algorithm": "context-parallel algorithm",
    "context_parallel_heads": "context-parallel head groups",
}
_METRIC_LABEL = {
    "step_time_s": "step time",
    "step_time_s_low": "step time (low end)",
    "step_time_s_high": "step time (high end)",
    "peak_memory_gib": "peak memory",
    "memory_peak_gib": "peak memory",
    "num_gpus": "GPUs",
    "tokens_per_s": "throughput",
    "model_tflops_per_gpu": "TFLOP/s per GPU",
    "mfu": "MFU",
    "mfu_bf16_peak": "MFU (BF16 peak)",
    "mfu_fp8_peak": "MFU (FP8 peak)",
}
_LOWER_IS_BETTER = (
    "step_time_s",
    "step_time_s_low",
    "step_time_s_high",
    "peak_memory_gib",
    "energy_per_token_j",
    "cost_per_million_tokens",
)
_HIGHER_IS_BETTER = ("tokens_per_s", "model_tflops_per_gpu", "mfu", "mfu_bf16_peak", "mfu_fp8_peak")


def round_metric(x: float) -> float:
    """`x` to `SIGNIFICANT_DIGITS` significant digits (a monotone map)."""
    if x == 0.0 or not math.isfinite(x):
        return x
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


def layout_of(plan: TrainingPlan) -> tuple[Any, ...]:
    """Every plan field but the tuning knobs (module docstring), hashable."""
    data = plan.model_dump(mode="json")
    parallelism = dict(data.pop("parallelism"))
    parallelism.pop("sequence_parallel", None)
    for knob in TUNING_KNOBS:
        data.pop(knob, None)
    return (
        tuple(sorted(parallelism.items())),
        tuple(sorted((k, repr(v)) for k, v in data.items())),
    )


def layout_key(key: PlanKey) -> PlanKey:
    """A plan key with its tuning knobs set to fixed values: two keys of one layout map to
    the same key (on a homogeneous cluster, where the key holds the whole plan). The shared
    bound of sharded searches counts one plan per layout key (`branch_and_bound`)."""
    return key._replace(
        micro_batch_size=1,
        zero_stage=0,
        recompute="none",
        sequence_parallel=False,
        flash_attention=True,
        stage_layers=(),
        context_parallel_algorithm="ring",
        context_parallel_heads=1,
    )


def dominance_metrics(est: TrainingEstimate) -> dict[str, float]:
    """The compared metrics, rounded, each oriented so that smaller is better (higher-is-
    better figures negated); optional metrics only when the estimate reports them."""
    m = est.metrics
    out: dict[str, float] = {}
    for name in _LOWER_IS_BETTER:
        value = getattr(m, name)
        if value is not None:
            out[name] = round_metric(float(value))
    out["memory_peak_gib"] = round_metric(float(est.memory.peak_gib))
    out["num_gpus"] = float(est.plan.num_gpus)
    for name in _HIGHER_IS_BETTER:
        value = getattr(m, name)
        if value is not None:
            out[name] = -round_metric(float(value))
    return out


@dataclass(frozen=True, slots=True)
class Profile:
    """What dominance reads of one estimate: its layout and compared metrics."""

    layout: tuple[Any, ...]
    metrics: dict[str, float]

    @classmethod
    def of(cls, est: TrainingEstimate) -> Profile:
        if not isinstance(est.plan, TrainingPlan):  # a plug-in returned something else
            est = dataclasses.replace(est, plan=TrainingPlan.model_validate(est.plan))
        return cls(layout_of(est.plan), dominance_metrics(est))


def profile_dominates(a: Profile, b: Profile) -> bool:
    """Same layout, and `a` at least as good as `b` on every metric both report."""
    if a.layout != b.layout:
        return False
    return all(value <= b.metrics[name] for name, value in a.metrics.items() if name in b.metrics)


def dominates(a: TrainingEstimate, b: TrainingEstimate) -> bool:
    """`a` dominates `b` (module docstring): same layout, at least as good on every metric.
    Whether `b` is folded under `a` also needs `a` to rank first (`fold_ranked`)."""
    return profile_dominates(Profile.of(a), Profile.of(b))


def _knob_values(plan: TrainingPlan) -> dict[str, Any]:
    return {
        "recompute": plan.recompute,
        "micro_batch_size": plan.micro_batch_size,
        "zero_stage": plan.zero_stage,
        "sequence_parallel": plan.parallelism.sequence_parallel,
        "flash_attention": plan.flash_attention,
        "stage_layers": plan.stage_layers,
        "context_parallel_algorithm": plan.context_parallel_algorithm,
        "context_parallel_heads": plan.context_parallel_heads,
    }


def knobs_differing(a: TrainingPlan, b: TrainingPlan) -> list[str]:
    """The tuning knobs whose values differ between `a` and `b`, in `TUNING_KNOBS` order."""
    va, vb = _knob_values(a), _knob_values(b)
    return [k for k in TUNING_KNOBS if va[k] != vb[k]]


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def dominance_reason(dominator: TrainingEstimate, folded: TrainingEstimate) -> str:
    """A short sentence: which knobs differ and on which metrics the dominator is better or
    equal, e.g. "recompute selective instead of none; no better on step time (+2.1%),
    peak memory (same), GPUs (same)"."""
    pa, pb = dominator.plan, folded.plan
    va, vb = _knob_values(pa), _knob_values(pb)
    knobs = knobs_differing(pa, pb)
    if knobs:
        diff = ", ".join(
            f"{_KNOB_LABEL[k]} {_show(vb[k])} instead of {_show(va[k])}" for k in knobs
        )
    else:
        diff = "the same knobs"
    ma, mb = dominance_metrics(dominator), dominance_metrics(folded)
    parts = []
    for name in ("step_time_s", "peak_memory_gib", "num_gpus"):
        a, b = ma[name], mb[name]
        if a == b:
            parts.append(f"{_METRIC_LABEL[name]} (same)")
        elif a != 0:
            parts.append(f"{_METRIC_LABEL[name]} ({(b / a - 1.0) * 100.0:+.1f}%)")
        else:
            parts.append(f"{_METRIC_LABEL[name]} (worse)")
    return f"{diff}; no better on {', '.join(parts)}"


@dataclass(frozen=True, slots=True)
class FoldedEntry:
    """One plan of a diverse top-k, in rank order: `dominated_by` is the index (in the
    same list) of the plan it is folded under, None for a non-dominated plan."""

    estimate: TrainingEstimate
    dominated_by: int | None = None
    reason: str | None = None


def fold_ranked(
    ranked: Sequence[TrainingEstimate], *, k: int, max_folded: int = MAX_FOLDED
) -> list[FoldedEntry]:
    """The diverse top-k (module docstring) of `ranked`, a list of every plan in rank
    order (best first; it must hold every plan that ranks before the k-th non-dominated
    one). The reference definition: the search's `TopK` computes the same incrementally."""
    profiles = [Profile.of(est) for est in ranked]
    roots: list[int] = []
    dominator: dict[int, int] = {}
    for i, prof in enumerate(profiles):
        by = next((r for r in roots if profile_dominates(profiles[r], prof)), None)
        if by is None:
            if len(roots) == k:
                break
            roots.append(i)
        else:
            dominator[i] = by
    cutoff = roots[-1] if len(roots) == k else len(ranked)
    kept: list[int] = []
    count: dict[int, int] = {}
    for i in range(min(cutoff + 1, len(ranked))):
        by = dominator.get(i)
        if by is None:
            kept.append(i)
        elif count.get(by, 0) < max_folded:
            count[by] = count.get(by, 0) + 1
            kept.append(i)
    position = {i: n for n, i in enumerate(kept)}
    return [
        FoldedEntry(
            ranked[i],
            position[dominator[i]] if i in dominator else None,
            dominance_reason(ranked[dominator[i]], ranked[i]) if i in dominator else None,
        )
        for i in kept
    ]
