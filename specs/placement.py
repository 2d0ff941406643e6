"""Mixture-of-Experts expert placement: the request (`ExpertPlacementRequest`) and the answer
(`ExpertPlacementAnswer`, `LayerPlacementPublic`) of `POST /v1/expert-placements`.

Single-field limits are pydantic constraints; the cross-field rules (rectangular loads, slots
that divide, ranks per node, groups that fit on nodes, the coactivation shape, size budgets)
live in `ExpertPlacementRequest.check()`, which raises `SpecError(field, rule, value)` naming
the fields, so the API answers a 422 problem that says which fields disagree.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from specs._base import Spec
from specs.errors import SpecError

MAX_EXPERTS = 4096
"""Experts per layer."""
MAX_LAYERS = 512
MAX_RANKS = 4096
MAX_EXPERT_LAYERS = 262_144
"""Budget on experts × layers (a 4096-expert request may carry 64 layers)."""
MAX_COACTIVATION_ENTRIES = 1_048_576
"""Budget on (layers − 1) × experts² when `coactivation` is given."""
MAX_TIME_LIMIT_S = 60.0
DEFAULT_TIME_LIMIT_S = 10.0

Load = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class ExpertPlacementRequest(Spec):
    """Token loads per layer and expert, and the expert-parallel group that serves them."""

    loads: list[Annotated[list[Load], Field(min_length=1, max_length=MAX_EXPERTS)]] = Field(
        min_length=1, max_length=MAX_LAYERS
    )
    """`loads[layer][expert]`: tokens routed to each expert (non-negative, finite)."""
    num_ranks: int = Field(ge=1, le=MAX_RANKS)
    """GPUs of the expert-parallel group."""
    ranks_per_node: int = Field(ge=1, le=MAX_RANKS)
    """GPUs per node (ranks g and h share a node iff g // ranks_per_node == h // ranks_per_node)."""
    num_redundant: int = Field(default=0, ge=0, le=MAX_EXPERTS * MAX_RANKS)
    """Extra expert copies per layer (slots per rank = (experts + redundant) / ranks)."""
    num_groups: int | None = Field(default=None, ge=1, le=MAX_EXPERTS)
    """Contiguous expert groups that must each sit on one node (group-limited routing)."""
    coactivation: list[list[list[Load]]] | None = None
    """`coactivation[l][i][j]`: tokens routed to expert i at layer l and expert j at layer
    l + 1 (shape [layers − 1][experts][experts])."""
    time_limit_s: float = Field(default=DEFAULT_TIME_LIMIT_S, gt=0.0, le=MAX_TIME_LIMIT_S)
    """Wall-clock limit of the whole solve (shared by the layers), seconds."""

    @property
    def num_layers(self) -> int:
        return len(self.loads)

    @property
    def num_experts(self) -> int:
        return len(self.loads[0])

    @property
    def num_nodes(self) -> int:
        return self.num_ranks // self.ranks_per_node

    @property
    def slots_per_rank(self) -> int:
        return (self.num_experts + self.num_redundant) // self.num_ranks

    def check(self) -> ExpertPlacementRequest:
        """Check the cross-field rules; return self.

        Raises:
            SpecError: the first rule broken, naming its fields.
        """
        experts, layers, ranks = self.num_experts, self.num_layers, self.num_ranks
        for layer, row in enumerate(self.loads):
            if len(row) != experts:
                raise SpecError(
                    f"loads.{layer}",
                    "must have as many experts as loads.0",
                    len(row),
                    f"loads.{layer} has {len(row)} experts but loads.0 has {experts}: every "
                    "layer must have the same number of experts",
                )
        if experts * layers > MAX_EXPERT_LAYERS:
            raise SpecError(
                "loads",
                f"experts × layers must be at most {MAX_EXPERT_LAYERS}",
                experts * layers,
                f"loads has {experts} experts × {layers} layers = {experts * layers} > "
                f"{MAX_EXPERT_LAYERS}",
            )
        copies = experts + self.num_redundant
        if copies % ranks:
            raise SpecError(
                "num_redundant",
                "experts + num_redundant must be divisible by num_ranks",
                self.num_redundant,
                f"experts ({experts}) + num_redundant ({self.num_redundant}) = {copies} must "
                f"be divisible by num_ranks ({ranks}) so every rank has the same slots",
            )
        if ranks % self.ranks_per_node:
            raise SpecError(
                "ranks_per_node",
                "must divide num_ranks",
                self.ranks_per_node,
                f"num_ranks ({ranks}) must be divisible by ranks_per_node ({self.ranks_per_node})",
            )
        if copies > experts * ranks:
            raise SpecError(
                "num_redundant",
                "at most one copy of an expert per rank",
                self.num_redundant,
                f"experts + num_redundant = {copies} copies exceed experts × num_ranks = "
                f"{experts * ranks}: a rank would hold two copies of one expert",
            )
        if self.num_groups is not None:
            self._check_groups()
        if self.coactivation is not None:
            self._check_coactivation()
        return self

    def _check_groups(self) -> None:
        groups, experts = self.num_groups or 1, self.num_experts
        if experts % groups:
            raise SpecError(
                "num_groups",
                "must divide the number of experts",
                groups,
                f"experts ({experts}) must be divisible by num_groups ({groups})",
            )
        # node n gets c_n whole groups of s experts; its N·S slots must hold every expert of
        # them (c_n·s ≤ N·S) and at most N copies of each (N·S ≤ c_n·s·N)
        size, per_node = experts // groups, self.ranks_per_node * self.slots_per_rank
        low = -(-per_node // (size * self.ranks_per_node))
        high = per_node // size
        nodes = self.num_nodes
        if low > high or not nodes * low <= groups <= nodes * high:
            raise SpecError(
                "num_groups",
                "groups must be placeable on nodes",
                groups,
                f"num_groups ({groups}): {groups} groups of {size} experts cannot fill {nodes} "
                f"nodes of "
                f"{self.ranks_per_node} ranks × {self.slots_per_rank} slots: each node needs "
                f"between {low} and {high} groups",
            )

    def _check_coactivation(self) -> None:
        co = self.coactivation or []
        experts, layers = self.num_experts, self.num_layers
        entries = (layers - 1) * experts * experts
        if entries > MAX_COACTIVATION_ENTRIES:
            raise SpecError(
                "coactivation",
                f"(layers − 1) × experts² must be at most {MAX_COACTIVATION_ENTRIES}",
                entries,
            )
        shape = [len(co)] + ([len(co[0])] if co else [])
        if len(co) != layers - 1:
            raise SpecError(
                "coactivation",
                f"must have shape [{layers - 1}][{experts}][{experts}]",
                shape,
                f"coactivation has {len(co)} layers; it must have layers − 1 = {layers - 1} "
                f"(one matrix per pair of consecutive layers)",
            )
        for layer, matrix in enumerate(co):
            if len(matrix) != experts or any(len(row) != experts for row in matrix):
                raise SpecError(
                    f"coactivation.{layer}",
                    f"must be a {experts} × {experts} matrix",
                    [len(matrix), *sorted({len(row) for row in matrix})],
                )


class LayerPlacementPublic(BaseModel):
    """One layer's placement and how balanced it is."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    rank_experts: list[list[int]]
    """Experts held by each rank (sorted)."""
    replicas: dict[str, int]
    """Copies of every replicated expert (experts with one copy are left out)."""
    rank_loads: list[float]
    """Tokens each rank serves (a replicated expert's load is split evenly over its copies)."""
    imbalance: float
    """max rank load / mean rank load (1.0 when every load is zero)."""
    cross_node_traffic: float
    """Tokens that cross nodes (see `solver.formulations.expert_placement`)."""
    status: str
    """`optimal` or `feasible` (time limit or model budget reached; see `gap`)."""
    gap: float
    """(max rank load − best lower bound) / max rank load, a fraction 0–1 (0: proven
    optimal)."""
    lower_bound: float
    """Best proven lower bound on the max rank load."""
    solve_time_s: float
    """Wall time the solver spent on this layer, seconds."""
    baselines: dict[str, float]
    """Imbalance of `round_robin`, `greedy` (LPT) and `eplb` on the same layer."""


class ExpertPlacementAnswer(BaseModel):
    """The placement of every layer."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    status: str
    """`optimal` when every layer is proven optimal, else `feasible`."""
    gap: float
    """Largest per-layer `gap`, a fraction 0–1."""
    max_imbalance: float
    """Largest per-layer `imbalance` (max rank load / mean rank load; 1.0 = balanced)."""
    layers: list[LayerPlacementPublic]
    """One placement per layer, in layer order."""
    solve_time_s: float
    """Wall time of the whole solve (every layer), seconds."""
    num_ranks: int
    """GPUs of the expert-parallel group, as requested."""
    ranks_per_node: int
    """GPUs per node, as requested."""
    slots_per_rank: int
    """Expert copies each rank holds: (experts + num_redundant) / num_ranks."""
    traffic_model: str
    """`uniform_senders` or `coactivation`."""
