"""The context-parallel algorithm is a searched dimension and the search stays exact
(issue 15): the step-time bound is below the evaluated step time for every algorithm, and
branch and bound equals exhaustive evaluation on a long-sequence problem with context
parallelism, free and with each algorithm pinned."""

from __future__ import annotations

import pytest
from fake_cost_model import make_problem, tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_models.registry import build_cost_model
from solver import exhaustive_search, search
from solver.formulations.stage_partition import PartitionSolver
from solver.space import candidates
from specs.constraints import SearchConstraints
from specs.plan import CONTEXT_PARALLEL_ALGORITHMS

ANALYTICAL = build_cost_model("analytical")


def _problem(seq: int = 16384, nodes: int = 2, gbs: int = 16):
    model = tiny_model(num_layers=8, hidden=2048, heads=16, kv=8, ffn=8192)
    return make_problem(model, nodes, memory_gib=80.0, global_batch=gbs, seq=seq)


PROBLEM = _problem()
CP_KEYS = [
    k
    for k in candidates(PROBLEM, SearchConstraints(max_virtual_pipeline=2))
    if k.context > 1 and not ANALYTICAL.check_key(PROBLEM, k)
]


def test_the_space_holds_every_algorithm() -> None:
    algorithms = {k.context_parallel_algorithm for k in CP_KEYS}
    assert algorithms == set(CONTEXT_PARALLEL_ALGORITHMS)
    # hybrids run where the context group spans nodes (context × tensor > 8 GPUs), their
    # head group inside one node
    for k in CP_KEYS:
        if k.context_parallel_algorithm == "hybrid":
            assert k.context * k.tensor > 8 >= k.context_parallel_heads * k.tensor
            assert k.context % k.context_parallel_heads == 0


def _even_split(layers: int, chunks: int) -> list[int]:
    base, extra = divmod(layers, chunks)
    return [base + (1 if i < extra else 0) for i in range(chunks)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CP_KEYS))
def test_step_bound_never_exceeds_the_evaluated_time(key) -> None:
    bound = ANALYTICAL.step_time_lower_bound_s(PROBLEM, key)
    split = _even_split(PROBLEM.model.num_layers, key.pipeline * key.virtual_pipeline)
    est = ANALYTICAL.evaluate(PROBLEM, key.to_plan(split))
    assert bound <= est.metrics.step_time_s * (1 + 1e-9), (key, bound, est.metrics.step_time_s)
    # and the bound of the fixed split too
    fixed = key._replace(stage_layers=tuple(split))
    assert ANALYTICAL.step_time_lower_bound_s(PROBLEM, fixed) <= est.metrics.step_time_s * (
        1 + 1e-9
    )


def _top(result) -> list[tuple[object, float]]:
    return [(p.estimate.plan, p.estimate.metrics.step_time_s) for p in result.plans]


def test_branch_and_bound_equals_exhaustive_with_context_parallelism() -> None:
    cons = SearchConstraints(fixed={"micro_batch_size": 1, "zero_stage": 1}, max_virtual_pipeline=1)
    bnb = search(PROBLEM, ANALYTICAL, cons, top_k=60, solver=PartitionSolver())
    ref = exhaustive_search(PROBLEM, ANALYTICAL, cons, top_k=60, solver=PartitionSolver())
    assert _top(bnb) == _top(ref)
    algorithms = {
        p.estimate.plan.context_parallel_algorithm
        for p in ref.plans
        if p.estimate.plan.parallelism.context > 1
    }
    assert len(algorithms) >= 3, algorithms  # the equality says something about them
    assert bnb.stats.evaluated < ref.stats.evaluated


@pytest.mark.parametrize("algorithm", CONTEXT_PARALLEL_ALGORITHMS)
def test_with_one_algorithm_pinned_equals_exhaustive(algorithm: str) -> None:
    fixed = {"micro_batch_size": 1, "zero_stage": 1, "context_parallel_algorithm": algorithm}
    cons = SearchConstraints(fixed=fixed, max_virtual_pipeline=1)
    bnb = search(PROBLEM, ANALYTICAL, cons, top_k=10, solver=PartitionSolver())
    ref = exhaustive_search(PROBLEM, ANALYTICAL, cons, top_k=10, solver=PartitionSolver())
    assert _top(bnb) == _top(ref)
    assert ref.plans
    for p in ref.plans:
        plan = p.estimate.plan
        assert plan.context_parallel_algorithm == algorithm
        # only the ring runs without context parallelism
        assert plan.parallelism.context > 1 or algorithm == "ring"


def test_frameworks_limit_the_algorithms() -> None:
    cons = SearchConstraints(fixed={"framework": "torchtitan", "zero_stage": 2})
    algorithms = {k.context_parallel_algorithm for k in candidates(PROBLEM, cons) if k.context > 1}
    assert algorithms == {"ring", "all_gather"}
    cons = SearchConstraints(fixed={"framework": "deepspeed", "pipeline": 1, "zero_stage": 2})
    keys = [k for k in candidates(PROBLEM, cons) if k.context > 1]
    assert keys and {k.context_parallel_algorithm for k in keys} == {"ulysses"}


def test_fixed_algorithm_is_validated() -> None:
    from specs.errors import SpecError

    with pytest.raises(SpecError) as info:
        list(candidates(PROBLEM, SearchConstraints(fixed={"context_parallel_algorithm": "x"})))
    assert info.value.field == "constraints.fixed.context_parallel_algorithm"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CP_KEYS))
def test_the_group_bound_is_below_every_algorithm(key) -> None:
    """`context_free_step_lower_bound_s` (one queue entry for all of a candidate's
    algorithms, `solver.search.cp_groups`) is at most the step bound and the evaluated step
    time of each algorithm."""
    group = ANALYTICAL.context_free_step_lower_bound_s(PROBLEM, key)
    assert group <= ANALYTICAL.step_time_lower_bound_s(PROBLEM, key) * (1 + 1e-9)
    split = _even_split(PROBLEM.model.num_layers, key.pipeline * key.virtual_pipeline)
    est = ANALYTICAL.evaluate(PROBLEM, key.to_plan(split))
    assert group <= est.metrics.step_time_s * (1 + 1e-9)
    # the same for every sibling algorithm of the key
    for other in CP_KEYS:
        if other._replace(context_parallel_algorithm="ring", context_parallel_heads=1) == (
            key._replace(context_parallel_algorithm="ring", context_parallel_heads=1)
        ):
            assert ANALYTICAL.context_free_step_lower_bound_s(PROBLEM, other) == group


def test_grouped_search_counts_every_candidate() -> None:
    cons = SearchConstraints(fixed={"micro_batch_size": 1, "zero_stage": 1}, max_virtual_pipeline=1)
    bnb = search(PROBLEM, ANALYTICAL, cons, top_k=5, solver=PartitionSolver())
    ref = exhaustive_search(PROBLEM, ANALYTICAL, cons, top_k=5, solver=PartitionSolver())
    assert bnb.stats.enumerated == ref.stats.enumerated
    # every candidate is accounted for once: pruned (by reason) or evaluated and feasible
    for result in (bnb, ref):
        stats = result.stats
        assert sum(stats.pruned.values()) + stats.feasible == stats.enumerated, stats
