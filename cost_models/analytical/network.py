"""Collective and point-to-point times on a cluster's measured tiers: the scale-up fabric of
a domain (NVLink + NVSwitch, NVL72, xGMI) and the scale-out fabric (InfiniBand, RoCE) with its
layout (rail-optimised, rail-only, fat tree; oversubscription above the leaves).

Every tier carries nccl-tests / rccl-tests curves: bus bandwidth / line rate against message
size, measured at a reference group (`hardware_catalog` fabrics, sources per data file;
nccl-tests `doc/PERFORMANCE.md` for the bus-bandwidth convention: all-reduce moves
2(n−1)/n·S per rank, all-gather / reduce-scatter / all-to-all (n−1)/n·S, send/recv S).
A curve gives the reference group's time t_ref(S) = factor_ref·S / (B_ref·η(S)). Its latency
L_ref is the time of the smallest measured message (below it, time stays flat: the latency
floor); the rest, t_ref(S) − L_ref, is the transfer with its protocol ramp-up. For another
group the transfer scales with the group's bus factor and bus bandwidth, and the latency
with its sequential steps across the tier: NCCL's ring pays one network step per domain
boundary (2(k−1) for an all-reduce, k−1 otherwise; `tuning.cc` ring latency), its tree
2·log2(k) (all-reduce only; NCCL takes the faster), and inside a domain a ring pays one
step per rank.

Algorithm per tier, as NCCL picks (docs/research/network.md §3): inside one domain the ring,
or NVLink SHARP (NVLS) for an all-reduce over at least `min_ranks` GPUs when that is faster;
across domains NCCL's rings run through every member and cross the network once per domain
on each member's own NIC (rail-aligned), so the bus bandwidth is the slower of the scale-up
ring and g NICs per domain (g = members per domain; DGX A100: 192 of 200 GB/s, DGX H100:
370–380 of 400, capped by the NVLink ring).

All-to-all across domains (Megatron's token dispatch): the on-domain share moves over the
scale-up fabric while the off-domain share leaves through each GPU's own NIC (a GPU cannot
use other NICs for it); on a rail-only fabric a rank reaches another rail only through a
peer on that rail in its own domain, so the off-domain share also crosses the scale-up
fabric once more (Wang et al. 2023, arXiv 2307.12169 §4; NCCL's PXN does the same).

Oversubscription r above the leaves: a group whose traffic crosses leaves gets a share of
the uplinks. A ring crosses a leaf boundary twice per traversal, so with m of its domains
under one leaf the leaf's rings need 1/m of the downlink bandwidth upward: the crossing
runs at min(1, m / r) of the NIC rate. An all-to-all sends its off-leaf share (n − n_leaf)/n
of every rank's buffer upward: it runs at min(1, 1 / (r · share)) of the NIC rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from cost_models.analytical.placement import GroupPlacement, Tier
from hardware_catalog.schema import CollectiveCurve, FabricLayout, FabricSpec

GB = 1e9


def _factor(collective: str, n: int) -> float:
    """Bus-bandwidth factor of a collective over n ranks (nccl-tests PERFORMANCE.md)."""
    if n <= 1:
        return 0.0
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective == "send_recv":
        return 1.0
    return (n - 1) / n


def _steps(collective: str, units: int) -> float:
    """Sequential ring steps over `units` (ranks inside a domain, domains across the
    network): 2(u−1) for all-reduce, u−1 for the others, 1 for send/recv."""
    if collective == "send_recv":
        return 1.0
    if collective == "all_reduce":
        return 2.0 * max(1, units - 1)
    return float(max(1, units - 1))


@dataclass(frozen=True)
class TierCurve:
    """One measured curve bound to the line rate its efficiencies divide."""

    curve: CollectiveCurve
    line_rate_bytes_per_s: float
    collective: str

    def reference_time_s(self, size: float) -> float:
        """The reference group's time for `size` bytes (flat below the first point)."""
        c = self.curve
        size = max(size, c.points[0][0])
        return (
            _factor(self.collective, c.reference_ranks)
            * size
            / (self.line_rate_bytes_per_s * c.efficiency(size))
        )

    @cached_property
    def latency_s(self) -> float:
        """The reference group's latency: the time of the smallest measured message."""
        return self.reference_time_s(0.0)

    def transfer_s(self, size: float) -> float:
        """The reference group's time for `size` bytes beyond its latency."""
        if size <= 0:
            return 0.0
        return max(0.0, self.reference_time_s(size) - self.latency_s)

    @property
    def reference_bus_bytes_per_s(self) -> float:
        """The bus bandwidth the reference group reaches at its peak."""
        return self.line_rate_bytes_per_s * self.curve.peak_efficiency


