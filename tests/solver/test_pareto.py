"""The Pareto front of a training search (issue 16, point 2) against brute force: every
plan of small spaces priced (the exhaustive search, nothing folded), the non-dominated ones
picked by pairwise comparison here, and the pruned front search compared with them."""

from __future__ import annotations

import pytest
from fake_cost_model import tiny_model

from cost_models.base import TrainingProblem
from cost_models.mixed import pool_problem
from cost_models.registry import build_cost_model
from hardware_catalog import resolve_cluster
from solver import exhaustive_search
from solver.formulations.stage_partition import PartitionSolver
from solver.objectives import candidate_sizes
from solver.search.pareto import pareto_front
from specs.cluster import ClusterSpec
from specs.constraints import SearchConstraints
from specs.workload import TrainingWorkload

ANALYTICAL = build_cost_model("analytical")


def _problem(nodes: int, gpus_per_node: int, memory_layers: int = 8) -> TrainingProblem:
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {"accelerator": "h100-sxm", "num_nodes": nodes, "gpus_per_node": gpus_per_node}
                ]
            }
        )
    )
    return TrainingProblem(
        model=tiny_model(num_layers=memory_layers, hidden=2048, heads=16, kv=8, ffn=8192),
        cluster=cluster,
        workload=TrainingWorkload(global_batch_size=32, sequence_length=4096),
    )


def _figures(est) -> tuple[float, ...]:
    m = est.metrics
    return (
        round(m.tokens_per_s, 6),
        m.gpus_used,
        round(m.cost_per_million_tokens, 12),
        round(m.energy_per_token_j, 12),
        round(est.memory.peak_gib, 9),
    )


def _brute_front(sizes, constraints) -> set[tuple[float, ...]]:
    every = []
    for problem in sizes:
        result = exhaustive_search(
            problem, ANALYTICAL, constraints, top_k=100_000, fold=False, solver=PartitionSolver()
        )
        assert result.stats.complete
        every += [p.estimate for p in result.plans]
    assert len(every) > 20  # a space with something to trade

    def better(a, b) -> bool:  # a dominates b
        fa, fb = _figures(a), _figures(b)
        ga = (-fa[0], *fa[1:])
        gb = (-fb[0], *fb[1:])
        return all(x <= y for x, y in zip(ga, gb, strict=True)) and ga != gb

    return {_figures(e) for e in every if not any(better(o, e) for o in every)}


@pytest.mark.parametrize("pipeline", [1, 2])
def test_front_of_one_size_equals_brute_force(pipeline: int) -> None:
    problem = _problem(1, 8)
    constraints = SearchConstraints(time_limit_s=120, fixed={"pipeline": pipeline})
    found = pareto_front([problem], ANALYTICAL, constraints, solver=PartitionSolver())
    assert found.stats.complete and found.stats.wall_time_s > 0
    assert {_figures(e) for e in found.plans} == _brute_front([problem], constraints)
    # the front trades something: more than one plan, not all at the top throughput
    assert len(found.plans) >= 2
    assert found.stats.pruned.get("pareto_bound", 0) > 0  # the bounds did prune
    speeds = [e.metrics.tokens_per_s for e in found.plans]
    assert speeds == sorted(speeds, reverse=True)


def test_front_over_sizes_that_leave_gpus_idle_equals_brute_force() -> None:
    full = _problem(1, 8)
    sizes = [pool_problem(full, full.cluster, g) for g in candidate_sizes(8, 1)]
    constraints = SearchConstraints(
        time_limit_s=120, fixed={"pipeline": 1}, micro_batch_sizes=[1, 4]
    )
    found = pareto_front(sizes, ANALYTICAL, constraints, solver=PartitionSolver())
    assert {_figures(e) for e in found.plans} == _brute_front(sizes, constraints)
    assert len({e.metrics.gpus_used for e in found.plans}) >= 2  # GPUs traded too
