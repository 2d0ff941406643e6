"""Alpha-beta collectives and group placement, against hand-derived numbers."""

from __future__ import annotations

import pytest

from cost_models.analytical.collectives import (
    TwoTierNetwork,
    all_gather_time_s,
    all_reduce_time_s,
    all_to_all_time_s,
    reduce_scatter_time_s,
    send_recv_time_s,
)
from cost_models.analytical.placement import GroupPlacement, place_group, place_groups

H100 = TwoTierNetwork(450e9 * 0.82, 50e9 * 0.97, None, 10e-6, 30e-6)
GIB = 2**30


def test_ring_all_reduce_8_gpus_nvlink() -> None:
    t = all_reduce_time_s(H100, GIB, place_group(8, 1, 8))
    assert t == pytest.approx(2 * 7 / 8 * GIB / (450e9 * 0.82) + 14 * 10e-6, rel=1e-12)


def test_reduce_scatter_and_all_gather_are_half() -> None:
    g = place_group(8, 1, 8)
    rs = reduce_scatter_time_s(H100, GIB, g)
    assert rs == pytest.approx(7 / 8 * GIB / (450e9 * 0.82) + 7 * 10e-6, rel=1e-12)
    assert all_gather_time_s(H100, GIB, g) == rs


def test_hierarchical_all_reduce_two_nodes() -> None:
    # 16 GPUs = 2 nodes × 8: 2·7/8·S/B_nvl + 2·(1/2)·(S/8)/B_nic + 14 α_intra + 2 α_inter
    g = GroupPlacement(16, 8, 2, "inter")
    expected = (
        2 * 7 / 8 * GIB / (450e9 * 0.82)
        + 2 * 0.5 * (GIB / 8) / (50e9 * 0.97)
        + 14 * 10e-6
        + 2 * 30e-6
    )
    assert all_reduce_time_s(H100, GIB, g) == pytest.approx(expected, rel=1e-12)


def test_ring_over_nics_one_rank_per_node() -> None:
    g = place_group(4, 8, 8)  # stride 8: one member per node
    assert (g.members_per_domain, g.domains, g.tier) == (1, 4, "inter")
    expected = 2 * 3 / 4 * GIB / (50e9 * 0.97) + 6 * 30e-6
    assert all_reduce_time_s(H100, GIB, g) == pytest.approx(expected, rel=1e-12)


def test_single_rank_and_empty_buffers_cost_nothing() -> None:
    assert all_reduce_time_s(H100, GIB, place_group(1, 1, 8)) == 0.0
    assert all_reduce_time_s(H100, 0, place_group(8, 1, 8)) == 0.0
    assert send_recv_time_s(H100, 0, "intra") == 0.0


def test_send_recv_and_mesh_peer_bandwidth() -> None:
    assert send_recv_time_s(H100, 1e9, "inter") == pytest.approx(30e-6 + 1e9 / (50e9 * 0.97))
    # MI300X-like xGMI mesh: 448 aggregate, 64 per peer; a group of 4 gets 3 links
    mesh = TwoTierNetwork(448e9, 48e9, 64e9, 10e-6, 30e-6)
    assert send_recv_time_s(mesh, 64e9, "intra") == pytest.approx(1.0 + 10e-6)
    g4 = place_group(4, 1, 8)
    assert all_reduce_time_s(mesh, 1e9, g4) == pytest.approx(
        2 * 3 / 4 * 1e9 / (3 * 64e9) + 6 * 10e-6
    )
    # the full 8-GPU mesh gets 7 links = 448
    assert all_reduce_time_s(mesh, 1e9, place_group(8, 1, 8)) == pytest.approx(
        2 * 7 / 8 * 1e9 / 448e9 + 14 * 10e-6
    )


def test_all_to_all_intra_and_inter() -> None:
    assert all_to_all_time_s(H100, GIB, place_group(8, 1, 8)) == pytest.approx(
        7 * 10e-6 + 7 / 8 * GIB / (450e9 * 0.82)
    )
    # 16 ranks on 2 nodes: half the bytes leave the node through one NIC (the slow part)
    t = all_to_all_time_s(H100, GIB, GroupPlacement(16, 8, 2, "inter"))
    assert t == pytest.approx(15 * 30e-6 + 8 / 16 * GIB / (50e9 * 0.97))


@pytest.mark.parametrize(
    ("size", "stride", "gpn", "expected"),
    [
        (8, 1, 8, (8, 1, "intra")),  # tp=8 on 8-GPU nodes
        (4, 1, 8, (4, 1, "intra")),
        (2, 8, 8, (1, 2, "inter")),  # dp group behind tp=8 spans nodes
        (4, 2, 8, (4, 1, "intra")),  # dp=4 behind tp=2 fits a node
        (8, 2, 8, (4, 2, "inter")),  # dp=8 behind tp=2: 4 per node on 2 nodes
        (16, 1, 8, (8, 2, "inter")),  # tensor across nodes
        (4, 16, 8, (1, 4, "inter")),
    ],
)
def test_placement(size: int, stride: int, gpn: int, expected: tuple[int, int, str]) -> None:
    g = place_group(size, stride, gpn)
    assert (g.members_per_domain, g.domains, g.tier) == expected


def test_place_groups_megatron_order() -> None:
    gr = place_groups(tensor=4, context=2, data=2, pipeline=4, domain_gpus=8)
    assert gr.tensor.tier == "intra" and gr.context.tier == "intra"
    assert (gr.data.members_per_domain, gr.data.domains) == (1, 2)
    assert (gr.data_context.members_per_domain, gr.data_context.domains) == (2, 2)
    assert gr.pipeline.tier == "inter"
