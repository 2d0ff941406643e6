"""Vocabulary parallelism (Yeung et al., MLSys 2025, arXiv 2411.05288;
`cost_models.analytical.training.vocab_parallel`): a hand-worked 256k-vocabulary case
with and without it, its rules, the search's choice, and its bounds below what evaluate()
reports (hypothesis)."""

from __future__ import annotations

import dataclasses

import pytest
from cm_support import make_cluster, make_h100
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_models.analytical.training import AnalyticalTrainingCostModel
from cost_models.base import TrainingProblem
from solver import search
from solver.formulations.stage_partition import balanced_lower_bound, memory_lower_bound_bytes
from specs.constraints import SearchConstraints
from specs.model import ModelSpec
from specs.plan import ParallelDims, PlanKey, TrainingPlan
from specs.workload import TrainingWorkload

GIB = 1024**3

# a Llama-3-8B-shaped model with a 256k vocabulary (Gemma's 256,000 entries), untied
L, H, HEADS, KV, FFN, V = 32, 4096, 32, 8, 14336, 256_000
T, P, SEQ, GBS = 2, 4, 4096, 64


def _model(vocab: int = V, tie: bool = False) -> ModelSpec:
    return ModelSpec(
        name="vocab256k",
        num_layers=L,
        hidden_size=H,
        num_attention_heads=HEADS,
        num_kv_heads=KV,
        ffn_hidden_size=FFN,
        vocab_size=vocab,
        tie_embeddings=tie,
    )


def _problem(model: ModelSpec | None = None, nodes: int = 1) -> TrainingProblem:
    return TrainingProblem(
        model=model or _model(),
        cluster=make_cluster(make_h100(), nodes),
        workload=TrainingWorkload(global_batch_size=GBS, sequence_length=SEQ),
    )


