"""estimate_plan (split filled in, memory fallback), explain sentences, the public API."""

from __future__ import annotations

import pytest
from fake_cost_model import FakeCostModel, make_problem, tiny_model

import solver
from cost_models.base import TrainingEstimate
from cost_models.economics import with_economics
from cost_models.registry import build_cost_model
from solver import estimate_plan, explain
from specs.errors import InfeasiblePlan, SpecError
from specs.plan import (
    MemoryReport,
    ParallelDims,
    StageMemory,
    TimeBreakdown,
    TrainingMetrics,
    TrainingPlan,
)


def test_public_api_is_pinned() -> None:
    assert set(solver.__all__) == {
        "PartitionResult",
        "RankedPlan",
        "SearchResult",
        "SearchStats",
        "SolveStatus",
        "estimate_plan",
        "exhaustive_search",
        "explain",
        "mixed_search",
        "search",
    }


def test_estimate_fills_the_split_with_the_time_optimal_one() -> None:
    # fake model, 8 identical layers, pipeline 2: rank 1 also runs the LM head, so the
    # optimal split puts more layers on rank 0 (never fewer).
    problem = make_problem(tiny_model(num_layers=8), 1, global_batch=16)
    plan = TrainingPlan(parallelism=ParallelDims(data=4, pipeline=2), micro_batch_size=1)
    est = estimate_plan(problem, FakeCostModel(), plan)
    assert est.plan.stage_layers is not None and sum(est.plan.stage_layers) == 8
    assert est.plan.stage_layers[0] >= est.plan.stage_layers[1]
    best = min(
        FakeCostModel()
        .evaluate(problem, plan.model_copy(update={"stage_layers": [k, 8 - k]}))
        .metrics.step_time_s
        for k in range(1, 8)
    )
    assert est.metrics.step_time_s == pytest.approx(best)


def test_estimate_reports_memory_violation_instead_of_failing() -> None:
    problem = make_problem(
        tiny_model(num_layers=8, hidden=2048, ffn=8192),
        1,
        memory_gib=2.0,
        global_batch=16,
        headroom_gib=0.5,
    )
    plan = TrainingPlan(parallelism=ParallelDims(data=4, pipeline=2), zero_stage=0)
    est = estimate_plan(problem, FakeCostModel(), plan)
    assert not est.feasible
    assert est.violations[0].kind == "memory"
    assert est.plan.stage_layers is not None


def test_estimate_raises_on_rule_violation() -> None:
    problem = make_problem(tiny_model(num_layers=6), 1, gpus_per_node=4, global_batch=16)
    plan = TrainingPlan(
        parallelism=ParallelDims(data=2, pipeline=2, virtual_pipeline=2),
        pipeline_schedule="interleaved_1f1b",
    )
    with pytest.raises(InfeasiblePlan, match="interleaving"):
        estimate_plan(problem, FakeCostModel(), plan)


def test_estimate_prices_a_plan_its_framework_cannot_run_and_reports_the_rule() -> None:
    # DeepSpeed's PipelineEngine has no interleaved schedule: the plan is well formed, so it
    # is priced (split chosen) and answered infeasible with the rule instead of raising
    analytical = build_cost_model("analytical")
    problem = make_problem(tiny_model(num_layers=8), 1, global_batch=16)
    plan = TrainingPlan(
        parallelism=ParallelDims(data=2, tensor=2, pipeline=2, virtual_pipeline=2),
        pipeline_schedule="interleaved_1f1b",
        framework="deepspeed",
    )
    est = estimate_plan(problem, analytical, plan)
    assert not est.feasible
    assert [v.kind for v in est.violations] == ["framework"]
    assert "no interleaved schedule" in est.violations[0].detail
    assert est.plan.framework == "deepspeed"
    assert est.plan.stage_layers is not None and sum(est.plan.stage_layers) == 8
    # the split it chose, given back, prices the same
    again = with_economics(problem, analytical.evaluate(problem, est.plan))
    assert again.metrics == est.metrics and again.violations == est.violations
    # Megatron-Core runs the same plan
    megatron = estimate_plan(problem, analytical, plan.model_copy(update={"framework": None}))
    assert megatron.feasible and megatron.plan.framework == "megatron_core"


def test_estimate_still_raises_when_a_non_framework_rule_breaks_too() -> None:
    analytical = build_cost_model("analytical")
    problem = make_problem(tiny_model(num_layers=8), 1, global_batch=16)
    # 16 sequences cannot be cut into micro-batches of 3 on 4 data-parallel ranks
    plan = TrainingPlan(
        parallelism=ParallelDims(data=4, tensor=2), micro_batch_size=3, framework="fsdp"
    )
    with pytest.raises(InfeasiblePlan) as exc:
        estimate_plan(problem, analytical, plan)
    assert exc.value.extensions["kind"] == "batch"
    kinds = [v["kind"] for v in exc.value.extensions["violations"]]
    assert "framework" in kinds and "batch" in kinds


