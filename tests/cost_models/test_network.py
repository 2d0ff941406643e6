"""The measured-tier collective model (`cost_models/analytical/network.py`) and group
placement on scale-up domains and leaves (`placement.py`)."""

from __future__ import annotations

import pytest

from cost_models.analytical.network import NetworkModel, network_for
from cost_models.analytical.placement import place_group
from hardware_catalog import get_fabric, resolve_cluster
from hardware_catalog.schema import FabricLayout
from specs.cluster import ClusterSpec

MIB = 1 << 20


def _net(cluster: dict, **layout: object) -> NetworkModel:
    resolved = resolve_cluster(ClusterSpec.model_validate(cluster))
    g = resolved.groups[0]
    fabric = resolved.fabric.model_copy(update=layout) if layout else resolved.fabric
    return network_for(
        g.scale_up_fabric,
        g.intra_node_bandwidth_gb_s,
        g.scale_up_peer_bandwidth_gb_s,
        g.scale_out_fabric,
        g.inter_node_bandwidth_gb_s,
        fabric,
        g.gpus_per_node,
    )


H100 = {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 16, "gpus_per_node": 8}]}


def test_placement_counts_domains_not_nodes() -> None:
    # 8 consecutive ranks on 4-GPU trays of a 72-GPU NVLink domain: one domain
    tray = place_group(8, 1, domain_gpus=72)
    assert (tray.members_per_domain, tray.domains, tray.tier) == (8, 1, "intra")
    # the same ranks when each tray is its own domain: two domains, over the network
    split = place_group(8, 1, domain_gpus=4)
    assert (split.members_per_domain, split.domains, split.tier) == (4, 2, "inter")
    # a stride-8 group on 8-GPU nodes: one member per domain; 32 nodes per leaf
    dp = place_group(64, 8, domain_gpus=8, leaf_gpus=256)
    assert (dp.members_per_domain, dp.domains, dp.members_per_leaf, dp.leaves) == (1, 64, 32, 2)


def test_reference_group_reproduces_the_measured_curve() -> None:
    """At its reference shape (8 H100s, one domain) the ring all-gather time is the curve's
    factor·S / (B·η(S)) at every measured size from 1 MiB (no NVLS for all-gather); below,
    never less than the smallest message's time (the latency floor)."""
    net = _net(H100)
    curve = get_fabric("nvlink4-nvswitch").curve("all_gather")
    assert curve is not None and curve.reference_ranks == 8
    group = place_group(8, 1, 8)
    for size, eff in curve.points:
        expected = 7 / 8 * size / (450e9 * eff)
        if size >= MIB:
            assert net.all_gather(size, group) == pytest.approx(expected, rel=1e-9)
    floor = 7 / 8 * curve.points[0][0] / (450e9 * curve.points[0][1])
    assert net.all_gather(1024, group) == pytest.approx(floor, rel=1e-9)


def test_nvls_engages_only_from_its_minimum_group() -> None:
    net = _net(H100)
    size = 4 << 30
    eight = 2 * 7 / 8 * size / net.all_reduce(size, place_group(8, 1, 8))
    four = 2 * 3 / 4 * size / net.all_reduce(size, place_group(4, 1, 8))
    # in-switch reduction lifts an 8-GPU all-reduce above the per-GPU line rate (480 on 450);
    # four GPUs stay on the ring, below it
    assert eight > 450e9 > four


def test_nvl72_tray_group_stays_on_nvlink() -> None:
    """An all-to-all over 16 GPUs in 4-GPU trays: on a 72-GPU NVLink domain it never leaves
    NVLink; when each tray is taken as the whole domain it crosses InfiniBand (issue 10)."""
    rack = _net({"node_groups": [{"system": "gb200-nvl72", "num_nodes": 18}]})
    size = 64 * MIB
    in_domain = rack.all_to_all(size, place_group(16, 1, domain_gpus=72))
    over_ib = rack.all_to_all(size, place_group(16, 1, domain_gpus=4))
    assert over_ib > 5 * in_domain


def test_rail_only_forwards_all_to_all_over_nvlink() -> None:
    group = place_group(64, 1, 8, 256)  # 8 nodes × 8 GPUs
    optimized = _net(H100)
    rail_only = _net(H100, topology="rail_only")
    size = 256 * MIB
    assert rail_only.all_to_all(size, group) >= optimized.all_to_all(size, group)
    # the forwarded share costs NVLink time, not NIC time: all-reduce is unchanged
    assert rail_only.all_reduce(size, group) == optimized.all_reduce(size, group)


