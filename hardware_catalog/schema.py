"""Catalog records (accelerators, systems, fabrics) and the resolved cluster the cost models
read. Units are in field names; the JSON data files use the API's units (GiB, GB/s, TFLOP/s,
µs) and `*_bytes` / `*_flops` helpers convert to SI.

Three kinds of record, each in its own data folder:

* `AcceleratorSpec`: one device as the framework sees it (compute, memory, scalar
  efficiencies kept for the HTTP contract).
* `SystemSpec`: one node or rack type: how many accelerators a node holds, how many share one
  scale-up domain, which fabric joins them inside the domain and which NICs leave the node.
* `FabricSpec`: one interconnect technology tier (NVLink 4 + NVSwitch, InfiniBand NDR, ...):
  latency constants and measured or derived efficiency curves per collective.
"""

from __future__ import annotations

import bisect
import math
from typing import Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

GIB = 1024**3
GB = 1e9

CollectiveName = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
COLLECTIVES: tuple[str, ...] = get_args(CollectiveName)
"""Collectives a fabric has a curve for (nccl-tests names without `_perf`)."""

Topology = Literal["rail_optimized", "rail_only", "fat_tree"]
Provenance = Literal["measured", "derived", "mixed"]
LineRateBasis = Literal["gpu", "node", "peer"]
Algorithm = Literal["ring", "tree", "nvls", "nvls_tree", "collnet", "direct", "default"]
MAX_EFFICIENCY = 1.5
"""Upper bound of a curve's efficiency: in-switch reduction (NVLS, SHARP) reports bus
bandwidth above the wire rate (H100 NVLS: 480 GB/s busbw on a 450 GB/s link, 1.07)."""


