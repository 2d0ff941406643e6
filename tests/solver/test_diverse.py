"""The dominance rule of the diverse top-k (`solver.search.diverse`) on hand-made estimates:
which knobs may differ, every metric, ties, chains, the cut at the k-th non-dominated plan,
the cap on folded plans, and the incremental `TopK` against the reference `fold_ranked`
for any push order."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.base import TrainingEstimate
from solver.search.diverse import (
    TUNING_KNOBS,
    dominance_reason,
    dominates,
    fold_ranked,
    knobs_differing,
    layout_key,
    layout_of,
)
from solver.search.steps import TopK
from specs.plan import MemoryReport, ParallelDims, TimeBreakdown, TrainingMetrics, TrainingPlan

GBS_TOKENS = 1_000_000.0


def est(
    step: float,
    mem: float,
    *,
    data: int = 8,
    tensor: int = 1,
    pipeline: int = 1,
    framework: str | None = "megatron_core",
    high: float | None = None,
    **plan: Any,
) -> TrainingEstimate:
    """An estimate with step time `step` s and peak memory `mem` GiB; throughput and MFU
    follow from the step time as a cost model computes them (same GPUs, same batch)."""
    sp = plan.pop("sequence_parallel", False)
    training_plan = TrainingPlan(
        parallelism=ParallelDims(data=data, tensor=tensor, pipeline=pipeline, sequence_parallel=sp),
        framework=framework,
        **plan,
    )
    gpus = training_plan.num_gpus
    return TrainingEstimate(
        plan=training_plan,
        feasible=True,
        violations=[],
        metrics=TrainingMetrics(
            step_time_s=step,
            tokens_per_s=GBS_TOKENS / step,
            model_tflops_per_gpu=6e3 / (step * gpus),
            mfu=6e3 / (step * gpus) / 989.0,
            peak_memory_gib=mem,
            bubble_fraction=0.0,
            time_breakdown_s=TimeBreakdown(compute=step),
            step_time_s_high=high,
        ),
        memory=MemoryReport(peak_gib=mem, capacity_gib=80.0, usable_gib=76.0, by_stage=[]),
    )


def test_selective_recompute_with_the_same_memory_is_dominated_less_memory_is_not() -> None:
    base = est(1.00, 40.0)
    same_memory = est(1.02, 40.0, recompute="selective")
    assert dominates(base, same_memory)
    assert not dominates(same_memory, base)  # slower
    saves_memory = est(1.02, 30.0, recompute="selective")
    assert not dominates(base, saves_memory)  # recompute helped memory: a real trade-off
    assert dominates(base, est(1.3, 45.0, recompute="full"))


@pytest.mark.parametrize(
    ("change", "folds"),
    [
        ({"recompute": "full"}, True),
        ({"micro_batch_size": 4}, True),
        ({"zero_stage": 3}, True),
        ({"flash_attention": False}, True),
        ({"sequence_parallel": True, "tensor": 2}, False),  # tensor is the layout
        ({"stage_layers": [8]}, True),
        ({"tensor": 2, "data": 4}, False),
        ({"data": 4}, False),  # fewer GPUs: another layout (and better on GPUs)
        ({"framework": "torchtitan"}, False),
        ({"pipeline_schedule": "gpipe"}, False),
    ],
)
def test_which_knobs_may_differ(change: dict[str, Any], folds: bool) -> None:
    better = est(1.0, 40.0)
    worse = est(1.5, 50.0, **change)
    assert dominates(better, worse) is folds
    assert (layout_of(better.plan) == layout_of(worse.plan)) is folds


def test_sequence_parallel_is_a_tuning_knob_within_one_tensor_degree() -> None:
    a = est(1.0, 40.0, tensor=2, data=4)
    b = est(1.1, 40.0, tensor=2, data=4, sequence_parallel=True)
    assert dominates(a, b) and knobs_differing(a.plan, b.plan) == ["sequence_parallel"]
    assert layout_key(a.plan.key()) == layout_key(b.plan.key())
    assert layout_key(a.plan.key()) != layout_key(est(1.0, 40.0, tensor=4, data=2).plan.key())


def test_every_reported_metric_counts() -> None:
    a = est(1.0, 40.0)
    # better memory by one byte is better: no fold (9 significant digits of 40 GiB)
    assert not dominates(a, est(1.1, 40.0 - 1e-6))
    # float noise far below that is a tie ("same memory")
    assert dominates(a, est(1.1, 40.0 + 1e-12))
    # the uncertainty band: a tighter high end is a reason to keep the slower plan
    assert not dominates(est(1.0, 40.0, high=1.5), est(1.1, 40.0, high=1.2))
    assert dominates(est(1.0, 40.0, high=1.2), est(1.1, 40.0, high=1.5))
    # reported by one plan only: not compared
    assert dominates(est(1.0, 40.0, high=1.2), est(1.1, 40.0))
    # MFU higher at the same step time (a cost model counting FLOPs differently) counts:
    # b is then better than a on one metric and as good on the others
    b = est(1.0, 40.0, recompute="selective")
    b = TrainingEstimate(
        b.plan, True, [], b.metrics.model_copy(update={"mfu": a.metrics.mfu * 1.01}), b.memory
    )
    assert not dominates(a, b) and dominates(b, a)


def test_ties_fold_the_later_ranked_plan() -> None:
    a, b = est(1.0, 40.0), est(1.0, 40.0, zero_stage=2)
    assert dominates(a, b) and dominates(b, a)
    folded = fold_ranked([a, b], k=5)
    assert [e.dominated_by for e in folded] == [None, 0]
    folded = fold_ranked([b, a], k=5)  # the rank order decides which one stays
    assert folded[0].estimate is b and folded[1].dominated_by == 0


def test_chains_fold_under_the_best_ranked_dominator() -> None:
    a = est(1.0, 40.0)
    b = est(1.1, 40.0, recompute="selective")
    c = est(1.2, 41.0, recompute="full")
    assert dominates(a, b) and dominates(b, c) and dominates(a, c)
    folded = fold_ranked([a, b, c], k=3)
    assert [e.dominated_by for e in folded] == [None, 0, 0]
    # a plan between them of another layout does not interrupt the chain
    other = est(1.05, 20.0, tensor=2, data=4)
    folded = fold_ranked([a, other, b, c], k=3)
    assert [e.dominated_by for e in folded] == [None, None, 0, 0]


def test_a_dominated_plan_that_dominates_nothing_better_stays_apart() -> None:
    a = est(1.0, 40.0)
    b = est(1.1, 30.0, recompute="selective")  # trades time for memory: kept
    c = est(1.2, 35.0, recompute="full")  # b dominates it, a does not (a needs more memory)
    folded = fold_ranked([a, b, c], k=3)
    assert [e.dominated_by for e in folded] == [None, None, 1]


def test_the_cut_at_the_kth_non_dominated_plan_and_the_cap() -> None:
    a = est(1.0, 40.0)
    a1 = est(1.1, 40.0, recompute="selective")
    x = est(1.2, 20.0, tensor=2, data=4)
    a2 = est(1.3, 40.0, recompute="full")  # ranks after the 2nd non-dominated plan
    y = est(1.4, 10.0, tensor=4, data=2)
    folded = fold_ranked([a, a1, x, a2, y], k=2)
    assert [e.estimate for e in folded] == [a, a1, x]
    assert [e.dominated_by for e in folded] == [None, 0, None]
    variants = [est(1.0 + i / 100, 40.0, micro_batch_size=1 + i) for i in range(6)]
    folded = fold_ranked([*variants, x], k=2, max_folded=3)
    assert [e.estimate for e in folded] == [*variants[:4], x]
    assert [e.dominated_by for e in folded] == [None, 0, 0, 0, None]
    # fewer than k non-dominated plans: everything is shown
    assert len(fold_ranked(variants, k=10, max_folded=10)) == 6


def test_the_reason_names_the_knobs_and_the_metrics() -> None:
    a = est(1.0, 40.0)
    b = est(1.02, 40.0, recompute="selective", micro_batch_size=2)
    assert dominance_reason(a, b) == (
        "recompute selective instead of none, micro-batch size 2 instead of 1; no better on "
        "step time (+2.0%), peak memory (same), GPUs (same)"
    )
    assert set(knobs_differing(a.plan, b.plan)) <= set(TUNING_KNOBS)


# ---- the incremental TopK against the reference ----------------------------------------------
_LAYOUTS = [{}, {"tensor": 2, "data": 4}, {"framework": "torchtitan"}]
_KNOBS = [
    {},
    {"recompute": "selective"},
    {"recompute": "full"},
    {"micro_batch_size": 2},
    {"zero_stage": 3},
    {"flash_attention": False},
    {"micro_batch_size": 4, "recompute": "selective"},
]


@st.composite
def _pool(draw: st.DrawFn) -> list[TrainingEstimate]:
    """Distinct plans (layout × knobs) with step times and memories on a coarse grid, so
    that ties and dominance are common."""
    combos = draw(
        st.lists(
            st.tuples(st.integers(0, len(_LAYOUTS) - 1), st.integers(0, len(_KNOBS) - 1)),
            min_size=1,
            max_size=len(_LAYOUTS) * len(_KNOBS),
            unique=True,
        )
    )
    out = []
    for layout, knobs in combos:
        step = draw(st.integers(10, 16)) / 10
        mem = float(draw(st.integers(1, 4)) * 10)
        out.append(est(step, mem, **_LAYOUTS[layout], **_KNOBS[knobs]))
    return out


@settings(max_examples=200, deadline=None)
@given(
    pool=_pool(),
    k=st.integers(1, 4),
    cap=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_topk_equals_the_reference_folding_for_any_push_order(pool, k, cap, seed) -> None:
    ranked = sorted(pool, key=lambda e: (e.metrics.step_time_s, e.plan.key()))
    want = fold_ranked(ranked, k=k, max_folded=cap)
    order = list(pool)
    random.Random(seed).shuffle(order)
    top = TopK(k, max_folded=cap)
    for e in order:
        top.push(e.plan.key(), e)
    got = top.entries()
    assert [(g.estimate, g.dominated_by, g.reason) for g in got] == [
        (w.estimate, w.dominated_by, w.reason) for w in want
    ]
    roots = [w.estimate for w in want if w.dominated_by is None]
    assert top.estimates() == roots and len(top) == len(roots) <= k
    if len(roots) == k:
        assert top.full and top.worst()[0] == roots[-1].metrics.step_time_s
        # the threshold that only moves earlier is never earlier than the exact one
        assert top.safe_worst() >= top.worst()[0]


def test_topk_without_folding_is_the_plain_top_k() -> None:
    plans = [est(1.0 + i / 10, 40.0, micro_batch_size=1 + i) for i in range(5)]
    top = TopK(3, fold=False)
    for e in reversed(plans):
        top.push(e.plan.key(), e)
    assert top.estimates() == plans[:3] and [e.dominated_by for e in top.entries()] == [None] * 3
    folding = TopK(3)
    for e in reversed(plans):
        folding.push(e.plan.key(), e)
    assert folding.estimates() == plans[:1] and not folding.full
    assert [e.dominated_by for e in folding.entries()] == [None, 0, 0, 0, 0]


def test_a_plan_given_as_a_dict_by_a_plug_in_is_profiled_as_the_plan() -> None:
    import dataclasses

    from solver.search.diverse import Profile

    a = est(1.0, 40.0)
    as_dict = dataclasses.replace(a, plan=a.plan.model_dump(mode="json"))  # type: ignore[arg-type]
    assert Profile.of(as_dict) == Profile.of(a)
