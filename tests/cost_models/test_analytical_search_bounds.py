"""The analytical model's fast entry points and search bounds (`KeyedTrainingCostModel`,
`BoundedTrainingCostModel`): the keyed methods return exactly what the plain ones return,
and the bounds never exceed what evaluate() reports, for every member of a group and for
balanced and deliberately unbalanced splits. Brute force over sampled plans of the declared
space on a dense model (identical layers) and an MoE model with dense layers (two kinds)."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest
from cm_support import llama3_70b, make_cluster, make_h100

from cost_models.analytical.training import AnalyticalTrainingCostModel, rules
from cost_models.base import (
    BoundedTrainingCostModel,
    KeyedTrainingCostModel,
    TrainingProblem,
)
from solver.space import candidates
from specs.constraints import SearchConstraints
from specs.model import ModelSpec, MoESpec
from specs.plan import PlanKey
from specs.workload import MoERoutingSpec, TrainingWorkload

GIB = 1024**3


def _moe_model() -> ModelSpec:
    # 2 dense layers, then MoE every other layer: three runs of two layer kinds
    return ModelSpec(
        name="tiny-moe",
        num_layers=12,
        hidden_size=2048,
        num_attention_heads=16,
        num_kv_heads=4,
        ffn_hidden_size=8192,
        vocab_size=32000,
        moe=MoESpec(
            num_experts=8,
            top_k=2,
            expert_ffn_hidden_size=1408,
            num_dense_layers=2,
            layer_frequency=2,
        ),
    )


def _problems() -> list[tuple[TrainingProblem, dict[str, Any]]]:
    dense = TrainingProblem(
        model=llama3_70b(),
        cluster=make_cluster(make_h100(), 4),
        workload=TrainingWorkload(global_batch_size=256, sequence_length=4096),
    )
    moe = TrainingProblem(
        model=_moe_model(),
        cluster=make_cluster(make_h100(), 2),
        workload=TrainingWorkload(global_batch_size=64, sequence_length=2048),
    )
    # the folded MoE space (every expert / expert-tensor degree) under a skewed, dropless
    # router: the busiest expert-parallel rank sets the MoE layers' pace
    skewed = TrainingProblem(
        model=_moe_model(),
        cluster=make_cluster(make_h100(), 2),
        workload=TrainingWorkload(
            global_batch_size=64, sequence_length=2048, moe_routing=MoERoutingSpec(imbalance=1.0)
        ),
    )
    return [(dense, {}), (moe, {"expert": 2}), (skewed, {})]


def _sample(problem: TrainingProblem, fixed: dict[str, Any], n: int, seed: int) -> list[Any]:
    cands = list(candidates(problem, SearchConstraints(max_virtual_pipeline=3, fixed=fixed)))
    return random.Random(seed).sample(cands, min(n, len(cands)))


def _key(cand: Any) -> PlanKey:
    return cand.to_plan().key()


def _splits(problem: TrainingProblem, pipeline: int, virtual: int) -> list[list[int]]:
    """An even split and the most unbalanced one (everything it can on chunk 0)."""
    num_layers, chunks = problem.model.num_layers, pipeline * virtual
    base, extra = divmod(num_layers, chunks)
    even = [base + (1 if c < extra else 0) for c in range(chunks)]
    return [even, [num_layers - chunks + 1] + [1] * (chunks - 1)]


def test_analytical_model_offers_the_fast_protocols() -> None:
    cm = AnalyticalTrainingCostModel()
    assert isinstance(cm, KeyedTrainingCostModel)
    assert isinstance(cm, BoundedTrainingCostModel)


@pytest.mark.parametrize("case", [0, 1, 2])
def test_keyed_entry_points_equal_plain_ones(case: int) -> None:
    problem, fixed = _problems()[case]
    keyed, plain = AnalyticalTrainingCostModel(), AnalyticalTrainingCostModel()
    compared = 0
    for cand in _sample(problem, fixed, 250, seed=11):
        plan = cand.to_plan()
        key = plan.key()
        assert key.to_plan() == plan
        assert keyed.check_key(problem, key) == plain.check(problem, plan)
        # the check cache hands out copies: callers may append to the list
        keyed.check_key(problem, key).append(None)  # type: ignore[arg-type]
        assert keyed.check_key(problem, key) == plain.check(problem, plan)
        if plain.check(problem, plan):
            continue
        assert keyed.profile_key(problem, key) == plain.profile(problem, plan)
        compared += 1
    assert compared > 50


@pytest.mark.parametrize("case", [0, 1, 2])
def test_step_time_lower_bound_never_exceeds_evaluate(case: int) -> None:
    problem, fixed = _problems()[case]
    cm = AnalyticalTrainingCostModel()
    checked = tight = 0
    for cand in _sample(problem, fixed, 200, seed=5):
        key = _key(cand)
        if cm.check_key(problem, key):
            continue
        bound = cm.step_time_lower_bound_s(problem, key)
        for split in _splits(problem, cand.pipeline, cand.virtual_pipeline):
            step = cm.evaluate(problem, cand.to_plan(split)).metrics.step_time_s
            assert bound <= step * (1 + 1e-12), (cand, split, bound, step)
            tight += bound >= 0.8 * step
            checked += 1
    assert checked > 100
    assert tight > 0  # not a trivial bound: within 20% of the step time for some plans


@pytest.mark.parametrize("case", [0, 1, 2])
def test_group_memory_lower_bound_holds_for_every_member(case: int) -> None:
    problem, fixed = _problems()[case]
    cm = AnalyticalTrainingCostModel()
    groups: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    for cand in candidates(problem, SearchConstraints(max_virtual_pipeline=3, fixed=fixed)):
        if not cm.check_key(problem, _key(cand)):
            groups[
                (
                    cand.data,
                    cand.tensor,
                    cand.pipeline,
                    cand.context,
                    cand.expert,
                    cand.expert_tensor,
                    cand.sequence_parallel,
                    cand.zero_stage,
                    cand.flash_attention,
                    cand.vocab_parallel,
                )
            ].append(cand)
    rng = random.Random(2)
    checked = 0
    for members in rng.sample(list(groups.values()), min(25, len(groups))):
        bounds = {cm.group_memory_lower_bound_bytes(problem, _key(c)) for c in members}
        assert len(bounds) == 1  # the same bound whichever member asks
        bound = bounds.pop()
        for cand in rng.sample(members, min(6, len(members))):
            for split in _splits(problem, cand.pipeline, cand.virtual_pipeline):
                peak = cm.evaluate(problem, cand.to_plan(split)).memory.peak_gib * GIB
                assert bound <= peak * (1 + 1e-12), (cand, split, bound, peak)
                checked += 1
    assert checked > 100


def test_group_memory_bound_is_states_plus_fixed_for_a_hand_case() -> None:
    # Llama-3-70B, tensor 8, pipeline 1, data 4, ZeRO 0: every GPU holds 1/8 of all
    # parameters with 2 + 4 + 12 bytes each, plus the 1 GiB runtime and a gradient bucket of
    # 4 bytes × max(40M, 1M·4) elements (memory.py): well over the 77.65 GiB usable.
    problem = _problems()[0][0]
    cm = AnalyticalTrainingCostModel()
    key = PlanKey(
        data=4, tensor=8, pipeline=1, sequence_parallel=True, zero_stage=0, recompute="full"
    )
    model = problem.model
    per_gpu_params = (
        model.num_layers
        * (
            (model.attention_parameters() + model.dense_mlp_parameters()) / 8
            + 2 * model.norm_parameters()
        )
        + model.embedding_parameters() / 8
        + (model.vocab_size * model.hidden_size / 8 + model.norm_parameters())
    )
    expected = per_gpu_params * 18.0 + 1.0 * GIB + 4.0 * 40e6
    assert cm.group_memory_lower_bound_bytes(problem, key) == pytest.approx(expected, rel=1e-9)
    assert expected > problem.usable_memory_bytes


def test_check_key_lists_every_rule_in_order_on_both_paths() -> None:
    # Llama-3-70B (64 heads, 8 KV heads, 80 layers) on 4 nodes × 8 H100 = 32 GPUs, batch 256:
    # tensor 16 breaks the KV heads (8 % 16) and the node (16 > 8); 2 × 16 × 2 × 1 = 64 GPUs
    # is not 32; micro-batch 3 × data 2 does not divide 256; pipeline 2 × v 41 = 82 > 80;
    # ZeRO-2 with pipeline 2 (torchtitan runs it, so the unpinned key is priced there; pinned
    # to Megatron-Core it breaks that framework's rule). Degree rules come first, then batch, layers,
    # framework. The key keeps schedule 1f1b with v = 41: 1F1B runs one chunk per rank (the
    # schedule rule, after the layers rule).
    problem = _problems()[0][0]
    cm = AnalyticalTrainingCostModel()
    bad = PlanKey(
        data=2,
        tensor=16,
        pipeline=2,
        virtual_pipeline=41,
        sequence_parallel=True,
        micro_batch_size=3,
        zero_stage=2,
    )
    expected = ["divisibility", "divisibility", "topology", "batch", "divisibility", "schedule"]
    assert [v.kind for v in cm.check_key(problem, bad)] == expected
    pinned = bad._replace(framework="megatron_core")
    assert [v.kind for v in cm.check_key(problem, pinned)] == [*expected, "framework"]
    # same degrees, valid step fields: only the degree rules (cached) remain
    assert [
        v.kind
        for v in cm.check_key(
            problem, bad._replace(virtual_pipeline=1, micro_batch_size=1, zero_stage=1)
        )
    ] == expected[:3]
    # valid degrees, then only the per-step rules: the fast path must not hide them
    ok = PlanKey(data=4, tensor=8, pipeline=1, sequence_parallel=True, zero_stage=0)
    assert cm.check_key(problem, ok) == []
    assert [v.kind for v in cm.check_key(problem, ok._replace(micro_batch_size=3))] == ["batch"]
    # interleaving with pipeline 1, and with 256 / (1 · 2) = 128 micro-batches on pipeline 16
    assert [
        v.kind
        for v in cm.check_key(
            problem, ok._replace(pipeline_schedule="interleaved_1f1b", virtual_pipeline=2)
        )
    ] == ["schedule"]
    assert (
        cm.check_key(
            problem,
            PlanKey(
                data=2,
                tensor=8,
                pipeline=2,
                virtual_pipeline=2,
                sequence_parallel=True,
                pipeline_schedule="interleaved_1f1b",
            ),
        )
        == []
    )
    m_bad = PlanKey(
        data=2,
        tensor=8,
        pipeline=2,
        virtual_pipeline=2,
        sequence_parallel=True,
        micro_batch_size=128,
        pipeline_schedule="interleaved_1f1b",
    )
    assert [v.kind for v in cm.check_key(problem, m_bad)] == ["schedule"]  # m = 1 < 2
    z3_pp = ok._replace(data=1, pipeline=4, zero_stage=3)
    assert cm.check_key(problem, z3_pp) == []  # priced under torchtitan (FSDP2 + pipeline)
    assert [v.kind for v in cm.check_key(problem, z3_pp._replace(framework="deepspeed"))] == [
        "framework"
    ]
    # every answer equals the plain check() of a fresh model (no cache involved)
    for key in (bad, ok, m_bad, ok._replace(micro_batch_size=3)):
        fresh = AnalyticalTrainingCostModel().context(problem)
        assert cm.check_key(problem, key) == rules.check(fresh, fresh.resolve(key))


@pytest.mark.parametrize("case", [0, 1, 2])
def test_bounds_do_not_depend_on_the_order_of_questions(case: int) -> None:
    # The bounds and profiles are assembled from parts cached by the fields each depends
    # on; a model asked in another order (profiles first, shuffled) must give the very same
    # numbers.
    problem, fixed = _problems()[case]
    keys = [_key(c) for c in _sample(problem, fixed, 300, seed=3)]
    first = AnalyticalTrainingCostModel()
    answers = [
        (
            first.check_key(problem, k),
            first.group_memory_lower_bound_bytes(problem, k),
            first.step_time_lower_bound_s(problem, k),
        )
        for k in keys
    ]
    other = AnalyticalTrainingCostModel()
    order = list(range(len(keys)))
    random.Random(4).shuffle(order)
    for i in order:
        key = keys[i]
        if not answers[i][0]:
            other.profile_key(problem, key)
        got = (
            other.check_key(problem, key),
            other.group_memory_lower_bound_bytes(problem, key),
            other.step_time_lower_bound_s(problem, key),
        )
        assert got == answers[i], key
