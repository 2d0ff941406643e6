"""Plain-language explanations of ranked plans, built only from the estimates' numbers.

For each plan: the framework it was priced for (its label, `cost_models.frameworks`), its
bottleneck (the largest time component of `metrics.time_breakdown_s`), the bubble share, the
exposed communication and its tier (from `details["comm_tiers"]` when the cost model gives
it), the memory headroom, and what it trades against its neighbour (the plan above it; for
#1 the plan below it), a different framework included.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from cost_models.base import TrainingEstimate
from cost_models.frameworks import build_framework
from specs.errors import PlannerError
from specs.plan import TrainingPlan

_COMPONENT_LABEL = {
    "compute": "compute",
    "tensor_parallel_comm": "tensor-parallel communication",
    "data_parallel_comm": "data-parallel communication",
    "pipeline_comm": "pipeline send/recv",
    "context_parallel_comm": "context-parallel communication",
    "expert_parallel_comm": "expert-parallel communication",
    "bubble": "the pipeline bubble",
    "optimizer": "the optimizer step",
    "overhead": "fixed overhead",
}
_COMM_COMPONENTS = (
    "tensor_parallel_comm",
    "data_parallel_comm",
    "pipeline_comm",
    "context_parallel_comm",
    "expert_parallel_comm",
)
_TIER_LABEL = {"scale_up": "the scale-up fabric (NVLink)", "scale_out": "the network (NIC)"}
_TINY = 1e-12


def _seconds(x: float) -> str:
    """'9.10 s' from one second up, '12.3 ms' below."""
    return f"{x:.2f} s" if abs(x) >= 1.0 else f"{x * 1e3:.3g} ms"


@lru_cache(maxsize=64)
def _framework_label(name: str | None) -> str | None:
    """`Megatron-Core` for `megatron_core`; the name itself when no profile has it; None
    for a plan that names no framework (a cost model without framework profiles)."""
    if not name:
        return None
    try:
        return build_framework(name).label
    except PlannerError:
        return name


def _dims(plan: TrainingPlan) -> list[tuple[str, object]]:
    p = plan.parallelism
    return [
        ("data", p.data),
        ("tensor", p.tensor),
        ("pipeline", p.pipeline),
        ("virtual pipeline", p.virtual_pipeline),
        ("vocabulary parallel", "on" if plan.vocab_parallel else "off"),
        ("context", p.context),
        ("context-parallel algorithm", _cp_text(plan)),
        ("expert", p.expert),
        ("sequence parallel", p.sequence_parallel),
        ("micro-batch", plan.micro_batch_size),
        ("ZeRO stage", plan.zero_stage),
        ("recompute", plan.recompute),
        ("flash attention", plan.flash_attention),
        ("framework", _framework_label(plan.framework)),
    ]


def _cp_text(plan: TrainingPlan) -> str:
    """'ring', or 'hybrid (heads 8 × ring 2)'."""
    algorithm = plan.context_parallel_algorithm
    if algorithm == "hybrid":
        u = plan.context_parallel_heads
        return f"hybrid (heads {u} × ring {plan.parallelism.context // u})"
    return algorithm


def _group_order(plan: TrainingPlan) -> list[str]:
    """The node groups along the pipeline, each once (empty for a plan without them)."""
    return list(dict.fromkeys(plan.stage_groups or []))


def _degrees_text(plan: TrainingPlan) -> str:
    """Each stage's tensor degree, runs collapsed ('2 on 16 stages, 4 on 2')."""
    runs: list[list[int]] = []
    for t in plan.stage_tensor_degrees():
        if runs and runs[-1][0] == t:
            runs[-1][1] += 1
        else:
            runs.append([t, 1])
    return ", ".join(f"{t} on {n} stage{'s' if n > 1 else ''}" for t, n in runs)


def _plan_diff(plan: TrainingPlan, other: TrainingPlan) -> str:
    """'pipeline 8 instead of 4, micro-batch 2 instead of 1' (fields that differ)."""
    parts = [
        f"{name} {mine} instead of {theirs}"
        for (name, mine), (_, theirs) in zip(_dims(plan), _dims(other), strict=True)
        if mine != theirs
    ]
    # plans across node groups: the order of the groups along the pipeline and the tensor
    # degree of each stage are differences too
    mine_order, theirs_order = _group_order(plan), _group_order(other)
    if mine_order != theirs_order and mine_order and theirs_order:
        parts.append(f"groups {' → '.join(mine_order)} instead of {' → '.join(theirs_order)}")
    if plan.stage_tensor != other.stage_tensor and (plan.stage_tensor or other.stage_tensor):
        parts.append(
            f"stage tensor degrees {_degrees_text(plan)} instead of {_degrees_text(other)}"
        )
    if not parts and plan.stage_layers != other.stage_layers:
        parts.append(f"stage split {plan.stage_layers} instead of {other.stage_layers}")
    return ", ".join(parts) if parts else "the same degrees"


