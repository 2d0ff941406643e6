"""A search split into shards and merged gives the single search's top-k, ties included."""

from __future__ import annotations

import math

import pytest
from fake_cost_model import FakeCostModel, make_problem, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import search
from solver.formulations.stage_partition import PartitionSolver
from solver.search.diverse import fold_ranked
from solver.search.shards import Shard, deal_pairs, merge, run_shard, sharded_search
from solver.search.shared_bound import BoundPoller, KBestTimes
from solver.space import candidate_blocks, count_candidates
from specs.constraints import SearchConstraints
from specs.plan import PlanKey

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
        # the shard's diverse top-3: three non-dominated plans and the plans folded under
        # them, all ranked no later than the third, which sets the bound
        entries = [e[2] for e in result.entries]
        roots = [e for e in fold_ranked(entries, k=3) if e.dominated_by is None]
        assert len(roots) == 3 and len(fold_ranked(entries, k=3)) == len(entries)
        assert result.bound_s == result.entries[-1][0] == max(e[0] for e in result.entries)
        assert roots[-1].estimate is result.entries[-1][2]
    merged = merge(results, problem, top_k=3)
    union = [e[2] for e in sorted((e for r in results for e in r.entries), key=lambda e: e[:2])]
    best = [e.estimate for e in fold_ranked(union, k=3) if e.dominated_by is None]
    assert [p.estimate for p in merged.plans] == best
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


# ---- a bound shared while the shards run (solver.search.shared_bound) -----------------------
def _key(n: int) -> PlanKey:
    return PlanKey(data=n)


def test_k_best_times_counts_each_plan_once() -> None:
    bound = KBestTimes(3)
    assert bound.get() == math.inf
    bound.offer([(5.0, _key(1)), (4.0, _key(2))])
    assert bound.get() == math.inf  # two plans: fewer than k
    bound.offer([(4.0, _key(2)), (4.0, _key(2))])  # a retried shard offers its plans again
    assert bound.get() == math.inf
    bound.offer([(6.0, _key(3))])
    assert bound.get() == 6.0  # the 3rd of 4, 5, 6
    bound.offer([(1.0, _key(4)), (5.0, _key(5))])
    assert bound.get() == 5.0  # 1, 4, 5 (keys 4, 2, 1; key 5 sorts after key 1 at 5.0)
    bound.offer([(6.0, _key(3)), (5.0, _key(1))])  # evicted or kept: no change
    assert bound.get() == 5.0
    with pytest.raises(ValueError):
        KBestTimes(0)


def test_the_poller_offers_only_plans_that_can_lower_the_bound() -> None:
    class Recording(KBestTimes):
        def __init__(self, k: int) -> None:
            super().__init__(k)
            self.offers: list[list[tuple[float, PlanKey]]] = []
            self.gets = 0

        def offer(self, entries):
            self.offers.append(list(entries))
            super().offer(entries)

        def get(self):
            self.gets += 1
            return super().get()

    shared = Recording(2)
    shared.offer([(3.0, _key(1)), (2.0, _key(2))])
    poller = BoundPoller(shared, every=3)
    assert poller.bound_s == 3.0 and shared.gets == 1
    poller.found(3.0, _key(3))  # no faster than the bound read: never offered
    poller.found(1.0, _key(4))
    assert [poller.step(), poller.step()] == [3.0, 3.0] and shared.gets == 1
    assert poller.step() == 2.0  # the third step exchanges: 1.0 and 2.0 are the best two
    assert shared.offers[-1] == [(1.0, _key(4))] and shared.gets == 2


