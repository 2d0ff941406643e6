"""Alpha-beta cost of collectives on a two-tier (scale-up / scale-out) topology.

Cost = steps·α + factor·S/B_eff, with S the bytes of the full logical buffer (all-reduce
input, all-gather output, reduce-scatter input) and factor 2(n−1)/n (all-reduce) or (n−1)/n
(all-gather, reduce-scatter, all-to-all); the nccl-tests bus-bandwidth convention
(`nccl-tests/doc/PERFORMANCE.md`; `docs/reference/hardware_catalog.md` §5).

Groups that span nodes use the hierarchical algorithm (intra-node phase on the scale-up
fabric among the g members per node, inter-node phase on the S/g shard over k nodes with
every NIC working in parallel): all-reduce = 2(g−1)/g·S/B_intra + 2(k−1)/k·(S/g)/B_nic
(hardware_catalog.md §5, "Hierarchical all-reduce"). With g = n it is the intra-node ring,
with g = 1 the ring over NICs.

B_eff = line rate × achieved efficiency (the accelerator's scale_up_efficiency /
scale_out_efficiency, hardware_catalog.md §7). α defaults: 10 µs per intra-node step and
30 µs per inter-node step (hardware_catalog.md §6: 8-GPU NVSwitch ring ~15–56 µs per call,
40–60 µs across nodes; deliberately round, calibrated later).
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.analytical.placement import GroupPlacement, Tier


@dataclass(frozen=True, slots=True)
class TwoTierNetwork:
    """Effective bandwidths (bytes/s) and per-step latencies (s) of a two-tier cluster."""

    intra_bytes_per_s: float
    """Scale-up bandwidth per GPU per direction × efficiency."""
    inter_bytes_per_s: float
    """NIC bandwidth per GPU per direction × efficiency."""
    intra_peer_bytes_per_s: float | None
    """Point-to-point meshes (xGMI, Gaudi): bandwidth to one peer × efficiency; None for a
    switched fabric."""
    alpha_intra_s: float = 10e-6
    alpha_inter_s: float = 30e-6

    def group_intra_bytes_per_s(self, members: int) -> float:
        """Scale-up bandwidth available to `members` GPUs of one node: a point-to-point mesh
        gives a group of p GPUs only (p−1) peer links (hardware_catalog.md §7)."""
        if self.intra_peer_bytes_per_s is None:
            return self.intra_bytes_per_s
        return min(self.intra_bytes_per_s, max(1, members - 1) * self.intra_peer_bytes_per_s)

    def p2p_bytes_per_s(self, tier: Tier) -> float:
        """Send/recv bandwidth between two GPUs (per-peer on a mesh)."""
        if tier == "inter":
            return self.inter_bytes_per_s
        if self.intra_peer_bytes_per_s is not None:
            return min(self.intra_bytes_per_s, self.intra_peer_bytes_per_s)
        return self.intra_bytes_per_s


def _phased(net: TwoTierNetwork, size_bytes: float, group: GroupPlacement, passes: int) -> float:
    """`passes` = 2 for all-reduce (reduce-scatter + all-gather), 1 for either half alone."""
    g, k = group.members_per_domain, group.domains
    if group.size <= 1 or size_bytes <= 0:
        return 0.0
    t = 0.0
    if g > 1:
        t += (
            passes * (g - 1) * (net.alpha_intra_s + size_bytes / g / net.group_intra_bytes_per_s(g))
        )
    if k > 1:
        t += passes * (k - 1) * (net.alpha_inter_s + size_bytes / g / k / net.inter_bytes_per_s)
    return t


def all_reduce_time_s(net: TwoTierNetwork, size_bytes: float, group: GroupPlacement) -> float:
    """Ring / hierarchical all-reduce of an S-byte buffer.

    2(g−1)·α_intra + 2(g−1)/g·S/B_intra + 2(k−1)·α_inter + 2(k−1)/k·(S/g)/B_nic
    (hardware_catalog.md §5; Patarasuk & Yuan 2009 for the ring).
    """
    return _phased(net, size_bytes, group, 2)


def reduce_scatter_time_s(net: TwoTierNetwork, size_bytes: float, group: GroupPlacement) -> float:
    """Reduce-scatter of an S-byte input: half of the all-reduce, (n−1)/n·S/B on a ring."""
    return _phased(net, size_bytes, group, 1)


def all_gather_time_s(net: TwoTierNetwork, size_bytes: float, group: GroupPlacement) -> float:
    """All-gather to an S-byte output: (n−1)/n·S/B on a ring, hierarchical across nodes."""
    return _phased(net, size_bytes, group, 1)


def all_to_all_time_s(
    net: TwoTierNetwork,
    size_bytes: float,
    group: GroupPlacement,
    off_node_share: float | None = None,
) -> float:
    """All-to-all of an S-byte send buffer per rank: (n−1)·α + (n−1)/n·S/B on one node;
    across nodes the off-node share (n−g)/n·S leaves through the GPU's own NIC (no NIC
    aggregation, hardware_catalog.md §4) while the on-node share uses NVLink concurrently.

    `off_node_share` replaces (n−g)/n when the payload is not spread uniformly over the
    group, e.g. node-limited MoE routing that crosses the network once per target node
    (DeepSeek-V3, arXiv 2412.19437 §3.2.2); the on-node share is unchanged."""
    n, g = group.size, group.members_per_domain
    if n <= 1 or size_bytes <= 0:
        return 0.0
    intra = (g - 1) / n * size_bytes / net.group_intra_bytes_per_s(g) if g > 1 else 0.0
    if group.domains == 1:
        return (n - 1) * net.alpha_intra_s + intra
    share = (n - g) / n if off_node_share is None else off_node_share
    inter = share * size_bytes / net.inter_bytes_per_s
    return (n - 1) * net.alpha_inter_s + max(intra, inter)


def send_recv_time_s(net: TwoTierNetwork, size_bytes: float, tier: Tier) -> float:
    """Point-to-point transfer: α + S/B_p2p (hardware_catalog.md §5, Send/Recv)."""
    if size_bytes <= 0:
        return 0.0
    alpha = net.alpha_intra_s if tier == "intra" else net.alpha_inter_s
    return alpha + size_bytes / net.p2p_bytes_per_s(tier)


@dataclass(frozen=True, slots=True)
class AlphaBetaCollectives:
    """The functions above bound to one network (implements CollectiveTimeModel)."""

    net: TwoTierNetwork

    def all_reduce(self, size_bytes: float, group: GroupPlacement) -> float:
        return all_reduce_time_s(self.net, size_bytes, group)

    def reduce_scatter(self, size_bytes: float, group: GroupPlacement) -> float:
        return reduce_scatter_time_s(self.net, size_bytes, group)

    def all_gather(self, size_bytes: float, group: GroupPlacement) -> float:
        return all_gather_time_s(self.net, size_bytes, group)

    def all_to_all(
        self, size_bytes: float, group: GroupPlacement, off_node_share: float | None = None
    ) -> float:
        return all_to_all_time_s(self.net, size_bytes, group, off_node_share)

    def send_recv(self, size_bytes: float, tier: Tier) -> float:
        return send_recv_time_s(self.net, size_bytes, tier)
