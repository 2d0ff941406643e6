"""The folded MoE search space (Megatron-Core folding rules, `solver.space`) and the exact
search over it: every candidate obeys the rules, the space is complete against brute force,
dense models keep expert degrees 1 / 1, branch-and-bound equals the exhaustive search."""

from __future__ import annotations

import pytest
from fake_cost_model import make_problem
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.registry import build_cost_model
from solver import exhaustive_search, search
from solver.formulations.stage_partition import PartitionSolver
from solver.space import candidates, count_candidates, divisors, expert_degree_options
from specs.constraints import SearchConstraints
from specs.model import ModelSpec, MoESpec


def _moe(experts: int = 8, ffn: int = 1536, dense: int = 0, layers: int = 8) -> ModelSpec:
    return ModelSpec(
        name="tiny-moe",
        num_layers=layers,
        hidden_size=1024,
        num_attention_heads=16,
        num_kv_heads=8,
        ffn_hidden_size=4096,
        vocab_size=32000,
        moe=MoESpec(
            num_experts=experts, top_k=2, expert_ffn_hidden_size=ffn, num_dense_layers=dense
        ),
    )


@settings(max_examples=40, deadline=None)
@given(
    experts=st.sampled_from([4, 6, 8, 16, 64]),
    ffn=st.sampled_from([1536, 2048, 1000]),
    nodes=st.integers(1, 4),
    gpn=st.sampled_from([4, 8]),
    across=st.booleans(),
)
def test_every_moe_candidate_obeys_the_folding_rules(
    experts: int, ffn: int, nodes: int, gpn: int, across: bool
) -> None:
    problem = make_problem(_moe(experts, ffn), nodes, gpus_per_node=gpn, global_batch=32)
    cons = SearchConstraints(allow_tensor_across_nodes=across, max_virtual_pipeline=2)
    seen: set[tuple[int, int, int, int, int]] = set()
    n = 0
    for cand in candidates(problem, cons):
        n += 1
        e, et = cand.expert, cand.expert_tensor
        grid = cand.data * cand.context * cand.tensor
        assert experts % e == 0
        assert ffn % et == 0
        assert grid % (e * et) == 0
        assert across or et <= gpn
        seen.add((cand.data, cand.tensor, cand.context, e, et))
    assert n == count_candidates(problem, cons)
    # complete: brute force over every divisor pair for each attention layout seen
    layouts = {(d, t, c) for d, t, c, _, _ in seen}
    for d, t, c in layouts:
        brute = {
            (e, et)
            for e in divisors(experts)
            for et in divisors(ffn)
            if not (d * c * t) % (e * et) and (across or et <= gpn)
        }
        got = {(e, et) for dd, tt, cc, e, et in seen if (dd, tt, cc) == (d, t, c)}
        assert got == brute


def test_dense_models_keep_expert_degrees_one() -> None:
    from fake_cost_model import tiny_model

    problem = make_problem(tiny_model(), 2)
    assert expert_degree_options(problem, SearchConstraints(), 4, 4, 1) == [(1, 1)]
    assert {(c.expert, c.expert_tensor) for c in candidates(problem, SearchConstraints())} == {
        (1, 1)
    }


def test_fixed_expert_degrees_restrict_the_space() -> None:
    problem = make_problem(_moe(), 2)
    cons = SearchConstraints(fixed={"expert": 4, "expert_tensor": 2})
    pairs = {(c.expert, c.expert_tensor) for c in candidates(problem, cons)}
    assert pairs == {(4, 2)}
    # 16 GPUs, tensor 2, data 8: grid 16 admits e·etp ∈ {1, 2, 4, 8, 16} with e | 8, etp | 1536
    opts = expert_degree_options(problem, SearchConstraints(), 8, 2, 1)
    assert (8, 2) in opts and (8, 1) in opts and (1, 1) in opts
    assert all(16 % (e * et) == 0 for e, et in opts)


@pytest.mark.parametrize(("dense", "nodes", "gbs"), [(0, 1, 32), (1, 2, 64)])
def test_branch_and_bound_equals_exhaustive_on_moe(dense: int, nodes: int, gbs: int) -> None:
    # an all-MoE model (identical layers) and one with a dense first layer (two kinds: the
    # partition program), every expert / expert-tensor degree searched
    problem = make_problem(_moe(dense=dense, layers=6), nodes, global_batch=gbs, memory_gib=40.0)
    cons = SearchConstraints(max_virtual_pipeline=2, micro_batch_sizes=[1, 2])
    cm = build_cost_model("analytical")
    bnb = search(problem, cm, cons, top_k=5, solver=PartitionSolver())
    ref = exhaustive_search(
        problem, build_cost_model("analytical"), cons, top_k=5, solver=PartitionSolver()
    )
    assert ref.plans
    assert [p.estimate.plan for p in bnb.plans] == [p.estimate.plan for p in ref.plans]
    assert [p.estimate.metrics.step_time_s for p in bnb.plans] == [
        p.estimate.metrics.step_time_s for p in ref.plans
    ]
    assert bnb.stats.evaluated < ref.stats.evaluated
    # the ranking saw expert layouts: every plan reports its expert-parallel figures, and a
    # plan with expert > 1 pays an all-to-all (an unsplit expert group pays none)
    for p in ref.plans:
        ep = p.estimate.details["expert_parallel"]
        e = p.estimate.plan.parallelism.expert
        assert (ep["all_to_all_s_per_step"] > 0) == (e > 1)
        assert (p.estimate.metrics.time_breakdown_s.expert_parallel_comm > 0) == (
            e > 1 or p.estimate.plan.parallelism.expert_tensor > 1
        )
