"""Framework profiles (`cost_models/frameworks`): state bytes, combination rules, the
framework picked for a plan that names none, and what each overlaps, seen through the
analytical model's estimates."""

from __future__ import annotations

import pytest
from cm_support import llama3_70b

from cost_models.analytical.training import AnalyticalTrainingCostModel
from cost_models.base import TrainingProblem
from cost_models.frameworks import DEFAULT_PREFERENCE, build_framework, list_frameworks
from hardware_catalog import resolve_cluster
from solver import search
from specs.cluster import ClusterSpec
from specs.constraints import SearchConstraints
from specs.errors import PluginNotFound
from specs.plan import PlanKey
from specs.workload import TrainingWorkload

D = 8


def _problem(nodes: int = 8, gbs: int = 256, seq: int = 4096) -> TrainingProblem:
    cluster = {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": nodes, "gpus_per_node": 8}]}
    return TrainingProblem(
        model=llama3_70b(),
        cluster=resolve_cluster(ClusterSpec.model_validate(cluster)),
        workload=TrainingWorkload(global_batch_size=gbs, sequence_length=seq),
    )


def test_registry_lists_every_builtin_and_refuses_unknown_names() -> None:
    assert set(DEFAULT_PREFERENCE) == set(list_frameworks())
    with pytest.raises(PluginNotFound, match="unknown framework 'jax'"):
        build_framework("jax")


def test_state_bytes_follow_each_frameworks_dtypes() -> None:
    # Megatron-Core: bf16 params 2, fp32 main grads 4, fp32 master + Adam 12
    # (Megatron docs: 18 B/param, 6 + 12/d with the distributed optimizer)
    mc = build_framework("megatron_core")
    assert sum(mc.state_bytes_per_param(0, D)) == 18
    assert sum(mc.state_bytes_per_param(1, D)) == 6 + 12 / D
    assert sum(mc.state_bytes_per_param(2, D)) == 2 + 16 / D
    assert sum(mc.state_bytes_per_param(3, D)) == 18 / D
    # DeepSpeed with ZeRO accumulates gradients in bf16
    ds = build_framework("deepspeed")
    assert sum(ds.state_bytes_per_param(1, D)) == 2 + 2 + 12 / D


@pytest.mark.parametrize(
    ("framework", "key", "rule"),
    [
        ("deepspeed", PlanKey(data=4, pipeline=2, zero_stage=2), "incompatible with pipeline"),
        ("deepspeed", PlanKey(data=4, pipeline=2, virtual_pipeline=2), "no interleaved"),
        ("megatron_core", PlanKey(data=4, pipeline=2, zero_stage=3), "requires pipeline = 1"),
        ("fsdp", PlanKey(data=4, expert=2, zero_stage=3), "no expert parallelism"),
        ("fsdp", PlanKey(data=8, zero_stage=1), "implements zero_stage 0, 2, 3"),
        ("megatron_lm", PlanKey(data=4, context=2), "no context parallelism"),
    ],
)
def test_rules_live_in_the_profiles(framework: str, key: PlanKey, rule: str) -> None:
    violations = build_framework(framework).violations(llama3_70b(), key)
    assert any(rule in v for v in violations), violations


def test_torchtitan_combines_fsdp_with_pipelining() -> None:
    key = PlanKey(data=4, pipeline=4, zero_stage=3)
    assert build_framework("torchtitan").can_run(llama3_70b(), key)
    # FSDP2 composes with PyTorch's tensor, pipeline and context parallelism too (Llama 3)
    both = PlanKey(data=4, tensor=2, pipeline=4, context=2, zero_stage=2)
    assert build_framework("fsdp").can_run(llama3_70b(), both)


def test_a_plan_without_framework_gets_the_first_that_can_run_it() -> None:
    problem = _problem()
    cm = AnalyticalTrainingCostModel()
    zero1 = PlanKey(data=4, tensor=4, pipeline=4, sequence_parallel=True, zero_stage=1)
    zero3_pp = zero1._replace(zero_stage=3)
    est1 = cm.evaluate(problem, zero1.to_plan([20, 20, 20, 20]))
    est3 = cm.evaluate(problem, zero3_pp.to_plan([20, 20, 20, 20]))
    assert est1.plan.framework == "megatron_core"
    assert est3.plan.framework == "torchtitan"
    assert est3.feasible or all(v.kind != "framework" for v in est3.violations)
    # naming a framework that cannot run the plan is a rule violation, not a crash
    forced = cm.evaluate(problem, zero3_pp._replace(framework="deepspeed").to_plan([20] * 4))
    assert [v.kind for v in forced.violations if v.kind == "framework"] == ["framework"]


def _dp_details(framework: str, zero: int, **overrides: object) -> tuple[float, float]:
    problem = _problem(nodes=4, gbs=64)
    key = PlanKey(
        data=8, tensor=4, sequence_parallel=True, zero_stage=zero, framework=framework
    )._replace(**overrides)
    est = AnalyticalTrainingCostModel().evaluate(problem, key.to_plan([80]))
    d = est.details
    return d["data_parallel_comm_exposed_s"], d["data_parallel_comm_raw_s"]


def test_megatron_core_hides_its_gradient_reduction_legacy_megatron_does_not() -> None:
    exposed, raw = _dp_details("megatron_core", 1)
    legacy_exposed, legacy_raw = _dp_details("megatron_lm", 1)
    assert raw > 0
    assert exposed < 0.5 * raw  # bucketed during the last backward, gather in next forward
    assert legacy_exposed == pytest.approx(legacy_raw)  # after the backward, nothing hidden


def test_fsdp_prefetch_hides_gathers_deepspeed_measured_does_not() -> None:
    problem = _problem(nodes=2, gbs=32)
    cm = AnalyticalTrainingCostModel()
    times = {}
    for framework in ("fsdp", "deepspeed"):
        key = PlanKey(data=16, zero_stage=3, micro_batch_size=1, framework=framework)
        est = cm.evaluate(problem, key.to_plan([80]))
        times[framework] = est.details
    fsdp, ds = times["fsdp"], times["deepspeed"]
    assert fsdp["data_parallel_comm_exposed_s"] < fsdp["data_parallel_comm_raw_s"]
    assert ds["data_parallel_comm_exposed_s"] == pytest.approx(ds["data_parallel_comm_raw_s"])
    assert ds["data_parallel_comm_exposed_s"] > fsdp["data_parallel_comm_exposed_s"]


def test_tensor_parallel_backward_overlap_only_where_the_framework_has_it() -> None:
    problem = _problem(nodes=1, gbs=8)
    cm = AnalyticalTrainingCostModel()
    tp = {}
    for framework in ("megatron_core", "torchtitan"):
        key = PlanKey(data=1, tensor=8, sequence_parallel=True, zero_stage=0, framework=framework)
        est = cm.evaluate(problem, key.to_plan([80]))
        tp[framework] = est.metrics.time_breakdown_s.tensor_parallel_comm
    # Megatron hides the column-parallel backward collectives behind their GEMMs
    assert tp["megatron_core"] < 0.9 * tp["torchtitan"]


def test_interleaved_megatron_overlaps_p2p_deepspeed_cannot_interleave() -> None:
    problem = _problem(nodes=4, gbs=64)
    cm = AnalyticalTrainingCostModel()
    inter = PlanKey(
        data=2,
        tensor=4,
        pipeline=4,
        virtual_pipeline=2,
        sequence_parallel=True,
        pipeline_schedule="interleaved_1f1b",
        framework="megatron_core",
    )
    est = cm.evaluate(problem, inter.to_plan([10] * 8))
    m = est.details["num_microbatches"]
    raw_p2p = est.details["p2p_time_s"]
    # steady state hidden: only the fill and drain hops (2·(p−1)) remain
    assert est.metrics.time_breakdown_s.pipeline_comm < m * raw_p2p
    plain = cm.evaluate(problem, inter._replace(framework="megatron_lm").to_plan([10] * 8))
    assert plain.metrics.time_breakdown_s.pipeline_comm > est.metrics.time_breakdown_s.pipeline_comm


def test_search_compares_the_listed_frameworks() -> None:
    problem = _problem(nodes=2, gbs=32)
    cons = SearchConstraints(
        frameworks=["deepspeed", "torchtitan"],
        fixed={"tensor": 8, "pipeline": 2, "micro_batch_size": 1, "recompute": "full"},
    )
    result = search(problem, AnalyticalTrainingCostModel(), cons, top_k=20)
    frameworks = {p.estimate.plan.framework for p in result.plans}
    assert frameworks <= {"deepspeed", "torchtitan"}
    assert "torchtitan" in frameworks
    # ZeRO-2/3 with pipelining only under torchtitan
    for p in result.plans:
        if p.estimate.plan.zero_stage >= 2:
            assert p.estimate.plan.framework == "torchtitan"
    pinned = search(
        problem,
        AnalyticalTrainingCostModel(),
        cons.model_copy(
            update={"frameworks": None, "fixed": {**cons.fixed, "framework": "deepspeed"}}
        ),
        top_k=5,
    )
    assert {p.estimate.plan.framework for p in pinned.plans} == {"deepspeed"}


def test_zero3_working_copy_by_the_frameworks_unit() -> None:
    """ZeRO-3 on Llama-3-70B over 64 GPUs, tensor 1: FSDP-style frameworks gather a whole
    layer (two resident, bf16) and keep one layer's unsharded gradient in their reduce dtype;
    DeepSpeed gathers module by module (two of the largest: the gated MLP's fused gate and
    up projection, h × 2·ffn)."""
    from cost_models.analytical.training.profile import profiled

    model = llama3_70b()
    h, ffn, kv = model.hidden_size, model.ffn_hidden_size, model.kv_heads
    head_dim = h // model.num_attention_heads
    layer = h * h * 2 + 2 * h * kv * head_dim + 3 * h * ffn + 2 * h  # q, o, k, v, MLP, norms
    assert layer == model.layer_parameters(0)
    problem = TrainingProblem(
        model=model,
        cluster=resolve_cluster(
            ClusterSpec.model_validate(
                {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8}]}
            )
        ),
        workload=TrainingWorkload(global_batch_size=256, sequence_length=4096),
    )
    ctx = AnalyticalTrainingCostModel().context(problem)
    key = PlanKey(data=64, zero_stage=3)
    fsdp2 = profiled(ctx, key._replace(framework="torchtitan")).zero3_working_bytes
    assert fsdp2 == pytest.approx(2 * 2 * layer + 4 * layer, rel=1e-6)  # fp32 reduce
    modules = profiled(ctx, key._replace(framework="deepspeed")).zero3_working_bytes
    assert modules == pytest.approx(2 * 2 * h * 2 * ffn, rel=1e-6)
    # no sharding, no working copy
    unsharded = PlanKey(data=1, tensor=8, pipeline=8, zero_stage=3, framework="torchtitan")
    assert profiled(ctx, unsharded).zero3_working_bytes == 0