class Source(BaseModel):
    """One source behind catalog values."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    ref: str
    """URL or citation."""
    supports: str
    """Which values this source supports."""


class AcceleratorSpec(BaseModel):
    """One accelerator type (one device as the framework sees it)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    id: str
    """Catalog id, lower-case (`h100-sxm`)."""
    name: str
    """Full product name (`NVIDIA H100 SXM5 80GB`)."""
    vendor: str
    """Manufacturer (`NVIDIA`, `AMD`, `Intel (Habana)`, `Google`)."""
    aliases: list[str] = Field(default_factory=list)
    """Other names accepted on lookup (case-insensitive)."""
    memory_gib: float = Field(gt=0)
    """Device memory in GiB as the device reports it (e.g. nvidia-smi total)."""
    memory_bandwidth_gb_s: float = Field(gt=0)
    """Device-memory (HBM / GDDR) bandwidth, GB/s (peak, as the vendor states it)."""
    peak_tflops: dict[str, float | None]
    """Dense (no 2:4 sparsity) peak tensor rate by precision (`bf16`, `fp16`, `fp8`, `fp32`,
    `tf32`, ...), TFLOP/s per device; null where the device has no such rate."""
    scale_up_bandwidth_gb_s: float = Field(gt=0)
    """Scale-up (NVLink / xGMI / ICI) bandwidth per device per direction, GB/s."""
    scale_up_peer_bandwidth_gb_s: float | None = None
    """Bandwidth to a single peer per direction when the fabric is a point-to-point mesh
    (xGMI, Gaudi RoCE), GB/s; null means a switched fabric (any pair gets the full rate)."""
    scale_out_bandwidth_gb_s: float = Field(gt=0)
    """NIC bandwidth per device per direction, GB/s."""
    scale_up_domain_size: int = Field(ge=1)
    """Largest group of devices sharing the scale-up fabric, count of devices."""
    gpus_per_node: int = Field(ge=1)
    """Usual node size, devices per node (the default scale-up domain of a cluster node)."""
    num_compute_units: int | None = Field(default=None, ge=1)
    """Streaming multiprocessors (NVIDIA) or compute units (AMD) that run GEMM tiles in
    parallel; null where the notion does not apply or is not sourced."""
    gemm_efficiency: float = Field(gt=0, le=1)
    """Best-shape achieved fraction of the dense bf16 peak (MAMF-style measurement), 0–1."""
    gemm_efficiency_fp8: float | None = Field(default=None, gt=0, le=1)
    """Best-shape achieved fraction of the dense fp8 peak, 0–1; null when not measured."""
    attention_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Achieved fraction of the dense bf16 peak in fused (flash) attention, forward and
    backward together, 0–1; null means the cost model's default (FlashAttention-2 on A100)."""
    scale_up_efficiency: float = Field(gt=0, le=1)
    """Achieved ring bus bandwidth / line rate on the scale-up fabric, fraction 0–1."""
    scale_out_efficiency: float = Field(gt=0, le=1)
    """Achieved bus bandwidth / line rate on the NIC, fraction 0–1."""
    tdp_w: float | None = None
    """Thermal design power (board power limit), watts; null when not sourced."""
    price_per_gpu_hour: float | None = None
    """Default price of one GPU-hour, USD, used by the cost objectives when the request gives
    none (`price_per_gpu_hour` on a node group); null when not sourced. Cloud list prices
    move: `price_date` says when this one was read and `sources` where."""
    price_date: str | None = None
    """When `price_per_gpu_hour` was read (ISO date); null without a price."""
    default_system: str | None = None
    """Id of the system (`SystemSpec`) a node group of this accelerator gets when it names
    no system. Every catalog file sets it (the loader requires it); records built in code
    may leave it null and then get a system derived from the fields above."""
    unverified_fields: list[str] = Field(default_factory=list)
    """Values not read from a source (derived or assumed), each line starting with the field
    name."""
    notes: str | None = None
    """How derived values were computed (sparse vs dense peaks, GiB conversions, efficiency
    ratios)."""
    sources: list[Source] = Field(min_length=1)
    """Where the values come from (`ref` + which values it `supports`)."""

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s for a precision; fp16 and bf16 stand in for each other (same
        tensor-core rate on every listed part), nothing else does."""
        fallback = {"fp16": "bf16", "bf16": "fp16"}.get(precision)
        for key in (precision, fallback) if fallback else (precision,):
            value = self.peak_tflops.get(key)
            if value:
                return value * 1e12
        raise KeyError(precision)

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * GIB

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gb_s * GB


# ---- fabrics -------------------------------------------------------------------------------


def _check_points(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    previous = 0.0
    for message_bytes, efficiency in points:
        if not message_bytes > previous:
            raise ValueError(
                f"message sizes must be positive and strictly ascending "
                f"(got {message_bytes} after {previous})"
            )
        if not 0 < efficiency <= MAX_EFFICIENCY:
            raise ValueError(
                f"efficiency must be in (0, {MAX_EFFICIENCY}] (got {efficiency} at "
                f"{message_bytes} bytes)"
            )
        previous = message_bytes
    return points


def _interpolate(points: list[tuple[float, float]], log_sizes: list[float], size: float) -> float:
    if size <= points[0][0]:
        return points[0][1]
    if size >= points[-1][0]:
        return points[-1][1]
    x = math.log2(size)
    i = bisect.bisect_right(log_sizes, x)
    x0, x1 = log_sizes[i - 1], log_sizes[i]
    y0, y1 = points[i - 1][1], points[i][1]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class CollectiveCurve(BaseModel):
    """Achieved efficiency of one collective on one fabric against message size, as measured
    (or derived) at a reference group shape; interpolated linearly in log2(bytes)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    reference_ranks: int = Field(ge=1)
    """GPUs taking part in the measurement the points come from."""
    reference_ranks_per_node: int = Field(ge=1)
    """GPUs per node in that measurement (for scale-up curves usually = reference_ranks)."""
    algorithm: Algorithm
    """Algorithm the points describe (`ring`; `default` = NCCL's own choice per size)."""
    line_rate_basis: LineRateBasis = "gpu"
    """What the efficiency divides by: `gpu` = the per-GPU line rate (scale-up rate of one
    GPU, or one GPU's NIC share); `node` = the node's NIC aggregate (`reference_ranks_per_node`
    x per-GPU NIC rate, for multi-node all-reduce / all-gather / reduce-scatter bus bandwidth);
    `peer` = the line rate to one peer (its own link(s) on a point-to-point mesh)."""
    provenance: Provenance
    """`measured` = every point is a published measurement; `derived` = none is (the fabric's
    `notes` give the rule); `mixed` = some of each."""
    points: list[tuple[float, float]] = Field(min_length=1)
    """`[message_bytes, efficiency]` pairs, strictly ascending in bytes; efficiency is the
    nccl-tests bus bandwidth divided by the line rate `line_rate_basis` names."""

    _log_sizes: list[float] = PrivateAttr(default_factory=list)

    _points = field_validator("points")(_check_points)

    def model_post_init(self, _context: Any, /) -> None:
        self._log_sizes = [math.log2(size) for size, _ in self.points]

    @model_validator(mode="after")
    def _check_ranks(self) -> CollectiveCurve:
        if self.reference_ranks_per_node > self.reference_ranks:
            raise ValueError(
                f"reference_ranks_per_node ({self.reference_ranks_per_node}) must not exceed "
                f"reference_ranks ({self.reference_ranks})"
            )
        return self

    def efficiency(self, message_bytes: float) -> float:
        """Efficiency at `message_bytes`: linear in log2(bytes) between the two points around
        it; the first point's value below the first size, the last point's above the last."""
        return _interpolate(self.points, self._log_sizes, message_bytes)

    @property
    def peak_efficiency(self) -> float:
        """Largest efficiency of any point."""
        return max(e for _, e in self.points)