@pytest.mark.parametrize("stage_layers", [None, [4, 4]])
def test_estimate_refuses_an_unknown_framework_naming_the_field(
    stage_layers: list[int] | None,
) -> None:
    problem = make_problem(tiny_model(num_layers=8), 1, global_batch=16)
    plan = TrainingPlan(
        parallelism=ParallelDims(data=4, pipeline=2),
        stage_layers=stage_layers,
        framework="colossalai",
    )
    with pytest.raises(SpecError) as exc:
        estimate_plan(problem, FakeCostModel(), plan)
    assert exc.value.field == "plan.framework"
    assert exc.value.extensions["errors"][0]["value"] == "colossalai"
    assert "megatron_core" in exc.value.detail  # the registered names


def _estimate(
    pipeline: int,
    step: float,
    bubble: float,
    dp: float,
    peak: float,
    tiers: dict[str, str] | None = None,
    framework: str | None = None,
) -> TrainingEstimate:
    compute = step - bubble * step - dp
    return TrainingEstimate(
        plan=TrainingPlan(
            parallelism=ParallelDims(
                data=64 // (8 * pipeline), tensor=8, pipeline=pipeline, sequence_parallel=True
            ),
            stage_layers=[80 // pipeline] * pipeline,
            framework=framework,
        ),
        feasible=True,
        violations=[],
        metrics=TrainingMetrics(
            step_time_s=step,
            tokens_per_s=1.0,
            model_tflops_per_gpu=1.0,
            mfu=0.41,
            peak_memory_gib=peak,
            bubble_fraction=bubble,
            time_breakdown_s=TimeBreakdown(
                compute=compute, data_parallel_comm=dp, bubble=bubble * step
            ),
        ),
        memory=MemoryReport(
            peak_gib=peak,
            capacity_gib=80.0,
            usable_gib=78.0,
            by_stage=[
                StageMemory(
                    weights_gib=1,
                    gradients_gib=1,
                    optimizer_gib=1,
                    activations_gib=1,
                    other_gib=1,
                    total_gib=peak,
                )
            ],
        ),
        details={"comm_tiers": tiers or {}},
    )


def test_explain_names_bottleneck_bubble_comm_headroom_and_trade() -> None:
    first = _estimate(4, 10.0, 0.02, 0.5, 70.0, {"data_parallel": "scale_out"})
    # 3% slower; pipeline 8 instead of 4 adds 6 points of bubble but frees 21 GiB
    second = _estimate(8, 10.3, 0.08, 0.2, 49.0)
    lines = explain([first, second])
    assert len(lines) == 2
    one, two = lines
    # #1: compute = 10 - 0.2 - 0.5 = 9.3 s = 93% of the step; headroom 78 - 70 = 8.0 GiB
    assert one.startswith("#1: 10.00 s per step at 41.0% MFU")
    assert "bottleneck is compute (93% of the step)" in one
    assert "bubble is 2.0%" in one
    assert (
        "500 ms exposed communication (mostly data-parallel communication over the network" in one
    )
    assert "8.0 GiB of memory headroom" in one
    assert "2.9% faster than #2: data 2 instead of 1, pipeline 4 instead of 8" in one
    # #2: 10.3 / 10.0 - 1 = 3.0%; bubble 8% - 2% = 6.0 points; 49 - 70 = -21 GiB
    assert "3.0% slower than #1: data 1 instead of 2, pipeline 8 instead of 4" in two
    assert "adds 6.0% bubble" in two and "frees 21.0 GiB" in two
    assert "hides 300 ms of communication" in two


def test_explain_of_nothing_is_empty() -> None:
    assert explain([]) == []


def test_explain_names_the_framework_and_a_framework_difference() -> None:
    first = _estimate(4, 10.0, 0.02, 0.5, 70.0, framework="megatron_core")
    second = _estimate(4, 10.5, 0.02, 0.5, 70.0, framework="torchtitan")
    one, two = explain([first, second])
    assert one.startswith("#1: 10.00 s per step at 41.0% MFU with Megatron-Core; the bottleneck")
    assert "faster than #2: framework Megatron-Core instead of torchtitan" in one
    assert "10.50 s per step at 41.0% MFU with torchtitan;" in two
    assert "5.0% slower than #1: framework torchtitan instead of Megatron-Core" in two
    # a name no profile has is shown as it is; no framework, no mention
    (unknown,) = explain([_estimate(4, 10.0, 0.02, 0.5, 70.0, framework="jax")])
    assert "MFU with jax;" in unknown
    (plain,) = explain([_estimate(4, 10.0, 0.02, 0.5, 70.0)])
    assert "MFU; the bottleneck" in plain and " with " not in plain