def test_eager_frameworks_move_three_times_the_fused_elementwise_bytes() -> None:
    """The 3.1 of `EAGER_ELEMENTWISE_TRAFFIC`, recounted from its parts (bytes per element:
    RMSNorm 36 vs 4, rotary 20 vs 4, SwiGLU 10 vs 6 per FFN element, residual 6 vs 6) on
    Llama-3-8B's shapes (h 4096, 32 + 8 heads of 128, f 14336)."""
    from cost_models.frameworks.base import EAGER_ELEMENTWISE_TRAFFIC

    h, rope, f = 4096, (32 + 8) * 128, 14336
    eager = 2 * 36 * h + 20 * rope + 10 * f + 2 * 6 * h
    fused = 2 * 4 * h + 4 * rope + 6 * f + 2 * 6 * h
    assert eager / fused == pytest.approx(EAGER_ELEMENTWISE_TRAFFIC, abs=0.05)
    for name in ("torchtitan", "fsdp", "deepspeed"):
        assert build_framework(name).config.elementwise_traffic == EAGER_ELEMENTWISE_TRAFFIC
    assert build_framework("megatron_core").config.elementwise_traffic == 1.0


def test_expert_all_to_all_overlap_hides_it_behind_computation() -> None:
    """Mixtral-8x22B with an 8-way expert group (stride 2: two nodes): the all-to-all is on the
    critical path by default; with `ep_comm_overlap` (DualPipe-style) only what outlasts a
    layer's forward computation is exposed, and the hidden part still costs SM
    interference (so it never drops to zero)."""
    from specs.plan import TrainingPlan
    from specs.presets import get_preset

    problem = TrainingProblem(
        model=get_preset("mixtral-8x22b"),
        cluster=resolve_cluster(
            ClusterSpec.model_validate(
                {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8}]}
            )
        ),
        workload=TrainingWorkload(global_batch_size=256, sequence_length=4096),
    )
    plan = TrainingPlan.model_validate(
        {
            "parallelism": {
                "data": 8,
                "tensor": 2,
                "pipeline": 4,
                "expert": 8,
                "expert_tensor": 2,
            },
            "zero_stage": 1,
            "recompute": "full",
            "stage_layers": [14, 14, 14, 14],
            "framework": "megatron_core",
        }
    )
    plain = AnalyticalTrainingCostModel().evaluate(problem, plan)
    from cost_models.analytical.training.config import AnalyticalConfig

    overlapped = AnalyticalTrainingCostModel(
        AnalyticalConfig(frameworks={"megatron_core": {"ep_comm_overlap": True}})
    ).evaluate(problem, plan)
    assert plain.details["expert_parallel"]["all_to_all_tier"] == "inter"
    raw = plain.metrics.time_breakdown_s.expert_parallel_comm
    hidden = overlapped.metrics.time_breakdown_s.expert_parallel_comm
    assert 0.0 < hidden < raw
    assert overlapped.metrics.step_time_s < plain.metrics.step_time_s


