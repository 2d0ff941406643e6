"""Topology mapping: where the members of one parallel group sit on a two-tier cluster.

Ranks are numbered Megatron-style with tensor innermost, then context, then data, then
pipeline (Megatron-Core order "tp-cp-ep-dp-pp"; Shoeybi et al. 2019, Narayanan et al. 2021
§3.3 place tensor parallelism inside a node for this reason). A group of `size` ranks whose
consecutive members are `stride` ranks apart (stride = product of the inner degrees) packs
`members_per_node` members per node and spans `nodes` nodes.

MoE layers re-partition the same `data × context × tensor` GPUs of a pipeline stage into
expert groups (Megatron-Core "MoE Parallel Folding", Liu et al. 2025, arXiv 2504.14960 §3;
`parallel_state.initialize_model_parallel`'s expert rank generator, order "tp-ep-dp-pp"):
expert-tensor innermost (stride 1), then expert (stride expert_tensor), then expert-data
(stride expert × expert_tensor), pipeline outermost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Tier = Literal["intra", "inter"]


@dataclass(frozen=True, slots=True)
class GroupPlacement:
    """How one communication group maps onto nodes."""

    size: int
    """Ranks in the group (n)."""
    members_per_node: int
    """Group members sharing one node (g)."""
    nodes: int
    """Nodes the group spans (k = ceil(n / g))."""
    tier: Tier
    """`intra` when the group fits inside one node's scale-up domain, else `inter`."""


def flat_group(group: GroupPlacement) -> GroupPlacement:
    """The same ranks seen as a flat ring over NICs (one member per node): for collectives
    that gain nothing from the intra-node phase. A group inside one node is unchanged."""
    if group.nodes <= 1:
        return group
    return GroupPlacement(size=group.size, members_per_node=1, nodes=group.size, tier="inter")


def place_group(size: int, stride: int, gpus_per_node: int) -> GroupPlacement:
    """Place a group of `size` ranks, `stride` apart, on nodes of `gpus_per_node` GPUs.

    g_local = max(1, min(n, gpus_per_node // stride)) when stride < gpus_per_node, else 1;
    k = ceil(n / g_local); the tier is intra-node exactly when k == 1.

    Args:
        size: group size n (>= 1).
        stride: rank distance between consecutive members (product of the inner degrees).
        gpus_per_node: GPUs per node (the scale-up domain of one node).
    """
    if stride < gpus_per_node:
        per_node = max(1, min(size, gpus_per_node // stride))
    else:
        per_node = 1
    nodes = -(-size // per_node)
    return GroupPlacement(size, per_node, nodes, "intra" if nodes == 1 else "inter")


@dataclass(frozen=True, slots=True)
class ParallelGroups:
    """Placements of the groups one plan communicates over."""

    tensor: GroupPlacement
    context: GroupPlacement
    data: GroupPlacement
    data_context: GroupPlacement
    """The data × context group (gradient reduction and ZeRO sharding, as in Megatron-Core)."""
    pipeline: GroupPlacement

    def tiers(self) -> dict[str, str]:
        """Tier of each group, for explanations."""
        return {
            "tensor": self.tensor.tier,
            "context": self.context.tier,
            "data": self.data.tier,
            "data_context": self.data_context.tier,
            "pipeline": self.pipeline.tier,
        }


def place_groups(
    tensor: int, context: int, data: int, pipeline: int, gpus_per_node: int
) -> ParallelGroups:
    """Placements of the tensor, context, data, data×context and pipeline groups under the
    rank order tensor (innermost) → context → data → pipeline."""
    return ParallelGroups(
        tensor=place_group(tensor, 1, gpus_per_node),
        context=place_group(context, tensor, gpus_per_node),
        data=place_group(data, tensor * context, gpus_per_node),
        data_context=place_group(data * context, tensor, gpus_per_node),
        pipeline=place_group(pipeline, tensor * context * data, gpus_per_node),
    )


@dataclass(frozen=True, slots=True)
class ExpertGroups:
    """Placements of the groups an MoE layer communicates over (folded expert layout)."""

    expert_tensor: GroupPlacement
    """The expert-tensor group (ETP ranks, innermost): all-gather / reduce-scatter of the
    dispatched tokens."""
    expert: GroupPlacement
    """The expert-parallel group (EP ranks, stride ETP): token dispatch / combine all-to-all."""
    expert_data: GroupPlacement
    """The expert-data-parallel group (stride EP × ETP): expert gradient reduction and
    expert optimizer sharding."""

    def tiers(self) -> dict[str, str]:
        return {
            "expert_tensor": self.expert_tensor.tier,
            "expert": self.expert.tier,
            "expert_data": self.expert_data.tier,
        }


def place_expert_groups(
    expert: int, expert_tensor: int, data_context_tensor: int, gpus_per_node: int
) -> ExpertGroups:
    """Placements of the expert-tensor, expert and expert-data groups carved out of the
    `data_context_tensor` GPUs of one pipeline stage (order expert-tensor → expert →
    expert-data, Megatron-Core folding; module docstring).

    Args:
        expert: EP degree (e).
        expert_tensor: ETP degree (etp); e · etp must divide data_context_tensor.
        data_context_tensor: d · c · t, the GPUs of one pipeline stage.
        gpus_per_node: GPUs per node.
    """
    edp = max(1, data_context_tensor // (expert * expert_tensor))
    return ExpertGroups(
        expert_tensor=place_group(expert_tensor, 1, gpus_per_node),
        expert=place_group(expert, expert_tensor, gpus_per_node),
        expert_data=place_group(edp, expert * expert_tensor, gpus_per_node),
    )
