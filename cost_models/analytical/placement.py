"""Topology mapping: where the members of one parallel group sit on the cluster's scale-up
domains (NVLink / NVSwitch, Infinity Fabric; they may span nodes, as a GB200 NVL72 rack's 72
GPUs in 4-GPU trays do) and scale-out leaves.

Ranks are numbered Megatron-style with tensor innermost, then context, then data, then
pipeline (Megatron-Core order "tp-cp-ep-dp-pp"; Shoeybi et al. 2019, Narayanan et al. 2021
§3.3 place tensor parallelism inside a node for this reason); consecutive ranks fill a node,
consecutive nodes a scale-up domain, consecutive domains a leaf. A group of `size` ranks whose
consecutive members are `stride` ranks apart (stride = product of the inner degrees) packs
`members_per_domain` members per scale-up domain and spans `domains` domains, likewise
`members_per_leaf` per leaf over `leaves` leaves.

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
    """How one communication group maps onto scale-up domains and leaves."""

    size: int
    """Ranks in the group (n)."""
    members_per_domain: int
    """Group members sharing one scale-up domain (g)."""
    domains: int
    """Scale-up domains the group spans (k = ceil(n / g))."""
    tier: Tier
    """`intra` when the group fits inside one scale-up domain, else `inter`."""
    members_per_leaf: int = 0
    """Group members under one scale-out leaf (0: not placed on leaves, = size)."""
    leaves: int = 1
    """Scale-out leaves the group spans."""

    @property
    def domains_per_leaf(self) -> float:
        """Domains of the group under one leaf."""
        per_leaf = self.members_per_leaf or self.size
        return max(1.0, per_leaf / self.members_per_domain)


def flat_group(group: GroupPlacement) -> GroupPlacement:
    """The same ranks seen as a flat ring over NICs (one member per domain): for collectives
    that gain nothing from the scale-up phase. A group inside one domain is unchanged."""
    if group.domains <= 1:
        return group
    return GroupPlacement(
        size=group.size,
        members_per_domain=1,
        domains=group.size,
        tier="inter",
        members_per_leaf=group.members_per_leaf,
        leaves=group.leaves,
    )


def _per_unit(size: int, stride: int, unit_gpus: int) -> int:
    """Members of a group of `size` ranks `stride` apart inside one unit of `unit_gpus`
    consecutive ranks."""
    if stride < unit_gpus:
        return max(1, min(size, unit_gpus // stride))
    return 1


def place_group(
    size: int, stride: int, domain_gpus: int, leaf_gpus: int | None = None
) -> GroupPlacement:
    """Place a group of `size` ranks, `stride` apart, on scale-up domains of `domain_gpus`
    GPUs and leaves of `leaf_gpus` GPUs.

    g = max(1, min(n, domain_gpus // stride)) when stride < domain_gpus, else 1;
    k = ceil(n / g); the tier is intra-domain exactly when k == 1; likewise per leaf.

    Args:
        size: group size n (>= 1).
        stride: rank distance between consecutive members (product of the inner degrees).
        domain_gpus: GPUs per scale-up domain.
        leaf_gpus: GPUs under one scale-out leaf (None: one leaf holds everything).
    """
    per_domain = _per_unit(size, stride, domain_gpus)
    domains = -(-size // per_domain)
    if leaf_gpus is None:
        per_leaf, leaves = size, 1
    else:
        per_leaf = max(per_domain, _per_unit(size, stride, leaf_gpus))
        leaves = -(-size // per_leaf)
    return GroupPlacement(
        size, per_domain, domains, "intra" if domains == 1 else "inter", per_leaf, leaves
    )


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
    tensor: int,
    context: int,
    data: int,
    pipeline: int,
    domain_gpus: int,
    leaf_gpus: int | None = None,
) -> ParallelGroups:
    """Placements of the tensor, context, data, data×context and pipeline groups under the
    rank order tensor (innermost) → context → data → pipeline."""
    return ParallelGroups(
        tensor=place_group(tensor, 1, domain_gpus, leaf_gpus),
        context=place_group(context, tensor, domain_gpus, leaf_gpus),
        data=place_group(data, tensor * context, domain_gpus, leaf_gpus),
        data_context=place_group(data * context, tensor, domain_gpus, leaf_gpus),
        pipeline=place_group(pipeline, tensor * context * data, domain_gpus, leaf_gpus),
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
    expert: int,
    expert_tensor: int,
    data_context_tensor: int,
    domain_gpus: int,
    leaf_gpus: int | None = None,
) -> ExpertGroups:
    """Placements of the expert-tensor, expert and expert-data groups carved out of the
    `data_context_tensor` GPUs of one pipeline stage (order expert-tensor → expert →
    expert-data, Megatron-Core folding; module docstring).

    Args:
        expert: EP degree (e).
        expert_tensor: ETP degree (etp); e · etp must divide data_context_tensor.
        data_context_tensor: d · c · t, the GPUs of one pipeline stage.
        domain_gpus: GPUs per scale-up domain.
        leaf_gpus: GPUs per scale-out leaf (None: one leaf).
    """
    edp = max(1, data_context_tensor // (expert * expert_tensor))
    return ExpertGroups(
        expert_tensor=place_group(expert_tensor, 1, domain_gpus, leaf_gpus),
        expert=place_group(expert, expert_tensor, domain_gpus, leaf_gpus),
        expert_data=place_group(edp, expert * expert_tensor, domain_gpus, leaf_gpus),
    )