@pytest.mark.parametrize(
    "name", ["megatron_core", "megatron_lm", "deepspeed", "fsdp", "torchtitan"]
)
def test_rules_read_only_their_declared_fields(name: str) -> None:
    """Callers cache a profile's verdict per its `rule_fields` (the search space does): keys
    that differ only elsewhere must get the same violations."""
    import itertools

    profile = build_framework(name)
    degrees = {
        "data": (1, 4),
        "tensor": (1, 2),
        "pipeline": (1, 4),
        "virtual_pipeline": (1, 2),
        "context": (1, 2),
        "expert": (1, 2),
        "zero_stage": (0, 1, 2, 3),
        "recompute": ("none", "full"),
        "micro_batch_size": (1, 2),
    }
    seen: dict[tuple[object, ...], list[str]] = {}
    for values in itertools.product(*degrees.values()):
        fields = dict(zip(degrees, values, strict=True))
        schedule = "interleaved_1f1b" if fields["virtual_pipeline"] > 1 else "1f1b"
        key = PlanKey(**fields, pipeline_schedule=schedule)  # type: ignore[arg-type]
        read = tuple(getattr(key, f) for f in sorted(profile.rule_fields | {"pipeline_schedule"}))
        verdict = profile.violations(llama3_70b(), key)
        assert seen.setdefault(read, verdict) == verdict, (name, key)
