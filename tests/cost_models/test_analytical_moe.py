"""MoE pricing of the analytical model (`cost_models/analytical/moe.py`, training.py):
all-to-all times hand-derived for an intra-node and an inter-node expert-parallel group,
expert state bytes by EP / ETP / ZeRO, capacity factor and load-imbalance scaling."""

from __future__ import annotations

import pytest
from cm_support import make_cluster, make_h100

from cost_models.analytical.collectives import AlphaBetaCollectives, TwoTierNetwork
from cost_models.analytical.moe import (
    busiest_rank_load,
    dispatch_bytes,
    expert_load_shares,
    moe_comm_s,
)
from cost_models.analytical.placement import place_expert_groups
from cost_models.analytical.training import AnalyticalTrainingCostModel
from cost_models.base import TrainingProblem
from specs.model import ModelSpec, MoESpec
from specs.plan import PlanKey
from specs.workload import MoERoutingSpec, TrainingWorkload

NET = TwoTierNetwork(
    intra_bytes_per_s=400e9,
    inter_bytes_per_s=40e9,
    intra_peer_bytes_per_s=None,
    alpha_intra_s=10e-6,
    alpha_inter_s=30e-6,
)
COMM = AlphaBetaCollectives(NET)
# 4096 tokens on the GPU, top-2, h = 4096: S = 4096·2·4096·2 B = 67,108,864 B per direction
S = 67_108_864.0


def test_dispatch_bytes() -> None:
    assert dispatch_bytes(4096, 2, 4096) == S


def test_all_to_all_inside_one_node_hand_derived() -> None:
    # EP 8, ETP 1 on 8-GPU nodes: one node. a2a = 7·10 µs + 7/8·S / 400 GB/s
    #   = 70 µs + 146.8006 µs = 216.8006 µs; dispatch + combine = 433.6013 µs; no ETP group
    groups = place_expert_groups(8, 1, 64, 8)
    assert groups.expert.tier == "intra" and groups.expert.members_per_domain == 8
    comm = moe_comm_s(COMM, groups, 4096, 2, 4096, 1.0)
    assert comm.all_to_all_s == pytest.approx(2 * (70e-6 + 0.875 * S / 400e9), rel=1e-12)
    assert comm.all_to_all_s == pytest.approx(433.6013e-6, rel=1e-6)
    assert comm.expert_tensor_s == 0.0


def test_all_to_all_across_nodes_hand_derived() -> None:
    # EP 16, ETP 1 on 8-GPU nodes: 2 nodes, 8 members each. Off-node share 8/16 through the
    # GPU's NIC: 0.5·S / 40 GB/s = 838.8608 µs, on-node 7/16·S / 400 GB/s = 73.4 µs in
    # parallel; latency 15 · 30 µs = 450 µs → 1288.8608 µs per all-to-all.
    groups = place_expert_groups(16, 1, 64, 8)
    assert groups.expert.tier == "inter" and groups.expert.domains == 2
    comm = moe_comm_s(COMM, groups, 4096, 2, 4096, 1.0)
    assert comm.all_to_all_s == pytest.approx(2 * 1288.8608e-6, rel=1e-9)
    # node-limited routing (DeepSeek-V3 §3.2.2) to M = 1 node: min(1, 2, 2)·(2−1)/(2·2) =
    # 1/4 of S crosses the network → 419.4304 µs + 450 µs
    limited = moe_comm_s(COMM, groups, 4096, 2, 4096, 1.0, max_nodes_per_token=1)
    assert limited.all_to_all_s == pytest.approx(2 * (419.4304e-6 + 450e-6), rel=1e-9)


def test_expert_tensor_folds_inside_the_expert_group() -> None:
    # ETP innermost (stride 1), EP stride ETP: EP 4 × ETP 2 fills one 8-GPU node; EP 8 × ETP 2
    # spans two nodes; the expert-data group strides over e·etp ranks
    g = place_expert_groups(4, 2, 64, 8)
    assert (g.expert_tensor.tier, g.expert.tier, g.expert.members_per_domain) == (
        "intra",
        "intra",
        4,
    )
    assert g.expert_data.size == 8 and g.expert_data.tier == "inter"
    g2 = place_expert_groups(8, 2, 64, 8)
    assert g2.expert.tier == "inter" and g2.expert.members_per_domain == 4
    # ETP collectives: all-gather + reduce-scatter of etp·S over the 2-GPU group, each
    # (2−1)·(10 µs + S/400 GB/s)... of the 2·S gathered buffer / 2 members
    comm = moe_comm_s(COMM, g, 4096, 2, 4096, 1.0)
    one = 10e-6 + (2 * S) / 2 / 400e9
    assert comm.expert_tensor_s == pytest.approx(2 * one, rel=1e-12)


