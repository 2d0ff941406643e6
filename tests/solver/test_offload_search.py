"""Offload in the search: searched only when no plan fits without it, exact (the
branch-and-bound equals the exhaustive search over the space with offload), and off with
`constraints.offload` `never`."""

from __future__ import annotations

from cost_models.analytical.training import AnalyticalTrainingCostModel
from cost_models.base import TrainingProblem
from hardware_catalog import resolve_cluster
from solver import exhaustive_search, search
from solver.search.offload_phase import search_offload_when_needed, with_offload
from solver.space import candidates, count_candidates
from specs import ClusterSpec, TrainingWorkload
from specs.constraints import SearchConstraints
from specs.presets import get_preset


def _problem(
    preset: str, nodes: int, gpn: int, gbs: int, seq: int, headroom: float = 2.0
) -> TrainingProblem:
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": nodes, "gpus_per_node": gpn}]}
        )
    )
    return TrainingProblem(
        model=get_preset(preset),
        cluster=cluster,
        workload=TrainingWorkload(global_batch_size=gbs, sequence_length=seq),
        memory_headroom_gib=headroom,
    )


def test_a_problem_that_fits_is_searched_as_before_without_offload() -> None:
    # Llama-3-8B on 8 H100 fits many ways: the offload-free space is the whole search
    problem = _problem("llama3-8b", 1, 8, 64, 4096)
    constraints = SearchConstraints()
    assert not any(k.offloads for k in candidates(problem, constraints))
    result, ran = search_offload_when_needed(
        search, problem, AnalyticalTrainingCostModel(), constraints, top_k=5
    )
    assert not ran and result.plans
    assert all(not p.estimate.plan.offload.enabled for p in result.plans)
    assert all(p.estimate.metrics.time_breakdown_s.offload == 0.0 for p in result.plans)


def test_a_problem_that_fits_nowhere_gets_offload_plans() -> None:
    # Llama-3-8B on 2 H100 with 40 GiB kept free (37.65 GiB usable each): 16 B × 8.03e9 =
    # 128 GB of states over 2 × 40 GB: nothing fits without offload; with the optimizer on the
    # CPU, 6 B × 8.03e9 / 2 = 24 GB per GPU (tensor 2) leaves room for the activations
    problem = _problem("llama3-8b", 1, 2, 16, 2048, headroom=40.0)
    cm = AnalyticalTrainingCostModel()
    first = search(problem, cm, SearchConstraints(), top_k=3)
    assert not first.plans and first.stats.complete
    result, ran = search_offload_when_needed(search, problem, cm, SearchConstraints(), top_k=3)
    assert ran and result.plans
    for ranked in result.plans:
        est = ranked.estimate
        assert est.feasible and est.plan.offload.enabled
        assert est.metrics.time_breakdown_s.offload > 0.0
    # switched off: the first search's answer
    never = SearchConstraints(offload="never")
    result, ran = search_offload_when_needed(search, problem, cm, never, top_k=3)
    assert not ran and not result.plans


def test_branch_and_bound_equals_exhaustive_over_the_offload_space() -> None:
    problem = _problem("llama3-8b", 1, 2, 16, 2048, headroom=40.0)
    constraints = with_offload(
        SearchConstraints(frameworks=["megatron_core", "deepspeed", "torchtitan"])
    )
    assert count_candidates(problem, constraints) > count_candidates(
        problem, SearchConstraints(frameworks=["megatron_core", "deepspeed", "torchtitan"])
    )
    fast = search(problem, AnalyticalTrainingCostModel(), constraints, top_k=5)
    slow = exhaustive_search(problem, AnalyticalTrainingCostModel(), constraints, top_k=5)
    assert fast.stats.complete and slow.stats.complete
    assert [p.estimate.plan for p in fast.plans] == [p.estimate.plan for p in slow.plans]
    assert [p.estimate.metrics.step_time_s for p in fast.plans] == [
        p.estimate.metrics.step_time_s for p in slow.plans
    ]
    assert fast.stats.evaluated < slow.stats.evaluated
    kinds = {(p.estimate.plan.framework, p.estimate.plan.offload.parameters) for p in fast.plans}
    assert len(kinds) > 1  # several frameworks / offload kinds compete


def test_offload_devices_constraint_limits_the_space() -> None:
    problem = _problem("llama3-8b", 1, 2, 16, 2048, headroom=40.0)
    fw = ["megatron_core", "deepspeed", "torchtitan"]
    cpu_only = SearchConstraints.model_validate(
        {"frameworks": fw, "offload": {"mode": "always", "devices": ["cpu"], "activations": False}}
    )
    keys = [k for k in candidates(problem, cpu_only) if k.offloads]
    assert keys
    assert {k.offload_optimizer for k in keys} == {"cpu"}
    assert {k.offload_parameters for k in keys} <= {"none", "cpu"}
    assert {k.offload_activations for k in keys} == {0.0}
