"""One serving instance whose pipeline stages run on different hardware, priced by composing
one-stage costs.

Helix (Mei et al., ASPLOS'25, "Helix: Serving Large Language Models over Heterogeneous GPUs
and Network via Max-Flow") and Parallax (Tong et al. 2025, "Parallax: Efficient LLM
Inference Service over Decentralized Environment") serve one model replica over GPUs of
different kinds by giving each GPU a contiguous run of layers, more to the faster ones, and
passing the hidden states between them. Here an instance's stage j is `tensor × expert`
GPUs of one device pool (`ResolvedCluster.pools`) holding `stage_layers[j]` layers:

- stage j is priced by the serving cost model as an instance of its own that holds only
  those layers (`ServingCostModel.instance_cost(..., layers=(start, stop))`): its GEMMs,
  attention, elementwise kernels and tensor-parallel all-reduces on its own accelerator and
  scale-up domain, the embedding on the first stage, the LM head, sampler and the
  per-iteration overhead on the last; its weights and KV cache of its layers in its own
  GPUs' memory (infeasible when they do not fit);
- the hand-off after stage j sends the batch's hidden states (T tokens × hidden × 2 bytes,
  each attention replica its share) to stage j + 1: over the pool's own fabric when both
  stages sit on one pool (the homogeneous model's send / receive), else over the link
  between the pools at `ResolvedCluster.inter_pool_bytes_per_s` (bytes / rate, as the training side's
  `cost_models.mixed.hand_off_s` prices it);
- one iteration's latency is the sum of the stage times and hand-offs (what the homogeneous
  model reports for a p-stage instance), and a p-stage instance runs p schedulers
  (`base.pipeline_engines`), each of which waits max(latency, p × the slowest stage or
  link) per iteration (`base.VirtualEngineCost`): `stage_times_s` gives the parts;
- KV capacity in tokens: the least over stages (each holds the KV of its own layers in what
  its weights leave); memory figures per GPU are the largest stage's.

With every stage on one pool and the homogeneous split, the sum of the stages and hand-offs
is the homogeneous p-stage instance's iteration time (tests check it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cost_models.serving.base import InstanceCost, IterationBatch

ACT_BYTES = 2.0
"""bf16 hidden states handed from stage to stage."""


def cross_pool_hand_off(
    hidden_size: int, expert: int, bytes_per_s: float
) -> Callable[[int], float]:
    """The seconds a hand-off of T tokens' hidden states takes over a link of
    `bytes_per_s` (every attention replica sends its 1/expert share in parallel)."""

    def seconds(tokens: int) -> float:
        return tokens / expert * hidden_size * ACT_BYTES / bytes_per_s if tokens > 0 else 0.0

    return seconds


@dataclass(frozen=True)
class PipelineInstanceCost:
    """Costs of an instance composed of one-stage costs (implements `InstanceCost`; module
    docstring). `hand_offs[j]` prices the hand-off after stage j (p − 1 of them)."""

    stages: Sequence[InstanceCost]
    hand_offs: Sequence[Callable[[int], float]]
    stage_layers: tuple[int, ...]
    stage_pools: tuple[str, ...]
    _last: tuple[IterationBatch, list[float]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if len(self.hand_offs) != len(self.stages) - 1:
            raise ValueError("a pipeline of p stages has p - 1 hand-offs")

    @property
    def num_gpus(self) -> int:
        return sum(s.num_gpus for s in self.stages)

    @property
    def pipeline_stages(self) -> int:
        return len(self.stages)

    @property
    def kv_capacity_tokens(self) -> int:
        return min(s.kv_capacity_tokens for s in self.stages)

    @property
    def kv_cache_gib(self) -> float:
        return max(s.kv_cache_gib for s in self.stages)

    @property
    def weights_gib(self) -> float:
        return max(s.weights_gib for s in self.stages)

    def stage_times_s(self, batch: IterationBatch) -> list[float]:
        """The time every stage, then every hand-off, holds `batch` (the last batch's
        answer is kept: a scheduler asks for the latency and the parts of one batch)."""
        last = self._last
        if last is not None and last[0] == batch:
            return last[1]
        tokens = batch.decode_seqs + batch.prefill_tokens
        parts = [s.iteration_time_s(batch) for s in self.stages] + [
            h(tokens) for h in self.hand_offs
        ]
        object.__setattr__(self, "_last", (batch, parts))
        return parts

    def iteration_time_s(self, batch: IterationBatch) -> float:
        """Latency of one pass through every stage and hand-off."""
        if batch.decode_seqs + batch.prefill_tokens <= 0:
            return 0.0
        return sum(self.stage_times_s(batch))

    def kv_transfer_time_s(self, tokens: int) -> float:
        """Every stage sends its own layers' KV in parallel: the slowest one."""
        return max(s.kv_transfer_time_s(tokens) for s in self.stages)


__all__ = [
    "PipelineInstanceCost",
    "cross_pool_hand_off",
]
