"""Plans whose pipeline stages run on different hardware (`cost_models.mixed`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import ValidationError

from cost_models.base import TrainingProblem
from cost_models.mixed import evaluate_mixed, pool_problem
from cost_models.registry import build_cost_model
from hardware_catalog import resolve_cluster
from hardware_catalog.schema import MixedClusterError
from solver.explain import compare
from specs.cluster import ClusterSpec
from specs.errors import InfeasiblePlan
from specs.plan import TrainingPlan
from specs.presets import get_preset
from specs.workload import TrainingWorkload

WORKLOAD = TrainingWorkload.model_validate(
    {"kind": "training", "global_batch_size": 64, "sequence_length": 4096, "precision": "bf16"}
)
MIXED = {
    "node_groups": [
        {"accelerator": "h100-sxm", "num_nodes": 2, "gpus_per_node": 8},
        {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 8},
    ]
}


def _problem(cluster: dict[str, Any] = MIXED) -> TrainingProblem:
    return TrainingProblem(
        model=get_preset("llama3-8b"),
        cluster=resolve_cluster(ClusterSpec.model_validate(cluster)),
        workload=WORKLOAD,
    )


def _plan(groups: list[str] | None, layers: list[int]) -> TrainingPlan:
    return TrainingPlan.model_validate(
        {
            "parallelism": {"data": 1, "tensor": 8, "pipeline": len(layers)},
            "stage_layers": layers,
            "stage_groups": groups,
            "recompute": "selective",
        }
    )


def test_groups_are_named_and_merged_into_pools() -> None:
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8},
                    {"accelerator": "H100", "num_nodes": 2, "gpus_per_node": 8},
                    {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4},
                    {"accelerator": "a100-80gb", "num_nodes": 1, "name": "old"},
                ]
            }
        )
    )
    assert [g.name for g in cluster.groups] == ["h100-sxm", "h100-sxm-2", "h100-sxm-3", "old"]
    pools = cluster.pools()
    assert list(pools) == ["h100-sxm", "h100-sxm-3", "old"]  # same nodes merge
    assert pools["h100-sxm"].num_gpus == 24 and pools["h100-sxm-3"].num_gpus == 4
    assert not cluster.is_homogeneous
    # without inter_group_bandwidth_gb_s the pools meet at the slower NIC rate
    slowest = min(g.inter_node_bandwidth_gb_s for g in cluster.groups)
    assert cluster.inter_pool_bandwidth_gb_s == slowest
    with pytest.raises(ValidationError, match="names must be unique"):
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "name": "x"},
                             {"accelerator": "a100-80gb", "num_nodes": 1, "name": "x"}]}
        )  # fmt: skip


def test_all_stages_on_one_pool_is_the_homogeneous_estimate() -> None:
    problem = _problem()
    model = build_cost_model("analytical")
    mixed = evaluate_mixed(model, problem, _plan(["h100-sxm", "h100-sxm"], [16, 16]))
    pool = problem.cluster.pools()["h100-sxm"]
    alone = model.evaluate(pool_problem(problem, pool, 16), _plan(None, [16, 16]))
    assert pool.num_gpus == 16
    assert mixed.metrics.step_time_s == pytest.approx(alone.metrics.step_time_s, rel=1e-12)
    assert mixed.metrics.mfu == pytest.approx(alone.metrics.mfu, rel=1e-12)
    assert mixed.memory.peak_gib == pytest.approx(alone.memory.peak_gib, rel=1e-12)
    assert mixed.details["pool_boundaries"] == []
    breakdown = mixed.metrics.time_breakdown_s
    parts = breakdown.model_dump()
    parts.pop("recompute")
    assert sum(parts.values()) == pytest.approx(mixed.metrics.step_time_s, rel=1e-9)


def test_a_stage_on_slower_gpus_wants_fewer_layers() -> None:
    problem = _problem()
    model = build_cost_model("analytical")
    even = evaluate_mixed(model, problem, _plan(["a100-80gb", "h100-sxm"], [16, 16]))
    uneven = evaluate_mixed(model, problem, _plan(["a100-80gb", "h100-sxm"], [12, 20]))
    assert uneven.metrics.step_time_s < even.metrics.step_time_s
    work = even.details["rank_work_s"]
    assert work[0] > work[1]  # the same layers take longer on the A100 stage
    # the hand-off crosses from the A100 node to the H100 nodes at the slower NIC rate
    (boundary,) = even.details["pool_boundaries"]
    acc = problem.cluster.pools()["a100-80gb"].groups[0].accelerator
    other = problem.cluster.pools()["h100-sxm"].groups[0].accelerator
    efficiency = min(acc.scale_out_efficiency, other.scale_out_efficiency)
    size = 1 * 4096 * 4096 * 2  # micro-batch × sequence × hidden × bf16 (no sequence parallel)
    bandwidth = problem.cluster.inter_pool_bandwidth_gb_s * 1e9 * efficiency
    assert boundary["s"] == pytest.approx(size / bandwidth, rel=1e-9)
    assert even.details["pools"]["a100-80gb"]["gpus_used"] == 8
    # the breakdown adds up to the step and no part is negative
    parts = even.metrics.time_breakdown_s.model_dump()
    recompute = parts.pop("recompute")
    assert min(parts.values()) >= 0 and 0 <= recompute <= parts["compute"]
    assert sum(parts.values()) == pytest.approx(even.metrics.step_time_s, rel=1e-9)
    # MFU counts every used GPU at its own peak
    flops = even.metrics.model_tflops_per_gpu * 16 * 1e12
    peaks = 8 * acc.peak_flops("bf16") + 8 * other.peak_flops("bf16")
    assert even.metrics.mfu == pytest.approx(flops / peaks, rel=1e-9)


def test_bad_stage_groups_are_refused_with_their_field() -> None:
    problem = _problem()
    model = build_cost_model("analytical")
    with pytest.raises(InfeasiblePlan) as info:
        evaluate_mixed(model, problem, _plan(["h100-sxm", "v100"], [16, 16]))
    assert info.value.extensions["errors"][0]["field"] == "plan.stage_groups.1"
    with pytest.raises(InfeasiblePlan) as info:
        evaluate_mixed(model, problem, _plan(["a100-80gb", "a100-80gb"], [16, 16]))
    assert "need 16 GPUs of a100-80gb; it has 8" in str(info.value)
    with pytest.raises(ValidationError, match="one per pipeline stage"):
        _plan(["h100-sxm"], [16, 16])


def test_unavailable_gpus_take_whole_nodes_first_and_leave_a_partial_node() -> None:
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 4, "gpus_per_node": 8,
                              "unavailable_gpus": 11}]}
        )
    )  # fmt: skip
    # 11 = one whole node + 3 GPUs of another: 2 full nodes and one node of 5 GPUs
    assert [(g.name, g.num_nodes, g.gpus_per_node) for g in cluster.groups] == [
        ("h100-sxm", 2, 8),
        ("h100-sxm-partial", 1, 5),
    ]
    assert cluster.num_gpus == 32 - 11
    assert list(cluster.pools()) == ["h100-sxm", "h100-sxm-partial"]
    none_left = {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8,
                                  "unavailable_gpus": 8}]}  # fmt: skip
    with pytest.raises(Exception) as info:
        resolve_cluster(ClusterSpec.model_validate(none_left))
    assert getattr(info.value, "field", None) == "cluster.node_groups.0.unavailable_gpus"


def test_one_group_with_an_interleaved_schedule_is_its_homogeneous_estimate() -> None:
    problem = _problem()
    model = build_cost_model("analytical")
    body = {
        "parallelism": {"data": 1, "tensor": 8, "pipeline": 2, "virtual_pipeline": 2},
        "pipeline_schedule": "interleaved_1f1b",
        "stage_layers": [8, 8, 8, 8],
    }
    named = TrainingPlan.model_validate({**body, "stage_groups": ["h100-sxm", "h100-sxm"]})
    mixed = evaluate_mixed(model, problem, named)
    pool = problem.cluster.pools()["h100-sxm"]
    alone = model.evaluate(pool_problem(problem, pool, 16), TrainingPlan.model_validate(body))
    assert mixed.metrics.step_time_s == alone.metrics.step_time_s
    assert mixed.plan.stage_groups == ["h100-sxm", "h100-sxm"]
    with pytest.raises(ValidationError, match="one group for every stage"):
        TrainingPlan.model_validate({**body, "stage_groups": ["h100-sxm", "a100-80gb"]})


def test_measured_links_override_the_catalog_where_given() -> None:
    spec = {
        "node_groups": [
            {"accelerator": "h100-sxm", "num_nodes": 2, "gpus_per_node": 8,
             "node_ids": ["h0", "h1"]},
            {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 8,
             "node_ids": ["a0"]},
        ],
        "measured_links": [
            {"src": "h0", "dst": "h1", "gb_s": 300.0},
            {"src": "h1", "dst": "h0", "gb_s": 280.0},
            {"src": "h1", "dst": "a0", "gb_s": 20.0},
            {"src": "a0", "dst": "h0", "gb_s": 24.0},
        ],
    }  # fmt: skip
    cluster = resolve_cluster(ClusterSpec.model_validate(spec))
    h100, a100 = cluster.groups
    # within the H100 group: its slowest link, per GPU, as a line rate at its efficiency
    eff = h100.accelerator.scale_out_efficiency
    assert h100.inter_node_bandwidth_gb_s == pytest.approx(280.0 / 8 / eff)
    # the A100 group has no link between two of its nodes: the catalog's rate stays
    plain = resolve_cluster(
        ClusterSpec.model_validate({"node_groups": [{"accelerator": "a100-80gb", "num_nodes": 1}]})
    )
    assert a100.inter_node_bandwidth_gb_s == plain.groups[0].inter_node_bandwidth_gb_s
    # between the groups: the slowest measured link
    both = min(eff, a100.accelerator.scale_out_efficiency)
    assert cluster.inter_pool_bandwidth_gb_s == pytest.approx(20.0 / 8 / both)
    with pytest.raises(ValidationError, match="which no node_groups"):
        ClusterSpec.model_validate(
            {**spec, "measured_links": [{"src": "h0", "dst": "x9", "gb_s": 1.0}]}
        )
    with pytest.raises(ValidationError, match="node_ids has 1 entries for 2 nodes"):
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 2, "node_ids": ["h0"]}]}
        )


def _two_nodes_batch_128() -> TrainingProblem:
    """One H100 node and one A100 node, a global batch of 128."""
    problem = _problem(
        {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8},
                         {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 8}]}
    )  # fmt: skip
    return dataclasses.replace(
        problem, workload=WORKLOAD.model_copy(update={"global_batch_size": 128})
    )


def _shares_plan(new: int, old: int, data: int | None = None) -> TrainingPlan:
    return TrainingPlan.model_validate(
        {
            "parallelism": {"data": data or 4, "tensor": 4, "sequence_parallel": True},
            "recompute": "selective",
            "stage_layers": [32],
            "data_shares": [
                {"group": "h100-sxm", "replicas": 2, "sequences": new},
                {"group": "a100-80gb", "replicas": 2, "sequences": old},
            ],
        }
    )


def test_data_shares_balance_replicas_on_different_gpus() -> None:
    from cost_models.mixed import evaluate_data_shares

    problem = _two_nodes_batch_128()
    model = build_cost_model("analytical")
    even = evaluate_data_shares(model, problem, _shares_plan(32, 32))
    skewed = evaluate_data_shares(model, problem, _shares_plan(44, 20))
    shares = skewed.details["data_shares"]
    # the even split leaves the H100 replicas idle half the step; 44 / 20 balances them
    assert even.details["data_shares"]["h100-sxm"]["step_time_s"] < (
        0.6 * even.details["data_shares"]["a100-80gb"]["step_time_s"]
    )
    assert skewed.metrics.step_time_s < 0.7 * even.metrics.step_time_s
    assert shares["h100-sxm"]["step_time_s"] == pytest.approx(
        shares["a100-80gb"]["step_time_s"], rel=0.1
    )
    # the step is the slowest group's plus the reduction across groups
    slowest = max(x["step_time_s"] for x in shares.values())
    across = skewed.details["cross_group_reduction_s"]
    assert across > 0
    assert skewed.metrics.step_time_s == pytest.approx(slowest + across, rel=1e-12)
    # one group's share alone is that group's own estimate
    one = TrainingPlan.model_validate(
        {"parallelism": {"data": 2, "tensor": 4, "sequence_parallel": True},
         "recompute": "selective", "stage_layers": [32],
         "data_shares": [{"group": "h100-sxm", "replicas": 2, "sequences": 64}]}
    )  # fmt: skip
    alone = evaluate_data_shares(model, problem, one)
    pool = problem.cluster.pools()["h100-sxm"]
    sub = dataclasses.replace(pool_problem(problem, pool, 8), workload=problem.workload)
    plain = model.evaluate(sub, one.model_copy(update={"data_shares": None}))
    assert alone.metrics.step_time_s == pytest.approx(plain.metrics.step_time_s, rel=1e-12)


def test_bad_data_shares_are_refused_at_their_fields() -> None:
    from cost_models.mixed import evaluate_data_shares

    problem = _problem(
        {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8},
                         {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 8}]}
    )  # fmt: skip
    model = build_cost_model("analytical")
    with pytest.raises(InfeasiblePlan) as info:  # 2·10 + 2·10 = 40, not 64
        evaluate_data_shares(model, problem, _shares_plan(10, 10))
    assert info.value.extensions["errors"][0]["field"] == "plan.data_shares"
    with pytest.raises(ValidationError, match="hold 4 replicas; parallelism.data is 6"):
        _shares_plan(16, 16, data=6)


def test_a_slow_link_between_groups_shows_as_pipeline_communication() -> None:
    model = build_cost_model("analytical")
    plan = _plan(["a100-80gb", "h100-sxm"], [12, 20])
    fast = evaluate_mixed(model, _problem(), plan)
    slow_cluster = {**MIXED, "inter_group_bandwidth_gb_s": 0.5}
    slow = evaluate_mixed(model, _problem(slow_cluster), plan)
    grew = slow.metrics.step_time_s - fast.metrics.step_time_s
    assert grew > 1.0
    comm = slow.metrics.time_breakdown_s.pipeline_comm - fast.metrics.time_breakdown_s.pipeline_comm
    assert comm > 0.5 * grew  # the link's cost is pipeline communication, not compute
    assert slow.metrics.time_breakdown_s.compute == pytest.approx(
        fast.metrics.time_breakdown_s.compute, rel=0.35
    )


def test_a_share_that_is_not_a_whole_number_of_micro_batches_names_its_field() -> None:
    from solver import estimate_plan

    problem = _two_nodes_batch_128()
    plan = TrainingPlan.model_validate(
        {"parallelism": {"data": 4, "tensor": 4}, "micro_batch_size": 2,
         "data_shares": [{"group": "h100-sxm", "replicas": 2, "sequences": 43},
                         {"group": "a100-80gb", "replicas": 2, "sequences": 21}]}
    )  # fmt: skip
    with pytest.raises(InfeasiblePlan) as info:
        estimate_plan(problem, build_cost_model("analytical"), plan)
    assert info.value.extensions["errors"][0]["field"] == "plan.data_shares.0.sequences"


def test_stages_with_their_own_tensor_degree_compose_their_own_evaluations() -> None:
    """Stage 0 on the A100 node at tensor 8, stage 1 on four H100s at tensor 4 (data 1):
    each rank's work is the rank's work in the homogeneous job of its pool at its degree,
    plus, on both sides of the boundary, the inter-pool hand-off of the tensor-4 shard
    (the narrower stage's GPUs hold 1/4 of the activation with sequence parallelism) less
    the send / receive their own job already counts; GPUs and MFU count 8 + 4."""
    problem = _problem()
    model = build_cost_model("analytical")
    plan = TrainingPlan.model_validate(
        {
            "parallelism": {"data": 1, "tensor": 8, "pipeline": 2, "sequence_parallel": True},
            "stage_layers": [12, 20],
            "stage_groups": ["a100-80gb", "h100-sxm"],
            "stage_tensor": [8, 4],
            "recompute": "selective",
        }
    )
    est = evaluate_mixed(model, problem, plan)
    pools = problem.cluster.pools()
    at8 = plan.model_copy(update={"stage_groups": None, "stage_tensor": None})
    dims4 = plan.parallelism.model_copy(update={"tensor": 4})
    at4 = at8.model_copy(update={"parallelism": dims4})
    a100 = model.evaluate(pool_problem(problem, pools["a100-80gb"], 16), at8)
    h100 = model.evaluate(pool_problem(problem, pools["h100-sxm"], 8), at4)
    acc = pools["a100-80gb"].groups[0].accelerator
    other = pools["h100-sxm"].groups[0].accelerator
    bandwidth = (
        problem.cluster.inter_pool_bandwidth_gb_s
        * 1e9
        * min(acc.scale_out_efficiency, other.scale_out_efficiency)
    )
    cross = 1 * 4096 * 4096 * 2 / 4 / bandwidth  # mb × seq × hidden × bf16 / tensor 4
    (boundary,) = est.details["pool_boundaries"]
    assert boundary["s"] == pytest.approx(cross, rel=1e-9)
    own = [float(a100.details["p2p_time_s"]), float(h100.details["p2p_time_s"])]
    work = [float(a100.details["rank_work_s"][0]), float(h100.details["rank_work_s"][1])]
    assert not a100.details["p2p_overlapped"]  # Megatron-Core exposes its send / receives
    assert cross > max(own)  # the inter-node link is slower than NVLink inside a pool
    work = [w + cross - o for w, o in zip(work, own, strict=True)]
    assert est.details["rank_work_s"] == pytest.approx(work, rel=1e-9)
    assert est.details["stage_tensor"] == [8, 4]
    assert est.details["pools"]["h100-sxm"]["gpus_used"] == 4
    assert est.details["pools"]["a100-80gb"]["gpus_used"] == 8
    assert est.memory.by_stage[0].total_gib == pytest.approx(
        a100.memory.by_stage[0].total_gib, rel=1e-12
    )
    assert est.memory.by_stage[1].total_gib == pytest.approx(
        h100.memory.by_stage[1].total_gib, rel=1e-12
    )
    flops = est.metrics.model_tflops_per_gpu * 12 * 1e12
    peaks = 8 * acc.peak_flops("bf16") + 4 * other.peak_flops("bf16")
    assert est.metrics.mfu == pytest.approx(flops / peaks, rel=1e-9)
    # one degree on every stage is the plan without stage_tensor
    same = plan.model_copy(update={"stage_tensor": [8, 8]})
    plain = plan.model_copy(update={"stage_tensor": None})
    assert evaluate_mixed(model, problem, same).metrics.step_time_s == pytest.approx(
        evaluate_mixed(model, problem, plain).metrics.step_time_s, rel=1e-12
    )


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"stage_groups": None}, "stage_tensor needs stage_groups"),
        ({"stage_tensor": [8]}, "one per pipeline stage"),
        ({"stage_tensor": [4, 2]}, "must be the widest stage's degree"),
        ({"stage_tensor": [8, 0]}, ">= 1"),
    ],
)
def test_bad_stage_tensor_is_refused(update: dict[str, Any], message: str) -> None:
    body: dict[str, Any] = {
        "parallelism": {"data": 1, "tensor": 8, "pipeline": 2},
        "stage_groups": ["a100-80gb", "h100-sxm"],
        "stage_tensor": [8, 4],
        **update,
    }
    with pytest.raises(ValidationError, match=message):
        TrainingPlan.model_validate(body)


def test_single_device_figures_of_a_mixed_cluster_raise() -> None:
    """A cluster of several pools has no one accelerator, node size or link: reading one
    raises instead of returning the first group's (which priced mixed clusters as their
    first group); a cluster whose groups share their hardware still answers."""
    mixed = _problem().cluster
    for name in ("accelerator", "gpus_per_node", "intra_node_bandwidth_gb_s", "system"):
        with pytest.raises(MixedClusterError, match="price each pool"):
            getattr(mixed, name)
    same = resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1},
                             {"accelerator": "h100-sxm", "num_nodes": 2, "name": "more"}]}
        )
    )  # fmt: skip
    assert same.accelerator.id == "h100-sxm" and same.gpus_per_node == 8


def test_explanations_name_the_group_order_and_the_stage_degrees() -> None:
    """Two plans that differ only in the order of the groups along the pipeline, or only in
    the stages' tensor degrees, are told apart by that difference (not by 'the same
    degrees' or an unrelated field)."""
    problem = _problem()
    model = build_cost_model("analytical")
    first = evaluate_mixed(model, problem, _plan(["a100-80gb", "h100-sxm"], [12, 20]))
    turned = evaluate_mixed(model, problem, _plan(["h100-sxm", "a100-80gb"], [20, 12]))
    text = compare(first, turned, 2)
    assert "groups a100-80gb → h100-sxm instead of h100-sxm → a100-80gb" in text
    narrow = first.plan.model_copy(update={"stage_tensor": [8, 4]})
    text = compare(evaluate_mixed(model, problem, narrow), first, 1)
    assert "stage tensor degrees 8 on 1 stage, 4 on 1 stage instead of 8 on 2 stages" in text
