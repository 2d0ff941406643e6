"""Property tests of the candidate generators in solver/space.py."""

from __future__ import annotations

import itertools

import pytest
from fake_cost_model import make_problem, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.space import (
    candidates,
    count_candidates,
    degree_tuples,
    divisors,
    framework_options,
    micro_batch_options,
    virtual_pipeline_options,
    zero_stage_options,
)
from specs.constraints import SearchConstraints
from specs.errors import SpecError
from specs.plan import TrainingPlan


@given(st.integers(min_value=1, max_value=5000))
def test_divisors_are_exactly_the_divisors(n: int) -> None:
    got = divisors(n)
    assert got == [d for d in range(1, n + 1) if n % d == 0]


def test_divisors_rejects_zero() -> None:
    with pytest.raises(SpecError, match="positive"):
        divisors(0)


@given(st.integers(1, 200), st.integers(1, 64), st.integers(1, 16))
def test_virtual_pipeline_options(num_layers: int, pipeline: int, max_v: int) -> None:
    got = virtual_pipeline_options(num_layers, pipeline, max_v)
    if pipeline == 1:
        assert got == [1]
    else:
        assert got == [1] + [v for v in range(2, max_v + 1) if pipeline * v <= num_layers]


@given(st.integers(1, 4096), st.integers(1, 64))
def test_micro_batch_options_are_powers_of_two_dividing(gbs: int, data: int) -> None:
    got = micro_batch_options(gbs, data)
    if gbs % data:
        assert got == []
        return
    assert got == [b for b in (1, 2, 4, 8, 16) if (gbs // data) % b == 0]


_problems = st.builds(
    lambda nodes, gpn, layers, heads_kv, gbs, seq: make_problem(
        tiny_model(
            num_layers=layers,
            hidden=64 * heads_kv[0],
            heads=heads_kv[0],
            kv=heads_kv[1],
            ffn=96 * heads_kv[0],
        ),
        nodes,
        gpus_per_node=gpn,
        global_batch=gbs,
        seq=seq,
    ),
    st.sampled_from([1, 2, 3, 4]),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(1, 12),
    st.sampled_from([(4, 4), (8, 2), (12, 4), (16, 8), (6, 6)]),
    st.sampled_from([1, 6, 16, 64, 96]),
    st.sampled_from([128, 1024, 2000, 4096]),
)


@settings(max_examples=60, deadline=None)
@given(_problems, st.booleans(), st.integers(1, 4))
def test_degree_tuples_are_exactly_the_legal_ones(problem, across: bool, max_v: int) -> None:
    cons = SearchConstraints(allow_tensor_across_nodes=across, max_virtual_pipeline=max_v)
    n, m, wl = problem.num_gpus, problem.model, problem.workload
    expected = set()
    for d, t, p, c in itertools.product(range(1, n + 1), repeat=4):
        if d * t * p * c != n:
            continue
        if m.num_attention_heads % t or m.kv_heads % t or m.ffn_hidden_size % t:
            continue
        if not across and t > problem.cluster.gpus_per_node:
            continue
        if p > m.num_layers or wl.global_batch_size % d:
            continue
        if c > 1 and (wl.sequence_length // 2) % c:
            continue
        expected.add((d, t, p, c))
    got = list(degree_tuples(problem, cons))
    assert len(got) == len(set(got))
    assert set(got) == expected


@settings(max_examples=40, deadline=None)
@given(_problems, st.integers(1, 4))
def test_every_candidate_is_a_valid_plan(problem, max_v: int) -> None:
    cons = SearchConstraints(max_virtual_pipeline=max_v)
    wl = problem.workload
    cands = list(candidates(problem, cons))
    assert count_candidates(problem, cons) == len(cands)
    assert len(set(cands)) == len(cands)
    assert all(cand.to_plan().key() == cand for cand in cands)
    for cand in cands:
        plan = cand.to_plan()
        assert isinstance(plan, TrainingPlan)
        par = plan.parallelism
        assert par.world_size == problem.num_gpus
        assert par.sequence_parallel == (par.tensor > 1)
        m = wl.global_batch_size // (plan.micro_batch_size * par.data)
        assert m * plan.micro_batch_size * par.data == wl.global_batch_size
        assert plan.micro_batch_size in (1, 2, 4, 8, 16)
        assert plan.zero_stage in zero_stage_options()
        # the default search prices under Megatron-Core, which shards gradients and weights
        # (ZeRO-2/3) only without pipelining
        assert plan.framework == "megatron_core"
        assert par.pipeline == 1 or plan.zero_stage <= 1
        if par.virtual_pipeline > 1:
            assert plan.pipeline_schedule == "interleaved_1f1b"
            assert m % par.pipeline == 0 and m >= par.pipeline
            assert par.pipeline * par.virtual_pipeline <= problem.model.num_layers
        assert (par.expert, par.expert_tensor) == (1, 1)


def test_fixed_fields_restrict_the_space() -> None:
    problem = make_problem(tiny_model(num_layers=8), 2, global_batch=64)
    fixed = {
        "tensor": 4,
        "pipeline": 2,
        "recompute": "full",
        "zero_stage": 1,
        "sequence_parallel": False,
        "micro_batch_size": 2,
    }
    cands = list(candidates(problem, SearchConstraints(fixed=fixed, research_forks=True)))
    # 16 GPUs / (4 × 2) = 2 = data × context; context ∈ {1, 2} (1024 % 2 == 0) → 2 tuples;
    # micro-batches per replica: 64/2/2 = 16 (data 2) or 64/1/2 = 32 (data 1), both multiples
    # of pipeline 2; v ∈ {1, 2, 3, 4} (2·v ≤ 8) → 4 per tuple; context 1 runs the ring only,
    # context 2 the ring, Ulysses (16 / 4 = 4 query and 8 / 4 = 2 KV heads per tensor rank
    # split over 2) and the all-gather (no hybrid: no head degree strictly between 1 and 2)
    # → 4 + 3 × 4 = 16 candidates; with pipeline 2 and untied embeddings each 1F1B one
    # (v = 1: one per context-parallel variant, 1 + 3) also comes vocabulary-parallel → 20,
    # when research forks are searched (the fork runs it)
    assert len(cands) == 20
    vocab = [c for c in cands if c.vocab_parallel]
    assert len(vocab) == 4
    assert {(c.virtual_pipeline, c.pipeline_schedule) for c in vocab} == {(1, "1f1b")}
    no_vocab = list(
        candidates(problem, SearchConstraints(fixed={**fixed, "vocab_parallel": False}))
    )
    assert len(no_vocab) == 16 and not any(c.vocab_parallel for c in no_vocab)
    stock = list(candidates(problem, SearchConstraints(fixed=fixed)))
    assert stock == no_vocab  # the default space: released frameworks only
    assert {(c.context, c.context_parallel_algorithm) for c in cands} == {
        (1, "ring"),
        (2, "ring"),
        (2, "ulysses"),
        (2, "all_gather"),
    }
    assert {
        (c.tensor, c.pipeline, c.recompute, c.zero_stage, c.sequence_parallel, c.micro_batch_size)
        for c in cands
    } == {(4, 2, "full", 1, False, 2)}
    assert {c.virtual_pipeline for c in cands} == {1, 2, 3, 4}


def test_fixed_stage_layers_and_schedule() -> None:
    problem = make_problem(tiny_model(num_layers=8), 1, global_batch=16)
    cons = SearchConstraints(
        fixed={"pipeline": 2, "stage_layers": [3, 5], "pipeline_schedule": "1f1b"}
    )
    cands = list(candidates(problem, cons))
    assert cands and all(c.stage_layers == (3, 5) and c.virtual_pipeline == 1 for c in cands)
    assert count_candidates(problem, cons) == len(cands)


def test_fixed_value_of_wrong_type_is_a_spec_error() -> None:
    problem = make_problem(tiny_model(), 1)
    with pytest.raises(SpecError, match="constraints.fixed.tensor"):
        list(candidates(problem, SearchConstraints(fixed={"tensor": "eight"})))


def test_framework_options_name_an_unknown_entry_at_its_request_index() -> None:
    # duplicates are priced once, but an unknown entry keeps the index it has in the request
    constraints = SearchConstraints(frameworks=["fsdp", "fsdp", "torchtitan", "jax"])
    with pytest.raises(SpecError) as exc:
        framework_options(constraints)
    assert exc.value.field == "constraints.frameworks.3"
    assert exc.value.extensions["errors"][0]["value"] == "jax"
    profiles, requested = framework_options(
        SearchConstraints(frameworks=["fsdp", "torchtitan", "fsdp"])
    )
    assert [p.name for p in profiles] == ["fsdp", "torchtitan"] and requested
    with pytest.raises(SpecError) as fixed:
        framework_options(SearchConstraints(fixed={"framework": "jax"}))
    assert fixed.value.field == "constraints.fixed.framework"


def test_a_pinned_framework_must_be_among_the_listed_ones() -> None:
    constraints = SearchConstraints(frameworks=["fsdp"], fixed={"framework": "deepspeed"})
    with pytest.raises(SpecError) as exc:
        framework_options(constraints)
    assert exc.value.field == "constraints.fixed.framework"
    profiles, requested = framework_options(
        SearchConstraints(frameworks=["fsdp", "deepspeed"], fixed={"framework": "deepspeed"})
    )
    assert [p.name for p in profiles] == ["deepspeed"] and requested
