"""Advisory warnings (`solver.warnings`): each rule on both sides of its threshold, with the
numbers computed here from the published figures, and the wiring into estimates, searches
and serving estimates (warnings never change feasibility or ranking)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from fake_cost_model import FakeCostModel, make_problem, tiny_model
from pydantic import ValidationError

from cost_models.base import TrainingEstimate, TrainingProblem
from cost_models.serving.analytical import AnalyticalServingCostModel
from hardware_catalog import get_accelerator, resolve_cluster
from solver import exhaustive_search, search
from solver.estimate import estimate_plan, estimate_with_warnings
from solver.serving.evaluate import InstanceCosts, ServingEstimate, ServingProblem, evaluate_plan
from solver.warnings import (
    BATCH_TOKENS_LIMIT,
    LARGEST_PUBLISHED_BATCH_TOKENS,
    bandwidth_out_of_range,
    batch_looks_like_tokens,
    longest_request,
    measured_mfu,
    mfu_above_measured,
    scale_up_domain_beyond_system,
    serving_low_memory_headroom,
    serving_warnings,
    training_low_memory_headroom,
    training_outside_validated_range,
    training_warnings,
)
from specs import presets
from specs.cluster import ClusterSpec
from specs.constraints import SearchConstraints
from specs.model import ModelSpec
from specs.plan import (
    MemoryReport,
    ParallelDims,
    StageMemory,
    TimeBreakdown,
    TrainingMetrics,
    TrainingPlan,
)
from specs.serving import ServingPlan, ServingWorkload
from specs.warnings import WARNING_CODES, PlanWarning
from specs.workload import TrainingWorkload

H100_BF16_TFLOPS = 989.4
A100_BF16_TFLOPS = 312.0
H100_MEMORY_GIB = 79.6474609375
H200_MEMORY_GIB = 140.4013671875


def cluster_spec(accelerator: str = "h100-sxm", nodes: int = 1, **group: Any) -> ClusterSpec:
    return ClusterSpec.model_validate(
        {"node_groups": [{"accelerator": accelerator, "num_nodes": nodes, **group}]}
    )


def problem(
    accelerator: str = "h100-sxm",
    nodes: int = 12,
    model: ModelSpec | None = None,
    *,
    global_batch: int = 256,
    seq: int = 4096,
    precision: str = "bf16",
    **group: Any,
) -> TrainingProblem:
    return TrainingProblem(
        model=model or presets.get_preset("llama2-7b"),
        cluster=resolve_cluster(cluster_spec(accelerator, nodes, **group)),
        workload=TrainingWorkload(
            global_batch_size=global_batch,
            sequence_length=seq,
            precision=precision,
        ),
    )


def estimate(
    tflops: float,
    peak_gib: float,
    capacity_gib: float,
    peak_tflops: float,
    data: int = 96,
    fp8_peak_tflops: float | None = None,
) -> TrainingEstimate:
    """An estimate with the given model TFLOP/s per GPU and peak memory (nothing else
    matters to the warnings); `mfu` is on `peak_tflops` (the BF16 peak, also for FP8 runs)
    and `mfu_fp8_peak` on `fp8_peak_tflops` when given."""
    stage = StageMemory(
        weights_gib=peak_gib,
        gradients_gib=0.0,
        optimizer_gib=0.0,
        activations_gib=0.0,
        other_gib=0.0,
        total_gib=peak_gib,
    )
    return TrainingEstimate(
        plan=TrainingPlan(parallelism=ParallelDims(data=data)),
        feasible=True,
        violations=[],
        metrics=TrainingMetrics(
            step_time_s=1.0,
            tokens_per_s=1.0,
            model_tflops_per_gpu=tflops,
            mfu=tflops / peak_tflops,
            mfu_fp8_peak=tflops / fp8_peak_tflops if fp8_peak_tflops else None,
            peak_memory_gib=peak_gib,
            bubble_fraction=0.0,
            time_breakdown_s=TimeBreakdown(compute=1.0),
        ),
        memory=MemoryReport(
            peak_gib=peak_gib, capacity_gib=capacity_gib, usable_gib=capacity_gib, by_stage=[stage]
        ),
    )


def codes(warnings: list[PlanWarning] | tuple[PlanWarning, ...]) -> list[str]:
    return [w.code for w in warnings]


# ---- the record ---------------------------------------------------------------------------
def test_plan_warning_is_frozen_and_strict() -> None:
    w = PlanWarning(code="low_memory_headroom", detail="x")
    with pytest.raises(ValidationError):
        PlanWarning.model_validate({"code": "not_a_code", "detail": "x"})
    with pytest.raises(ValidationError):
        PlanWarning.model_validate({"code": "low_memory_headroom", "detail": "x", "extra": 1})
    with pytest.raises(ValidationError):
        w.detail = "y"  # type: ignore[misc]
    assert PlanWarning.model_fields["detail"].description  # docstrings per field


# ---- mfu_above_measured -------------------------------------------------------------------
def test_measured_mfu_records_match_the_research_notes() -> None:
    records = measured_mfu()
    # docs/research/frameworks.md §10: A100 72 % (FlashAttention-2, Table 1), H100/H200 49.4 %
    # (Megatron-Core's weak-scaling table), TPU v4 46.2 %, TPU v5p 71.5 %
    assert records["a100-80gb"].mfu == records["a800"].mfu == 0.72
    assert "2307.08691" in records["a100-80gb"].source
    assert records["h100-sxm"].mfu == records["h200"].mfu == 0.494
    assert records["tpu-v4"].mfu == 0.462
    assert records["tpu-v5p"].mfu == 0.715
    # no credible figure: no ceiling
    for acc in ("b200", "gb200", "mi300x", "gaudi3", "h20"):
        assert acc not in records
    for acc, record in records.items():
        assert get_accelerator(acc).id == acc  # every id is in the catalog
        assert record.source and record.run
        assert record.precision_basis.startswith("bf16")


def test_mfu_above_the_h100_benchmark_figure_warns() -> None:
    p = problem()
    above = 0.50 * H100_BF16_TFLOPS  # 50.0 % > 49.4 %
    w = mfu_above_measured(p, estimate(above, 40, H100_MEMORY_GIB, H100_BF16_TFLOPS))
    assert w is not None and w.code == "mfu_above_measured"
    assert "50.0 %" in w.detail and "49.4 %" in w.detail and "H100/H200" in w.detail
    below = 0.49 * H100_BF16_TFLOPS
    assert mfu_above_measured(p, estimate(below, 40, H100_MEMORY_GIB, H100_BF16_TFLOPS)) is None


def test_fp8_runs_are_compared_on_the_bf16_peak() -> None:
    p = problem(precision="fp8")
    fp8_peak = 1978.9
    # 500 TFLOP/s is 25.3 % of the fp8 peak, but 50.5 % of the bf16 peak: above 49.4 %
    w = mfu_above_measured(
        p, estimate(500.0, 40, H100_MEMORY_GIB, H100_BF16_TFLOPS, fp8_peak_tflops=fp8_peak)
    )
    assert w is not None
    assert "50.5 % of the BF16 peak (25.3 % of the fp8 peak" in w.detail
    # 450 TFLOP/s = 45.5 % of the bf16 peak: below
    assert (
        mfu_above_measured(
            p, estimate(450.0, 40, H100_MEMORY_GIB, H100_BF16_TFLOPS, fp8_peak_tflops=fp8_peak)
        )
        is None
    )


def test_a100_and_tpu_ceilings() -> None:
    a100 = problem("a100-80gb", nodes=4)
    assert mfu_above_measured(a100, estimate(225.0, 40, 80, A100_BF16_TFLOPS)) is not None  # 72.1 %
    assert mfu_above_measured(a100, estimate(224.0, 40, 80, A100_BF16_TFLOPS)) is None  # 71.8 %
    tpu = problem("tpu-v4", nodes=4)
    assert mfu_above_measured(tpu, estimate(0.47 * 275, 20, 32, 275)) is not None
    assert mfu_above_measured(tpu, estimate(0.46 * 275, 20, 32, 275)) is None


def test_no_ceiling_no_warning() -> None:
    # MI300X has no credible published MFU: even 90 % gets no warning
    p = problem("mi300x", nodes=2)
    assert mfu_above_measured(p, estimate(0.9 * 1307.4, 40, 192, 1307.4)) is None


# ---- low_memory_headroom ------------------------------------------------------------------
def test_training_headroom_below_one_gib_or_two_percent() -> None:
    # H100: 2 % of 79.65 GiB = 1.59 GiB is the larger limit
    assert training_low_memory_headroom(estimate(100, 78.2, H100_MEMORY_GIB, 989.4)) is not None
    assert training_low_memory_headroom(estimate(100, 78.0, H100_MEMORY_GIB, 989.4)) is None
    w = training_low_memory_headroom(estimate(100, 79.0, H100_MEMORY_GIB, 989.4))
    assert w is not None and "0.65 GiB" in w.detail and "1.59 GiB" in w.detail
    # H200: 2.4 GiB free is above 1 GiB but below 2 % (2.81 GiB)
    assert training_low_memory_headroom(estimate(100, 138.0, H200_MEMORY_GIB, 989.4)) is not None
    assert training_low_memory_headroom(estimate(100, 137.5, H200_MEMORY_GIB, 989.4)) is None
    # over capacity: the memory violation says it, not a warning
    assert training_low_memory_headroom(estimate(100, 90.0, H100_MEMORY_GIB, 989.4)) is None


def _serving_estimate(weights: float, kv: float) -> ServingEstimate:
    plan = ServingPlan.model_validate({"mode": "colocated", "instances": [{"role": "both"}]})
    details = {
        "instances": [{"role": "both", "gpus": 1, "weights_gib": weights, "kv_cache_gib": kv}]
    }
    return ServingEstimate(plan, True, [], None, details)


def _serving_problem(model: ModelSpec | None = None, **workload: Any) -> ServingProblem:
    body: dict[str, Any] = {
        "kind": "serving",
        "prompt_tokens": 1024,
        "output_tokens": 1024,
        "precision": "fp8",
        "slo": {"ttft_ms": 1000, "tpot_ms": 50},
        "num_requests": 60,
    }
    body.update(workload)
    cluster = resolve_cluster(cluster_spec("h100-sxm", 1, gpus_per_node=1))
    return ServingProblem(
        model or presets.get_preset("llama3-8b"), cluster, ServingWorkload.model_validate(body)
    )


def test_serving_headroom_counts_weights_and_kv_cache() -> None:
    p = _serving_problem()
    w = serving_low_memory_headroom(p, _serving_estimate(60.0, 18.5))  # 1.15 GiB free
    assert w is not None and "1.15 GiB" in w.detail
    assert serving_low_memory_headroom(p, _serving_estimate(60.0, 17.5)) is None  # 2.15 free


# ---- sequence_beyond_max_positions ---------------------------------------------------------
def test_training_sequence_beyond_max_positions() -> None:
    model = presets.get_preset("llama3-8b").model_copy(update={"max_position_embeddings": 8192})
    w = training_warnings(problem(model=model, seq=16384), estimate(100, 40, H100_MEMORY_GIB, 989))
    found = [x for x in w if x.code == "sequence_beyond_max_positions"]
    assert len(found) == 1 and "16384" in found[0].detail and "8192" in found[0].detail
    unknown = model.model_copy(update={"max_position_embeddings": None})
    for m, seq in ((model, 8192), (unknown, 16384)):  # at the limit; unknown
        got = training_warnings(problem(model=m, seq=seq), estimate(1, 40, H100_MEMORY_GIB, 989))
        assert "sequence_beyond_max_positions" not in codes(got)
    # the preset carries its config.json context (Meta-Llama-3-8B: 8192)
    preset = presets.get_preset("llama3-8b")
    got = training_warnings(problem(model=preset, seq=16384), estimate(1, 40, H100_MEMORY_GIB, 989))
    assert "sequence_beyond_max_positions" in codes(got)


def test_longest_serving_request() -> None:
    assert longest_request(_serving_problem().workload).tokens == 2048
    samples = _serving_problem(prompt_tokens={"samples": [10, 700, 30]}, output_tokens=5)
    assert longest_request(samples.workload).tokens == 705
    # lognormal fit through p50 = 500 and p90 = 900: its p90 is 900
    stats = _serving_problem(prompt_tokens={"mean": 600, "p50": 500, "p90": 900}, output_tokens=100)
    longest = longest_request(stats.workload)
    assert longest.tokens == 1000 and "p90" in longest.description
    trace = _serving_problem(
        prompt_tokens=None, output_tokens=None, trace=[[0, 100, 10], [1, 50, 300], [2, 200, 20]]
    )
    assert longest_request(trace.workload).tokens == 350


def test_serving_sequence_beyond_max_positions() -> None:
    model = presets.get_preset("llama3-8b").model_copy(update={"max_position_embeddings": 2000})
    p = _serving_problem(model)  # 1024 + 1024 = 2048 tokens > 2000
    w = serving_warnings(p, _serving_estimate(10, 10))
    found = [x for x in w if x.code == "sequence_beyond_max_positions"]
    assert len(found) == 1 and "2048" in found[0].detail and "2000" in found[0].detail
    ok = presets.get_preset("llama3-8b").model_copy(update={"max_position_embeddings": 2048})
    assert "sequence_beyond_max_positions" not in codes(
        serving_warnings(_serving_problem(ok), _serving_estimate(10, 10))
    )


# ---- batch_looks_like_tokens ---------------------------------------------------------------
def test_batch_threshold_comes_from_the_largest_published_batch() -> None:
    # DeepSeek-V3: 15,360 sequences × 4,096 tokens; the limit is 16× that
    assert LARGEST_PUBLISHED_BATCH_TOKENS == 62_914_560
    assert BATCH_TOKENS_LIMIT == 1_006_632_960


@pytest.mark.parametrize(
    ("batch", "seq", "warns"),
    [
        (4_194_304, 4096, True),  # 4M "sequences": a token count of 1,024 sequences
        (65_536, 2048, True),  # 64Ki and a multiple of the sequence length
        (300_000, 4096, True),  # 1.23e9 tokens > 1.007e9, not a multiple
        (15_360, 4096, False),  # DeepSeek-V3's real batch
        (65_536, 3000, False),  # 1.97e8 tokens and not a multiple
        (32_768, 2048, False),  # a multiple, but below 64Ki sequences
    ],
)
def test_batch_looks_like_tokens(batch: int, seq: int, warns: bool) -> None:
    w = batch_looks_like_tokens(TrainingWorkload(global_batch_size=batch, sequence_length=seq))
    assert (w is not None) is warns
    if batch == 4_194_304:
        assert w is not None and "1,024 sequences" in w.detail
        # 4,194,304 × 4,096 = 17.18e9 tokens = 273 × 62,914,560
        assert "17.2B tokens per step, 273×" in w.detail


# ---- bandwidth_out_of_range ----------------------------------------------------------------
def test_gbit_typed_as_gbyte_is_caught_with_the_conversion() -> None:
    spec = cluster_spec(inter_node_bandwidth_gb_s=400)  # 400 Gb/s NIC typed as GB/s
    w = bandwidth_out_of_range(resolve_cluster(spec), spec)
    assert w is not None and "8× the catalog default" in w.detail
    assert "50 GB/s" in w.detail and "Gbit/s" in w.detail
    low = cluster_spec(intra_node_bandwidth_gb_s=56.25)  # 450 GB/s divided by 8
    w = bandwidth_out_of_range(resolve_cluster(low), low)
    assert w is not None and "intra_node_bandwidth_gb_s" in w.detail and "450 GB/s" in w.detail


@pytest.mark.parametrize(
    ("field", "value", "warns"),
    [
        ("inter_node_bandwidth_gb_s", 12.5, False),  # 0.25 × 50: the edge is accepted
        ("inter_node_bandwidth_gb_s", 12.4, True),
        ("inter_node_bandwidth_gb_s", 200.0, False),  # 4 × 50
        ("inter_node_bandwidth_gb_s", 201.0, True),
        ("intra_node_bandwidth_gb_s", 900.0, False),  # 2 × 450 (bidirectional typed)
        ("intra_node_bandwidth_gb_s", 1801.0, True),
    ],
)
def test_bandwidth_range(field: str, value: float, warns: bool) -> None:
    group: dict[str, Any] = {field: value}
    spec = cluster_spec(**group)
    resolved = resolve_cluster(spec)
    assert (bandwidth_out_of_range(resolved, spec) is not None) is warns
    # the resolved cluster alone answers the same (null bandwidths are the defaults)
    assert (bandwidth_out_of_range(resolved) is not None) is warns


def test_a_system_only_group_is_checked_against_its_system() -> None:
    spec = ClusterSpec.model_validate(
        {"node_groups": [{"system": "hgx-h800", "num_nodes": 2, "intra_node_bandwidth_gb_s": 900}]}
    )
    w = bandwidth_out_of_range(resolve_cluster(spec), spec)
    # H800: 200 GB/s NVLink per GPU (the export-limited part), so 900 is 4.5×
    assert w is not None and "4.5× the catalog default for h800" in w.detail
    assert "accepted 50–800 GB/s" in w.detail


def test_a_scale_up_domain_beyond_the_systems_is_flagged() -> None:
    # 16 GPUs on DGX H100 nodes (8-GPU NVSwitch domains): priced at NVLink speed across two
    # nodes, which only an NVLink Switch fabric would give
    spec = ClusterSpec.model_validate(
        {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 4, "scale_up_domain_gpus": 16}]}
    )
    w = scale_up_domain_beyond_system(resolve_cluster(spec), spec)
    assert w is not None and w.code == "scale_up_domain_beyond_system"
    assert "scale_up_domain_gpus = 16" in w.detail and "dgx-h100 (8 GPUs" in w.detail
    # the system's own domain, a smaller one (NVL72 trays taken one by one), or none: silent
    for group in (
        {"system": "gb200-nvl72", "num_nodes": 16},
        {"system": "gb200-nvl72", "num_nodes": 16, "scale_up_domain_gpus": 72},
        {"system": "gb200-nvl72", "num_nodes": 16, "scale_up_domain_gpus": 4},
        {"accelerator": "h100-sxm", "num_nodes": 4, "scale_up_domain_gpus": 8},
    ):
        quiet = ClusterSpec.model_validate({"node_groups": [group]})
        assert scale_up_domain_beyond_system(resolve_cluster(quiet), quiet) is None, group
    # without the request's spec only the resolved (system) values are known: nothing to flag
    assert scale_up_domain_beyond_system(resolve_cluster(spec)) is None


def test_catalog_defaults_never_warn() -> None:
    for acc in ("h100-sxm", "a100-80gb", "mi300x", "tpu-v5p", "gb200"):
        spec = cluster_spec(acc)
        assert bandwidth_out_of_range(resolve_cluster(spec), spec) is None


# ---- outside_validated_range (training) ----------------------------------------------------
def test_inside_the_validated_h100_runs() -> None:
    # Megatron-Core README rows on H100: dense GPT 1.5B-459B, 48-6144 GPUs, 4096 tokens, bf16
    assert training_outside_validated_range(problem(nodes=12)) is None  # 96 GPUs, 6.7B


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"seq": 8192}, "sequence length 8192"),
        ({"precision": "fp8"}, "fp8 was never validated on h100-sxm"),
        ({"nodes": 1024}, "8192 GPUs"),
        ({"accelerator": "h200"}, "h200 has no validation runs for training"),
        ({"accelerator": "mi300x"}, "mi300x has no validation runs"),
    ],
)
def test_outside_the_validated_runs(kwargs: dict[str, Any], text: str) -> None:
    w = training_outside_validated_range(problem(**kwargs))
    assert w is not None and w.code == "outside_validated_range"
    assert text in w.detail


def test_moe_where_only_dense_was_validated() -> None:
    p = problem("a100-80gb", nodes=16, model=presets.get_preset("mixtral-8x7b"), seq=2048)
    w = training_outside_validated_range(p)
    assert w is not None and "MoE models have no validation runs on a100-80gb" in w.detail
    # Mixtral-8x22B (141B) on 128 H100 is inside the MoE Folding rows (57B-465B, 64-256 GPUs)
    mixtral = presets.get_preset("mixtral-8x22b")
    assert training_outside_validated_range(problem(nodes=16, model=mixtral)) is None
    w = training_outside_validated_range(problem(nodes=16, model=p.model))  # 46.7B
    assert w is not None and "46.7B parameters is outside the validated 57.4B–465B" in w.detail


def test_fp16_counts_as_bf16() -> None:
    assert (
        training_outside_validated_range(problem("a100-80gb", seq=2048, precision="fp16")) is None
    )


# ---- wiring -------------------------------------------------------------------------------
def test_estimate_with_warnings_leaves_the_estimate_alone() -> None:
    p = make_problem(tiny_model(num_layers=4), 1, global_batch=65_536)
    plan = TrainingPlan(parallelism=ParallelDims(data=8))
    est, warnings = estimate_with_warnings(p, FakeCostModel(), plan)
    assert est == estimate_plan(p, FakeCostModel(), plan)
    # 65,536 sequences of the fake problem's length: a multiple of it
    assert "batch_looks_like_tokens" in codes(warnings)
    assert codes(warnings) == sorted(codes(warnings), key=WARNING_CODES.index)


def test_search_plans_carry_warnings_and_keep_their_order() -> None:
    p = make_problem(tiny_model(num_layers=4), 1, global_batch=65_536)
    constraints = SearchConstraints(time_limit_s=60)
    result = search(p, FakeCostModel(), constraints, top_k=3)
    oracle = exhaustive_search(p, FakeCostModel(), constraints, top_k=3)
    assert [r.estimate.plan for r in result.plans] == [r.estimate.plan for r in oracle.plans]
    assert result.plans
    for ranked in result.plans:
        assert list(ranked.warnings) == training_warnings(p, ranked.estimate)
        assert "batch_looks_like_tokens" in codes(ranked.warnings)
        dumped = ranked.to_dict()["warnings"]
        assert dumped == [w.model_dump(mode="json") for w in ranked.warnings]


def test_serving_estimates_carry_their_warnings() -> None:
    cost_model = AnalyticalServingCostModel()
    plan = ServingPlan.model_validate(
        {"mode": "colocated", "instances": [{"role": "both", "max_batch_size": 64}]}
    )
    # fp8 llama3-8b on one H100 with 2048-token requests: inside the published serving rows
    inside = _serving_problem()
    est = evaluate_plan(inside, plan, InstanceCosts(inside, cost_model))
    assert est.warnings == ()
    # bf16 weights and 640-token requests: the H100 rows are fp8 and 1318-5500 tokens
    outside = _serving_problem(precision="bf16", prompt_tokens=512, output_tokens=128)
    est = evaluate_plan(outside, plan, InstanceCosts(outside, cost_model))
    assert codes(est.warnings) == ["outside_validated_range"]
    detail = est.warnings[0].detail
    assert "bf16 was never validated on h100-sxm (fp8 only)" in detail
    assert "requests of 640 tokens" in detail
    assert list(est.warnings) == serving_warnings(outside, dataclasses.replace(est, warnings=()))


def test_readme_lists_every_code() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Warnings", 1)[1].split("\n## ", 1)[0]
    listed = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert listed == list(WARNING_CODES)
