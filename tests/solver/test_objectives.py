"""Training objectives other than throughput (issue 16, point 1): the figures every plan
reports (GPUs used, power, energy and cost per token, days to train) against the formulas
worked from the catalog's TDP and price, and each objective's answer against separate plain
searches on clusters of each size (independent of `solver.objectives`' merging)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from fake_cost_model import tiny_model

from cost_models.base import TrainingProblem
from cost_models.registry import build_cost_model
from hardware_catalog import get_accelerator, resolve_cluster
from solver import exhaustive_search, search
from solver.estimate import estimate_plan
from solver.formulations.stage_partition import PartitionSolver
from solver.objectives import candidate_sizes, check_objective, objective_search
from specs.cluster import ClusterSpec
from specs.constraints import SearchConstraints
from specs.errors import NoFeasiblePlan, SpecError
from specs.plan import ParallelDims, TrainingPlan
from specs.workload import TrainingWorkload

ANALYTICAL = build_cost_model("analytical")
H100 = get_accelerator("h100-sxm")
CONSTRAINTS = SearchConstraints(time_limit_s=60)


def _problem(
    nodes: int = 2, gpus_per_node: int = 8, accelerator: str = "h100-sxm", **workload: float
) -> TrainingProblem:
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {
                        "accelerator": accelerator,
                        "num_nodes": nodes,
                        "gpus_per_node": gpus_per_node,
                    }
                ]
            }
        )
    )
    return TrainingProblem(
        model=tiny_model(num_layers=8, hidden=2048, heads=16, kv=8, ffn=8192),
        cluster=cluster,
        workload=TrainingWorkload(global_batch_size=64, sequence_length=2048, **workload),
    )


def _size_problem(gpus: int, **workload: float) -> TrainingProblem:
    """A cluster of exactly `gpus` H100s, specified on its own (whole nodes of 8, or one
    node of fewer GPUs)."""
    if gpus >= 8:
        return _problem(gpus // 8, 8, **workload)
    return _problem(1, gpus, **workload)


def test_candidate_sizes_cover_part_of_a_node_and_every_node_count() -> None:
    assert candidate_sizes(8, 4) == [1, 2, 4, 8, 16, 24, 32]
    big = candidate_sizes(8, 100)
    nodes = sorted(s // 8 for s in big if s >= 8)
    assert nodes == [*range(1, 17), 32, 64, 100]


def test_energy_power_and_cost_follow_the_catalog_tdp_and_price() -> None:
    problem = _problem(1, 8, train_tokens=1e12)
    plan = TrainingPlan(parallelism=ParallelDims(data=4, tensor=2), recompute="full")
    est = estimate_plan(problem, ANALYTICAL, plan)
    m = est.metrics
    tokens = 64 * 2048
    peak = H100.peak_flops("bf16")
    hfu = m.hardware_tflops_per_gpu * 1e12 / peak  # FLOPs executed (recompute included)
    assert 0.0 < hfu < 1.0
    # P = TDP × (300/700 + (600/700 − 300/700) × HFU) on a 700 W board
    power = 700.0 * (300 / 700 + 300 / 700 * hfu)
    assert m.gpus_used == 8
    assert m.power_per_gpu_w == pytest.approx(power, rel=1e-9)
    assert m.energy_per_token_j == pytest.approx(8 * power * m.step_time_s / tokens, rel=1e-9)
    # $4.916 per H100-hour (AWS Capacity Blocks, the catalog's default)
    assert m.price_per_gpu_hour == pytest.approx(4.916)
    cost = 8 * 4.916 / 3600 * m.step_time_s / tokens * 1e6
    assert m.cost_per_million_tokens == pytest.approx(cost, rel=1e-9)
    assert m.time_to_train_days == pytest.approx(1e12 / m.tokens_per_s / 86400, rel=1e-9)
    # full recompute executes more FLOPs than the model needs: more power than at the MFU
    assert m.power_per_gpu_w > 700.0 * (300 / 700 + 300 / 700 * m.mfu)


def test_the_request_price_overrides_the_catalog_default() -> None:
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "price_per_gpu_hour": 2}]}
        )
    )
    problem = TrainingProblem(
        model=tiny_model(),
        cluster=cluster,
        workload=TrainingWorkload(global_batch_size=64, sequence_length=2048),
    )
    est = estimate_plan(problem, ANALYTICAL, TrainingPlan(parallelism=ParallelDims(data=8)))
    m = est.metrics
    assert m.price_per_gpu_hour == 2.0
    assert m.cost_per_million_tokens == pytest.approx(
        8 * 2 / 3600 * m.step_time_s / (64 * 2048) * 1e6
    )


def test_a_plan_of_fewer_gpus_runs_on_the_first_of_them_and_reports_it() -> None:
    small = estimate_plan(
        _problem(2, 8), ANALYTICAL, TrainingPlan(parallelism=ParallelDims(data=8))
    )
    alone = estimate_plan(
        _problem(1, 8), ANALYTICAL, TrainingPlan(parallelism=ParallelDims(data=8))
    )
    assert small.metrics.gpus_used == 8
    assert small.metrics.step_time_s == pytest.approx(alone.metrics.step_time_s, rel=1e-12)


def _best_per_size(objective_value, **workload: float) -> dict[int, float]:
    """Each size's best plan under the plain throughput search, on its own cluster."""
    out = {}
    for gpus in candidate_sizes(8, 2):
        result = search(
            _size_problem(gpus, **workload),
            ANALYTICAL,
            CONSTRAINTS,
            top_k=1,
            solver=PartitionSolver(),
        )
        if result.plans:
            out[gpus] = objective_value(result.plans[0].estimate.metrics)
    return out


