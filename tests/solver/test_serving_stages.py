"""One serving instance whose pipeline stages run on different node groups: its price from
the per-stage costs and the hand-off, the exact layer split against brute force, memory per
stage, the one-pool case against the homogeneous price, and the rules on its fields."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from cost_models.serving.analytical import AnalyticalInstanceCost
from cost_models.serving.base import IterationBatch, pipeline_engines
from cost_models.serving.registry import build_serving_cost_model
from hardware_catalog import resolve_cluster
from hardware_catalog.schema import ResolvedCluster
from solver.serving.evaluate import InstanceCosts, ServingProblem, evaluate_plan
from solver.serving.stages import split_batch, split_layers
from specs.cluster import ClusterSpec
from specs.errors import InfeasiblePlan
from specs.presets import get_preset
from specs.serving import ServingPlan, ServingWorkload

LLAMA = get_preset("llama3-8b")
WORKLOAD = ServingWorkload.model_validate(
    {"kind": "serving", "prompt_tokens": 1024, "output_tokens": 256,
     "slo": {"ttft_ms": 1000, "tpot_ms": 50}, "num_requests": 200}
)  # fmt: skip


def _cluster(*groups: tuple[str, str]) -> ResolvedCluster:
    return resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": a, "num_nodes": 1, "name": n} for n, a in groups]}
        )
    )


H100_A100 = _cluster(("h100", "h100-sxm"), ("a100", "a100-80gb"))


def _problem(cluster: ResolvedCluster = H100_A100) -> ServingProblem:
    return ServingProblem(model=LLAMA, cluster=cluster, workload=WORKLOAD)


def _costs(problem: ServingProblem) -> InstanceCosts:
    return InstanceCosts(problem, build_serving_cost_model("analytical", None))


def _plan(**inst: Any) -> ServingPlan:
    body = {"parallelism": {"tensor": 1, "pipeline": 2}, "max_batch_size": 64, **inst}
    return ServingPlan.model_validate({"mode": "colocated", "instances": [body]})


def _stage(cluster: ResolvedCluster, pool: str, layers: tuple[int, int]) -> AnalyticalInstanceCost:
    """One stage built directly by the analytical model (independent of InstanceCosts)."""
    return AnalyticalInstanceCost(
        LLAMA, cluster.pools()[pool], 1, 1, 1, "bf16", "bf16", layers=layers
    )


def test_a_two_stage_instance_is_its_stages_plus_the_hand_off() -> None:
    """llama3-8b, layers 0-17 on one H100 and 18-31 on one A100 (tensor 1). The hand-off of
    T tokens sends T × 4096 hidden × 2 bytes over the link between the groups: the slower
    group's line rate, 25 GB/s (A100 nodes), at the lower scale-out efficiency, 0.96:
    24e9 B/s. At a decode batch of 64 (context 1152): 64 × 8192 B = 524288 B → 21.85 µs.
    Latency = H100 stage + A100 stage + 21.85 µs; each of the two schedulers waits
    max(latency, 2 × the slowest part) per iteration."""
    problem = _problem()
    costs = _costs(problem)
    plan = _plan(stage_groups=["h100", "a100"], stage_layers=[18, 14])
    cost = costs.of(plan.instances[0])
    batch = IterationBatch(64, 64 * 1152)
    first = _stage(H100_A100, "h100", (0, 18)).iteration_time_s(batch)
    second = _stage(H100_A100, "a100", (18, 32)).iteration_time_s(batch)
    hand_off = 524288 / 24e9
    assert hand_off == pytest.approx(21.845e-6, rel=1e-4)
    gpu = cost.base.iteration_time_s(batch)  # type: ignore[attr-defined]
    assert gpu == pytest.approx(first + second + hand_off, rel=1e-12)
    # 18 layers on the H100 (3.35 TB/s) against 14 on the A100 (2.04 TB/s): the A100 is
    # the slower stage here, and one scheduler waits twice its time
    assert second > first
    engine, stages = pipeline_engines(cost)
    assert stages == 2
    latency = cost.iteration_time_s(batch)  # with the engine's host time
    assert engine.iteration_time_s(batch) == pytest.approx(max(latency, 2 * second), rel=1e-12)
    # KV: each stage holds its own layers' cache; the instance the least of the two
    assert cost.kv_capacity_tokens == min(
        _stage(H100_A100, "h100", (0, 18)).kv_capacity_tokens,
        _stage(H100_A100, "a100", (18, 32)).kv_capacity_tokens,
    )
    est = evaluate_plan(problem, plan, costs)
    assert est.feasible, est.violations
    assert est.plan.instances[0].stage_layers == [18, 14]
    details = est.details["instances"][0]
    assert details["stage_split"] == (
        "layers 0-17 on h100 (h100-sxm); layers 18-31 on a100 (a100-80gb)"
    )


def test_stages_on_one_accelerator_add_up_to_the_homogeneous_instance() -> None:
    """The stages of any split on one pool, plus the NVLink hand-off, sum to the
    homogeneous two-stage instance's iteration (identical layers: the split does not change
    the sum), for decode, prefill and mixed batches."""
    problem = _problem()
    costs = _costs(problem)
    uneven = costs.of(_plan(stage_groups=["h100", "h100"], stage_layers=[21, 11]).instances[0])
    homogeneous = costs.get(1, 2, 1, "bf16", "inter", "h100")
    for batch in (
        IterationBatch(64, 64 * 1152),
        IterationBatch(0, 0, 2048, 2048 * 2049 / 2, 1),
        IterationBatch(32, 32 * 700, 512, 512 * 513 / 2 + 512 * 300, 2),
    ):
        assert uneven.iteration_time_s(batch) == pytest.approx(
            homogeneous.iteration_time_s(batch), rel=1e-12
        )


def test_a_one_pool_instance_with_stage_groups_is_priced_as_the_homogeneous_one() -> None:
    problem = _problem()
    costs = _costs(problem)
    staged = evaluate_plan(problem, _plan(stage_groups=["h100", "h100"]), costs)
    grouped = evaluate_plan(problem, _plan(group="h100"), costs)
    assert staged.feasible and grouped.feasible
    assert staged.metrics is not None and grouped.metrics is not None
    assert staged.metrics.goodput_rps == grouped.metrics.goodput_rps
    assert staged.metrics.tpot_ms_p90 == grouped.metrics.tpot_ms_p90
    assert staged.metrics.kv_capacity_tokens == grouped.metrics.kv_capacity_tokens
    assert staged.plan.instances[0].stage_layers == [16, 16]  # the homogeneous split


def _brute_force(
    cluster: ResolvedCluster, pools: list[str], batch: IterationBatch, kv_tokens: int
) -> tuple[float, list[int]] | None:
    """The least slowest-stage time over every split, each stage built by the model."""
    best: tuple[float, list[int]] | None = None
    cache: dict[tuple[str, int, int], AnalyticalInstanceCost | None] = {}
    L = LLAMA.num_layers
    for cuts in itertools.combinations(range(1, L), len(pools) - 1):
        bounds = [0, *cuts, L]
        times = []
        for j, pool in enumerate(pools):
            key = (pool, bounds[j], bounds[j + 1])
            if key not in cache:
                try:
                    cache[key] = _stage(cluster, pool, (bounds[j], bounds[j + 1]))
                except InfeasiblePlan:
                    cache[key] = None
            stage = cache[key]
            if stage is None or stage.kv_capacity_tokens < kv_tokens:
                break
            times.append(stage.iteration_time_s(batch))
        else:
            split = [bounds[j + 1] - bounds[j] for j in range(len(pools))]
            if best is None or max(times) < best[0]:
                best = (max(times), split)
    return best


@pytest.mark.parametrize(
    ("groups", "pools", "kv_tokens"),
    [
        ((("h100", "h100-sxm"), ("a100", "a100-80gb")), ["h100", "a100"], 1280),
        ((("h100", "h100-sxm"), ("a100", "a100-80gb")), ["a100", "h100"], 1280),
        # a T4 (320 GB/s) is so slow that it takes one layer
        ((("h100", "h100-sxm"), ("t4", "t4")), ["h100", "t4"], 60_000),
        # memory binds: by speed the H100 takes 20 layers (as above), but with the KV of
        # 850k tokens (850k × 4096 B = 3.48 GB per layer, + 0.44 GB of weights) its
        # 74.2 GB budget holds the embedding and 18
        ((("h100", "h100-sxm"), ("a100", "a100-80gb")), ["h100", "a100"], 850_000),
        ((("h100", "h100-sxm"), ("a100", "a100-80gb")), ["h100", "a100", "h100"], 1280),
    ],
)
def test_the_split_equals_brute_force_and_favours_the_faster_gpu(
    groups: tuple[tuple[str, str], ...], pools: list[str], kv_tokens: int
) -> None:
    cluster = _cluster(*groups)
    costs = _costs(_problem(cluster))
    batch = split_batch(64, 1152)

    def stage(pool: str, layers: tuple[int, int]) -> Any:
        return costs.stage(1, 1, "bf16", "inter", pool, layers)

    split = split_layers(stage, LLAMA, pools, batch, kv_tokens)
    expected = _brute_force(cluster, pools, batch, kv_tokens)
    assert split is not None and expected is not None
    bounds = [0, *itertools.accumulate(split)]
    worst = max(
        _stage(cluster, p, (bounds[j], bounds[j + 1])).iteration_time_s(batch)
        for j, p in enumerate(pools)
    )
    assert worst == pytest.approx(expected[0], rel=1e-9)
    assert sum(split) == 32
    h100 = [n for n, p in zip(split, pools, strict=True) if p == "h100"]
    other = [n for n, p in zip(split, pools, strict=True) if p != "h100"]
    assert min(h100) > max(other)  # more layers on the faster H100
    if kv_tokens == 850_000:
        assert split == [18, 14]
    elif pools == ["h100", "a100"]:
        assert split == [20, 12]


def test_no_split_is_found_when_no_split_fits() -> None:
    """A T4 (15 GiB) and a V100-16GB cannot hold llama3-70b's ≈ 131 GiB of bf16 weights."""
    cluster = _cluster(("t4", "t4"), ("v100", "v100-16gb"))
    big = get_preset("llama3-70b")
    costs = _costs(ServingProblem(model=big, cluster=cluster, workload=WORKLOAD))
    split = split_layers(
        lambda pool, layers: costs.stage(1, 1, "bf16", "inter", pool, layers),
        big,
        ["t4", "v100"],
        split_batch(64, 1152),
        1280,
    )
    assert split is None


