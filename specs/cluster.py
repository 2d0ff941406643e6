"""Cluster specs: groups of identical nodes, each naming an accelerator from the catalog."""

from __future__ import annotations

from pydantic import Field, model_validator

from specs._base import Spec

MAX_TOTAL_GPUS = 1_048_576


class NodeGroupSpec(Spec):
    """A group of identical nodes."""

    accelerator: str = Field(min_length=1, max_length=100)
    """Accelerator id or alias from the hardware catalog (`GET /v1/hardware`)."""
    num_nodes: int = Field(ge=1, le=MAX_TOTAL_GPUS)
    """Nodes in this group."""
    gpus_per_node: int | None = Field(default=None, ge=1, le=1024)
    """Accelerators per node (the scale-up domain); null takes the catalog's usual node size."""
    intra_node_bandwidth_gb_s: float | None = Field(default=None, gt=0, le=100_000)
    """Scale-up bandwidth per GPU per direction, GB/s; null takes the catalog default."""
    inter_node_bandwidth_gb_s: float | None = Field(default=None, gt=0, le=100_000)
    """Scale-out (NIC) bandwidth per GPU per direction, GB/s; null takes the catalog default."""


class ClusterSpec(Spec):
    """The cluster: one or more node groups."""

    node_groups: list[NodeGroupSpec] = Field(min_length=1, max_length=64)
    """Node groups; several groups of one accelerator type form one homogeneous pool."""

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        total = sum(g.num_nodes * (g.gpus_per_node or 8) for g in self.node_groups)
        if total > MAX_TOTAL_GPUS:
            raise ValueError(f"the cluster has {total} GPUs; at most {MAX_TOTAL_GPUS} are allowed")
        return self