def test_min_cost_leaves_gpus_idle_when_that_is_cheaper() -> None:
    problem = _problem(2, 8)
    fastest = objective_search(
        problem, ANALYTICAL, CONSTRAINTS, objective="max_throughput", top_k=1
    )
    cheapest = objective_search(problem, ANALYTICAL, CONSTRAINTS, objective="min_cost", top_k=3)
    # cost per token of each size's fastest plan = GPUs × $4.916/h × step / tokens
    costs = _best_per_size(lambda m: m.gpus_used * 4.916 / 3600 * m.step_time_s / (64 * 2048) * 1e6)
    best_size = min(costs, key=costs.get)
    top = cheapest.plans[0].estimate.metrics
    assert top.gpus_used == best_size
    assert top.cost_per_million_tokens == pytest.approx(costs[best_size], rel=1e-6)
    # the answer differs from the fastest plan, which uses all 16 GPUs
    assert fastest.plans[0].estimate.metrics.gpus_used == 16
    assert best_size < 16
    assert top.cost_per_million_tokens < fastest.plans[0].estimate.metrics.cost_per_million_tokens
    ranked = [p.estimate.metrics.cost_per_million_tokens for p in cheapest.plans]
    assert ranked == sorted(ranked)
    assert "idle" in cheapest.plans[0].explanation
    assert cheapest.stats.wall_time_s > 0  # the time of all the sizes' searches


def test_min_gpus_is_the_smallest_size_reaching_the_target() -> None:
    speeds = _best_per_size(lambda m: m.tokens_per_s)
    sizes = sorted(speeds)
    # a target just above the second-largest size's best throughput: the largest size needed
    below, above = sizes[-2], sizes[-1]
    target = speeds[below] * 1.01
    assert speeds[above] >= target
    expected = min(s for s in sizes if speeds[s] >= target)
    result = objective_search(
        _problem(2, 8, target_tokens_per_s=target),
        ANALYTICAL,
        CONSTRAINTS,
        objective="min_gpus",
        top_k=2,
    )
    assert result.plans[0].estimate.metrics.gpus_used == expected
    assert all(p.estimate.metrics.tokens_per_s >= target for p in result.plans)
    # a target nothing reaches: a 422 that says so
    with pytest.raises(NoFeasiblePlan, match="no plan reaches"):
        objective_search(
            _problem(2, 8, target_tokens_per_s=max(speeds.values()) * 2),
            ANALYTICAL,
            CONSTRAINTS,
            objective="min_gpus",
        )


