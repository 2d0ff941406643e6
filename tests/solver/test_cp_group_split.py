"""A context-parallel group is split once on its no-exchange profile (`cp_groups.
refine_group`, issue 15's search latency): that profile's partition program is no harder
than any algorithm's, its optimum bounds every algorithm's busiest rank from below, a group
it cannot split has no algorithm that fits, and the search returns the very same ranked
top-k (plans, metrics, folded plans) as without it and as exhaustive evaluation."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from fake_cost_model import make_problem, tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_context_parallel_search import _even_split

from cost_models.registry import build_cost_model
from solver import exhaustive_search, search
from solver.base import SearchStats, SolveStatus
from solver.formulations.stage_partition import PartitionSolver
from solver.search.cp_groups import drop, refine_group
from solver.search.steps import Monitor
from solver.space import candidates
from specs.constraints import SearchConstraints

ANALYTICAL = build_cost_model("analytical")
bnb_module = importlib.import_module("solver.search.branch_and_bound")


def _problem(layers: int, memory_gib: float, seq: int):
    model = tiny_model(num_layers=layers, hidden=2048, heads=16, kv=8, ffn=8192)
    return make_problem(model, 2, memory_gib=memory_gib, global_batch=32, seq=seq)


# memory-tight: some groups fit under no algorithm, some splits are lumpier than balanced
TIGHT = _problem(16, 16.0, 16384)
TIGHT_LONG = _problem(12, 17.0, 32768)
NARROW = SearchConstraints(
    fixed={"zero_stage": 1}, micro_batch_sizes=[1, 2], max_virtual_pipeline=4
)


def _groups(problem, cons) -> list[tuple[Any, list[Any]]]:
    """(ring key, its variants passing the rules) of every key with context > 1."""
    out: dict[Any, list[Any]] = {}
    for key in candidates(problem, cons):
        if key.context > 1 and not ANALYTICAL.check_key(problem, key):
            canon = key._replace(context_parallel_algorithm="ring", context_parallel_heads=1)
            out.setdefault(canon, []).append(key)
    return sorted(out.items())


GROUPS = _groups(TIGHT, SearchConstraints(max_virtual_pipeline=4))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(GROUPS))
def test_the_group_profile_is_no_harder_than_any_algorithm(group) -> None:
    canon, variants = group
    free = ANALYTICAL.context_free_profile_key(TIGHT, canon)
    assert free is not None  # 1F1B and interleaved place chunk c on rank c mod p
    for key in variants:
        prof = ANALYTICAL.profile_key(TIGHT, key)
        assert all(
            a <= b * (1 + 1e-12) for a, b in zip(free.layer_time_s, prof.layer_time_s, strict=True)
        )
        assert free.fixed_bytes <= prof.fixed_bytes
        for name in (
            "layer_state_bytes",
            "layer_activation_bytes",
            "first_extra_time_s",
            "last_extra_time_s",
            "first_extra_state_bytes",
            "last_extra_state_bytes",
            "first_extra_activation_bytes",
            "last_extra_activation_bytes",
            "p2p_time_s",
            "inflight_microbatches",
            "num_microbatches",
            "usable_bytes",
        ):
            assert getattr(free, name) == getattr(prof, name), name


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(GROUPS))
def test_the_group_bound_is_below_every_algorithm_with_its_split(group) -> None:
    """What `refine_group` answers against what each algorithm gets: no split for the group
    means none for any algorithm; otherwise its bound is at most the evaluated step time of
    every algorithm under the split the search would give it."""
    canon, variants = group
    solver = PartitionSolver()
    entry = (0.0, min(variants), None, None, tuple(variants))
    reason, bound = refine_group(
        TIGHT, ANALYTICAL, entry, solver, SearchStats(), Monitor(60.0, None, None, 1)
    )
    pp, v = canon.pipeline, canon.virtual_pipeline
    for key in variants:
        prof = ANALYTICAL.profile_key(TIGHT, key)
        res = solver.solve(prof, pp, v)
        if reason is not None:
            assert res.status == SolveStatus.INFEASIBLE, (key, reason)
            continue
        if res.stage_layers is None:
            continue
        est = ANALYTICAL.evaluate(TIGHT, key.to_plan(res.stage_layers))
        if bound is not None:
            assert bound <= est.metrics.step_time_s, (key, bound, est.metrics.step_time_s)
        # the floor argument of the bound alone, with the split's own busiest rank
        floor = res.max_rank_time_s
        assert ANALYTICAL.context_free_step_lower_bound_s(
            TIGHT, canon, floor
        ) <= est.metrics.step_time_s * (1 + 1e-9)
    # and an even split (the bound must not rely on the solver's split being optimal)
    if reason is None and bound is not None:
        for key in variants:
            split = _even_split(TIGHT.model.num_layers, pp * v)
            est = ANALYTICAL.evaluate(TIGHT, key.to_plan(split))
            if est.feasible:
                assert bound <= est.metrics.step_time_s


def test_a_dropped_group_counts_each_variant_once() -> None:
    canon, variants = next(
        (c, vs)
        for c, vs in GROUPS
        if len(vs) > 1
        and refine_group(
            TIGHT,
            ANALYTICAL,
            (0.0, min(vs), None, None, tuple(vs)),
            PartitionSolver(),
            SearchStats(),
            Monitor(60.0, None, None, 1),
        )[0]
        == "memory"
    )
    stats, monitor = SearchStats(), Monitor(60.0, None, None, len(variants))
    drop(
        TIGHT,
        ANALYTICAL,
        (0.0, min(variants), None, None, tuple(variants)),
        "memory",
        stats,
        monitor,
    )
    assert stats.pruned == {"memory": len(variants)} and monitor.done == len(variants)


class _WithoutGroupSplit:
    """The analytical model without `context_free_profile_key`: the search as it was before
    groups were split (each algorithm split on its own)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "context_free_profile_key":
            raise AttributeError(name)
        return getattr(self._inner, name)


