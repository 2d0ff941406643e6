"""Cluster specs: groups of identical nodes, each naming an accelerator and / or a system
from the catalog, and the layout of the scale-out network."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from specs._base import Spec

MAX_TOTAL_GPUS = 1_048_576
MAX_DOMAIN_GPUS = 65_536


GROUP_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class NodeGroupSpec(Spec):
    """A group of identical nodes. Give `accelerator`, `system` or both."""

    name: str | None = Field(default=None, pattern=GROUP_NAME_PATTERN)
    """What plans call the group (`plan.stage_groups`, explanations); letters, digits, `_`,
    `.`, `-`. Null takes the accelerator id (`h100-sxm`, then `h100-sxm-2`, … for repeats)."""

    accelerator: str | None = Field(default=None, min_length=1, max_length=100)
    """Accelerator id or alias from the hardware catalog (`GET /v1/hardware`); may be left
    out when `system` is given (the system names its accelerator). When both are given, the
    system must hold this accelerator."""
    system: str | None = Field(default=None, min_length=1, max_length=100)
    """System (node or rack type) id or alias from the catalog (`GET /v1/systems`, e.g.
    `dgx-h100`, `gb200-nvl72`); null takes the accelerator's default system. It supplies the
    defaults of the node size, scale-up domain, fabrics and line rates."""
    num_nodes: int = Field(ge=1, le=MAX_TOTAL_GPUS)
    """Nodes in this group."""
    gpus_per_node: int | None = Field(default=None, ge=1, le=1024)
    """Accelerators per node; null takes the named system's node size, or without a system
    the accelerator's usual node size (GB200 alone: the 72-GPU rack)."""
    scale_up_domain_gpus: int | None = Field(default=None, ge=1, le=MAX_DOMAIN_GPUS)
    """GPUs sharing one NVLink / NVSwitch / Infinity Fabric / ICI domain; may span nodes
    (GB200 NVL72: 4 GPUs per node, 72 per domain). Must be a multiple of gpus_per_node or
    divide it. Null takes the system's domain when it spans nodes and the group uses the
    system's node size, else the node."""
    intra_node_bandwidth_gb_s: float | None = Field(default=None, gt=0, le=100_000)
    """Scale-up bandwidth per GPU per direction, GB/s; null takes the system's line rate."""
    inter_node_bandwidth_gb_s: float | None = Field(default=None, gt=0, le=100_000)
    """Scale-out (NIC) bandwidth per GPU per direction, GB/s; null takes the system's NIC
    line rate."""
    node_ids: list[str] | None = Field(default=None, max_length=MAX_TOTAL_GPUS)
    """Host names of the group's nodes, one per node (as `measured_links` name them)."""
    price_per_gpu_hour: float | None = Field(default=None, ge=0, le=10_000)
    """What one GPU of the group costs per hour (any currency, the same for every group);
    the `min_cost` serving objective needs it on every group it may use."""
    unavailable_gpus: int = Field(default=0, ge=0, le=MAX_TOTAL_GPUS, strict=True)
    """GPUs of the group that cannot be used (failed, drained, reserved), counted as whole
    nodes first: the group keeps its full nodes, and the remainder leaves one node with
    fewer GPUs, planned as a group of its own (`<name>-partial`). At least one GPU must
    remain."""

    @field_validator("scale_up_domain_gpus")
    @classmethod
    def _domain_fits_node(cls, value: int | None, info: ValidationInfo) -> int | None:
        node = info.data.get("gpus_per_node")
        if value is not None and isinstance(node, int) and value % node and node % value:
            raise ValueError(
                f"scale_up_domain_gpus must be a multiple of gpus_per_node ({node}) or divide "
                f"it (got {value})"
            )
        return value

    @model_validator(mode="after")
    def _names_hardware(self) -> NodeGroupSpec:
        if self.accelerator is None and self.system is None:
            raise ValueError(
                "a node group needs accelerator or system (or both); got neither "
                "(accelerator=null, system=null)"
            )
        return self


class MeasuredLink(Spec):
    """One directional node-to-node bandwidth a point-to-point benchmark measured (mpiGraph
    with one process per node prints a matrix of these)."""

    src: str = Field(min_length=1, max_length=256)
    """Sending node (a `node_ids` entry)."""
    dst: str = Field(min_length=1, max_length=256)
    """Receiving node."""
    gb_s: float = Field(gt=0, le=100_000)
    """Achieved bandwidth from src to dst, GB/s for the whole node."""