def test_min_energy_equals_brute_force_over_every_plan_of_every_size() -> None:
    # a space small enough to list whole: no pipelining, two micro-batch sizes
    small = SearchConstraints(time_limit_s=60, fixed={"pipeline": 1}, micro_batch_sizes=[1, 4])
    result = objective_search(_problem(1, 8), ANALYTICAL, small, objective="min_energy", top_k=3)
    assert result.stats.complete
    energies = []
    for gpus in candidate_sizes(8, 1):
        every = exhaustive_search(
            _size_problem(gpus), ANALYTICAL, small, top_k=2000, solver=PartitionSolver()
        )
        assert len(every.plans) < 2000  # the whole space of the size
        # non-dominated plans: a folded plan is no better on any metric, energy included
        energies += [p.estimate.metrics.energy_per_token_j for p in every.plans]
    best = sorted(energies)[:3]
    found = [p.estimate.metrics.energy_per_token_j for p in result.plans]
    assert found == pytest.approx(best, rel=1e-6)


def test_min_time_to_train_ranks_by_days() -> None:
    result = objective_search(
        _problem(2, 8, train_tokens=1e11),
        ANALYTICAL,
        CONSTRAINTS,
        objective="min_time_to_train",
        top_k=3,
    )
    days = [p.estimate.metrics.time_to_train_days for p in result.plans]
    assert days == sorted(days)
    speeds = _best_per_size(lambda m: m.tokens_per_s)
    assert days[0] == pytest.approx(1e11 / max(speeds.values()) / 86400, rel=1e-6)


@pytest.mark.parametrize(
    ("objective", "workload", "field"),
    [
        ("min_time_to_train", {}, "workload.train_tokens"),
        ("min_gpus", {}, "workload.target_tokens_per_s"),
        ("min_gpus", {"train_tokens": 1e12}, "workload.target_tokens_per_s"),
    ],
)
def test_objectives_name_the_input_they_need(objective: str, workload: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        check_objective(_problem(1, 8, **workload), objective)
    assert info.value.field == field


def test_min_cost_without_any_price_names_the_node_group_field() -> None:
    problem = _problem(1, 8, accelerator="l40s")
    assert get_accelerator("l40s").price_per_gpu_hour is None
    with pytest.raises(SpecError) as info:
        check_objective(problem, "min_cost")
    assert info.value.field == "cluster.node_groups.0.price_per_gpu_hour"
    check_objective(problem, "min_energy")  # l40s has a sourced TDP
    assert math.isfinite(get_accelerator("l40s").tdp_w or math.nan)


# ---- mixed clusters ----------------------------------------------------------------------

A100_PRICE = 1.5
"""A request price for the A100 nodes (the catalog has none for a100-80gb)."""


def _mixed_problem(**workload: float) -> TrainingProblem:
    """One node of 8 H100 (catalog price) and one of 8 A100 at `A100_PRICE` per GPU-hour."""
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8},
                    {
                        "accelerator": "a100-80gb",
                        "num_nodes": 1,
                        "gpus_per_node": 8,
                        "price_per_gpu_hour": A100_PRICE,
                    },
                ]
            }
        )
    )
    return TrainingProblem(
        model=tiny_model(num_layers=8, hidden=2048, heads=16, kv=8, ffn=8192),
        cluster=cluster,
        workload=TrainingWorkload(global_batch_size=64, sequence_length=2048, **workload),
    )


