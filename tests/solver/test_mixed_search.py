"""The mixed-cluster search against exhaustive evaluation of the same space."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from cost_models.base import TrainingProblem
from cost_models.mixed import evaluate_mixed, pool_problem
from cost_models.registry import build_cost_model
from hardware_catalog import resolve_cluster
from solver.search.exhaustive import exhaustive_search
from solver.search.mixed import _candidates, mixed_search
from specs.cluster import ClusterSpec
from specs.constraints import SearchConstraints
from specs.model import ModelSpec
from specs.workload import TrainingWorkload
from tests.support import TINY_MODEL

SMALL: dict[str, Any] = {**TINY_MODEL, "num_layers": 6}


def _problem(groups: list[dict[str, Any]]) -> TrainingProblem:
    return TrainingProblem(
        model=ModelSpec.model_validate(SMALL),
        cluster=resolve_cluster(ClusterSpec.model_validate({"node_groups": groups})),
        workload=TrainingWorkload.model_validate(
            {"kind": "training", "global_batch_size": 16, "sequence_length": 512}
        ),
    )


def _exhaustive_best(problem: TrainingProblem, constraints: SearchConstraints) -> float:
    """Every plan of the declared space priced: each pool alone (exhaustive homogeneous
    search) and every cross-pool candidate with every split of the layers."""
    model = build_cost_model("analytical")
    best = float("inf")
    for pool in problem.cluster.pools().values():
        alone = exhaustive_search(
            pool_problem(problem, pool, pool.num_gpus), model, constraints, top_k=1
        )
        if alone.plans:
            best = min(best, alone.plans[0].estimate.metrics.step_time_s)
    layers = problem.model.num_layers
    for stage_pools, plan in _candidates(problem, constraints, list(problem.cluster.pools())):
        pp = len(stage_pools)
        for cuts in itertools.combinations(range(1, layers), pp - 1):
            bounds = (0, *cuts, layers)
            split = [bounds[i + 1] - bounds[i] for i in range(pp)]
            full = plan.model_copy(update={"stage_layers": split, "stage_groups": stage_pools})
            if model.check(pool_problem(problem, problem.cluster.pools()[stage_pools[0]],
                                        plan.parallelism.world_size), plan):  # fmt: skip
                break
            est = evaluate_mixed(model, problem, full)
            if est.feasible:
                best = min(best, est.metrics.step_time_s)
    return best


@pytest.mark.parametrize(
    "groups",
    [
        [
            {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2},
            {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 2},
        ],
        [
            {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4},
            {"accelerator": "l40s", "num_nodes": 1, "gpus_per_node": 2},
            {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 2},
        ],
    ],
)
def test_mixed_search_equals_exhaustive_evaluation(groups: list[dict[str, Any]]) -> None:
    problem = _problem(groups)
    constraints = SearchConstraints(micro_batch_sizes=[1, 2], time_limit_s=120)
    model = build_cost_model("analytical")
    exact = mixed_search(problem, model, constraints, top_k=3, share_data=False)
    assert exact.stats.complete
    assert exact.plans[0].estimate.metrics.step_time_s == pytest.approx(
        _exhaustive_best(problem, constraints), rel=1e-9
    )
    # sharing data over groups only adds candidates: never slower
    shared = mixed_search(problem, model, constraints, top_k=3)
    best = shared.plans[0].estimate.metrics.step_time_s
    assert best <= exact.plans[0].estimate.metrics.step_time_s * (1 + 1e-12)


def test_mixed_search_is_never_worse_than_any_single_pool() -> None:
    problem = _problem(
        [
            {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4},
            {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 4},
        ]
    )
    constraints = SearchConstraints(micro_batch_sizes=[1, 2], time_limit_s=120)
    model = build_cost_model("analytical")
    result = mixed_search(problem, model, constraints, top_k=5)
    best = result.plans[0].estimate.metrics.step_time_s
    for pool in problem.cluster.pools().values():
        alone = exhaustive_search(pool_problem(problem, pool, pool.num_gpus), model, constraints)
        assert best <= alone.plans[0].estimate.metrics.step_time_s * (1 + 1e-12)
    # every plan names a pool per stage and says what each group does
    for ranked in result.plans:
        plan = ranked.estimate.plan
        if plan.data_shares is None:
            assert len(plan.stage_groups or []) == plan.parallelism.pipeline
        assert "Groups: " in ranked.explanation
