"""Mixture-of-Experts layer costs: routed-token loads, token dispatch / combine, grouped
expert GEMMs and the expert-tensor collectives, per MoE layer and micro-batch on one GPU.

Layout (Megatron-Core "MoE Parallel Folding", Liu et al. 2025, arXiv 2504.14960 §3): the
attention runs on the `data × context × tensor` GPUs of a pipeline stage; the MoE layer
re-partitions the same GPUs into expert-tensor (ETP, innermost), expert (EP) and
expert-data groups (`placement.place_expert_groups`). With sequence parallelism each GPU
holds T/t of the micro-batch's T = b·s/c tokens. Per MoE layer (Megatron-Core all-to-all
token dispatcher, ibid. §3.2):

1. router GEMM (T/t)·h·E (priced with the attention GEMMs, `flops.layer_gemms`);
2. dispatch all-to-all over the EP group: every GPU sends its T/t·top_k routed token copies,
   S = (T/t)·top_k·h·2 bytes (bf16);
3. all-gather of the received tokens over the ETP group (each ETP rank holds a 1/etp slice
   of every local expert's matrices, so it needs all of their tokens);
4. grouped expert GEMMs: E/e local experts, expert i with m_i tokens, up (h → 2f/etp gated)
   and down (f/etp → h) projections at their real per-expert shapes (many small GEMMs are
   less efficient: tile padding and the k-overhead of `gemm.py`, plus one launch per expert,
   the per-expert cost of a grouped GEMM's problem scheduling or of a sequential loop);
5. reduce-scatter over ETP, combine all-to-all back over EP (same sizes as 3 and 2);
   the backward repeats 2, 3 and 5 on the gradients (Lepikhin et al. 2020 §2.2 for the
   dispatch / combine pair).

Loads: on balance every expert receives T_grp·top_k/E tokens. A `MoERoutingSpec` skews the
shares (Zipf exponent or a measured histogram) and caps each expert at
capacity_factor · T_grp·top_k/E tokens when tokens are dropped (GShard, Lepikhin et al. 2020
§2.2; Switch Transformer, Fedus et al. 2021 §2.2, eq. 3-4); dropless routing keeps every
token, so the busiest expert-parallel rank sets the pace. Experts are placed contiguously,
expert i on EP rank ⌊i·e/E⌋ (Megatron-Core's default); the busiest rank's load relative to
the balanced one (the load factor λ ≥ 0) scales its expert GEMMs, its received all-to-all
bytes, its ETP collectives and its routed activations.

Node-limited routing (DeepSeek-V3, arXiv 2412.19437 §2.1.2 and §3.2.2): each token goes to
at most M nodes, crossing the scale-out network once per target node before NVLink
forwarding; the off-node share of the dispatch buffer is then min(M, K, top_k)·(K−1)/K per
token instead of top_k·(n−g)/n, with K the nodes of the EP group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cost_models.analytical.placement import ExpertGroups, GroupPlacement
from cost_models.analytical.protocols import GemmTimeModel
from specs.workload import MoERoutingSpec

BYTES_PER_TOKEN_ELEMENT = 2.0
"""bf16 hidden states in dispatch / combine (Megatron-Core default, no fp8 dispatch)."""


def expert_load_shares(num_experts: int, routing: MoERoutingSpec | None) -> tuple[float, ...]:
    """Share of the routed token copies each expert receives (sums to 1).

    Balanced (default, or imbalance 0): 1/E each. Zipf skew α: ∝ 1/(i+1)^α in expert order
    (the heaviest experts share the first EP rank: a pessimistic placement). A measured
    histogram: normalised as given.

    Raises:
        ValueError: a histogram whose length is not `num_experts`.
    """
    if routing is not None and routing.expert_loads is not None:
        loads = routing.expert_loads
        if len(loads) != num_experts:
            raise ValueError(
                f"moe_routing.expert_loads has {len(loads)} entries; the model "
                f"has {num_experts} routed experts"
            )
        total = float(sum(loads))
        return tuple(x / total for x in loads)
    alpha = routing.imbalance if routing is not None else None
    if not alpha:
        return (1.0 / num_experts,) * num_experts
    weights = [1.0 / (i + 1) ** alpha for i in range(num_experts)]
    total = sum(weights)
    return tuple(w / total for w in weights)


@dataclass(frozen=True, slots=True)
class ExpertLoad:
    """Routed-token load of the busiest expert-parallel rank."""

    load_factor: float
    """λ: tokens the busiest EP rank processes / tokens of a balanced rank (1 on balance;
    below 1 when the capacity factor drops tokens everywhere)."""
    local_factors: tuple[float, ...]
    """Per local expert of that rank: its tokens / a balanced expert's tokens."""


def busiest_rank_load(num_experts: int, expert: int, routing: MoERoutingSpec | None) -> ExpertLoad:
    """The busiest EP rank's load under the routing's shares, capacity factor and the
    contiguous expert placement (module docstring).

    Each expert processes min(share_i, C/E) of the routed copies with a capacity factor C
    (token dropping), all of share_i without one; rank r holds experts
    r·E/e … (r+1)·E/e − 1; λ = max_r Σ processed · e.
    """
    local = num_experts // expert
    factors = routing.rank_load_factors if routing is not None else None
    if factors and expert in factors:
        # The busiest rank of a solved placement (expert placement solver): its experts are
        # taken as equally loaded, their sum at the placement's λ.
        lam = factors[expert]
        return ExpertLoad(lam, (lam,) * local)
    shares = expert_load_shares(num_experts, routing)
    cap = routing.capacity_factor if routing is not None else None
    if cap is not None:
        limit = cap / num_experts
        shares = tuple(min(x, limit) for x in shares)
    best: tuple[float, ...] = ()
    best_sum = -1.0
    for r in range(expert):
        chunk = shares[r * local : (r + 1) * local]
        total = sum(chunk)
        if total > best_sum:
            best, best_sum = chunk, total
    return ExpertLoad(best_sum * expert, tuple(x * num_experts for x in best))