def _comm(est: TrainingEstimate) -> tuple[float, str | None]:
    """Exposed communication seconds and the largest component's name."""
    tb = est.metrics.time_breakdown_s
    values = {name: float(getattr(tb, name)) for name in _COMM_COMPONENTS}
    total = sum(values.values())
    biggest = max(values, key=lambda n: (values[n], n)) if total > _TINY else None
    return total, biggest


def _tier(est: TrainingEstimate, component: str) -> str | None:
    tiers = est.details.get("comm_tiers") if isinstance(est.details, dict) else None
    if not isinstance(tiers, dict):
        return None
    key = component.removesuffix("_comm")
    tier = tiers.get(key, tiers.get(component))
    return _TIER_LABEL.get(str(tier), str(tier)) if tier is not None else None


def describe(est: TrainingEstimate) -> str:
    """One sentence: step time and MFU with the framework priced for, bottleneck, bubble,
    exposed communication and tier, memory headroom."""
    m = est.metrics
    tb = m.time_breakdown_s
    components = {name: float(getattr(tb, name)) for name in _COMPONENT_LABEL}
    bottleneck = max(components, key=lambda n: (components[n], n))
    share = components[bottleneck] / m.step_time_s if m.step_time_s > 0 else 0.0
    comm, biggest = _comm(est)
    if biggest is None:
        comm_text = "no exposed communication"
    else:
        tier = _tier(est, biggest)
        where = f" over {tier}" if tier else ""
        comm_text = (
            f"{_seconds(comm)} exposed communication (mostly {_COMPONENT_LABEL[biggest]}{where})"
        )
    headroom = est.memory.usable_gib - est.memory.peak_gib
    label = _framework_label(est.plan.framework)
    framework = f" with {label}" if label else ""
    if est.plan.vocab_parallel:
        framework += (
            f" (vocabulary parallel: embedding and LM head split over the "
            f"{est.plan.parallelism.pipeline} pipeline stages)"
        )
    mfu = f"{m.mfu:.1%} MFU"
    if m.mfu_fp8_peak is not None and m.mfu_bf16_peak is not None:
        mfu += f" ({m.mfu_bf16_peak:.1%} of the BF16 peak)"
    return (
        f"{_seconds(m.step_time_s)} per step at {mfu}{framework}; the bottleneck is "
        f"{_COMPONENT_LABEL[bottleneck]} ({share:.0%} of the step), the bubble is "
        f"{m.bubble_fraction:.1%}, {comm_text}, and {headroom:.1f} GiB of memory headroom."
    )


def compare(est: TrainingEstimate, other: TrainingEstimate, other_rank: int) -> str:
    """One sentence: how `est` differs from the plan ranked `other_rank`, and what it costs."""
    t, t_other = est.metrics.step_time_s, other.metrics.step_time_s
    rel = (t / t_other - 1.0) * 100.0 if t_other > 0 else 0.0
    if abs(rel) < 0.05:
        head = f"As fast as #{other_rank}"
    elif rel > 0:
        head = f"{rel:.1f}% slower than #{other_rank}"
    else:
        head = f"{-rel:.1f}% faster than #{other_rank}"
    gains: list[str] = []
    costs: list[str] = []
    d_bubble = (est.metrics.bubble_fraction - other.metrics.bubble_fraction) * 100.0
    if d_bubble >= 0.05:
        costs.append(f"adds {d_bubble:.1f}% bubble")
    elif d_bubble <= -0.05:
        gains.append(f"cuts the bubble by {-d_bubble:.1f}%")
    comm, _ = _comm(est)
    comm_other, _ = _comm(other)
    if abs(comm - comm_other) >= 0.001 * max(t, t_other):
        if comm > comm_other:
            costs.append(f"exposes {_seconds(comm - comm_other)} more communication")
        else:
            gains.append(f"hides {_seconds(comm_other - comm)} of communication")
    d_mem = est.memory.peak_gib - other.memory.peak_gib
    if d_mem <= -0.05:
        gains.append(f"frees {-d_mem:.1f} GiB")
    elif d_mem >= 0.05:
        costs.append(f"needs {d_mem:.1f} GiB more")
    # A slower plan leads with what it costs, a faster one with what it buys.
    lead, rest = (costs, gains) if rel > 0 else (gains, costs)
    text = f"{head}: {_plan_diff(est.plan, other.plan)}"
    if lead or rest:
        text += " " + " and ".join(lead or rest)
        if lead and rest:
            text += " but " + " and ".join(rest)
    return text + "."


def explain(ranked: Sequence[TrainingEstimate]) -> list[str]:
    """One or two sentences per plan (best first) saying why it ranks where it does."""
    out: list[str] = []
    for i, est in enumerate(ranked):
        text = f"#{i + 1}: {describe(est)}"
        if i > 0:
            text += " " + compare(est, ranked[i - 1], i)
        elif len(ranked) > 1:
            text += " " + compare(est, ranked[1], 2)
        out.append(text)
    return out