def _ranked(result) -> list[dict[str, Any]]:
    """Every plan of the ranked top-k (folded plans included) with its metrics, memory,
    fold and explanation."""
    return [p.to_dict() for p in result.all_plans]


def _spy(monkeypatch) -> dict[str, int]:
    seen: dict[str, int] = {}
    original = bnb_module.refine_group

    def spy(problem, cost_model, entry, *args):
        reason, bound = original(problem, cost_model, entry, *args)
        outcome = reason or ("raised" if bound is not None and bound > entry[0] else "kept")
        seen[outcome] = seen.get(outcome, 0) + 1
        return reason, bound

    monkeypatch.setattr(bnb_module, "refine_group", spy)
    return seen


@pytest.mark.parametrize(
    ("problem", "cons", "top_k"),
    [
        (TIGHT, SearchConstraints(max_virtual_pipeline=4), 5),
        (TIGHT, SearchConstraints(max_virtual_pipeline=4), 12),
        (TIGHT_LONG, SearchConstraints(max_virtual_pipeline=3), 8),
    ],
)
def test_same_ranked_top_k_as_without_group_splits(monkeypatch, problem, cons, top_k) -> None:
    seen = _spy(monkeypatch)
    new = search(
        problem, build_cost_model("analytical"), cons, top_k=top_k, solver=PartitionSolver()
    )
    # every outcome of a group split happened, so the equality below covers each
    assert {"memory", "memory_bound", "raised", "kept"} <= set(seen), seen
    old = search(
        problem,
        _WithoutGroupSplit(build_cost_model("analytical")),
        cons,
        top_k=top_k,
        solver=PartitionSolver(),
    )
    assert new.plans and _ranked(new) == _ranked(old)
    assert new.stats.enumerated == old.stats.enumerated
    assert sum(new.stats.pruned.values()) + new.stats.feasible == new.stats.enumerated


@pytest.mark.parametrize("problem", [TIGHT, TIGHT_LONG])
def test_branch_and_bound_with_group_splits_equals_exhaustive(monkeypatch, problem) -> None:
    seen = _spy(monkeypatch)
    bnb = search(problem, ANALYTICAL, NARROW, top_k=5, solver=PartitionSolver())
    assert seen.get("memory", 0) and seen.get("raised", 0), seen
    ref = exhaustive_search(problem, ANALYTICAL, NARROW, top_k=5, solver=PartitionSolver())
    assert bnb.plans and _ranked(bnb) == _ranked(ref)
