"""Offload (`plan.offload`) in the analytical model: hand-worked memory and seconds, the
frameworks' offload rules, and the search bounds staying below evaluate() for offload plans
(hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_models.analytical.training import AnalyticalTrainingCostModel
from cost_models.base import TrainingProblem
from hardware_catalog import resolve_cluster
from solver.space import candidates
from specs import ClusterSpec, TrainingWorkload
from specs.constraints import OffloadConstraints, SearchConstraints
from specs.model import ModelSpec
from specs.plan import ParallelDims, PlanKey, TrainingPlan
from specs.presets import get_preset

GIB = 1024**3


def _problem(
    preset: str, nodes: int, gpn: int, gbs: int, seq: int, headroom: float = 2.0
) -> TrainingProblem:
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": nodes, "gpus_per_node": gpn}]}
        )
    )
    return TrainingProblem(
        model=get_preset(preset),
        cluster=cluster,
        workload=TrainingWorkload(global_batch_size=gbs, sequence_length=seq),
        memory_headroom_gib=headroom,
    )


def _per_gpu_params(model: ModelSpec, t: int) -> float:
    """Parameters on one GPU of a tensor-t, pipeline-1 plan (matrices split, norms
    replicated; untied LM head and final norm)."""
    return (
        model.num_layers
        * (
            (model.attention_parameters() + model.dense_mlp_parameters()) / t
            + 2 * model.norm_parameters()
        )
        + model.embedding_parameters() / t
        + model.vocab_size * model.hidden_size / t
        + model.norm_parameters()
    )


def _plan(offload: dict[str, object], **kw: object) -> TrainingPlan:
    base: dict[str, object] = {
        "parallelism": ParallelDims(tensor=8, sequence_parallel=True),
        "micro_batch_size": 4,
        "zero_stage": 1,
        "recompute": "full",
        "framework": "megatron_core",
        "stage_layers": [80],
        "offload": offload,
    }
    base.update(kw)
    return TrainingPlan.model_validate(base)


def test_optimizer_states_alone_over_hbm_fit_only_with_optimizer_offload() -> None:
    # Llama-3-70B on one DGX H100, tensor 8, data 1: each GPU holds 70.6e9 / 8 = 8.8e9
    # parameters; their fp32 master weights and Adam moments alone are 12 × 8.8e9 = 106 GB =
    # 98.6 GiB, over the 77.65 GiB usable. Offloaded, the GPU keeps bf16 weights (2) and fp32
    # main gradients (4): 6 × 8.8e9 = 49 GiB plus activations.
    problem = _problem("llama3-70b", 1, 8, 8, 4096)
    cm = AnalyticalTrainingCostModel()
    s = _per_gpu_params(problem.model, 8)
    without = cm.evaluate(problem, _plan({}))
    assert not without.feasible and without.violations[0].kind == "memory"
    opt_gib = without.memory.by_stage[0].optimizer_gib
    assert opt_gib == pytest.approx(12 * s / GIB, rel=1e-9)
    assert opt_gib > without.memory.usable_gib

    plan = _plan({"optimizer": "cpu"})
    assert cm.check(problem, plan) == []
    est = cm.evaluate(problem, plan)
    assert est.feasible, est.violations
    stage = est.memory.by_stage[0]
    assert stage.optimizer_gib == 0.0
    assert stage.weights_gib == pytest.approx(2 * s / GIB, rel=1e-9)
    assert stage.gradients_gib == pytest.approx(4 * s / GIB, rel=1e-9)

    # Offload seconds by hand (offload.py): DGX H100 host link 52.8 GB/s measured, the
    # GPU's share of host DRAM 614.4 GB/s × 0.7 / 8 = 53.76 GB/s. The bf16 gradients go down
    # (2 B/param) behind the backward of a 4-sequence micro-batch (> 0.5 s for 8.8e9
    # parameters, so hidden); CPU Adam streams 30 B/param through host DRAM; the bf16
    # parameters come back up (2 B/param).
    link, dram = 52.8e9, 614.4e9 * 0.7 / 8
    expected = 30 * s / dram + 2 * s / link
    assert est.details["offload_optimizer_s"] == [pytest.approx(expected, rel=1e-9)]
    assert est.metrics.time_breakdown_s.offload == pytest.approx(expected, rel=1e-9)
    assert est.metrics.time_breakdown_s.optimizer == 0.0  # no GPU Adam step
    # everything else is the same plan: the step trades the GPU Adam step for the offload,
    # both scaled by the straggler factor
    delta = (expected - without.metrics.time_breakdown_s.optimizer) * est.details[
        "straggler_factor"
    ]
    assert est.metrics.step_time_s - without.metrics.step_time_s == pytest.approx(delta, rel=1e-6)
    # host memory: 8 GPUs × 12 B × 8.8e9 = 845 GB of 2 TiB × 0.8
    assert est.details["offload_host_bytes_per_node"] == pytest.approx(8 * 12 * s, rel=1e-9)


def test_activation_offload_keeps_a_fraction_and_costs_only_what_compute_cannot_hide() -> None:
    # Megatron-Core offloads whole layers' activations, without recompute and pipelining:
    # half of Llama-3-70B's 80 layers. The activations on the GPU drop by half (the rest of
    # the memory is the same); the copies (f · A per micro-batch each way at 52.8 GB/s) hide
    # behind the forward and the backward of the layers, so nothing is exposed here.
    problem = _problem("llama3-70b", 1, 8, 8, 4096)
    cm = AnalyticalTrainingCostModel()
    base = cm.evaluate(problem, _plan({"optimizer": "cpu"}, recompute="none", micro_batch_size=1))
    half = cm.evaluate(
        problem,
        _plan({"optimizer": "cpu", "activations": 0.5}, recompute="none", micro_batch_size=1),
    )
    assert cm.check(problem, half.plan) == []
    a0, a1 = base.memory.by_stage[0], half.memory.by_stage[0]
    # the layers' share halves; the embedding output and the logits stay
    assert a1.activations_gib < a0.activations_gib
    assert a1.weights_gib == a0.weights_gib and a1.gradients_gib == a0.gradients_gib
    assert half.details["offload_activation_s_per_microbatch"] == [0.0]
    assert half.metrics.time_breakdown_s.offload == pytest.approx(
        base.metrics.time_breakdown_s.offload, rel=1e-12
    )


def test_framework_offload_rules() -> None:
    problem = _problem("llama3-70b", 1, 8, 8, 4096)
    cm = AnalyticalTrainingCostModel()

    def kinds(plan: TrainingPlan) -> list[str]:
        return [v.detail for v in cm.check(problem, plan) if v.kind == "offload"]

    assert kinds(_plan({"optimizer": "nvme"}))[0].startswith(
        "megatron_core does not offload the optimizer to nvme"
    )
    # Megatron-Core's activation offload refuses recompute (TransformerConfig), and all
    # layers (cpu_offloading_num_layers < num_layers)
    assert "without recompute" in kinds(_plan({"activations": 0.5}))[0]
    assert "integer from 1 to 79" in kinds(_plan({"activations": 1.0}, recompute="none"))[0]
    # DeepSpeed: NVMe optimizer offload with ZeRO-3 only; cpu_checkpointing = fraction 1
    ds = {"framework": "deepspeed", "parallelism": ParallelDims(data=8)}
    assert "zero_stage 3 only" in kinds(_plan({"optimizer": "nvme"}, **ds))[0]
    assert kinds(_plan({"optimizer": "nvme", "parameters": "nvme"}, zero_stage=3, **ds)) == []
    assert "must be 1 with recompute full" in kinds(_plan({"activations": 0.5}, **ds))[0]
    # torchtitan (FSDP2 CPUOffloadPolicy): parameters and optimizer together, ZeRO-3
    tt = {"framework": "torchtitan", "parallelism": ParallelDims(data=8), "zero_stage": 3}
    assert "together" in kinds(_plan({"optimizer": "cpu"}, **tt))[0]
    assert kinds(_plan({"optimizer": "cpu", "parameters": "cpu"}, **tt)) == []


def test_parameter_offload_needs_zero3() -> None:
    with pytest.raises(ValueError, match="needs zero_stage 3"):
        _plan({"optimizer": "cpu", "parameters": "cpu"})


def test_host_memory_rule() -> None:
    # 70B with every state on the CPU of one 4-GPU GH200 node (JUPITER: 480 GB LPDDR5X, 0.8
    # usable = 358 GiB): 12 + 2 bytes × 70.6e9 = 0.99 TB per node does not fit
    cluster = resolve_cluster(
        ClusterSpec.model_validate({"node_groups": [{"accelerator": "gh200", "num_nodes": 1}]})
    )
    assert cluster.system.id == "gh200-quad-node"
    problem = TrainingProblem(
        model=get_preset("llama3-70b"),
        cluster=cluster,
        workload=TrainingWorkload(global_batch_size=8, sequence_length=4096),
    )
    plan = TrainingPlan(
        parallelism=ParallelDims(data=4),
        zero_stage=3,
        recompute="full",
        framework="deepspeed",
        stage_layers=[80],
        offload={"optimizer": "cpu", "parameters": "cpu"},
    )
    est = AnalyticalTrainingCostModel().evaluate(problem, plan)
    assert [v.kind for v in est.violations] == ["host_memory"]


_BOUND_PROBLEM = _problem("llama3-8b", 1, 2, 16, 2048, headroom=40.0)
_OFFLOAD_SPACE = [
    c
    for c in candidates(
        _BOUND_PROBLEM,
        SearchConstraints(
            offload=OffloadConstraints(mode="always"),
            frameworks=["megatron_core", "deepspeed", "torchtitan"],
        ),
    )
    if c.offloads and not AnalyticalTrainingCostModel().check_key(_BOUND_PROBLEM, c)
]
"""Every offload key of a small space (Llama-3-8B on 2 H100 with 40 GiB headroom, every
framework) that passes the rules: optimizer, parameter and activation offload to CPU and
NVMe under Megatron-Core, DeepSpeed and torchtitan."""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_OFFLOAD_SPACE), st.booleans())
def test_bounds_stay_below_evaluate_for_offload_plans(key: object, lumpy: bool) -> None:
    """The step-time bound (free and fixed split) and the group memory bound of an offload
    key never exceed what evaluate() reports, for an even and the most unbalanced split."""
    cm = AnalyticalTrainingCostModel()
    problem = _BOUND_PROBLEM
    assert isinstance(key, PlanKey)
    layers = problem.model.num_layers
    chunks = key.pipeline * key.virtual_pipeline
    even = [layers // chunks + (1 if c < layers % chunks else 0) for c in range(chunks)]
    split = [layers - chunks + 1] + [1] * (chunks - 1) if lumpy else even
    est = cm.evaluate(problem, key.to_plan(split))
    step = est.metrics.step_time_s
    assert cm.step_time_lower_bound_s(problem, key) <= step * (1 + 1e-12)
    assert cm.step_time_lower_bound_s(problem, key._replace(stage_layers=tuple(split))) <= step * (
        1 + 1e-12
    )
    assert cm.group_memory_lower_bound_bytes(problem, key) <= est.memory.peak_gib * GIB * (
        1 + 1e-12
    )
