"""The registered analytical TrainingCostModel: check rules, profile/evaluate consistency,
breakdown and memory sums, and a sanity band for Llama-3-70B on 64 H100."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from cm_support import gpt, llama3_70b, make_a100, make_cluster, make_h100
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models import build_cost_model
from cost_models.analytical.training import AnalyticalTrainingCostModel
from cost_models.base import TrainingCostModel, TrainingProblem
from hardware_catalog.schema import ResolvedCluster, ResolvedNodeGroup
from specs.errors import InfeasiblePlan
from specs.model import ModelSpec, MoESpec
from specs.plan import ParallelDims, TrainingPlan
from specs.workload import TrainingWorkload

GIB = 1024**3


def _plan(stage_layers: list[int] | None = None, **kw: Any) -> TrainingPlan:
    dims = {k: kw.pop(k) for k in list(kw) if k in ParallelDims.model_fields}
    return TrainingPlan(parallelism=ParallelDims(**dims), stage_layers=stage_layers, **kw)


LLAMA_PLAN = {
    "data": 2,
    "tensor": 8,
    "pipeline": 4,
    "sequence_parallel": True,
    "micro_batch_size": 1,
    "zero_stage": 1,
    "recompute": "selective",
}


def test_protocol_and_identity() -> None:
    cm = build_cost_model("analytical")
    assert isinstance(cm, TrainingCostModel)
    assert (cm.name, cm.version) == ("analytical", "1")


def test_llama3_70b_sanity(llama_problem: TrainingProblem) -> None:
    est = build_cost_model().evaluate(llama_problem, _plan([20] * 4, **LLAMA_PLAN))
    assert est.feasible, est.violations
    assert 0.30 < est.metrics.mfu < 0.60
    assert est.metrics.peak_memory_gib < 80
    assert est.details["group_tiers"]["tensor"] == "intra"
    assert est.details["group_tiers"]["data"] == "inter"


def test_breakdown_sums_to_step_time(llama_problem: TrainingProblem) -> None:
    cm = build_cost_model()
    for extra in (
        {},
        {"recompute": "full"},
        {"pipeline_schedule": "interleaved_1f1b", "virtual_pipeline": 2},
    ):
        kw = {**LLAMA_PLAN, **extra}
        stages = [10] * 8 if "virtual_pipeline" in extra else [20] * 4
        est = cm.evaluate(llama_problem, _plan(stages, **kw))
        b = est.metrics.time_breakdown_s
        total = (
            b.compute
            + b.tensor_parallel_comm
            + b.data_parallel_comm
            + b.pipeline_comm
            + b.context_parallel_comm
            + b.expert_parallel_comm
            + b.bubble
            + b.optimizer
            + b.overhead
        )
        assert total == pytest.approx(est.metrics.step_time_s, rel=1e-9)
        assert 0 <= b.recompute <= b.compute
        assert est.metrics.bubble_fraction == pytest.approx(b.bubble / est.metrics.step_time_s)
        if kw["recompute"] == "full":
            assert est.metrics.hardware_tflops_per_gpu == pytest.approx(
                est.metrics.model_tflops_per_gpu * 4 / 3, rel=0.02
            )


def test_memory_categories_sum_and_match_profile(llama_problem: TrainingProblem) -> None:
    cm = build_cost_model()
    for extra in (
        {},
        {"recompute": "full", "zero_stage": 0},
        {"pipeline_schedule": "interleaved_1f1b", "virtual_pipeline": 2},
    ):
        plan = _plan(
            [10] * 8 if extra.get("virtual_pipeline") else [21, 20, 20, 19],
            **{**LLAMA_PLAN, **extra},
        )
        est = cm.evaluate(llama_problem, plan)
        prof = cm.profile(llama_problem, plan)
        p, v = plan.parallelism.pipeline, plan.parallelism.virtual_pipeline
        stages = plan.stage_layers
        assert stages is not None
        starts = [sum(stages[:c]) for c in range(p * v)]
        for j, sm in enumerate(est.memory.by_stage):
            parts = (
                sm.weights_gib
                + sm.gradients_gib
                + sm.optimizer_gib
                + sm.activations_gib
                + sm.other_gib
            )
            assert parts == pytest.approx(sm.total_gib, rel=1e-12)
            # the solver's view: the same total from the LayerProfile alone
            total = prof.fixed_bytes
            for lc, c in enumerate(range(j, p * v, p)):
                layers = range(starts[c], starts[c] + stages[c])
                total += sum(prof.layer_state_bytes[i] for i in layers)
                total += prof.inflight_microbatches[j][lc] * sum(
                    prof.layer_activation_bytes[i] for i in layers
                )
            if j == 0:
                total += prof.first_extra_state_bytes
                total += prof.inflight_microbatches[0][0] * prof.first_extra_activation_bytes
            if j == p - 1:
                total += prof.last_extra_state_bytes + prof.last_extra_activation_bytes
            assert total / GIB == pytest.approx(sm.total_gib, rel=1e-9)
        assert est.memory.peak_gib == max(s.total_gib for s in est.memory.by_stage)


def test_work_per_rank_matches_profile(llama_problem: TrainingProblem) -> None:
    cm = build_cost_model()
    plan = _plan([20] * 4, **LLAMA_PLAN)
    prof = cm.profile(llama_problem, plan)
    est = cm.evaluate(llama_problem, plan)
    w0 = sum(prof.layer_time_s[:20]) + prof.first_extra_time_s + 2 * prof.p2p_time_s
    w3 = sum(prof.layer_time_s[60:]) + prof.last_extra_time_s + 2 * prof.p2p_time_s
    assert est.details["rank_work_s"][0] == pytest.approx(w0, rel=1e-12)
    assert est.details["rank_work_s"][3] == pytest.approx(w3, rel=1e-12)
    assert prof.num_microbatches == 512
    assert prof.inflight_microbatches == ((4,), (3,), (2,), (1,))


def test_zero_stage_state_bytes(problem_factory: Callable[..., TrainingProblem]) -> None:
    # 1 pipeline rank, tensor 1, data 4: weights+grads+optimizer per parameter 18, 6+12/4,
    # 2+16/4, 18/4 (ZeRO-3 under Megatron-Core's FSDP also holds two layers gathered in bf16
    # and one layer's unsharded fp32 gradient: 8 bytes per parameter of a layer).
    model = gpt(layers=4, h=512, a=8, vocab=1000)
    prob = problem_factory(model, make_h100(), 1, 64, 512, gpus_per_node=4)
    cm = build_cost_model()
    n = model.num_parameters()
    expected = {0: 18.0, 1: 6 + 12 / 4, 2: 2 + 16 / 4, 3: 18 / 4}
    for zero, bpp in expected.items():
        est = cm.evaluate(prob, _plan([4], data=4, zero_stage=zero))
        sm = est.memory.by_stage[0]
        states = (sm.weights_gib + sm.gradients_gib + sm.optimizer_gib) * GIB
        if zero == 3:
            states -= 8 * model.layer_parameters(0)
        assert states == pytest.approx(n * bpp, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from([(1, 2), (1, 4), (2, 4), (2, 8), (4, 8), (1, 8)]),
    st.sampled_from([0, 1, 2, 3]),
    st.sampled_from([1, 2]),
)
def test_more_tensor_parallelism_never_more_weight_memory(
    pair: tuple[int, int], zero: int, data: int
) -> None:
    model = llama3_70b()
    cm = build_cost_model()
    weights = []
    for t in pair:
        prob = TrainingProblem(
            model=model,
            cluster=make_cluster(make_h100(), 1, data * t),
            workload=TrainingWorkload(global_batch_size=64, sequence_length=2048),
        )
        est = cm.evaluate(prob, _plan([80], data=data, tensor=t, zero_stage=zero))
        weights.append(est.memory.by_stage[0].weights_gib)
    assert weights[1] <= weights[0]


def test_bad_stage_layers_raise(llama_problem: TrainingProblem) -> None:
    cm = build_cost_model()
    with pytest.raises(InfeasiblePlan) as exc:
        cm.evaluate(llama_problem, _plan(None, **LLAMA_PLAN))
    assert exc.value.kind == "divisibility"
    with pytest.raises(InfeasiblePlan, match="sum to 81"):
        cm.evaluate(llama_problem, _plan([21, 20, 20, 20], **LLAMA_PLAN))
    with pytest.raises(InfeasiblePlan, match="64 GPUs"):
        cm.evaluate(llama_problem, _plan([20] * 4, **{**LLAMA_PLAN, "data": 1}))


def test_memory_violation_sentence(problem_factory: Callable[..., TrainingProblem]) -> None:
    prob = problem_factory(llama3_70b(), make_h100(), 1, 8, 4096)
    est = build_cost_model().evaluate(prob, _plan([80], data=8, zero_stage=0))
    assert not est.feasible
    v = [x for x in est.violations if x.kind == "memory"]
    assert v and v[0].detail.startswith("pipeline rank 0 needs ")
    assert "GiB of 77.65 GiB usable (weights" in v[0].detail


def _kinds(cm: AnalyticalTrainingCostModel, prob: TrainingProblem, **kw: Any) -> set[str]:
    return {v.kind for v in cm.check(prob, _plan(None, **kw))}


def test_check_rules(
    llama_problem: TrainingProblem, problem_factory: Callable[..., TrainingProblem]
) -> None:
    cm = AnalyticalTrainingCostModel()
    ok = {"data": 2, "tensor": 8, "pipeline": 4}
    assert cm.check(llama_problem, _plan(None, **ok)) == []
    assert _kinds(cm, llama_problem, data=1, tensor=8, pipeline=4) == {"divisibility"}
    msg = cm.check(llama_problem, _plan(None, data=1, tensor=8, pipeline=4))[0].detail
    assert "1 × 8 × 4 × 1 = 32" in msg and "64 GPUs" in msg
    # heads 64, kv heads 8: tensor 16 breaks kv heads (and crosses the 8-GPU node)
    assert _kinds(cm, llama_problem, data=1, tensor=16, pipeline=4) == {"divisibility", "topology"}
    allowed = TrainingProblem(
        model=llama_problem.model,
        cluster=llama_problem.cluster,
        workload=llama_problem.workload,
        allow_tensor_across_nodes=True,
    )
    assert _kinds(cm, allowed, data=1, tensor=16, pipeline=4) == {"divisibility"}
    # sequence 4096 is not divisible by 2 × context = 6 (24 GPUs = 1 × 8 × 1 × 3)
    odd = problem_factory(llama3_70b(), make_h100(), 3, 24, 4096)
    assert _kinds(cm, odd, data=1, tensor=8, context=3) == {"divisibility"}
    # batch: 1024 is not divisible by micro-batch 3 × data 2
    assert _kinds(cm, llama_problem, micro_batch_size=3, **ok) == {"batch"}
    # pipeline × virtual > layers
    tiny = problem_factory(gpt(layers=4, h=256, a=4), make_h100(), 1, 16, 256)
    assert _kinds(cm, tiny, data=1, pipeline=8) == {"divisibility"}
    # interleaved: micro-batches (1024/(1·2) = 512) fine; 8 micro-batches vs pipeline 16 not
    assert (
        _kinds(cm, llama_problem, pipeline_schedule="interleaved_1f1b", virtual_pipeline=2, **ok)
        == set()
    )
    small = problem_factory(llama3_70b(), make_h100(), 8, 8, 4096)
    assert _kinds(
        cm,
        small,
        data=1,
        tensor=4,
        pipeline=16,
        pipeline_schedule="interleaved_1f1b",
        virtual_pipeline=2,
    ) == {"schedule"}
    # ZeRO-2/3 with pipelining: torchtitan (FSDP2 + pipeline) runs it, so an unpinned plan is
    # priced there; Megatron-Core and DeepSpeed refuse it by their own rule
    assert _kinds(cm, llama_problem, zero_stage=2, **ok) == set()
    for name in ("megatron_core", "deepspeed"):
        assert _kinds(cm, llama_problem, zero_stage=2, framework=name, **ok) == {"framework"}
    assert _kinds(cm, llama_problem, zero_stage=3, framework="torchtitan", **ok) == set()
    # expert degrees on a dense model
    assert _kinds(cm, llama_problem, expert=2, **ok) == {"expert"}
    # fp8 on an A100 (no fp8 peak)
    fp8 = problem_factory(gpt(layers=4, h=256, a=4), make_a100(), 1, 16, 256, precision="fp8")
    assert _kinds(cm, fp8, data=8) == {"precision"}


def test_check_moe_and_heterogeneous(problem_factory: Callable[..., TrainingProblem]) -> None:
    cm = AnalyticalTrainingCostModel()
    moe = ModelSpec(
        num_layers=4,
        hidden_size=512,
        num_attention_heads=8,
        ffn_hidden_size=2048,
        vocab_size=1000,
        moe=MoESpec(num_experts=6, top_k=2, expert_ffn_hidden_size=512),
    )
    prob = problem_factory(moe, make_h100(), 1, 16, 256)
    assert _kinds(cm, prob, data=8, expert=4) == {"expert"}  # 6 % 4
    assert _kinds(cm, prob, data=8, expert=2) == set()
    assert _kinds(cm, prob, data=4, tensor=2, expert=6) == {"expert"}  # 6 ∤ 8
    h, a = make_h100(), make_a100()
    mixed = ResolvedCluster(
        groups=[
            ResolvedNodeGroup(
                accelerator=h,
                num_nodes=1,
                gpus_per_node=8,
                intra_node_bandwidth_gb_s=450,
                inter_node_bandwidth_gb_s=50,
            ),
            ResolvedNodeGroup(
                accelerator=a,
                num_nodes=1,
                gpus_per_node=8,
                intra_node_bandwidth_gb_s=300,
                inter_node_bandwidth_gb_s=25,
            ),
        ]
    )
    het = TrainingProblem(
        model=gpt(layers=4, h=256, a=4),
        cluster=mixed,
        workload=TrainingWorkload(global_batch_size=16, sequence_length=256),
    )
    assert _kinds(cm, het, data=16) == {"heterogeneous"}


def test_moe_layers_cost_differently(problem_factory: Callable[..., TrainingProblem]) -> None:
    moe = ModelSpec(
        num_layers=4,
        hidden_size=1024,
        num_attention_heads=8,
        ffn_hidden_size=4096,
        vocab_size=1000,
        moe=MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=1024, num_dense_layers=1),
    )
    prob = problem_factory(moe, make_h100(), 1, 16, 1024)
    prof = build_cost_model().profile(prob, _plan(None, data=4, tensor=2, expert=2))
    assert prof.layer_time_s[1] == prof.layer_time_s[2] != prof.layer_time_s[0]
    assert prof.layer_state_bytes[1] > prof.layer_state_bytes[0]


def test_more_overlap_and_context_parallel(llama_problem: TrainingProblem) -> None:
    base = build_cost_model().evaluate(llama_problem, _plan([20] * 4, **LLAMA_PLAN))
    hidden = build_cost_model(
        config={"frameworks": {"megatron_core": {"tp_comm_overlap": 1.0}}}
    ).evaluate(llama_problem, _plan([20] * 4, **LLAMA_PLAN))
    # the layers' exchanges are all hidden; the embedding's and LM head's stay exposed
    # (one exchange each per micro-batch, against 2 × 80 / 4 = 40 per stage's layers)
    base_tp = base.metrics.time_breakdown_s.tensor_parallel_comm
    hidden_tp = hidden.metrics.time_breakdown_s.tensor_parallel_comm
    assert 0.0 < hidden_tp < base_tp / 20
    assert hidden.metrics.step_time_s < base.metrics.step_time_s
    cp = build_cost_model().evaluate(
        llama_problem,
        _plan(
            [20] * 4,
            data=1,
            tensor=8,
            pipeline=4,
            context=2,
            sequence_parallel=True,
            zero_stage=1,
            recompute="selective",
        ),
    )
    assert cp.details["group_tiers"]["context"] == "inter"
    assert cp.metrics.time_breakdown_s.context_parallel_comm >= 0.0


def test_profile_and_evaluate_are_fast(llama_problem: TrainingProblem) -> None:
    cm = build_cost_model()
    plans = [
        _plan([20] * 4, **{**LLAMA_PLAN, "micro_batch_size": mb, "recompute": rc})
        for mb in (1, 2)
        for rc in ("none", "selective", "full")
    ]
    t0 = time.perf_counter()
    for pl in plans:
        cm.profile(llama_problem, pl)  # cold: builds the layer costs
    cold = (time.perf_counter() - t0) / len(plans)
    t0 = time.perf_counter()
    for _ in range(50):
        for pl in plans:
            cm.profile(llama_problem, pl)
            cm.evaluate(llama_problem, pl)
    warm = (time.perf_counter() - t0) / (50 * len(plans))
    assert cold < 5e-3 and warm < 1e-3


def test_time_breakdown_adds_up_to_the_step(llama_problem: TrainingProblem) -> None:
    """Every part but `recompute` (which is inside `compute`) sums to the step time."""
    for recompute in ("none", "full"):
        est = build_cost_model().evaluate(
            llama_problem, _plan([20] * 4, **{**LLAMA_PLAN, "recompute": recompute})
        )
        parts = est.metrics.time_breakdown_s.model_dump()
        rc = parts.pop("recompute")
        assert sum(parts.values()) == pytest.approx(est.metrics.step_time_s, rel=1e-9)
        assert (rc > 0) is (recompute == "full")


def test_options_of_earlier_versions_still_validate() -> None:
    """Stored searches and existing clients send the options this model had before the
    framework profiles: renamed ones move, global overlaps become every framework's, the
    ones the fabric curves replaced are dropped."""
    from cost_models.analytical.training.config import AnalyticalConfig
    from cost_models.frameworks import list_frameworks

    config = AnalyticalConfig.model_validate(
        {
            "optimizer_bytes_per_param": 28.0,
            "tp_comm_overlap": 0.5,
            "zero3_overlap": 0.8,
            "alpha_intra_s": 1e-5,
            "dp_overlap_efficiency": 0.8,
            "frameworks": {"deepspeed": {"tp_comm_overlap": 0.0}},
        }
    )
    assert config.adam_step_bytes_per_param == 28.0
    assert set(config.frameworks) == set(list_frameworks())
    assert config.frameworks["megatron_core"] == {"tp_comm_overlap": 0.5, "zero3_prefetch": True}
    # an explicit per-framework value wins over the old global one
    assert config.frameworks["deepspeed"]["tp_comm_overlap"] == 0.0
    assert "alpha_intra_s" not in config.model_dump()
    # the mapped options take effect
    assert build_cost_model(config={"tp_comm_overlap": 1.0}).config.frameworks["fsdp"] == {
        "tp_comm_overlap": 1.0
    }
