"""Accelerator and resolved-cluster records. Units are in field names; the JSON data files
use the API's units (GiB, GB/s, TFLOP/s) and `*_bytes` / `*_flops` helpers convert to SI."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

GIB = 1024**3
GB = 1e9


class Source(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    ref: str
    """URL or citation."""
    supports: str
    """Which values this source supports."""


class AcceleratorSpec(BaseModel):
    """One accelerator type (one device as the framework sees it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """Catalog id, lower-case (`h100-sxm`)."""
    name: str
    vendor: str
    aliases: list[str] = Field(default_factory=list)
    """Other names accepted on lookup (case-insensitive)."""
    memory_gib: float = Field(gt=0)
    """Device memory in GiB as the device reports it (e.g. nvidia-smi total)."""
    memory_bandwidth_gb_s: float = Field(gt=0)
    """HBM bandwidth, GB/s."""
    peak_tflops: dict[str, float | None]
    """Dense peak TFLOP/s by precision (`bf16`, `fp16`, `fp8`, `fp32`, `tf32`, ...)."""
    scale_up_bandwidth_gb_s: float = Field(gt=0)
    """Scale-up (NVLink / xGMI / ICI) bandwidth per device per direction, GB/s."""
    scale_up_peer_bandwidth_gb_s: float | None = None
    """Bandwidth to a single peer per direction when the fabric is a point-to-point mesh
    (xGMI, Gaudi RoCE); null means a switched fabric (any pair gets the full rate)."""
    scale_out_bandwidth_gb_s: float = Field(gt=0)
    """NIC bandwidth per device per direction, GB/s."""
    scale_up_domain_size: int = Field(ge=1)
    """Largest group of devices sharing the scale-up fabric."""
    gpus_per_node: int = Field(ge=1)
    """Usual node size (the default scale-up domain of a cluster node)."""
    num_compute_units: int | None = Field(default=None, ge=1)
    """Streaming multiprocessors (NVIDIA) or compute units (AMD) that run GEMM tiles in
    parallel; null where the notion does not apply or is not sourced."""
    gemm_efficiency: float = Field(gt=0, le=1)
    """Best-shape achieved fraction of the dense bf16 peak (MAMF-style measurement)."""
    gemm_efficiency_fp8: float | None = Field(default=None, gt=0, le=1)
    """Best-shape achieved fraction of the dense fp8 peak."""
    attention_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Achieved fraction of the dense bf16 peak in fused (flash) attention, forward and
    backward together; null means the cost model's default (FlashAttention-2 on A100)."""
    scale_up_efficiency: float = Field(gt=0, le=1)
    """Achieved ring bus bandwidth / line rate on the scale-up fabric."""
    scale_out_efficiency: float = Field(gt=0, le=1)
    """Achieved bus bandwidth / line rate on the NIC."""
    tdp_w: float | None = None
    unverified_fields: list[str] = Field(default_factory=list)
    notes: str | None = None
    sources: list[Source] = Field(min_length=1)

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


class ResolvedNodeGroup(BaseModel):
    """A node group with its accelerator looked up and every default filled in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    accelerator: AcceleratorSpec
    num_nodes: int
    gpus_per_node: int
    intra_node_bandwidth_gb_s: float
    """Scale-up bandwidth per GPU per direction (line rate), GB/s."""
    inter_node_bandwidth_gb_s: float
    """NIC bandwidth per GPU per direction (line rate), GB/s."""

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


class ResolvedCluster(BaseModel):
    """The cluster as the cost models see it: node groups with their accelerators."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    groups: list[ResolvedNodeGroup]

    @property
    def num_gpus(self) -> int:
        return sum(g.num_gpus for g in self.groups)

    @property
    def is_homogeneous(self) -> bool:
        first = self.groups[0]
        return all(
            g.accelerator.id == first.accelerator.id
            and g.gpus_per_node == first.gpus_per_node
            and g.intra_node_bandwidth_gb_s == first.intra_node_bandwidth_gb_s
            and g.inter_node_bandwidth_gb_s == first.inter_node_bandwidth_gb_s
            for g in self.groups
        )

    # The properties below describe a homogeneous cluster (the first group's values).
    @property
    def accelerator(self) -> AcceleratorSpec:
        return self.groups[0].accelerator

    @property
    def gpus_per_node(self) -> int:
        return self.groups[0].gpus_per_node

    @property
    def num_nodes(self) -> int:
        return sum(g.num_nodes for g in self.groups)

    @property
    def intra_node_bandwidth_gb_s(self) -> float:
        return self.groups[0].intra_node_bandwidth_gb_s

    @property
    def inter_node_bandwidth_gb_s(self) -> float:
        return self.groups[0].inter_node_bandwidth_gb_s
