"""Expert placement feeding the MoE cost model: per-degree busiest-rank load factors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models.analytical.moe import busiest_rank_load
from cost_models.base import TrainingProblem
from cost_models.registry import build_cost_model
from hardware_catalog import resolve_cluster
from solver import estimate_plan
from solver.placement_load import placement_load_factors, with_placement_load_factors
from specs import ClusterSpec, ModelSpec, TrainingWorkload
from specs.plan import ParallelDims, TrainingPlan
from specs.workload import MoERoutingSpec

LOADS = [4.0, 3.0, 2.0, 1.0]


def _problem(optimize: bool) -> TrainingProblem:
    model = ModelSpec.model_validate(
        {
            "num_layers": 4,
            "hidden_size": 1024,
            "num_attention_heads": 8,
            "num_kv_heads": 8,
            "ffn_hidden_size": 4096,
            "vocab_size": 32000,
            "moe": {"num_experts": 4, "top_k": 1, "expert_ffn_hidden_size": 4096},
        }
    )
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2}]}
        )
    )
    workload = TrainingWorkload(
        global_batch_size=16,
        sequence_length=2048,
        moe_routing=MoERoutingSpec(expert_loads=LOADS, optimize_placement=optimize),
    )
    return TrainingProblem(model=model, cluster=cluster, workload=workload)


def test_solved_placement_balances_what_contiguous_placement_cannot() -> None:
    problem = _problem(optimize=True)
    factors = placement_load_factors(problem, [1, 2, 4, 3])
    # 2 ranks: {4, 1} and {3, 2} carry 5 each = the mean 5 → λ = 1.0; contiguous
    # {4, 3} / {2, 1} gives 7 / 5 = 1.4. 4 ranks: one expert each, λ = 4 / 2.5 = 1.6.
    assert factors == {1: 1.0, 2: pytest.approx(1.0), 4: pytest.approx(1.6)}
    assert busiest_rank_load(4, 2, problem.workload.moe_routing).load_factor == pytest.approx(1.4)


def test_the_search_prices_the_solved_placement() -> None:
    plan = TrainingPlan(
        parallelism=ParallelDims(data=2, expert=2), micro_batch_size=1, zero_stage=1
    )
    cost_model = build_cost_model("analytical")
    contiguous = estimate_plan(_problem(optimize=False), cost_model, plan)
    problem = with_placement_load_factors(_problem(optimize=True), [2])
    assert problem.workload.moe_routing is not None
    assert problem.workload.moe_routing.rank_load_factors == {2: pytest.approx(1.0)}
    placed = estimate_plan(problem, cost_model, plan)
    balanced = estimate_plan(
        replace(problem, workload=problem.workload.model_copy(update={"moe_routing": None})),
        cost_model,
        plan,
    )
    # the solved placement removes the 1.4× busiest-rank load: as fast as balanced routing
    assert placed.metrics.step_time_s < contiguous.metrics.step_time_s
    assert placed.metrics.step_time_s == pytest.approx(balanced.metrics.step_time_s, rel=1e-9)


def test_optimize_placement_needs_a_histogram() -> None:
    with pytest.raises(ValueError, match="optimize_placement needs"):
        MoERoutingSpec(optimize_placement=True)