def _plan(vocab_parallel: bool, zero: int = 1) -> TrainingPlan:
    return TrainingPlan(
        parallelism=ParallelDims(data=1, tensor=T, pipeline=P, sequence_parallel=True),
        micro_batch_size=1,
        zero_stage=zero,
        stage_layers=[L // P] * P,
        vocab_parallel=vocab_parallel,
        framework="megatron_core",
    )


def _both() -> tuple[object, object]:
    problem, cm = _problem(), AnalyticalTrainingCostModel()
    return cm.evaluate(problem, _plan(False)), cm.evaluate(problem, _plan(True))


def test_states_per_stage_by_hand() -> None:
    """Weights, gradients and optimizer states of every stage from the model dims: bf16
    weights (2 B), fp32 gradients (4 B), fp32 master + Adam moments (12 B; one data rank,
    nothing sharded). Naive: the embedding V·h/t on stage 0, the head V·h/t and the final
    norm on stage 3. Vocabulary parallel: 2·V·h/(t·p) on every stage, the norm on stage 3."""
    naive, vocab = _both()
    head_dim = H // HEADS
    attention = H * (H + 2 * KV * head_dim) + H * H  # q, k, v and the output projection
    mlp = 3 * H * FFN  # gated: gate, up, down
    layer = (attention + mlp) / T + 2 * H  # matrices split over t, two RMSNorms replicated
    stage_layers = (L // P) * layer
    table = V * H / T
    expected = {
        False: [stage_layers + table, stage_layers, stage_layers, stage_layers + table + H],
        True: [stage_layers + 2 * table / P] * (P - 1) + [stage_layers + 2 * table / P + H],
    }
    for est, vp in ((naive, False), (vocab, True)):
        for j, stage in enumerate(est.memory.by_stage):  # type: ignore[attr-defined]
            params = expected[vp][j]
            assert stage.weights_gib == pytest.approx(2 * params / GIB, rel=1e-9)
            assert stage.gradients_gib == pytest.approx(4 * params / GIB, rel=1e-9)
            assert stage.optimizer_gib == pytest.approx(12 * params / GIB, rel=1e-9)
    # the 256k tables: 2 × 524.3M parameters per GPU on the end stages before, 262.1M on
    # every stage after: the last stage's states shrink by a quarter of the states there
    last_naive = naive.memory.by_stage[-1]  # type: ignore[attr-defined]
    last_vocab = vocab.memory.by_stage[-1]  # type: ignore[attr-defined]
    saved = 18 * (table - 2 * table / P) / GIB
    got = (last_naive.weights_gib + last_naive.gradients_gib + last_naive.optimizer_gib) - (
        last_vocab.weights_gib + last_vocab.gradients_gib + last_vocab.optimizer_gib
    )
    assert got == pytest.approx(saved, rel=1e-9)
    assert saved == pytest.approx(4.395, abs=1e-3)  # GiB, by hand: 18 B × 262.144M


def test_activations_per_stage_by_hand() -> None:
    """The fp32 logits and their gradient of one micro-batch, s·b·V/t × 8 B = 3.91 GiB on
    the last stage, become s·b·V/(t·p) × 8 B = 0.98 GiB on every stage, plus the broadcast
    copy of the head's input (s·b·h/t × 2 B under sequence parallelism) and one more
    micro-batch of every stage's layer activations in flight (1F1B holds p − j on stage
    j, the one-barrier schedule p − j + 1; stage 0 also one more embedding output). One micro-batch of 8 layers' activations, A,
    is read off the naive stages 1 and 2 (3 and 2 micro-batches in flight, same layers)."""
    naive, vocab = _both()
    frag = AnalyticalTrainingCostModel().config.fragmentation_fraction
    n = [s.activations_gib * GIB for s in naive.memory.by_stage]  # type: ignore[attr-defined]
    w = [s.activations_gib * GIB for s in vocab.memory.by_stage]  # type: ignore[attr-defined]
    one_microbatch = n[1] - n[2]
    logits = SEQ * 1 * V / T * 8.0
    assert logits / GIB == pytest.approx(3.906, abs=1e-3)
    head_input = SEQ * H / T * 2.0
    share = logits / P + head_input
    for j in range(P):
        expected = n[j] + one_microbatch + share - (logits if j == P - 1 else 0.0)
        if j == 0:  # and stage 0 holds one more embedding output (s·b·h/t × 2 B)
            expected += SEQ * H / T * 2.0
        assert w[j] == pytest.approx(expected, rel=1e-9), j
    # "other" carries the allocator fragmentation of the activations
    other_n = naive.memory.by_stage[-1].other_gib * GIB  # type: ignore[attr-defined]
    other_w = vocab.memory.by_stage[-1].other_gib * GIB  # type: ignore[attr-defined]
    assert other_w - other_n == pytest.approx(frag * (w[-1] - n[-1]), rel=1e-6)


def test_step_time_balance_by_hand() -> None:
    """1F1B's step is (m − 1)·max W + ΣW (Narayanan et al. 2021 §2.2): the bubble is
    ΣW − max W. Naive: the last stage carries the head and the loss, H = W_3 − W_1, the
    first the embedding lookup, E = W_0 − W_1. Vocabulary parallel: every stage runs W_1 +
    E + its share of the head (at least H/p; smaller GEMMs run no faster per FLOP) + the
    overlapped collectives' interference, so max W drops from W_1 + H to about W_1 + H/p
    and the bubble is (p − 1)·W."""
    naive, vocab = _both()
    wn = naive.details["rank_work_s"]  # type: ignore[attr-defined]
    wv = vocab.details["rank_work_s"]  # type: ignore[attr-defined]
    m = naive.details["num_microbatches"]  # type: ignore[attr-defined]
    assert m == GBS
    head, embedding = wn[3] - wn[1], wn[0] - wn[1]
    assert wn[1] == pytest.approx(wn[2], rel=1e-12)
    assert head > 0.25 * wn[1]  # a 256k head is a quarter of 8 layers' work and more
    assert max(wv) - min(wv) == pytest.approx(0.0, abs=1e-12)  # balanced
    extra = wv[0] - wn[1]
    comm = vocab.details["vocab_parallel_comm_raw_s"]  # type: ignore[attr-defined]
    assert embedding + head / P <= extra <= embedding + 1.3 * head / P + comm
    bubble_n = naive.metrics.time_breakdown_s.bubble  # type: ignore[attr-defined]
    bubble_v = vocab.metrics.time_breakdown_s.bubble  # type: ignore[attr-defined]
    assert bubble_n == pytest.approx(sum(wn) - max(wn), rel=1e-9)
    assert bubble_v == pytest.approx((P - 1) * wv[0], rel=1e-9)
    # the pipeline part of the step: m·max W + bubble, the rest (optimizer, DP, overhead)
    # about the same; the gain is most of (m − 1)·(max W_naive − W_vocab)
    sched_n, sched_v = (m - 1) * max(wn) + sum(wn), (m - 1) * max(wv) + sum(wv)
    gain = naive.metrics.step_time_s - vocab.metrics.step_time_s  # type: ignore[attr-defined]
    assert gain == pytest.approx((sched_n - sched_v) * naive.details["straggler_factor"], rel=0.02)  # type: ignore[attr-defined]
    assert vocab.metrics.step_time_s < 0.9 * naive.metrics.step_time_s  # type: ignore[attr-defined]


def test_rules() -> None:
    cm = AnalyticalTrainingCostModel()
    tied = _problem(_model(tie=True))
    kinds = {v.field for v in cm.check(tied, _plan(True))}
    assert "plan.vocab_parallel" in kinds
    interleaved = _plan(True).model_copy(
        update={
            "pipeline_schedule": "interleaved_1f1b",
            "parallelism": ParallelDims(
                data=1, tensor=T, pipeline=P, virtual_pipeline=2, sequence_parallel=True
            ),
            "stage_layers": [L // (2 * P)] * (2 * P),
        }
    )
    details = [v.detail for v in cm.check(_problem(), interleaved)]
    assert any("vocab_parallel runs with pipeline_schedule 1f1b or v_half" in d for d in details)
    torchtitan = _plan(True).model_copy(update={"framework": "torchtitan", "zero_stage": 1})
    assert any("does not run vocab_parallel" in v.detail for v in cm.check(_problem(), torchtitan))
    assert cm.check(_problem(), _plan(True)) == []
    with pytest.raises(ValueError, match="vocab_parallel needs parallelism.pipeline > 1"):
        TrainingPlan(parallelism=ParallelDims(data=8), vocab_parallel=True)


def test_plan_encoding() -> None:
    plan = _plan(True)
    assert plan.key().vocab_parallel is True
    assert plan.key().to_plan() == plan
    # a plan without it hashes as before the field existed
    off = _plan(False)
    data = off.model_dump(mode="json")
    data.pop("vocab_parallel")
    from specs.plan import canonical_hash

    data.pop("context_parallel_algorithm")
    data.pop("context_parallel_heads")
    assert off.content_hash() == canonical_hash(data)
    assert plan.content_hash() != off.content_hash()
    assert PlanKey().vocab_parallel is False


def test_search_picks_vocab_parallel_for_a_large_vocabulary() -> None:
    problem = _problem()
    fixed = {"tensor": T, "pipeline": P, "micro_batch_size": 1, "pipeline_schedule": "1f1b"}
    forks = SearchConstraints(fixed=fixed, research_forks=True)
    result = search(problem, AnalyticalTrainingCostModel(), forks, top_k=3)
    best = result.plans[0].estimate
    assert best.plan.vocab_parallel
    # a fork's option: not in the default space
    stock = search(problem, AnalyticalTrainingCostModel(), SearchConstraints(fixed=fixed), top_k=3)
    assert stock.plans and not any(p.estimate.plan.vocab_parallel for p in stock.plans)
    assert "vocabulary parallel" in result.plans[0].explanation
    naive = AnalyticalTrainingCostModel().evaluate(
        problem, best.plan.model_copy(update={"vocab_parallel": False})
    )
    assert best.metrics.step_time_s < naive.metrics.step_time_s


def test_search_keeps_the_naive_layout_where_it_does_not_pay() -> None:
    """A 4k-entry vocabulary with a pipeline that crosses nodes: the head is a sliver of a
    stage's work, while every stage would pay the embedding lookup and the interference of
    the collectives over the network; the search keeps Megatron's layout, and evaluating
    the vocabulary-parallel twin confirms it is slower."""
    problem = _problem(_model(vocab=4096), nodes=2)
    fixed = {"tensor": 8, "pipeline": 2, "micro_batch_size": 1, "pipeline_schedule": "1f1b"}
    cm = AnalyticalTrainingCostModel()
    result = search(problem, cm, SearchConstraints(fixed=fixed, research_forks=True), top_k=3)
    best = result.plans[0].estimate
    assert not best.plan.vocab_parallel
    twin = cm.evaluate(problem, best.plan.model_copy(update={"vocab_parallel": True}))
    assert twin.metrics.step_time_s > best.metrics.step_time_s


@st.composite
def _cases(draw: st.DrawFn) -> tuple[TrainingProblem, PlanKey, list[int]]:
    heads = draw(st.sampled_from([8, 16, 32]))
    hidden = heads * draw(st.sampled_from([64, 128]))
    layers = draw(st.integers(4, 24))
    model = ModelSpec(
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=draw(st.sampled_from([h for h in (1, 2, 4, 8) if heads % h == 0])),
        ffn_hidden_size=draw(st.sampled_from([2, 4])) * hidden,
        vocab_size=draw(st.sampled_from([4096, 32000, 128256, 256000])),
    )
    nodes = draw(st.sampled_from([1, 2]))
    pipeline = draw(st.sampled_from([p for p in (2, 4, 8) if p <= layers and p <= 8 * nodes]))
    tensor = draw(st.sampled_from([t for t in (1, 2, 4) if heads % t == 0]))
    rest = 8 * nodes // (pipeline * tensor)
    if rest < 1 or 8 * nodes % (pipeline * tensor):
        tensor, rest = 1, 8 * nodes // pipeline
    data = rest
    mbs = draw(st.sampled_from([1, 2]))
    gbs = data * mbs * draw(st.sampled_from([pipeline, 2 * pipeline, 16]))
    problem = TrainingProblem(
        model=model,
        cluster=make_cluster(make_h100(), nodes),
        workload=TrainingWorkload(
            global_batch_size=gbs, sequence_length=draw(st.sampled_from([1024, 4096]))
        ),
    )
    schedule = draw(st.sampled_from(["1f1b", "v_half"]))
    v = 2 if schedule == "v_half" else 1
    if pipeline * v > layers:
        schedule, v = "1f1b", 1
    key = PlanKey(
        data=data,
        tensor=tensor,
        pipeline=pipeline,
        virtual_pipeline=v,
        sequence_parallel=tensor > 1 and draw(st.booleans()),
        micro_batch_size=mbs,
        zero_stage=draw(st.sampled_from([0, 1])),
        recompute=draw(st.sampled_from(["none", "selective", "full"])),
        pipeline_schedule=schedule,
        framework="megatron_core",
        vocab_parallel=draw(st.booleans()),
    )
    chunks = pipeline * v
    cuts = sorted(
        draw(
            st.lists(
                st.integers(1, layers - 1), min_size=chunks - 1, max_size=chunks - 1, unique=True
            )
        )
    )
    bounds = [0, *cuts, layers]
    return problem, key, [b - a for a, b in zip(bounds, bounds[1:], strict=False)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_cases())
def test_bounds_below_evaluated(case: tuple[TrainingProblem, PlanKey, list[int]]) -> None:
    """The step-time bounds (free split, the context-free one, the fixed split's) and the
    group memory bound never exceed what evaluate() reports, with vocabulary parallelism on
    or off, on random models, degrees and splits."""
    problem, key, split = case
    cm = AnalyticalTrainingCostModel()
    if cm.check_key(problem, key):
        return
    est = cm.evaluate(problem, key.to_plan(split))
    step = est.metrics.step_time_s
    assert cm.step_time_lower_bound_s(problem, key) <= step * (1 + 1e-12)
    assert cm.context_free_step_lower_bound_s(problem, key) <= step * (1 + 1e-12)
    fixed = key._replace(stage_layers=tuple(split))
    assert cm.step_time_lower_bound_s(problem, fixed) <= step * (1 + 1e-12)
    peak = est.memory.peak_gib * GIB
    assert cm.group_memory_lower_bound_bytes(problem, key) <= peak * (1 + 1e-12)
    # the partition program's bounds on the profile (`solver.search.steps`)
    profile = cm.profile_key(problem, key)
    p, v = key.pipeline, key.virtual_pipeline
    assert profile.num_microbatches * balanced_lower_bound(profile, p, v) <= step * (1 + 1e-12)
    assert memory_lower_bound_bytes(profile, p, v) <= peak * (1 + 1e-9)


def test_vocab_parallel_on_one_pool_of_a_mixed_cluster_prices_as_on_that_pool() -> None:
    """A pool's plan on a mixed cluster names its pool on every stage (`stage_groups`);
    vocabulary parallelism is allowed there and priced as on the pool alone, but refused on
    stages across groups and with data shares."""
    from hardware_catalog import resolve_cluster
    from solver.estimate import estimate_plan
    from specs.cluster import ClusterSpec

    plan = _plan(True)
    pp = plan.parallelism.pipeline
    mixed = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8},
                    {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 8},
                ]
            }
        )
    )
    alone = resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}]}
        )
    )
    problem = _problem()
    cm = AnalyticalTrainingCostModel()
    on_pool = TrainingPlan.model_validate({**plan.model_dump(), "stage_groups": ["h100-sxm"] * pp})
    on_mixed = estimate_plan(dataclasses.replace(problem, cluster=mixed), cm, on_pool)
    by_itself = estimate_plan(dataclasses.replace(problem, cluster=alone), cm, plan)
    assert on_mixed.metrics.step_time_s == pytest.approx(by_itself.metrics.step_time_s, rel=1e-12)
    assert on_mixed.memory.peak_gib == pytest.approx(by_itself.memory.peak_gib, rel=1e-12)
    with pytest.raises(ValueError, match="several groups or with data_shares"):
        TrainingPlan.model_validate(
            {**plan.model_dump(), "stage_groups": ["h100-sxm"] * (pp - 1) + ["a100-80gb"]}
        )