def _pool_best(accelerator: str, objective_value) -> dict[int, float]:
    """Each size of one 8-GPU node of `accelerator` (1, 2, 4, 8 GPUs), searched for
    throughput on a cluster of exactly that size, specified on its own."""
    out = {}
    for gpus in candidate_sizes(8, 1):
        result = search(
            _problem(1, gpus, accelerator=accelerator),
            ANALYTICAL,
            CONSTRAINTS,
            top_k=1,
            solver=PartitionSolver(),
        )
        if result.plans:
            out[gpus] = objective_value(result.plans[0].estimate.metrics, accelerator)
    return out


def _cost(m, accelerator: str) -> float:
    """Cost per million tokens worked from the step time: GPUs × price × step / tokens."""
    price = A100_PRICE if accelerator == "a100-80gb" else 4.916
    return m.gpus_used * price / 3600 * m.step_time_s / (64 * 2048) * 1e6


def test_min_cost_on_a_mixed_cluster_takes_the_cheaper_pool_and_leaves_the_rest_idle() -> None:
    from solver import mixed_search

    problem = _mixed_problem()
    result = objective_search(
        problem, ANALYTICAL, CONSTRAINTS, objective="min_cost", top_k=3, run=mixed_search
    )
    fastest = mixed_search(problem, ANALYTICAL, CONSTRAINTS, top_k=1)
    # independent: each pool's sizes searched on clusters of their own, priced by hand
    by_pool = {a: _pool_best(a, _cost) for a in ("h100-sxm", "a100-80gb")}
    cheapest = min((c, a, g) for a, costs in by_pool.items() for g, c in costs.items())
    top = result.plans[0].estimate
    assert top.metrics.cost_per_million_tokens == pytest.approx(cheapest[0], rel=1e-6)
    assert set(top.plan.stage_groups or ()) == {cheapest[1]}
    assert top.metrics.gpus_used == cheapest[2]
    # not the max-throughput answer, and cheaper than it
    assert top.metrics.cost_per_million_tokens < (
        fastest.plans[0].estimate.metrics.cost_per_million_tokens
    )
    ranked = [p.estimate.metrics.cost_per_million_tokens for p in result.plans]
    assert ranked == sorted(ranked)
    assert f"(pool {cheapest[1]})" in result.plans[0].explanation


def test_min_gpus_on_a_mixed_cluster_is_the_smallest_pool_size_reaching_the_target() -> None:
    from solver import mixed_search

    speeds = {a: _pool_best(a, lambda m, _a: m.tokens_per_s) for a in ("h100-sxm", "a100-80gb")}
    # a target the 4-GPU H100 size reaches but the 4-GPU A100 size and both 2-GPU sizes do not
    target = max(speeds["a100-80gb"][4], speeds["h100-sxm"][2]) * 1.001
    assert speeds["h100-sxm"][4] >= target
    result = objective_search(
        _mixed_problem(target_tokens_per_s=target),
        ANALYTICAL,
        CONSTRAINTS,
        objective="min_gpus",
        top_k=1,
        run=mixed_search,
    )
    top = result.plans[0].estimate
    assert top.metrics.gpus_used == 4 and set(top.plan.stage_groups or ()) == {"h100-sxm"}
    assert top.metrics.tokens_per_s >= target


def test_min_energy_on_a_mixed_cluster_needs_every_pool_tdp() -> None:
    problem = _mixed_problem()
    check_objective(problem, "min_energy")  # both have a sourced TDP
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {"accelerator": "h100-sxm", "num_nodes": 1},
                    {"accelerator": "l40s", "num_nodes": 1, "gpus_per_node": 8},
                ]
            }
        )
    )
    check_objective(dataclasses.replace(problem, cluster=cluster), "min_energy")
    with pytest.raises(SpecError) as info:
        check_objective(dataclasses.replace(problem, cluster=cluster), "min_cost")
    assert info.value.field == "cluster.node_groups.1.price_per_gpu_hour"