class InNetworkReduction(BaseModel):
    """Reduction done inside the switches (NVLink SHARP / NVLS, InfiniBand SHARP): all-reduce
    bus bandwidth can exceed the line rate because each GPU sends its data once."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    name: Literal["nvls", "sharp"]
    """`nvls` = NVLink SHARP in NVSwitch gen3+; `sharp` = InfiniBand SHARP in the switches."""
    min_ranks: int = Field(ge=2)
    """Fewest GPUs in the group for the reduction to engage and pay off (NVLS: 5 on Hopper,
    6 on Blackwell)."""
    latency_us: float = Field(ge=0)
    """Fixed latency of one in-network all-reduce, µs."""
    enabled_by_default: bool = True
    """NVLS is used by NCCL without configuration; IB SHARP needs the SHARP plug-in and an
    aggregation manager on the fabric, so it counts only where the site enables it."""
    reference_ranks: int = Field(ge=1)
    """GPUs taking part in the measurement the points come from."""
    reference_ranks_per_node: int = Field(ge=1)
    """GPUs per node in that measurement."""
    line_rate_basis: LineRateBasis = "gpu"
    """What the efficiency divides by (as in `CollectiveCurve`)."""
    provenance: Provenance
    """`measured`, `derived` or `mixed` (as in `CollectiveCurve`)."""
    all_reduce: list[tuple[float, float]] = Field(min_length=1)
    """All-reduce `[message_bytes, efficiency]` pairs with the reduction available (bus
    bandwidth / line rate; may exceed 1)."""

    _log_sizes: list[float] = PrivateAttr(default_factory=list)

    _points = field_validator("all_reduce")(_check_points)

    def model_post_init(self, _context: Any, /) -> None:
        self._log_sizes = [math.log2(size) for size, _ in self.all_reduce]

    def efficiency(self, message_bytes: float) -> float:
        """All-reduce efficiency at `message_bytes` (interpolated like `CollectiveCurve`)."""
        return _interpolate(self.all_reduce, self._log_sizes, message_bytes)

    def curve(self) -> CollectiveCurve:
        """The all-reduce points as a `CollectiveCurve` (algorithm `nvls` or `collnet`)."""
        return CollectiveCurve(
            reference_ranks=self.reference_ranks,
            reference_ranks_per_node=self.reference_ranks_per_node,
            algorithm="nvls" if self.name == "nvls" else "collnet",
            line_rate_basis=self.line_rate_basis,
            provenance=self.provenance,
            points=self.all_reduce,
        )


class FabricSpec(BaseModel):
    """One interconnect technology tier (Calculon's "network tier"): scale-up (NVLink +
    NVSwitch, xGMI, ICI, PCIe) or scale-out (InfiniBand, RoCE, DCN)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    id: str
    """Catalog id, lower-case and hyphenated (`nvlink4-nvswitch`)."""
    name: str
    """Human-readable name (`NVLink 4 + NVSwitch gen3 (H100 / H200 / H800 / H20 HGX)`)."""
    kind: Literal["scale_up", "scale_out"]
    """`scale_up`: joins the GPUs of one domain (node or rack); `scale_out`: joins nodes."""
    technology: str
    """Free text: link generation, switch generation, topology."""
    aliases: list[str] = Field(default_factory=list)
    """Other names accepted on lookup (case-insensitive)."""
    line_rate_gb_s: float = Field(gt=0)
    """Line rate per direction, GB/s: per GPU for scale-up fabrics (summed over the GPU's
    links), per NIC port for scale-out fabrics. A system may run the same fabric at another
    rate (H800: NVLink 4 capped at 200); `SystemSpec` carries the rate actually used."""
    switched: bool
    """True when any pair of GPUs gets the full per-GPU rate (NVSwitch, IB, PCIe switch);
    false for point-to-point meshes (xGMI, Gaudi RoCE, TPU ICI torus), where a peer gets only
    its own link(s)."""
    latency_protocol: str
    """Which NCCL protocol the latency constants below are taken from (`LL128` here: the
    protocol NCCL picks for mid-size messages on these tiers)."""
    step_latency_us: float = Field(ge=0)
    """Latency per ring step on this tier, µs (NCCL's per-step hardware latency)."""
    base_latency_us: float = Field(ge=0)
    """Fixed latency per collective call, µs (NCCL's base latency)."""
    collectives: dict[CollectiveName, CollectiveCurve]
    """Efficiency curves by collective."""
    in_network_reduction: InNetworkReduction | None = None
    """In-switch all-reduce, null where the fabric has none."""
    hop_latency_us: float | None = Field(default=None, ge=0)
    """Scale-out: latency added per extra switch tier crossed, µs, when published; null
    otherwise (then `hop_latency_estimate_us`)."""
    hop_latency_estimate_us: float | None = Field(default=None, ge=0)
    """Scale-out: our estimate of the latency per extra switch tier, µs, where
    `hop_latency_us` is unpublished (always listed in `unverified_fields`)."""
    sources: list[Source] = Field(min_length=1)
    """Where the values come from (`ref` + which values it `supports`)."""
    unverified_fields: list[str] = Field(default_factory=list)
    """Values not read from a source (derived or assumed), each line starting with the field
    name."""
    notes: str | None = None
    """How every derived value was computed."""

    def curve(self, collective: str) -> CollectiveCurve | None:
        """The curve of `collective` (`all_reduce`, `all_gather`, `reduce_scatter`,
        `all_to_all`, `send_recv`), or None if the fabric has none for it."""
        return self.collectives.get(cast(CollectiveName, collective))

    @property
    def hop_latency_or_estimate_us(self) -> float | None:
        """The published hop latency, else our estimate, else None."""
        if self.hop_latency_us is not None:
            return self.hop_latency_us
        return self.hop_latency_estimate_us