def test_oversubscribed_spine_slows_traffic_that_crosses_leaves() -> None:
    size = 512 * MIB
    flat = _net(H100, nodes_per_leaf=2)
    tapered = _net(H100, nodes_per_leaf=2, oversubscription=4.0)
    # 128 ranks over 8 leaves of 2 nodes: most all-to-all bytes leave the leaf
    a2a = place_group(128, 1, 8, 16)
    assert tapered.all_to_all(size, a2a) > 2.5 * flat.all_to_all(size, a2a)
    # a rail-aligned ring with one member per node (2 domains per leaf) keeps 2 / 4 of the
    # NIC rate: its bandwidth-bound time about doubles
    ring = place_group(16, 8, 8, 16)
    ratio = tapered.all_reduce(size, ring) / flat.all_reduce(size, ring)
    assert 1.7 < ratio < 2.05
    # inside one leaf nothing changes
    local = place_group(2, 8, 8, 16)
    assert tapered.all_reduce(size, local) == flat.all_reduce(size, local)


def test_cross_node_ring_is_bounded_by_the_nics_and_nvlink() -> None:
    net = _net(H100)
    size = 4 << 30
    # 8 nodes × 8 GPUs: NCCL's rings reach about the NVLink ring rate (~370 GB/s), not
    # the hierarchical sum of an NVLink phase and a NIC phase
    busbw = 2 * 63 / 64 * size / net.all_reduce(size, place_group(64, 1, 8, 256))
    assert 300e9 < busbw < 400e9
    # one member per node: one NIC per member (~47 of 50 GB/s)
    busbw = 2 * 15 / 16 * size / net.all_reduce(size, place_group(16, 8, 8, 256))
    assert 40e9 < busbw < 50e9


def test_mesh_pairs_get_one_link() -> None:
    mesh = _net({"node_groups": [{"accelerator": "mi300x", "num_nodes": 1}]})
    size = 1 << 30
    two = size / mesh.all_gather(2 * size, place_group(2, 1, 8))
    eight = 7 / 8 * 8 * size / mesh.all_gather(8 * size, place_group(8, 1, 8))
    assert two < 64e9  # one xGMI link: 64 GB/s per direction
    assert eight > 3 * two


def test_layout_defaults_to_a_non_blocking_fabric() -> None:
    resolved = resolve_cluster(ClusterSpec.model_validate(H100))
    assert resolved.fabric == FabricLayout(
        topology=resolved.fabric.topology, oversubscription=1.0, nodes_per_leaf=32
    )


def test_moe_on_nvl72_trays_prices_the_rack_domain() -> None:
    """End to end (issue 10): a Mixtral-8x22B plan with an 8-way expert group on GB200
    NVL72 described as Slurm sees it (4-GPU trays). Named as the system the rack's 72-GPU
    NVLink domain holds the expert group; declared with a 4-GPU domain, the same all-to-all
    crosses InfiniBand and the step is slower."""
    from cost_models.base import TrainingProblem
    from cost_models.registry import build_cost_model
    from specs.plan import TrainingPlan
    from specs.presets import get_preset
    from specs.workload import TrainingWorkload

    def estimate(group: dict) -> tuple[str, float, float]:
        problem = TrainingProblem(
            model=get_preset("mixtral-8x22b"),
            cluster=resolve_cluster(ClusterSpec.model_validate({"node_groups": [group]})),
            workload=TrainingWorkload(global_batch_size=256, sequence_length=4096),
        )
        plan = TrainingPlan.model_validate(
            {
                "parallelism": {"data": 16, "tensor": 1, "pipeline": 4, "expert": 8},
                "micro_batch_size": 1,
                "zero_stage": 1,
                "recompute": "full",
                "stage_layers": [14, 14, 14, 14],
            }
        )
        est = build_cost_model("analytical").evaluate(problem, plan)
        moe = est.details["expert_parallel"]
        return moe["all_to_all_tier"], moe["all_to_all_s_per_step"], est.metrics.step_time_s

    rack = {"system": "gb200-nvl72", "num_nodes": 16}
    assert (
        resolve_cluster(ClusterSpec.model_validate({"node_groups": [rack]}))
        .groups[0]
        .scale_up_domain_gpus
        == 72
    )
    tier, a2a_rack, step_rack = estimate(rack)
    trays = {**rack, "scale_up_domain_gpus": 4}
    tier_trays, a2a_trays, step_trays = estimate(trays)
    assert (tier, tier_trays) == ("intra", "inter")
    assert a2a_trays > 3 * a2a_rack
    assert step_trays > step_rack
