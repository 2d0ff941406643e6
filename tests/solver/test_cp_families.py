"""A degree tuple's context-parallel candidates wait in the queue as one family entry
(`cp_groups.FamilyEntry`) until it reaches the front: its bound
(`relaxed_step_lower_bound_s`, the least over its micro-batch sizes, frameworks and
vocabulary layouts) is below every member's context-free bound and evaluated step time,
families are pruned unexpanded on real searches, and the search returns the very same
ranked top-k and counts as without families and as exhaustive evaluation."""

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
from solver.formulations.stage_partition import PartitionSolver
from solver.space import candidates
from specs.constraints import SearchConstraints
from specs.model import ModelSpec, MoESpec

ANALYTICAL = build_cost_model("analytical")
bnb_module = importlib.import_module("solver.search.branch_and_bound")


def _moe() -> ModelSpec:
    return ModelSpec(
        name="tiny-moe",
        num_layers=8,
        hidden_size=2048,
        num_attention_heads=16,
        num_kv_heads=8,
        ffn_hidden_size=8192,
        vocab_size=64000,
        moe=MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=2048),
    )


DENSE = make_problem(
    tiny_model(num_layers=8, hidden=2048, heads=16, kv=8, ffn=8192),
    2,
    memory_gib=24.0,
    global_batch=32,
    seq=16384,
)
MOE = make_problem(_moe(), 2, memory_gib=40.0, global_batch=32, seq=16384)
SPACE = SearchConstraints(max_virtual_pipeline=2, micro_batch_sizes=[1, 2], research_forks=True)

_FAMILY_FIELDS = ("data", "tensor", "pipeline", "context", "expert", "expert_tensor")
_PROBE_FIELDS = ("micro_batch_size", "framework", "vocab_parallel")


def _members(problem) -> list[tuple[Any, Any]]:
    """(probe key, member key) for every runnable candidate with context > 1: the probe is
    the first candidate with the member's degrees, micro-batch, framework and vocabulary
    layout (what the family bound is asked with), the member any candidate sharing them."""
    probes: dict[tuple[Any, ...], Any] = {}
    out = []
    for key in candidates(problem, SPACE):
        if key.context <= 1 or ANALYTICAL.check_key(problem, key):
            continue
        fields = tuple(getattr(key, f) for f in _FAMILY_FIELDS + _PROBE_FIELDS)
        probe = probes.setdefault(fields, key)
        out.append((probe, key))
    return out


MEMBERS = [(DENSE, *pair) for pair in _members(DENSE)] + [(MOE, *pair) for pair in _members(MOE)]


def test_the_members_cover_what_the_family_bound_ignores() -> None:
    # recompute, virtual pipeline, schedule, ZeRO stage and algorithm all vary among the
    # members of one probe, so the bound below is tested across each of them
    for field in (
        "recompute",
        "virtual_pipeline",
        "zero_stage",
        "context_parallel_algorithm",
        "pipeline_schedule",
    ):
        assert any(getattr(p, field) != getattr(k, field) for _, p, k in MEMBERS), field
    assert any(k.expert > 1 for _, _, k in MEMBERS) and any(k.vocab_parallel for _, _, k in MEMBERS)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(MEMBERS))
def test_the_family_bound_is_below_every_member(case) -> None:
    problem, probe, key = case
    family = ANALYTICAL.relaxed_step_lower_bound_s(problem, probe)
    assert family == ANALYTICAL.relaxed_step_lower_bound_s(problem, key)
    assert family <= ANALYTICAL.context_free_step_lower_bound_s(problem, key) * (1 + 1e-12)
    split = _even_split(problem.model.num_layers, key.pipeline * key.virtual_pipeline)
    est = ANALYTICAL.evaluate(problem, key.to_plan(split))
    assert family <= est.metrics.step_time_s, (key, family, est.metrics.step_time_s)


class _WithoutFamilies:
    """The analytical model without `relaxed_step_lower_bound_s`: the search queues every
    group from the start, as before families."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "relaxed_step_lower_bound_s":
            raise AttributeError(name)
        return getattr(self._inner, name)


def _ranked(result) -> list[dict[str, Any]]:
    return [p.to_dict() for p in result.all_plans]


@pytest.mark.parametrize("problem", [DENSE, MOE], ids=["dense", "moe"])
@pytest.mark.parametrize("top_k", [3, 10])
def test_same_ranked_top_k_and_counts_as_without_families(monkeypatch, problem, top_k) -> None:
    expanded: list[int] = []
    original = bnb_module.expand_family

    def spy(*args):
        out = original(*args)
        expanded.append(len(out))
        return out

    monkeypatch.setattr(bnb_module, "expand_family", spy)
    new = search(problem, ANALYTICAL, SPACE, top_k=top_k, solver=PartitionSolver())
    families = {
        tuple(getattr(k, f) for f in _FAMILY_FIELDS)
        for k in candidates(problem, SPACE)
        if k.context > 1
    }
    # some families were expanded and some left the queue unexpanded
    assert 0 < len(expanded) < len(families), (len(expanded), len(families))
    old = search(
        problem, _WithoutFamilies(build_cost_model("analytical")), SPACE, top_k=top_k,
        solver=PartitionSolver(),
    )  # fmt: skip
    assert new.plans and _ranked(new) == _ranked(old)
    assert new.stats.enumerated == old.stats.enumerated
    assert new.stats.evaluated == old.stats.evaluated
    assert sum(new.stats.pruned.values()) + new.stats.feasible == new.stats.enumerated


@pytest.mark.parametrize("problem", [DENSE, MOE], ids=["dense", "moe"])
def test_search_with_families_equals_exhaustive(problem) -> None:
    cons = SearchConstraints(
        fixed={"zero_stage": 1},
        max_virtual_pipeline=2,
        micro_batch_sizes=[1, 2],
        research_forks=True,
    )
    bnb = search(problem, ANALYTICAL, cons, top_k=5, solver=PartitionSolver())
    ref = exhaustive_search(problem, ANALYTICAL, cons, top_k=5, solver=PartitionSolver())
    assert bnb.plans and _ranked(bnb) == _ranked(ref)