# ---- systems -------------------------------------------------------------------------------


class FabricLayout(BaseModel):
    """How a cluster's scale-out network is laid out."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    topology: Topology
    """`rail_optimized`: NIC i of every node goes to leaf (rail) i, leaves joined by spines;
    `rail_only`: the same rails without spines (cross-rail traffic is forwarded over the
    scale-up fabric); `fat_tree`: leaves without rail alignment."""
    oversubscription: float = Field(ge=1, le=64)
    """Leaf downlink / uplink bandwidth ratio (1.0 = non-blocking); applies to traffic
    crossing the leaf / spine boundary."""
    nodes_per_leaf: int = Field(ge=1, le=65536)
    """Nodes reachable from one another through one leaf tier (one scalable unit of a
    rail-optimised fabric: DGX SuperPOD 32 nodes)."""


HOST_LINK_EFFICIENCY = 0.8
"""Achieved fraction of a host link's per-direction line rate in pinned host ↔ device
copies where no measurement is recorded: H100 SXM reaches 50–55 GB/s of PCIe Gen5 x16's
64 GB/s (nvbandwidth / `cudaMemcpy` bandwidth tests, 0.78–0.86); PCIe's 128b/130b encoding
and TLP headers leave about 0.85 of the raw rate at best (PCI-SIG PCIe 5.0 base
specification)."""


class HostLinkSpec(BaseModel):
    """How a node's GPUs reach host memory and local NVMe (what offloading crosses)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    kind: Literal["pcie", "nvlink_c2c", "infinity_fabric"]
    """`pcie`: each GPU on a PCIe link to the host CPU (through PCIe switches on 8-GPU
    baseboards); `nvlink_c2c`: NVLink chip-to-chip to a Grace CPU (GH200, GB200, GB300);
    `infinity_fabric`: AMD CPU–GPU Infinity Fabric (Frontier's MI250X)."""
    pcie_generation: int | None = Field(default=None, ge=1, le=7)
    """PCIe generation of the GPU's host link (null for NVLink-C2C)."""
    pcie_lanes: int | None = Field(default=None, ge=1, le=32)
    """PCIe lanes per GPU (null for NVLink-C2C)."""
    bandwidth_gb_s: float = Field(gt=0)
    """Line rate of one GPU's host link per direction, GB/s (PCIe Gen4 x16 ≈ 32, Gen5 x16
    ≈ 64; NVLink-C2C 450 of its 900 bidirectional)."""
    measured_bandwidth_gb_s: float | None = Field(default=None, gt=0)
    """Published pinned host → device copy bandwidth per GPU, GB/s; null: the cost model
    takes `HOST_LINK_EFFICIENCY` × the line rate."""
    gpus_per_link: int = Field(default=1, ge=1, le=16)
    """GPUs sharing one link to the CPU (a PCIe switch uplink); 1 when each has its own."""
    host_memory_gib: float = Field(gt=0)
    """Host DRAM (LPDDR5X on Grace) per node, GiB."""
    host_memory_bandwidth_gb_s: float = Field(gt=0)
    """Host DRAM bandwidth per node (all sockets), GB/s, peak."""
    nvme_bandwidth_gb_s: float | None = Field(default=None, gt=0)
    """Aggregate sequential read bandwidth of the node's local NVMe drives, GB/s; null
    when the node has no local NVMe (no NVMe offload)."""

    @property
    def effective_bandwidth_gb_s(self) -> float:
        """Per GPU per direction: the measured copy rate, else `HOST_LINK_EFFICIENCY` × the
        line rate, divided among the GPUs sharing the link."""
        rate = self.measured_bandwidth_gb_s or HOST_LINK_EFFICIENCY * self.bandwidth_gb_s
        return rate / self.gpus_per_link


