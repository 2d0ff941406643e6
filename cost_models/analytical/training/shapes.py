"""The keys the analytical training model caches its parts by: what one layer's costs depend
on (`LayerShape`) and what its model-state bytes depend on (`StateShape`), each a named
projection of the plan key."""

from __future__ import annotations

from typing import NamedTuple

from specs.plan import PlanKey


class LayerShape(NamedTuple):
    """Everything a transformer layer's time and activation memory per micro-batch depend on,
    besides the layer kind (dense or MoE) and the problem."""

    tensor: int
    context: int
    micro_batch_size: int
    recompute: str
    sequence_parallel: bool
    flash_attention: bool
    expert: int
    expert_tensor: int
    framework: str
    context_parallel_algorithm: str = "ring"
    context_parallel_heads: int = 1

    @classmethod
    def of(cls, key: PlanKey) -> LayerShape:
        return cls(
            key.tensor,
            key.context,
            key.micro_batch_size,
            key.recompute,
            key.sequence_parallel,
            key.flash_attention,
            key.expert,
            key.expert_tensor,
            key.framework,
            key.context_parallel_algorithm,
            key.context_parallel_heads,
        )

    def without_recompute(self) -> LayerShape:
        """The recompute-independent core of this shape (recompute set to "none")."""
        return self._replace(recompute="none") if self.recompute != "none" else self


class StateShape(NamedTuple):
    """Everything a layer's per-GPU parameters and their state bytes depend on."""

    tensor: int
    shards: int
    """Ranks the dense states are sharded over (data × context)."""
    zero_stage: int
    expert: int
    expert_tensor: int
    framework: str

    @classmethod
    def of(cls, key: PlanKey) -> StateShape:
        return cls(
            key.tensor,
            key.data * key.context,
            key.zero_stage,
            key.expert,
            key.expert_tensor,
            key.framework,
        )
