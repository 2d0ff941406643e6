"""A search split into shards and merged gives the single search's top-k, ties included."""

from __future__ import annotations

import pytest
from fake_cost_model import FakeCostModel, make_problem, tiny_model

from solver import search
from solver.formulations.stage_partition import PartitionSolver
from solver.search.shards import Shard, deal_pairs, merge, run_shard, sharded_search
from solver.space import candidate_blocks, count_candidates
from specs.constraints import SearchConstraints

CASES = [  # (layers, nodes, memory GiB, global batch, layer_scale)
    (8, 1, 80.0, 64, (1.0,)),
    (8, 2, 3.0, 64, (1.0,)),
    (12, 4, 2.6, 96, (1.0,)),
    (6, 1, 3.0, 32, (1.0, 1.7, 0.6)),
]


def _problem(layers, nodes, mem, gbs):
    model = tiny_model(num_layers=layers, hidden=2048, ffn=8192)
    return make_problem(model, nodes, memory_gib=mem, global_batch=gbs, headroom_gib=0.5)


def _top(result):
    return [(p.estimate.metrics.step_time_s, p.estimate.plan, p.explanation) for p in result.plans]


def test_shards_are_disjoint_and_cover_the_space() -> None:
    problem, cons = _problem(12, 4, 80.0, 96), SearchConstraints(max_virtual_pipeline=3)
    blocks = list(candidate_blocks(problem, cons))
    owner = deal_pairs(blocks, 3)
    assert len(set(owner.values())) == 3  # every shard gets a degree pair
    parts = [Shard(i, 3).select(blocks) for i in range(3)]
    keys = [{(b.base, len(b.slots)) for b in part} for part in parts]
    assert sum(len(k) for k in keys) == len(blocks)
    assert set().union(*keys) == {(b.base, len(b.slots)) for b in blocks}
    sizes = [sum(b.size for b in part) for part in parts]
    assert sum(sizes) == count_candidates(problem, cons)
    # a pair never straddles two shards
    for part_index, part in enumerate(parts):
        assert all(owner[(b.base.tensor, b.base.pipeline)] == part_index for b in part)
    with pytest.raises(ValueError):
        Shard(3, 3)


@pytest.mark.parametrize(("layers", "nodes", "mem", "gbs", "scale"), CASES)
@pytest.mark.parametrize("shards", [2, 3, 5])
def test_merged_shards_equal_one_search(layers, nodes, mem, gbs, scale, shards) -> None:
    problem, cons = _problem(layers, nodes, mem, gbs), SearchConstraints(max_virtual_pipeline=3)
    one = search(problem, FakeCostModel(scale), cons, top_k=8, solver=PartitionSolver())
    split = sharded_search(problem, FakeCostModel(scale), cons, shards=shards, top_k=8)
    assert one.plans
    assert _top(split) == _top(one)
    assert [p.rank for p in split.plans] == list(range(1, len(one.plans) + 1))
    assert split.stats.enumerated == one.stats.enumerated
    assert split.stats.complete and split.stats.best_step_time_s == one.stats.best_step_time_s


def test_ties_across_shards_break_as_in_one_search() -> None:
    """Frameworks price a plan alike: equal step times whose order is the plan key's."""
    problem = _problem(8, 2, 80.0, 64)
    cons = SearchConstraints(max_virtual_pipeline=2)
    one = search(problem, FakeCostModel(), cons, top_k=20, solver=PartitionSolver())
    times = [p.estimate.metrics.step_time_s for p in one.plans]
    assert len(set(times)) < len(times), "the case must have ties in its top-k"
    for shards in (2, 4, 7):
        assert _top(sharded_search(problem, FakeCostModel(), cons, shards=shards, top_k=20)) == (
            _top(one)
        )


def test_each_shard_returns_its_bound() -> None:
    problem, cons = _problem(8, 2, 80.0, 64), SearchConstraints(max_virtual_pipeline=2)
    results = [run_shard(problem, FakeCostModel(), cons, Shard(i, 2), top_k=3) for i in range(2)]
    for result in results:
        assert len(result.entries) == 3
        assert result.bound_s == result.entries[-1][0] == max(e[0] for e in result.entries)
    merged = merge(results, problem, top_k=3)
    best = sorted(e[:2] for r in results for e in r.entries)[:3]
    assert [(p.estimate.metrics.step_time_s) for p in merged.plans] == [b[0] for b in best]
    # too small a shard: fewer than k plans, an infinite bound
    few = run_shard(problem, FakeCostModel(), cons, Shard(0, 2), top_k=10_000)
    assert few.bound_s == float("inf")


def test_the_lazy_search_shards_exactly_too() -> None:
    from cost_models.registry import build_cost_model

    problem = _problem(16, 2, 80.0, 128)
    cons = SearchConstraints(max_virtual_pipeline=2)
    one = search(problem, build_cost_model("analytical"), cons, top_k=10, solver=PartitionSolver())
    split = sharded_search(problem, build_cost_model("analytical"), cons, shards=3, top_k=10)
    assert one.plans and _top(split) == _top(one)