class _Fixed:
    """A 'shared' bound fixed at `value` (what an oracle would share)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def get(self) -> float:
        return self.value

    def offer(self, entries) -> None:
        pass


def _kth_time(problem, cons, top_k, model):
    one = search(problem, model, cons, top_k=top_k, solver=PartitionSolver())
    return one, one.plans[top_k - 1].estimate.metrics.step_time_s


def test_the_tightest_valid_bound_keeps_ties_and_a_smaller_one_does_not() -> None:
    """Every shard pruning against exactly the global k-th best time (the smallest value
    the docstring allows) still merges into the single top-k, ties at that time included;
    a value below it (an invalid bound: half of it, below the bounds' slack) loses plans."""
    problem = _problem(8, 2, 80.0, 64)
    cons = SearchConstraints(max_virtual_pipeline=2)
    one, kth = _kth_time(problem, cons, 20, FakeCostModel())
    times = [p.estimate.metrics.step_time_s for p in one.plans]
    assert times.count(kth) >= 2, "the k-th time must be tied for this test to bite"

    def merged(value: float) -> list:
        results = [
            run_shard(
                problem, FakeCostModel(), cons, Shard(i, 3), top_k=20, shared_bound=_Fixed(value)
            )
            for i in range(3)
        ]
        return _top(merge(results, problem, top_k=20)), sum(r.stats.evaluated for r in results)

    exact, evaluated_at_kth = merged(kth)
    assert exact == _top(one)
    unshared = sum(
        run_shard(problem, FakeCostModel(), cons, Shard(i, 3), top_k=20).stats.evaluated
        for i in range(3)
    )
    assert evaluated_at_kth < unshared
    too_small, _ = merged(kth / 2)
    assert len(too_small) < len(one.plans)


_cases = st.tuples(
    st.sampled_from([4, 6, 8]),  # layers
    st.integers(1, 2),  # nodes
    st.sampled_from([2.2, 3.0, 6.0, 80.0]),  # memory GiB
    st.sampled_from([16, 32, 64, 96]),  # global batch
    st.sampled_from([(1.0,), (1.0, 1.7, 0.6), (0.5, 2.0)]),  # layer scale
)


@settings(max_examples=20, deadline=None)
@given(_cases, st.integers(2, 6), st.integers(1, 25))
def test_shards_sharing_their_bound_merge_into_the_single_top_k(case, shards, top_k) -> None:
    layers, nodes, mem, gbs, scale = case
    problem, cons = _problem(layers, nodes, mem, gbs), SearchConstraints(max_virtual_pipeline=2)
    one = search(problem, FakeCostModel(scale), cons, top_k=top_k, solver=PartitionSolver())
    split = sharded_search(problem, FakeCostModel(scale), cons, shards=shards, top_k=top_k)
    assert _top(split) == _top(one)
    assert split.stats.enumerated == one.stats.enumerated and split.stats.complete


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([8, 12, 16]), st.integers(1, 2), st.integers(2, 4), st.integers(1, 12))
def test_lazy_shards_sharing_their_bound_merge_exactly(layers, nodes, shards, top_k) -> None:
    from cost_models.registry import build_cost_model

    problem = _problem(layers, nodes, 80.0, 128)
    cons = SearchConstraints(max_virtual_pipeline=2)
    one = search(
        problem, build_cost_model("analytical"), cons, top_k=top_k, solver=PartitionSolver()
    )
    split = sharded_search(
        problem, build_cost_model("analytical"), cons, shards=shards, top_k=top_k
    )
    assert _top(split) == _top(one)


@pytest.mark.parametrize("lazy", [False, True])
def test_sharing_the_bound_evaluates_fewer_candidates(lazy: bool) -> None:
    from cost_models.registry import build_cost_model

    problem = _problem(12, 4, 80.0, 96) if lazy else _problem(8, 2, 80.0, 64)
    # the fake prices no vocabulary parallelism: its twins would only add equal-time ties
    fixed = {} if lazy else {"vocab_parallel": False}
    cons = SearchConstraints(max_virtual_pipeline=3 if lazy else 2, fixed=fixed)

    def model():
        return build_cost_model("analytical") if lazy else FakeCostModel((1.0, 1.7, 0.6))

    one = search(problem, model(), cons, top_k=10, solver=PartitionSolver())
    shared = sharded_search(problem, model(), cons, shards=3, top_k=10)
    alone = sharded_search(problem, model(), cons, shards=3, top_k=10, share_bound=False)
    assert _top(shared) == _top(alone) == _top(one)
    # shards run one after another here: the later ones start from the earlier ones' plans
    assert shared.stats.evaluated < alone.stats.evaluated
    assert one.stats.evaluated <= shared.stats.evaluated