def test_load_shares_and_busiest_rank() -> None:
    assert busiest_rank_load(8, 4, None).load_factor == pytest.approx(1.0)
    # Zipf α = 1 over 4 experts: 12/25, 6/25, 4/25, 3/25; EP 2: rank 0 holds 18/25 → λ = 1.44
    zipf = MoERoutingSpec(imbalance=1.0)
    assert expert_load_shares(4, zipf) == pytest.approx((0.48, 0.24, 0.16, 0.12))
    load = busiest_rank_load(4, 2, zipf)
    assert load.load_factor == pytest.approx(1.44)
    assert load.local_factors == pytest.approx((1.92, 0.96))
    # capacity factor 1 (token dropping): each expert keeps at most 1/4 → 0.25 + 0.24 → 0.98
    capped = busiest_rank_load(4, 2, MoERoutingSpec(imbalance=1.0, capacity_factor=1.0))
    assert capped.load_factor == pytest.approx(0.98)
    # a measured histogram: [3, 1, 1, 3] balances two ranks, not four (λ = 0.375·4)
    hist = MoERoutingSpec(expert_loads=[3, 1, 1, 3])
    assert busiest_rank_load(4, 2, hist).load_factor == pytest.approx(1.0)
    assert busiest_rank_load(4, 4, hist).load_factor == pytest.approx(1.5)
    with pytest.raises(ValueError, match="has 4 entries"):
        expert_load_shares(8, hist)


def test_routing_spec_rules() -> None:
    with pytest.raises(ValueError, match="exclusive"):
        MoERoutingSpec(imbalance=1.0, expert_loads=[1, 1])
    with pytest.raises(ValueError, match="non-negative"):
        MoERoutingSpec(expert_loads=[1, -1])
    # dense requests dump as before the field existed (request hashes unchanged)
    assert (
        "moe_routing" not in TrainingWorkload(global_batch_size=8, sequence_length=8).model_dump()
    )


def _model(layers: int = 2) -> ModelSpec:
    # h 1024, 8 heads (MHA): attention 4·h² = 4,194,304; router h·E = 8192; expert 3·h·f_e =
    # 6,291,456, 8 routed = 50,331,648; two RMSNorms 2048 per layer
    return ModelSpec(
        name="t",
        num_layers=layers,
        hidden_size=1024,
        num_attention_heads=8,
        ffn_hidden_size=2048,
        vocab_size=32000,
        moe=MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=2048),
    )


def _problem(routing: MoERoutingSpec | None = None) -> TrainingProblem:
    return TrainingProblem(
        model=_model(),
        cluster=make_cluster(make_h100(), 2),
        workload=TrainingWorkload(global_batch_size=64, sequence_length=2048, moe_routing=routing),
    )


@pytest.mark.parametrize(
    ("zero", "expected"),
    [
        # tensor 2, data 8 (16 GPUs), EP 4, ETP 2: dense per GPU (4,194,304 + 8192)/2 + 2048 =
        # 2,103,296 sharded over data 8; experts 50,331,648/8 = 6,291,456 over the
        # expert-data group 8·2/(4·2) = 2
        (0, 2_103_296 * 18 + 6_291_456 * 18),
        (1, 2_103_296 * (6 + 12 / 8) + 6_291_456 * (6 + 12 / 2)),  # 91,272,192
        (3, 2_103_296 * 18 / 8 + 6_291_456 * 18 / 2),  # 61,355,520
    ],
)
def test_expert_state_bytes_by_ep_etp_zero(zero: int, expected: float) -> None:
    cm = AnalyticalTrainingCostModel()
    key = PlanKey(
        data=8,
        tensor=2,
        pipeline=1,
        expert=4,
        expert_tensor=2,
        sequence_parallel=True,
        zero_stage=zero,
    )
    problem = _problem()
    assert cm.check_key(problem, key) == []
    prof = cm.profile_key(problem, key)
    assert prof.layer_state_bytes[0] == pytest.approx(expected, rel=1e-12)


def test_imbalance_and_capacity_scale_the_moe_layer() -> None:
    key = PlanKey(data=16, tensor=1, pipeline=1, expert=4)
    plan = key.to_plan([2])
    times = {}
    for name, routing in [
        ("balanced", None),
        ("zipf", MoERoutingSpec(imbalance=1.0)),
        ("dropped", MoERoutingSpec(imbalance=1.0, capacity_factor=1.0)),
    ]:
        est = AnalyticalTrainingCostModel().evaluate(_problem(routing), plan)
        times[name] = (est.metrics.step_time_s, est.details["expert_parallel"])
    # Zipf over 8 experts on EP 4: rank 0 holds experts 0-1, share (1 + 1/2)/H_8 = 0.5518 → λ
    # = 2.207; token dropping at capacity 1 caps both at 1/8 → λ = 1
    h8 = sum(1 / i for i in range(1, 9))
    assert times["zipf"][1]["load_factor"] == pytest.approx(1.5 / h8 * 4)
    assert times["dropped"][1]["load_factor"] == pytest.approx(1.0)
    assert times["balanced"][0] == pytest.approx(times["dropped"][0], rel=1e-12)
    assert times["zipf"][0] > times["balanced"][0] * 1.05
    # the all-to-all of the busiest rank grows with λ (bandwidth part; latency unchanged)
    a2a_b = times["balanced"][1]["all_to_all_s_per_layer"]
    a2a_z = times["zipf"][1]["all_to_all_s_per_layer"]
    assert a2a_z > a2a_b
    assert times["balanced"][1]["all_to_all_tier"] == "intra"


def test_wrong_histogram_is_a_violation_not_a_crash() -> None:
    problem = _problem(MoERoutingSpec(expert_loads=[1.0, 2.0]))
    cm = AnalyticalTrainingCostModel()
    key = PlanKey(data=16, tensor=1, pipeline=1, expert=4)
    assert [v.kind for v in cm.check_key(problem, key)] == ["expert"]
