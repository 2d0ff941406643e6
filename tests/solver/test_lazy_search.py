"""The lazy (best-first) branch-and-bound used with cost models that offer keyed entry
points and bounds: same top-k as the eager path and the exhaustive reference, every
candidate counted once, fewer profiles and evaluations; and the bound-statistics memo."""

from __future__ import annotations

from typing import Any

import pytest
from fake_cost_model import make_problem, tiny_model

from cost_models.base import (
    BoundedTrainingCostModel,
    KeyedTrainingCostModel,
    LayerProfile,
    TrainingEstimate,
    TrainingProblem,
)
from solver import exhaustive_search, search
from solver.formulations.stage_partition import (
    PartitionSolver,
    balanced_lower_bound,
    memory_lower_bound_bytes,
)
from solver.search.steps import is_lazy_capable
from solver.space import count_candidates
from specs.constraints import SearchConstraints
from specs.plan import TrainingPlan, Violation


def _analytical() -> Any:
    try:
        from cost_models.registry import build_cost_model

        return build_cost_model("analytical")
    except Exception:  # pragma: no cover - the integration tests skip with the reason
        return None


needs_analytical = pytest.mark.skipif(
    _analytical() is None, reason="analytical model not importable"
)


class PlainOnly:
    """Wraps a cost model, exposing only the base Protocol (forces the eager path)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.version = inner.name, inner.version
        self.profiles = 0

    def check(self, problem: TrainingProblem, plan: TrainingPlan) -> list[Violation]:
        return self.inner.check(problem, plan)  # type: ignore[no-any-return]

    def profile(self, problem: TrainingProblem, plan: TrainingPlan) -> LayerProfile:
        self.profiles += 1
        return self.inner.profile(problem, plan)  # type: ignore[no-any-return]

    def evaluate(self, problem: TrainingProblem, plan: TrainingPlan) -> TrainingEstimate:
        return self.inner.evaluate(problem, plan)  # type: ignore[no-any-return]


def _same_top(a: Any, b: Any) -> None:
    assert [p.estimate.plan for p in a.plans] == [p.estimate.plan for p in b.plans]
    assert [p.estimate.metrics.step_time_s for p in a.plans] == [
        p.estimate.metrics.step_time_s for p in b.plans
    ]


def _accounted(stats: Any) -> int:
    return (
        stats.feasible
        + stats.rule_rejected
        + sum(v for k, v in stats.pruned.items() if not k.startswith("rule:"))
    )


CASES = [
    # (layers, nodes, memory GiB, global batch, top_k)
    (8, 1, 80.0, 64, 5),
    (8, 2, 24.0, 64, 7),
    (12, 4, 16.0, 128, 10),
    (16, 4, 12.0, 128, 3),
]


@needs_analytical
@pytest.mark.parametrize(("layers", "nodes", "mem", "gbs", "k"), CASES)
def test_lazy_equals_eager_and_exhaustive(
    layers: int, nodes: int, mem: float, gbs: int, k: int
) -> None:
    cm = _analytical()
    assert is_lazy_capable(cm)
    problem = make_problem(
        tiny_model(num_layers=layers, hidden=2048, heads=16, kv=8, ffn=8192),
        nodes,
        memory_gib=mem,
        global_batch=gbs,
    )
    cons = SearchConstraints(max_virtual_pipeline=3)
    lazy = search(problem, cm, cons, top_k=k, solver=PartitionSolver())
    plain = PlainOnly(_analytical())
    assert not is_lazy_capable(plain)
    eager = search(problem, plain, cons, top_k=k, solver=PartitionSolver())
    ref = exhaustive_search(problem, _analytical(), cons, top_k=k, solver=PartitionSolver())
    assert ref.plans
    _same_top(lazy, ref)
    _same_top(eager, ref)
    assert lazy.stats.complete and lazy.stats.enumerated == ref.stats.enumerated
    assert lazy.stats.rule_rejected == ref.stats.rule_rejected
    assert lazy.stats.evaluated <= eager.stats.evaluated < ref.stats.evaluated
    for res in (lazy, eager, ref):
        assert _accounted(res.stats) == res.stats.enumerated
    assert lazy.stats.best_step_time_s == ref.plans[0].estimate.metrics.step_time_s


@needs_analytical
def test_lazy_profiles_fewer_candidates_than_eager() -> None:
    counted = _analytical()
    calls = {"n": 0}
    original = counted.profile_key

    def counting(problem: TrainingProblem, key: Any) -> LayerProfile:
        calls["n"] += 1
        return original(problem, key)  # type: ignore[no-any-return]

    counted.profile_key = counting
    problem = make_problem(
        tiny_model(num_layers=16, hidden=2048, heads=16, kv=8, ffn=8192),
        4,
        memory_gib=16.0,
        global_batch=128,
    )
    cons = SearchConstraints(max_virtual_pipeline=3)
    lazy = search(problem, counted, cons, top_k=3, solver=PartitionSolver())
    plain = PlainOnly(_analytical())
    search(problem, plain, cons, top_k=3, solver=PartitionSolver())
    assert lazy.plans
    assert 0 < calls["n"] < plain.profiles


@needs_analytical
def test_lazy_search_honours_cancel() -> None:
    problem = make_problem(
        tiny_model(num_layers=12, hidden=2048, heads=16, kv=8, ffn=8192),
        4,
        memory_gib=16.0,
        global_batch=128,
    )
    polls = {"n": 0}

    def stop() -> bool:
        polls["n"] += 1
        return polls["n"] > 3  # during the best-first loop (screening polls every 256)

    res = search(
        problem,
        _analytical(),
        SearchConstraints(),
        top_k=5,
        should_stop=stop,
        solver=PartitionSolver(),
    )
    assert res.stats.status == "cancelled"
    assert res.stats.pruned.get("not_reached", 0) > 0
    # unreached candidates (never enumerated) are counted as not_reached
    assert _accounted(res.stats) == count_candidates(problem, SearchConstraints())


def test_protocols_are_optional_for_plain_models() -> None:
    from fake_cost_model import FakeCostModel

    fake = FakeCostModel()
    assert not isinstance(fake, KeyedTrainingCostModel)
    assert not isinstance(fake, BoundedTrainingCostModel)
    assert not is_lazy_capable(fake)


def test_bound_memo_follows_the_values_not_the_identity() -> None:
    # Two profiles with equal-length but different tuples: the remembered statistics of one
    # must never be used for the other (the memo checks identity, not just id()).
    def prof(tau: float, state: float) -> LayerProfile:
        return LayerProfile(
            layer_time_s=(tau,) * 4,
            layer_forward_time_s=(tau / 3,) * 4,
            layer_state_bytes=(state,) * 4,
            layer_activation_bytes=(1.0,) * 4,
            first_extra_time_s=0.0,
            last_extra_time_s=0.0,
            first_extra_state_bytes=0.0,
            last_extra_state_bytes=0.0,
            first_extra_activation_bytes=0.0,
            last_extra_activation_bytes=0.0,
            p2p_time_s=0.0,
            fixed_bytes=0.0,
            inflight_microbatches=((2,), (1,)),
            num_microbatches=4,
            usable_bytes=1e12,
        )

    for _ in range(3):
        a, b = prof(1.0, 10.0), prof(3.0, 30.0)
        # 4 layers of τ over 2 ranks: 2τ; states 4σ + min ι (1) × 4 activations over 2 ranks
        assert balanced_lower_bound(a, 2, 1) == 2.0
        assert balanced_lower_bound(b, 2, 1) == 6.0
        assert memory_lower_bound_bytes(a, 2, 1) == (40.0 + 4.0) / 2
        assert memory_lower_bound_bytes(b, 2, 1) == (120.0 + 4.0) / 2


@needs_analytical
@pytest.mark.parametrize(
    "fixed",
    [
        {"pipeline": 2, "stage_layers": [5, 7], "tensor": 2},  # fixed split: no partition
        {"recompute": "full", "zero_stage": 1},  # restricted recompute / ZeRO
        {"pipeline": 4, "virtual_pipeline": 2},  # interleaved only
    ],
)
def test_lazy_equals_exhaustive_with_fixed_fields(fixed: dict[str, Any]) -> None:
    problem = make_problem(
        tiny_model(num_layers=12, hidden=2048, heads=16, kv=8, ffn=8192),
        2,
        memory_gib=20.0,
        global_batch=64,
    )
    cons = SearchConstraints(max_virtual_pipeline=3, fixed=fixed)
    lazy = search(problem, _analytical(), cons, top_k=4, solver=PartitionSolver())
    ref = exhaustive_search(problem, _analytical(), cons, top_k=4, solver=PartitionSolver())
    assert ref.plans
    _same_top(lazy, ref)
    assert lazy.stats.enumerated == ref.stats.enumerated == count_candidates(problem, cons)
    assert lazy.stats.rule_rejected == ref.stats.rule_rejected
    assert _accounted(lazy.stats) == lazy.stats.enumerated
    for ranked in lazy.plans:
        for name, value in fixed.items():
            got = getattr(ranked.estimate.plan, name, None)
            if got is None:
                got = getattr(ranked.estimate.plan.parallelism, name)
            assert got == value, name
    if "stage_layers" in fixed:
        assert lazy.stats.solver_calls == lazy.stats.solver_cache_hits == 0
