"""The pipeline schedule is a searched dimension and the search stays exact (issue 15):
branch and bound over every schedule equals exhaustive evaluation of the same space, with
the schedule free and with each schedule pinned, on the analytical cost model."""

from __future__ import annotations

import pytest
from fake_cost_model import make_problem, tiny_model

from cost_models.analytical.schedules import get as get_schedule
from cost_models.registry import build_cost_model
from solver import exhaustive_search, search
from solver.formulations.stage_partition import PartitionSolver
from specs.constraints import SearchConstraints
from specs.plan import PIPELINE_SCHEDULES

ANALYTICAL = build_cost_model("analytical")
FRAMEWORKS = ["megatron_core", "torchtitan", "deepspeed", "fsdp"]
"""Every framework profile: each schedule is then priced under whichever runs it."""


def _problem(layers: int = 8, nodes: int = 1, memory_gib: float = 80.0, gbs: int = 64):
    model = tiny_model(num_layers=layers, hidden=2048, heads=16, kv=8, ffn=8192)
    return make_problem(model, nodes, memory_gib=memory_gib, global_batch=gbs)


def _top(result) -> list[tuple[object, float]]:
    return [(p.estimate.plan, p.estimate.metrics.step_time_s) for p in result.plans]


@pytest.mark.parametrize(
    ("layers", "nodes", "memory_gib", "gbs"), [(8, 1, 80.0, 64), (12, 2, 20.0, 64)]
)
def test_search_over_every_schedule_equals_exhaustive(layers, nodes, memory_gib, gbs) -> None:
    problem = _problem(layers, nodes, memory_gib, gbs)
    cons = SearchConstraints(fixed={"pipeline": 4}, max_virtual_pipeline=2, frameworks=FRAMEWORKS)
    # 60 non-dominated plans (the diverse top-k, `solver.search.diverse`): these spaces
    # hold 94 and 273 of them, so the top-k fills and the bound prunes (with 400 it could not)
    bnb = search(problem, ANALYTICAL, cons, top_k=60, solver=PartitionSolver())
    ref = exhaustive_search(problem, ANALYTICAL, cons, top_k=60, solver=PartitionSolver())
    assert _top(bnb) == _top(ref) and len(bnb.plans) == 60
    shown = [p.estimate.plan for p in bnb.ranked(include_dominated=True)]
    assert shown == [p.estimate.plan for p in ref.ranked(include_dominated=True)]
    # the space really holds several schedules, so the equality says something about them
    schedules = {p.estimate.plan.pipeline_schedule for p in ref.plans}
    assert len(schedules) >= 3, schedules
    assert schedules - {"1f1b", "interleaved_1f1b"}, schedules  # beyond Megatron's two
    assert bnb.stats.evaluated < ref.stats.evaluated


@pytest.mark.parametrize("name", PIPELINE_SCHEDULES)
def test_search_with_one_schedule_pinned_equals_exhaustive(name: str) -> None:
    problem = _problem(8, 1, 80.0, 64)
    cons = SearchConstraints(
        fixed={"pipeline": 4},
        pipeline_schedules=[name],
        max_virtual_pipeline=2,
        frameworks=FRAMEWORKS,
    )
    bnb = search(problem, ANALYTICAL, cons, top_k=10, solver=PartitionSolver())
    ref = exhaustive_search(problem, ANALYTICAL, cons, top_k=10, solver=PartitionSolver())
    assert _top(bnb) == _top(ref)
    pipelined = [p for p in ref.plans if p.estimate.plan.parallelism.pipeline > 1]
    assert all(p.estimate.plan.pipeline_schedule == name for p in pipelined)
    runs = set(get_schedule(name).frameworks) & set(FRAMEWORKS)
    if runs:  # a framework runs it: the search finds pipelined plans with it
        assert pipelined and {p.estimate.plan.framework for p in pipelined} <= runs
    else:  # none does: every candidate is refused by the framework rule, none priced
        assert not pipelined
        assert ref.stats.pruned.get("rule:framework", 0) > 0