def test_a_stage_that_does_not_fit_is_named() -> None:
    """30 of llama3-8b's layers (≈ 0.41 GiB each in bf16) and the LM head do not fit a T4's
    15 GiB."""
    cluster = _cluster(("h100", "h100-sxm"), ("t4", "t4"))
    problem = _problem(cluster)
    est = evaluate_plan(
        problem, _plan(stage_groups=["h100", "t4"], stage_layers=[2, 30]), _costs(problem)
    )
    assert not est.feasible
    (violation,) = est.violations
    assert violation.kind == "memory"
    assert violation.field == "plan.instances.0.stage_layers"
    assert "pipeline stage 1 on t4 (layers 2-31)" in violation.detail


@pytest.mark.parametrize(
    ("inst", "field", "rule"),
    [
        ({"stage_groups": ["h100"]}, "plan.instances.0.stage_groups", "one group per"),
        ({"stage_groups": ["h100", "v100"]}, "plan.instances.0.stage_groups.1", "must name"),
        (
            {"stage_groups": ["h100", "a100"], "stage_layers": [16, 17]},
            "plan.instances.0.stage_layers",
            "adds to 32",
        ),
        (
            {"stage_groups": ["h100", "a100"], "stage_layers": [32, 0]},
            "plan.instances.0.stage_layers",
            "at least 1",
        ),
        ({"stage_layers": [16, 16]}, "plan.instances.0.stage_layers", "only with stage_groups"),
        (
            {
                "parallelism": {"tensor": 1, "pipeline": 33},
                "stage_groups": ["h100", "a100"] * 16 + ["a100"],
            },
            "plan.instances.0.stage_groups",
            "at most 32 stages",
        ),
        (
            {"stage_groups": ["h100", "a100"], "group": "h100"},
            "plan.instances.0.group",
            "not with stage_groups",
        ),
    ],
)
def test_bad_stage_fields_are_refused_naming_field_rule_and_value(
    inst: dict[str, Any], field: str, rule: str
) -> None:
    problem = _problem()
    with pytest.raises(InfeasiblePlan) as caught:
        evaluate_plan(problem, _plan(**inst), _costs(problem))
    (error,) = caught.value.extensions["errors"]
    assert error["field"] == field
    assert rule in error["rule"]
    assert "value" in error


def test_an_instance_without_stage_fields_serializes_as_before() -> None:
    plan = _plan()
    assert "stage_groups" not in plan.model_dump_json()
    assert "stage_layers" not in plan.model_dump_json()
    staged = _plan(stage_groups=["h100", "a100"], stage_layers=[18, 14])
    dumped = staged.model_dump(mode="json")["instances"][0]
    assert dumped["stage_groups"] == ["h100", "a100"] and dumped["stage_layers"] == [18, 14]