@dataclass(frozen=True)
class NetworkModel:
    """Collective times on one homogeneous group of nodes (implements CollectiveTimeModel).

    Args (fields):
        scale_up: the domain's fabric.
        scale_up_bytes_per_s: per-GPU scale-up line rate (the system's, or the request's).
        peer_bytes_per_s: per-peer line rate on a point-to-point mesh, else None.
        scale_out: the NIC fabric.
        nic_bytes_per_s: per-GPU NIC line rate.
        layout: the scale-out layout.
        gpus_per_node: GPUs per node.
    """

    scale_up: FabricSpec
    scale_up_bytes_per_s: float
    peer_bytes_per_s: float | None
    scale_out: FabricSpec
    nic_bytes_per_s: float
    layout: FabricLayout
    gpus_per_node: int
    _memo: dict[tuple[Any, ...], float] = field(default_factory=dict, compare=False, repr=False)
    """Times already computed, per (collective, bytes, group): a search asks for the same
    collectives over and over."""
    _tiers: dict[tuple[str, str], TierCurve] = field(
        default_factory=dict, compare=False, repr=False
    )

    # ---- curves -------------------------------------------------------------------------
    def _up(self, collective: str) -> TierCurve:
        hit = self._tiers.get(("up", collective))
        if hit is not None:
            return hit
        curve = self.scale_up.curve(collective) or self.scale_up.curve("all_reduce")
        assert curve is not None, f"fabric {self.scale_up.id} has no all_reduce curve"
        rate = self.scale_up_bytes_per_s
        if curve.line_rate_basis == "peer":
            rate = self.peer_bytes_per_s or rate
        hit = self._tiers[("up", collective)] = TierCurve(curve, rate, collective)
        return hit

    def _up_bus(self, tier: TierCurve, members: int) -> float:
        """Bus bandwidth of `members` GPUs of one domain at the curve's peak: a mesh gives p
        GPUs only (p−1) peer links (hardware_catalog.md §7)."""
        bus = tier.reference_bus_bytes_per_s
        if self.peer_bytes_per_s is not None and not self.scale_up.switched:
            links = max(1, members - 1) * self.peer_bytes_per_s * tier.curve.peak_efficiency
            bus = min(bus, links)
        return bus

    def _out_ring(self) -> TierCurve:
        """The scale-out tier's measured ring all-reduce curve: NCCL's all-gather and
        reduce-scatter are its two halves on the same rings, so they share its bandwidth
        and ramp (the multi-node all-gather / reduce-scatter sweeps are not published;
        docs/research/network.md §6)."""
        hit = self._tiers.get(("out", "all_reduce"))
        if hit is not None:
            return hit
        curve = self.scale_out.curve("all_reduce")
        assert curve is not None, f"fabric {self.scale_out.id} has no all_reduce curve"
        rate = self.nic_bytes_per_s
        if curve.line_rate_basis == "node":
            rate *= curve.reference_ranks_per_node
        hit = self._tiers[("out", "all_reduce")] = TierCurve(curve, rate, "all_reduce")
        return hit

    def _nic_peak(self, collective: str) -> float:
        """Achieved fraction of the NIC line rate for point-to-point traffic (large
        messages; `ib_write_bw` 46–49 of 50 GB/s, nccl-tests #267/#290)."""
        curve = self.scale_out.curve(collective) or self.scale_out.curve("all_reduce")
        assert curve is not None, f"fabric {self.scale_out.id} has no all_reduce curve"
        return curve.peak_efficiency

    def _out_latency_s(self, steps: float) -> float:
        """NCCL's latency model on the scale-out tier: base + steps × per-step latency."""
        f = self.scale_out
        return (f.base_latency_us + steps * f.step_latency_us) * 1e-6

    # ---- inside one domain --------------------------------------------------------------
    def _intra(self, collective: str, size: float, n: int) -> float:
        tier = self._up(collective)
        ref_n = tier.curve.reference_ranks
        transfer = (
            tier.transfer_s(size)
            * _factor(collective, n)
            / _factor(collective, ref_n)
            * tier.reference_bus_bytes_per_s
            / self._up_bus(tier, n)
        )
        latency = tier.latency_s * _steps(collective, n) / _steps(collective, ref_n)
        best = latency + transfer
        red = self.scale_up.in_network_reduction
        if collective == "all_reduce" and red is not None and n >= red.min_ranks:
            nvls = TierCurve(red.curve(), self.scale_up_bytes_per_s, "all_reduce")
            scale = _factor("all_reduce", n) / _factor("all_reduce", red.reference_ranks)
            # in-switch reduction: its latency does not grow with the ring's steps
            best = min(best, nvls.latency_s + nvls.transfer_s(size) * scale)
        return best

    # ---- across domains -----------------------------------------------------------------
    def _crossing_share(self, group: GroupPlacement) -> float:
        """Fraction of the NIC rate a ring crossing leaves keeps (module docstring)."""
        r = self.layout.oversubscription
        if group.leaves <= 1 or r <= 1.0:
            return 1.0
        return min(1.0, group.domains_per_leaf / r)

    def _inter(self, collective: str, size: float, group: GroupPlacement) -> float:
        n, g, k = group.size, group.members_per_domain, group.domains
        up = self._up(collective)
        out = self._out_ring()
        c = out.curve
        g_ref = c.reference_ranks_per_node
        k_ref = max(2, c.reference_ranks // max(1, g_ref))
        # bus bandwidth: the slower of the scale-up ring and g NICs (rail-aligned rings)
        nic_bus = self.nic_bytes_per_s * c.peak_efficiency * self._crossing_share(group)
        up_bus = self._up_bus(up, g) if g > 1 else math.inf
        bus = min(up_bus, g * nic_bus)
        ref_bus = min(
            self._up_bus(up, g_ref) if g_ref > 1 else math.inf,
            out.reference_bus_bytes_per_s,
        )
        transfer = (
            out.transfer_s(size)
            * _factor(collective, n)
            / _factor("all_reduce", c.reference_ranks)
            * ref_bus
            / bus
        )
        scale = _steps(collective, k) / _steps("all_reduce", k_ref)
        if collective == "all_reduce":  # NCCL's tree: 2·log2(k) network steps
            scale = min(scale, math.log2(k) / math.log2(k_ref))
        return out.latency_s * scale + transfer

    # ---- the protocol -------------------------------------------------------------------
    def _collective(self, collective: str, size_bytes: float, group: GroupPlacement) -> float:
        if group.size <= 1 or size_bytes <= 0:
            return 0.0
        key = (collective, size_bytes, group)
        hit = self._memo.get(key)
        if hit is None:
            if group.domains <= 1:
                hit = self._intra(collective, size_bytes, group.size)
            else:
                hit = self._inter(collective, size_bytes, group)
            self._memo[key] = hit
        return hit

    def all_reduce(self, size_bytes: float, group: GroupPlacement) -> float:
        """All-reduce of an S-byte buffer."""
        return self._collective("all_reduce", size_bytes, group)

    def reduce_scatter(self, size_bytes: float, group: GroupPlacement) -> float:
        """Reduce-scatter of an S-byte input."""
        return self._collective("reduce_scatter", size_bytes, group)

    def all_gather(self, size_bytes: float, group: GroupPlacement) -> float:
        """All-gather to an S-byte output."""
        return self._collective("all_gather", size_bytes, group)

    def all_to_all(
        self, size_bytes: float, group: GroupPlacement, off_node_share: float | None = None
    ) -> float:
        """All-to-all of an S-byte send buffer per rank (module docstring). `off_node_share`
        replaces (n−g)/n when the payload is not spread uniformly (node-limited MoE routing,
        DeepSeek-V3 §3.2.2)."""
        n, g = group.size, group.members_per_domain
        if n <= 1 or size_bytes <= 0:
            return 0.0
        if group.domains <= 1:
            return self._intra("all_to_all", size_bytes, n)
        share = (n - g) / n if off_node_share is None else off_node_share
        on_domain = (g - 1) / n * size_bytes
        if self.layout.topology == "rail_only":
            on_domain += (g - 1) / g * share * size_bytes  # forwarded to the right rail
        intra = self._intra("all_to_all", on_domain * g / (g - 1), g) if g > 1 else 0.0
        off_leaf = (n - group.members_per_leaf) / n if group.leaves > 1 else 0.0
        r = self.layout.oversubscription
        nic_share = min(1.0, 1.0 / (r * off_leaf)) if off_leaf > 0 and r > 1 else 1.0
        # the off-domain bytes over this GPU's own NIC (NCCL sends to every peer at once)
        nic = self.nic_bytes_per_s * self._nic_peak("all_to_all") * nic_share
        latency = self._out_latency_s(group.domains - 1)
        transfer = share * size_bytes / nic
        return max(intra, latency + transfer)

    def send_recv(self, size_bytes: float, tier: Tier) -> float:
        """Point-to-point transfer between two GPUs (per-peer rate on a mesh)."""
        if size_bytes <= 0:
            return 0.0
        if tier == "intra":
            up = self._up("send_recv")
            return up.latency_s + up.transfer_s(size_bytes) * up.reference_bus_bytes_per_s / (
                self._up_bus(up, 2)
            )
        return self._out_latency_s(1) + size_bytes / (
            self.nic_bytes_per_s * self._nic_peak("send_recv")
        )


def network_for(
    scale_up: FabricSpec,
    scale_up_gb_s: float,
    peer_gb_s: float | None,
    scale_out: FabricSpec,
    nic_gb_s: float,
    layout: FabricLayout,
    gpus_per_node: int,
) -> NetworkModel:
    """A `NetworkModel` from line rates in GB/s (the resolved cluster's units)."""
    return NetworkModel(
        scale_up=scale_up,
        scale_up_bytes_per_s=scale_up_gb_s * GB,
        peer_bytes_per_s=peer_gb_s * GB if peer_gb_s else None,
        scale_out=scale_out,
        nic_bytes_per_s=nic_gb_s * GB,
        layout=layout,
        gpus_per_node=gpus_per_node,
    )
