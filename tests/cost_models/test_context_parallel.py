"""Context-parallel algorithms (issue 15): the communication of each algorithm on a small
hand-worked case (independent arithmetic below, not the module's formulas), and their
effect on a priced layer."""

from __future__ import annotations

import pytest

from cost_models.analytical.collectives import AlphaBetaCollectives, TwoTierNetwork
from cost_models.analytical.context_parallel import (
    CPShape,
    all_gather_exchange,
    hybrid_exchange,
    ring_exchange,
    ulysses_exchange,
)
from cost_models.analytical.placement import GroupPlacement

# 100 GB/s NVLink, 25 GB/s NIC per GPU, α 10 µs intra / 30 µs inter
NET = AlphaBetaCollectives(TwoTierNetwork(100e9, 25e9, None, 10e-6, 30e-6))
# 1024 tokens on the rank, 8 query and 2 KV heads per tensor rank, head dims 128, c = 4
SHAPE = CPShape(tokens=1024, q_heads=8, kv_heads=2, qk_dim=128, v_dim=128, context=4)
INTRA4 = GroupPlacement(4, 4, 1, "intra")
US = 1e-6


def test_ring_exposes_what_outlasts_each_attention_step() -> None:
    # block: 1024 tokens × 2 heads × (128 + 128) × 2 bytes = 1 MiB; one hop 10 µs + 1 MiB / 100 GB/s
    block = 1024 * 2 * 256 * 2
    assert block == 1_048_576
    hop = 10e-6 + block / 100e9  # 20.48576 µs
    # forward: 3 hops, each beside a quarter of the 40 µs attention (10 µs): 10.48576 µs
    # exposed + 10 % of the 10 µs hidden, three times
    fwd = 3 * ((hop - 10e-6) + 0.1 * 10e-6)
    # backward: steps of 25 µs; steps 0 and 3 carry one block (hidden: 10 % of the hop),
    # steps 1 and 2 carry K/V and dK/dV (2 hops = 40.97 µs: 15.97 exposed, 10 % of 25 hidden)
    bwd = 2 * (0.1 * hop) + 2 * ((2 * hop - 25e-6) + 0.1 * 25e-6)
    x = ring_exchange(NET, SHAPE, INTRA4, 40e-6, 100e-6, 0.1)
    assert x.forward_s == pytest.approx(fwd, rel=1e-12)
    assert x.forward_s == pytest.approx(34.45728 * US, rel=1e-9)
    assert x.backward_s == pytest.approx(bwd, rel=1e-12)
    assert x.backward_s == pytest.approx(41.040192 * US, rel=1e-9)
    assert x.wire_forward_s == pytest.approx(3 * hop) and x.wire_backward_s == pytest.approx(
        6 * hop
    )
    assert x.working_bytes == 0.0 and x.ring_steps == 4


def test_ulysses_four_all_to_alls_each_way_exposed() -> None:
    # Q and O: 1024 × 8 × 128 × 2 = 2 MiB each; K and V: 1024 × 2 × 128 × 2 = 0.5 MiB each
    sizes = [1024 * 8 * 128 * 2, 1024 * 2 * 128 * 2, 1024 * 2 * 128 * 2, 1024 * 8 * 128 * 2]
    # one all-to-all on one node of 4: 3 steps of 10 µs + 3/4 of the buffer over 100 GB/s
    each = [3 * 10e-6 + 0.75 * s / 100e9 for s in sizes]
    x = ulysses_exchange(NET, SHAPE, INTRA4)
    assert x.forward_s == pytest.approx(sum(each), rel=1e-12)
    assert x.forward_s == pytest.approx(159.3216 * US, rel=1e-9)
    assert x.backward_s == x.forward_s  # the same four on the gradients
    assert x.working_bytes == sum(sizes) == 5_242_880  # the re-split copies


def test_all_gather_gathers_kv_forward_and_again_backward_with_a_reduce_scatter() -> None:
    # whole-sequence K (and V): 4096 tokens × 2 heads × 128 × 2 bytes = 2 MiB
    s_k = 4 * 1024 * 2 * 128 * 2
    # ring all-gather on one node of 4: 3 × (10 µs + 2 MiB / 4 / 100 GB/s)
    gather = 3 * (10e-6 + s_k / 4 / 100e9)
    x = all_gather_exchange(NET, SHAPE, INTRA4)
    assert x.forward_s == pytest.approx(2 * gather, rel=1e-12)  # K and V
    assert x.forward_s == pytest.approx(91.45728 * US, rel=1e-9)
    assert x.backward_s == pytest.approx(4 * gather, rel=1e-12)  # again + 2 reduce-scatters
    assert x.working_bytes == 2 * (s_k + s_k) == 8_388_608  # gathered K/V and their grads


def test_hybrid_is_ulysses_inside_the_head_group_and_a_ring_across() -> None:
    heads = GroupPlacement(2, 2, 1, "intra")
    ring = GroupPlacement(2, 1, 2, "inter")
    sizes = [2_097_152, 524_288, 524_288, 2_097_152]
    a2a = sum(10e-6 + 0.5 * s / 100e9 for s in sizes)  # 1 step, 1/2 of each buffer
    hop = 30e-6 + 1_048_576 / 25e9  # across nodes: 71.94304 µs
    ring_f = (hop - 20e-6) + 0.1 * 20e-6  # one hop beside half of the 40 µs
    ring_b = 2 * ((hop - 50e-6) + 0.1 * 50e-6)  # two single-block steps of 50 µs
    x = hybrid_exchange(NET, SHAPE, heads, ring, 40e-6, 100e-6, 0.1)
    assert x.forward_s == pytest.approx(a2a + ring_f, rel=1e-12)
    assert x.forward_s == pytest.approx(120.15744 * US, rel=1e-9)
    assert x.backward_s == pytest.approx(a2a + ring_b, rel=1e-12)
    assert x.backward_s == pytest.approx(120.10048 * US, rel=1e-9)
    assert x.ring_steps == 2


def test_no_exchange_without_a_group() -> None:
    one = GroupPlacement(1, 1, 1, "intra")
    for x in (
        ring_exchange(NET, SHAPE, one, 1.0, 1.0, 0.1),
        ulysses_exchange(NET, SHAPE, one),
        all_gather_exchange(NET, SHAPE, one),
    ):
        assert (x.forward_s, x.backward_s, x.working_bytes) == (0.0, 0.0, 0.0)