class SystemSpec(BaseModel):
    """One node or rack type: its accelerators, scale-up domain and NICs."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    id: str
    """Catalog id, lower-case and hyphenated (`dgx-h100`)."""
    name: str
    """Human-readable name (`NVIDIA DGX H100 / HGX H100 8-GPU`)."""
    vendor: str
    """Who builds or sells the system (`NVIDIA`, `AWS`, `Google Cloud`; `generic` for a
    plain PCIe server)."""
    aliases: list[str] = Field(default_factory=list)
    """Other names accepted on lookup (case-insensitive)."""
    accelerator: str
    """Accelerator id (`AcceleratorSpec.id`)."""
    gpus_per_node: int = Field(ge=1)
    """Accelerators per node (per OS instance / compute tray)."""
    scale_up_domain_gpus: int = Field(ge=1)
    """Accelerators sharing one scale-up domain; may span nodes (GB200 NVL72: 4 per tray, 72
    per domain) or be smaller than the node (NVLink-bridged PCIe pairs)."""
    scale_up_fabric: str
    """Fabric id of the scale-up tier."""
    scale_up_bandwidth_gb_s: float = Field(gt=0)
    """Scale-up line rate per GPU per direction on this system, GB/s."""
    scale_up_peer_bandwidth_gb_s: float | None = Field(default=None, gt=0)
    """Line rate to one peer per direction on a point-to-point mesh, GB/s; null when the
    scale-up fabric is switched."""
    scale_out_fabric: str
    """Fabric id of the scale-out tier."""
    nics_per_node: int = Field(ge=1)
    """Scale-out NIC ports per node (compute fabric only; storage / management NICs not
    counted)."""
    scale_out_bandwidth_gb_s: float = Field(gt=0)
    """NIC line rate per GPU per direction, GB/s (= nics_per_node x port rate /
    gpus_per_node)."""
    fabric: FabricLayout
    """The usual scale-out layout of clusters built from this system."""
    host_link: HostLinkSpec | None = None
    """The GPUs' link to host memory, host DRAM and local NVMe (offloading); every catalog
    file sets it, records built in code may leave it null (no offload then)."""
    sources: list[Source] = Field(min_length=1)
    """Where the values come from (`ref` + which values it `supports`)."""
    unverified_fields: list[str] = Field(default_factory=list)
    """Values not read from a source (assumed or derived), each line starting with the field
    name."""
    notes: str | None = None
    """How derived values were computed, and caveats."""


def default_scale_up_domain(system: SystemSpec, gpus_per_node: int) -> int:
    """The scale-up domain a node group gets when it does not give one: the system's domain
    if it spans several nodes and the group uses the system's node size (a GB200 group of
    4-GPU trays gets 72), otherwise the node."""
    if system.scale_up_domain_gpus > system.gpus_per_node and gpus_per_node == system.gpus_per_node:
        return system.scale_up_domain_gpus
    return gpus_per_node


def usual_layout(system: SystemSpec, gpus_per_node: int) -> FabricLayout:
    """The system's usual scale-out layout for nodes of `gpus_per_node` GPUs: nodes_per_leaf
    is converted so that a leaf still serves the same number of GPUs (a GB200 scalable unit
    of 144 four-GPU trays is 8 nodes of 72 GPUs)."""
    layout = system.fabric
    if gpus_per_node == system.gpus_per_node:
        return layout
    per_leaf = max(1, round(layout.nodes_per_leaf * system.gpus_per_node / gpus_per_node))
    return layout.model_copy(update={"nodes_per_leaf": min(per_leaf, 65536)})


def capped_peer_bandwidth(
    system: SystemSpec, intra_node_bandwidth_gb_s: float | None
) -> float | None:
    """The system's per-peer line rate, capped at the group's scale-up rate when the group
    overrides it with a lower one; None on switched fabrics."""
    peer = system.scale_up_peer_bandwidth_gb_s
    if peer is None or intra_node_bandwidth_gb_s is None:
        return peer
    return min(peer, intra_node_bandwidth_gb_s)


# ---- records derived from an accelerator alone (node groups built in code) -------------------

_DERIVED_NOTE = (
    "Derived in code from the accelerator record's scalar fields because the node group was "
    "built without a system: flat efficiency curves at scale_up_efficiency / "
    "scale_out_efficiency, NCCL's LL128 ring latency constants (NVLink 1.9 µs per step, "
    "network 4.0 µs per step, 14.0 µs base)."
)


def _flat_fabric(
    accelerator: AcceleratorSpec, kind: Literal["scale_up", "scale_out"]
) -> FabricSpec:
    up = kind == "scale_up"
    efficiency = accelerator.scale_up_efficiency if up else accelerator.scale_out_efficiency
    basis: LineRateBasis = "gpu" if up else "node"
    curves = {
        name: CollectiveCurve(
            reference_ranks=accelerator.gpus_per_node,
            reference_ranks_per_node=accelerator.gpus_per_node,
            algorithm="ring",
            line_rate_basis="gpu" if name in ("all_to_all", "send_recv") else basis,
            provenance="derived",
            points=[(1.0, efficiency)],
        )
        for name in COLLECTIVES
    }
    label = "scale-up" if up else "scale-out"
    return FabricSpec(
        id=f"{accelerator.id}-{label}-derived",
        name=f"{accelerator.name} {label} (derived)",
        kind=kind,
        technology=f"derived from accelerator {accelerator.id}",
        line_rate_gb_s=(
            accelerator.scale_up_bandwidth_gb_s if up else accelerator.scale_out_bandwidth_gb_s
        ),
        switched=not up or accelerator.scale_up_peer_bandwidth_gb_s is None,
        latency_protocol="LL128",
        step_latency_us=1.9 if up else 4.0,
        base_latency_us=14.0,
        collectives=curves,
        sources=[Source(ref=f"accelerator record {accelerator.id}", supports=_DERIVED_NOTE)],
        unverified_fields=["collectives: flat curves derived from the accelerator record"],
        notes=_DERIVED_NOTE,
    )


def derived_node(accelerator: AcceleratorSpec) -> tuple[SystemSpec, FabricSpec, FabricSpec]:
    """A system and its two fabrics built from an accelerator record alone (for node groups
    constructed in code without a system, e.g. test fixtures and records stored before
    systems existed). The curves are flat at the accelerator's scalar efficiencies, so a cost
    model reading curves prices such a group as the scalar fields say."""
    up = _flat_fabric(accelerator, "scale_up")
    out = _flat_fabric(accelerator, "scale_out")
    system = SystemSpec(
        id=f"{accelerator.id}-derived-node",
        name=f"{accelerator.name} node (derived)",
        vendor=accelerator.vendor,
        accelerator=accelerator.id,
        gpus_per_node=accelerator.gpus_per_node,
        scale_up_domain_gpus=accelerator.scale_up_domain_size,
        scale_up_fabric=up.id,
        scale_up_bandwidth_gb_s=accelerator.scale_up_bandwidth_gb_s,
        scale_up_peer_bandwidth_gb_s=accelerator.scale_up_peer_bandwidth_gb_s,
        scale_out_fabric=out.id,
        nics_per_node=accelerator.gpus_per_node,
        scale_out_bandwidth_gb_s=accelerator.scale_out_bandwidth_gb_s,
        fabric=FabricLayout(topology="fat_tree", oversubscription=1.0, nodes_per_leaf=32),
        sources=[Source(ref=f"accelerator record {accelerator.id}", supports=_DERIVED_NOTE)],
        unverified_fields=["fabric: generic non-blocking fat tree assumed"],
        notes=_DERIVED_NOTE,
    )
    return system, up, out


def _node_for(accelerator: AcceleratorSpec) -> tuple[SystemSpec, FabricSpec, FabricSpec]:
    """The catalog's default system of a catalog accelerator, else a derived one."""
    if accelerator.default_system is not None:
        # imported here: the loader imports this module
        from hardware_catalog.loader import get_fabric, get_system
        from specs.errors import CatalogLookupError

        try:
            system = get_system(accelerator.default_system)
            if system.accelerator == accelerator.id:
                return (
                    system,
                    get_fabric(system.scale_up_fabric),
                    get_fabric(system.scale_out_fabric),
                )
        except CatalogLookupError:
            pass
    return derived_node(accelerator)