def dispatch_bytes(tokens: float, top_k: int, hidden: int) -> float:
    """Send buffer of one dispatch (or combine) all-to-all on one GPU: tokens·top_k·h bf16
    elements (`docs/reference/cost_formulas.md`, expert parallel)."""
    return tokens * top_k * hidden * BYTES_PER_TOKEN_ELEMENT


def node_limited_off_node_share(
    top_k: int, max_nodes_per_token: int | None, group: GroupPlacement
) -> float | None:
    """Share of the dispatch buffer crossing the scale-out network under node-limited
    routing (DeepSeek-V3 §3.2.2): min(M, K, top_k)·(K−1)/(K·top_k), never above the
    unrestricted (n−g)/n; None (uniform spread) without a limit or inside one node."""
    if max_nodes_per_token is None or group.domains <= 1:
        return None
    k_nodes = group.domains
    limited = min(max_nodes_per_token, k_nodes, top_k) * (k_nodes - 1) / (k_nodes * top_k)
    uniform = (group.size - group.members_per_domain) / group.size
    return min(limited, uniform)


def grouped_expert_gemm_s(
    gemm: GemmTimeModel,
    tokens_per_expert: tuple[float, ...],
    hidden: int,
    expert_ffn: int,
    expert_tensor: int,
    gated: bool,
) -> tuple[float, float]:
    """(forward, backward) seconds of the local experts' up and down projections, each at
    its own shape: up (m_i × h)·(h × f'/etp) with f' = 2f gated, down (m_i × f/etp)·(f/etp
    × h); equal loads are priced once and multiplied. `GemmTimeModel.time_s` adds one
    launch per GEMM, i.e. per expert."""
    up = (2 * expert_ffn if gated else expert_ffn) / expert_tensor
    down_k = expert_ffn / expert_tensor
    counts: dict[float, int] = {}
    for m in tokens_per_expert:
        counts[m] = counts.get(m, 0) + 1
    fwd = bwd = 0.0
    for m, n in counts.items():
        if m <= 0:
            continue
        f1, b1 = gemm.forward_backward_s(m, hidden, up)
        f2, b2 = gemm.forward_backward_s(m, down_k, hidden)
        fwd += n * (f1 + f2)
        bwd += n * (b1 + b2)
    return fwd, bwd


def permute_bytes(routed_tokens: float, hidden: int) -> float:
    """Forward HBM bytes of Megatron-Core's token permutation before the expert GEMMs and
    the unpermutation (weighted combine) after them: read and write every routed copy
    once each (`moe_utils.permute` / `unpermute`)."""
    return 2 * 2 * routed_tokens * hidden * BYTES_PER_TOKEN_ELEMENT


@dataclass(frozen=True, slots=True)
class MoEComm:
    """Expert-parallel communication of one MoE layer and micro-batch, one direction."""

    all_to_all_s: float
    """Dispatch + combine all-to-alls."""
    expert_tensor_s: float
    """All-gather + reduce-scatter of the dispatched tokens over the ETP group."""

    @property
    def total_s(self) -> float:
        return self.all_to_all_s + self.expert_tensor_s


class CollectiveModel(Protocol):
    """What `moe_comm_s` needs of a collective model (AlphaBetaCollectives)."""

    def all_to_all(
        self, size_bytes: float, group: GroupPlacement, off_node_share: float | None = None
    ) -> float: ...

    def all_gather(self, size_bytes: float, group: GroupPlacement) -> float: ...

    def reduce_scatter(self, size_bytes: float, group: GroupPlacement) -> float: ...


def moe_comm_s(
    comm: CollectiveModel,
    groups: ExpertGroups,
    tokens_per_gpu: float,
    top_k: int,
    hidden: int,
    load_factor: float,
    max_nodes_per_token: int | None = None,
) -> MoEComm:
    """Forward (= backward) expert-parallel communication of one MoE layer on the busiest
    EP rank: 2 all-to-alls of λ·S, S = dispatch_bytes(T/t, top_k, h), over the EP group
    and an all-gather + reduce-scatter of etp·λ·S over the ETP group (module docstring).

    Args:
        tokens_per_gpu: T/t, the tokens this GPU routes (b·s / (c·t) with SP).
        load_factor: λ of `busiest_rank_load`.
    """
    size = dispatch_bytes(tokens_per_gpu, top_k, hidden) * load_factor
    share = node_limited_off_node_share(top_k, max_nodes_per_token, groups.expert)
    a2a = 2 * comm.all_to_all(size, groups.expert, share)
    etp = groups.expert_tensor
    gathered = size * etp.size
    etp_s = comm.all_gather(gathered, etp) + comm.reduce_scatter(gathered, etp)
    return MoEComm(a2a, etp_s)