class FabricLayoutSpec(Spec):
    """The scale-out network's layout; every null field takes the first node group's
    system's usual layout (`GET /v1/systems/{id}` `fabric`)."""

    topology: Literal["rail_optimized", "rail_only", "fat_tree"] | None = None
    """`rail_optimized`: NIC i of every node goes to leaf (rail) i and spines join the rails
    (DGX SuperPOD); `rail_only`: the rails without spines, cross-rail traffic is forwarded
    over the scale-up fabric first; `fat_tree`: leaves without rail alignment."""
    oversubscription: float | None = Field(default=None, ge=1, le=64)
    """Leaf downlink : uplink bandwidth ratio for traffic crossing the leaf / spine boundary;
    1.0 = non-blocking (e.g. 7.0 for a 7:1 tapered aggregation tier)."""
    nodes_per_leaf: int | None = Field(default=None, ge=1, le=MAX_DOMAIN_GPUS)
    """Nodes that reach one another without crossing the spine (one scalable unit of a
    rail-optimised fabric: DGX SuperPOD H100 / B200 32 nodes)."""


class ClusterSpec(Spec):
    """The cluster: one or more node groups and, optionally, the scale-out layout."""

    node_groups: list[NodeGroupSpec] = Field(min_length=1, max_length=64)
    """Node groups; several groups of one accelerator type form one homogeneous pool."""
    fabric: FabricLayoutSpec | None = None
    """Scale-out layout (topology, oversubscription, nodes per leaf); null or missing fields
    take the first node group's system's usual layout."""
    measured_links: list[MeasuredLink] | None = Field(default=None, max_length=1_000_000)
    """Measured node-to-node bandwidths (nodes named in `node_groups[].node_ids`); where
    given they override the catalog: a group's scale-out rate becomes its slowest measured
    link between two of its nodes, and the rate between groups the slowest measured link
    between them (each per GPU, as the line rate that yields it at the accelerator's
    scale-out efficiency)."""
    inter_group_bandwidth_gb_s: float | None = Field(default=None, gt=0, le=100_000)
    """Bandwidth per GPU per direction between GPUs of node groups of different hardware,
    GB/s (what a pipeline hand-off between them gets); null: the groups share one scale-out
    fabric and meet at the slower group's NIC rate."""

    @field_validator("node_groups")
    @classmethod
    def _unique_names(cls, value: list[NodeGroupSpec]) -> list[NodeGroupSpec]:
        names = [g.name for g in value if g.name is not None]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"node group names must be unique (repeated: {', '.join(repeated)})")
        return value

    @field_validator("node_groups")
    @classmethod
    def _known_node_ids(cls, value: list[NodeGroupSpec]) -> list[NodeGroupSpec]:
        seen: set[str] = set()
        for i, group in enumerate(value):
            ids = group.node_ids or []
            if group.node_ids is not None and len(ids) != group.num_nodes:
                raise ValueError(
                    f"node_groups[{i}].node_ids has {len(ids)} entries for {group.num_nodes} nodes"
                )
            for node in ids:
                if node in seen:
                    raise ValueError(f"node id {node!r} appears twice in node_groups[].node_ids")
                seen.add(node)
        return value

    @field_validator("measured_links")
    @classmethod
    def _links_name_known_nodes(
        cls, value: list[MeasuredLink] | None, info: ValidationInfo
    ) -> list[MeasuredLink] | None:
        groups = info.data.get("node_groups") or []
        known = {node for g in groups for node in g.node_ids or []}
        for j, link in enumerate(value or []):
            for end in (link.src, link.dst):
                if end not in known:
                    raise ValueError(
                        f"measured_links[{j}] names node {end!r}, which no node_groups[].node_ids "
                        "lists"
                    )
            if link.src == link.dst:
                raise ValueError(f"measured_links[{j}] links node {link.src!r} to itself")
        return value

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        total = sum(g.num_nodes * (g.gpus_per_node or 8) for g in self.node_groups)
        if total > MAX_TOTAL_GPUS:
            raise ValueError(f"the cluster has {total} GPUs; at most {MAX_TOTAL_GPUS} are allowed")
        return self