# ---- the resolved cluster ------------------------------------------------------------------


class ResolvedNodeGroup(BaseModel):
    """A node group with its accelerator, system and fabrics looked up and every default
    filled in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    accelerator: AcceleratorSpec
    num_nodes: int
    gpus_per_node: int
    name: str | None = None
    """The group's name (the request's, else the accelerator id, numbered for repeats)."""
    price_per_gpu_hour: float | None = None
    """The request's price of one GPU-hour of the group (null: not given)."""
    intra_node_bandwidth_gb_s: float
    """Scale-up bandwidth per GPU per direction (line rate), GB/s."""
    inter_node_bandwidth_gb_s: float
    """NIC bandwidth per GPU per direction (line rate), GB/s."""
    system: SystemSpec
    """The system the group named, else the accelerator's default system."""
    scale_up_domain_gpus: int = Field(ge=1)
    """GPUs sharing one scale-up domain; a multiple of gpus_per_node (the domain spans nodes)
    or a divisor of it. It may exceed the group's GPU count (one GB200 tray still belongs to
    a 72-GPU domain): a cost model takes min(domain, GPUs in the group)."""
    scale_up_fabric: FabricSpec
    scale_out_fabric: FabricSpec
    scale_up_peer_bandwidth_gb_s: float | None = None
    """Line rate to one peer per direction on a point-to-point mesh (the system's, capped at
    intra_node_bandwidth_gb_s); null on switched fabrics."""

    @model_validator(mode="before")
    @classmethod
    def _fill_topology(cls, data: Any) -> Any:
        """Groups built in code (or stored before systems existed) name no system: give them
        the accelerator's default system, or one derived from the accelerator record."""
        if not isinstance(data, dict) or "system" in data:
            return data
        raw = data.get("accelerator")
        accelerator = raw if isinstance(raw, AcceleratorSpec) else None
        if accelerator is None:
            try:
                accelerator = AcceleratorSpec.model_validate(raw)
            except ValueError:
                return data  # the field validation reports it
        system, up, out = _node_for(accelerator)
        filled = dict(data)
        filled["system"] = system
        filled.setdefault("scale_up_fabric", up)
        filled.setdefault("scale_out_fabric", out)
        gpus_per_node = data.get("gpus_per_node")
        if "scale_up_domain_gpus" not in filled and isinstance(gpus_per_node, int):
            filled["scale_up_domain_gpus"] = default_scale_up_domain(system, gpus_per_node)
        if "scale_up_peer_bandwidth_gb_s" not in filled:
            intra = data.get("intra_node_bandwidth_gb_s")
            filled["scale_up_peer_bandwidth_gb_s"] = capped_peer_bandwidth(
                system, intra if isinstance(intra, int | float) else None
            )
        return filled

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


def same_hardware(a: ResolvedNodeGroup, b: ResolvedNodeGroup) -> bool:
    """Whether two node groups are interchangeable nodes of one pool."""
    return (
        a.accelerator.id == b.accelerator.id
        and a.system.id == b.system.id
        and a.gpus_per_node == b.gpus_per_node
        and a.scale_up_domain_gpus == b.scale_up_domain_gpus
        and a.intra_node_bandwidth_gb_s == b.intra_node_bandwidth_gb_s
        and a.inter_node_bandwidth_gb_s == b.inter_node_bandwidth_gb_s
    )


class MixedClusterError(ValueError):
    """A single-device property read on a cluster of several device pools."""


_POOLS: dict[int, tuple[ResolvedCluster, dict[str, ResolvedCluster]]] = {}
_MAX_POOLS = 1024
"""`ResolvedCluster.pools()` by cluster object (a search asks the same cluster thousands of
times); the entry keeps its cluster, so an id is never reused while it is cached."""


class ResolvedCluster(BaseModel):
    """The cluster as the cost models see it: node groups with their accelerators, systems
    and fabrics, and the scale-out layout."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    groups: list[ResolvedNodeGroup]
    fabric: FabricLayout
    """The scale-out layout: the request's values over the first group's system's usual
    layout (nodes_per_leaf counted in the first group's nodes)."""
    inter_group_bandwidth_gb_s: float | None = None
    """Per-GPU bandwidth per direction between pools of different hardware, as requested
    (null: the slower pool's scale-out line rate, `inter_pool_bandwidth_gb_s`)."""

    @model_validator(mode="before")
    @classmethod
    def _fill_fabric(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "fabric" in data:
            return data
        groups = data.get("groups")
        if not isinstance(groups, list) or not groups:
            return data
        first = groups[0]
        if not isinstance(first, ResolvedNodeGroup):
            try:
                first = ResolvedNodeGroup.model_validate(first)
            except ValueError:
                return data  # the field validation reports it
        return {**data, "fabric": usual_layout(first.system, first.gpus_per_node)}

    @property
    def num_gpus(self) -> int:
        return sum(g.num_gpus for g in self.groups)

    @property
    def is_homogeneous(self) -> bool:
        return len(self.pools()) == 1

    def pools(self) -> dict[str, ResolvedCluster]:
        """The device pools: node groups of identical hardware (accelerator, system, node
        size, scale-up domain, line rates) merged into one homogeneous cluster each, named
        after their first group, in the order the groups first appear. A mixed cluster is
        planned as pools that hand work to one another; each pool is priced by the
        homogeneous cost models."""
        hit = _POOLS.get(id(self))
        if hit is not None and hit[0] is self:  # frozen: the same object has the same pools
            return dict(hit[1])
        merged: dict[str, list[ResolvedNodeGroup]] = {}
        for group in self.groups:
            for members in merged.values():
                if same_hardware(members[0], group):
                    members.append(group)
                    break
            else:
                name = base = group.name or group.accelerator.id
                n = 1
                while name in merged:  # clusters built in code may repeat a name
                    n += 1
                    name = f"{base}-{n}"
                merged[name] = [group]
        pools = {
            name: ResolvedCluster(groups=members, fabric=self.fabric)
            for name, members in merged.items()
        }
        if len(_POOLS) >= _MAX_POOLS:
            _POOLS.clear()
        _POOLS[id(self)] = (self, pools)
        return dict(pools)

    @property
    def inter_pool_bandwidth_gb_s(self) -> float:
        """Per-GPU bandwidth per direction between two pools: the request's
        `inter_group_bandwidth_gb_s`, else the slowest group's scale-out line rate (the
        pools share one scale-out fabric)."""
        if self.inter_group_bandwidth_gb_s is not None:
            return self.inter_group_bandwidth_gb_s
        return min(g.inter_node_bandwidth_gb_s for g in self.groups)

    def inter_pool_bytes_per_s(self, a: ResolvedCluster, b: ResolvedCluster) -> float:
        """Achievable bandwidth of a pipeline hand-off between pools `a` and `b`, bytes/s:
        `inter_pool_bandwidth_gb_s` at the lower scale-out efficiency of the two."""
        efficiency = min(
            a.groups[0].accelerator.scale_out_efficiency,
            b.groups[0].accelerator.scale_out_efficiency,
        )
        return self.inter_pool_bandwidth_gb_s * 1e9 * efficiency

    def one_device(self) -> ResolvedNodeGroup:
        """The hardware of a cluster with one device pool (its first group: every group of
        a pool has the same hardware).

        Raises:
            MixedClusterError: the cluster has several pools; code that prices hardware
                must take a pool (`pools()`) instead of reading the first group's values.
        """
        if len(self.groups) > 1 and not self.is_homogeneous:
            raise MixedClusterError(
                f"the cluster mixes {len(self.pools())} kinds of node "
                f"({', '.join(self.pools())}): price each pool (ResolvedCluster.pools())"
            )
        return self.groups[0]

    # The properties below describe a homogeneous cluster (its one pool's values).
    @property
    def accelerator(self) -> AcceleratorSpec:
        return self.one_device().accelerator

    @property
    def gpus_per_node(self) -> int:
        return self.one_device().gpus_per_node

    @property
    def num_nodes(self) -> int:
        return sum(g.num_nodes for g in self.groups)

    @property
    def intra_node_bandwidth_gb_s(self) -> float:
        return self.one_device().intra_node_bandwidth_gb_s

    @property
    def inter_node_bandwidth_gb_s(self) -> float:
        return self.one_device().inter_node_bandwidth_gb_s

    @property
    def scale_up_domain_gpus(self) -> int:
        return self.one_device().scale_up_domain_gpus

    @property
    def system(self) -> SystemSpec:
        return self.one_device().system

    @property
    def scale_up_fabric(self) -> FabricSpec:
        return self.one_device().scale_up_fabric

    @property
    def scale_out_fabric(self) -> FabricSpec:
        return self.one_device().scale_out_fabric
