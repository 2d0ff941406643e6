"""Interface between serving cost models and the serving simulator.

A serving cost model prices one engine instance (tensor × pipeline × expert GPUs holding
one replica of a model) per forward pass ("iteration") of continuous batching (Orca, Yu et
al., OSDI'22; vLLM, Kwon et al., SOSP'23) with chunked prefill (Sarathi-Serve, Agrawal et
al., OSDI'24). The simulator (`solver/serving/simulate.py`) builds one `IterationBatch` per
pass and asks `InstanceCost.iteration_time_s` for its latency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from hardware_catalog.schema import ResolvedCluster
    from specs.model import ModelSpec


class IterationBatch(NamedTuple):
    """One forward pass of one continuous-batching engine instance (a named tuple: the
    simulator builds one per iteration)."""

    decode_seqs: int = 0  # sequences producing one token each
    decode_context_tokens: int = 0  # Σ of their context lengths (KV read once per step)
    prefill_tokens: int = 0  # new prompt tokens processed in this pass (chunked prefill)
    prefill_attention_pairs: float = 0.0  # Σ over prefill chunks of n·past + n·(n+1)/2
    prefill_seqs: int = 0  # sequences with a prefill chunk in this pass


PrefillPolicy = Literal["mixed", "separate", "separate_unless_chunked"]
"""How an engine's scheduler puts prompts into iterations:

- `mixed`: prompt chunks and the running decodes share an iteration, the decodes first
  (Sarathi-Serve's stall-free batching; vLLM V1, TensorRT-LLM in-flight batching);
- `separate`: an iteration with prompts runs prompts only and the decodes wait for it
  (vLLM V0 without chunked prefill, SGLang's default prefill-first batches);
- `separate_unless_chunked`: `separate` without a token budget, `mixed` with one (vLLM V0,
  where `--enable-chunked-prefill` switches to mixed batches)."""


KvAllocation = Literal["reserve", "paged"]
"""How an engine admits requests into its KV cache:

- `reserve`: a request is admitted only when the cache can hold its prompt and its whole
  output; nothing is ever evicted (TensorRT-LLM's default `GUARANTEED_NO_EVICT` capacity
  scheduler);
- `paged`: a request is admitted when its prompt fits, and its cache grows a token per decode
  step; when the running decodes need more than is free, the most recently admitted running
  request is preempted: its cache is freed and it goes back to the head of the queue, to
  prefill its prompt and the tokens it had generated again (vLLM's PagedAttention block
  manager with preemption by recomputation, Kwon et al., SOSP'23 §4.5, its default in V0 and
  V1; SGLang retracts decodes the same way when its optimistic admission overshoots)."""


@dataclass(frozen=True, slots=True)
class SchedulerPolicy:
    """The scheduling behaviour of an engine that the simulator follows
    (`solver/serving/simulate.py`). The default is the simulator's original policy."""

    prefill: PrefillPolicy = "mixed"
    decode_steps: int = 1
    """Decode steps per scheduler call (vLLM V0 `--num-scheduler-steps`): new prompts join
    only at the end of a block of this many decode steps."""
    prefix_caching: bool = False
    """Prompt prefixes already in the KV cache are not computed again (vLLM's automatic
    prefix caching, SGLang's radix cache, TensorRT-LLM's KV block reuse): a request's shared
    prefix (`Request.shared_prefix_tokens`) is prefilled once per instance."""
    split_prompts: bool = True
    """A prompt may be split over iterations to fill the token budget (chunked prefill).
    False: a prompt runs whole, in an iteration whose remaining budget holds it (TensorRT-LLM
    without chunked context); one that no budget holds runs alone."""
    kv_allocation: KvAllocation = "reserve"
    """How a colocated instance hands out its KV cache (`KvAllocation`)."""

    def __post_init__(self) -> None:
        if self.decode_steps < 1:
            raise ValueError(f"decode_steps must be >= 1 (got {self.decode_steps})")

    def separates(self, chunked: bool) -> bool:
        """Whether an iteration with prompts runs them without the decodes."""
        return self.prefill == "separate" or (
            self.prefill == "separate_unless_chunked" and not chunked
        )


DEFAULT_SCHEDULER = SchedulerPolicy()


def scheduler_of(cost: object) -> SchedulerPolicy:
    """The cost's `scheduler` attribute (an engine-wrapped cost has one), else the default."""
    policy = getattr(cost, "scheduler", None)
    return policy if isinstance(policy, SchedulerPolicy) else DEFAULT_SCHEDULER


@runtime_checkable
class InstanceCost(Protocol):
    """Costs of one engine instance (tp × pp × ep GPUs) of one model on one accelerator."""

    @property
    def num_gpus(self) -> int:
        """GPUs of the instance (tensor × pipeline × expert)."""
        ...

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache tokens the instance can hold (all sequences together)."""
        ...

    @property
    def kv_cache_gib(self) -> float:
        """KV-cache memory per GPU, GiB."""
        ...

    @property
    def weights_gib(self) -> float:
        """Weight memory per GPU, GiB."""
        ...

    def iteration_time_s(self, batch: IterationBatch) -> float:
        """Latency of one forward pass over `batch`, seconds."""
        ...

    def kv_transfer_time_s(self, tokens: int) -> float:
        """Seconds to move the KV cache of `tokens` tokens to another instance."""
        ...


class ForwardingCost:
    """An `InstanceCost` that wraps another (`base`) and answers its GPU count, memory, KV
    transfers and scheduler from it; subclasses change what they price differently."""

    base: InstanceCost

    @property
    def num_gpus(self) -> int:
        return self.base.num_gpus

    @property
    def kv_capacity_tokens(self) -> int:
        return self.base.kv_capacity_tokens

    @property
    def kv_cache_gib(self) -> float:
        return self.base.kv_cache_gib

    @property
    def weights_gib(self) -> float:
        return self.base.weights_gib

    @property
    def scheduler(self) -> SchedulerPolicy:
        return scheduler_of(self.base)

    def iteration_time_s(self, batch: IterationBatch) -> float:
        return self.base.iteration_time_s(batch)

    def kv_transfer_time_s(self, tokens: int) -> float:
        return self.base.kv_transfer_time_s(tokens)


@dataclass(frozen=True)
class VirtualEngineCost(ForwardingCost):
    """One of the `stages` schedulers of a pipelined instance.

    A p-stage instance keeps p batches in flight, one per stage, as vLLM's virtual engines
    (one scheduler per pipeline stage, each with its share of the KV-cache blocks; vLLM
    `Scheduler(..., virtual_engine)`, `num_gpu_blocks // pipeline_parallel_size`), SGLang's
    and TensorRT-LLM's pipeline micro-batches do: each batch still takes the whole
    pipeline's latency per iteration (`iteration_time_s` of the instance), but p of them
    proceed at once, so a p-stage instance serves like p engines of 1/p of its KV cache.

    Uneven stages (different hardware, `cost_models.serving.pipeline`): the p batches
    circulate through the stages (and the hand-off links), each served one batch at a
    time, a closed cyclic pipeline whose period per batch is the larger of the latency
    (Σ of the parts) and p × the slowest part (the cycle time of a marked graph is its
    largest cycle delay over the cycle's tokens: the loop through all parts holds p
    batches, each part's own loop one; Ramamoorthy & Ho, IEEE TSE 1980). A cost with
    `stage_times_s` gets that period; the homogeneous model's stages are even, so its
    latency is already the period (p × Σ/p)."""

    base: InstanceCost
    stages: int
    _parts: Callable[[IterationBatch], list[float]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # looked up once: iteration_time_s is the simulator's innermost call
        object.__setattr__(self, "_parts", getattr(self.base, "stage_times_s", None))

    @property
    def kv_capacity_tokens(self) -> int:
        return self.base.kv_capacity_tokens // self.stages

    @property
    def iteration_time_fn(self) -> Callable[[IterationBatch], float]:
        """`iteration_time_s` itself, or, with even stages (no `stage_times_s`), the base's,
        which it returns as it is (one call fewer in the simulator's innermost loop)."""
        return self.base.iteration_time_s if self._parts is None else self.iteration_time_s

    def iteration_time_s(self, batch: IterationBatch) -> float:
        latency = self.base.iteration_time_s(batch)
        parts = self._parts
        if parts is None or latency <= 0.0:
            return latency
        return max(latency, self.stages * max(parts(batch)))


def pipeline_engines(cost: InstanceCost) -> tuple[InstanceCost, int]:
    """(the cost of one scheduler, schedulers per instance): a cost with a
    `pipeline_stages` attribute p > 1 runs as p `VirtualEngineCost` engines; any other as
    itself, once."""
    stages = int(getattr(cost, "pipeline_stages", 1) or 1)
    if stages <= 1 or isinstance(cost, VirtualEngineCost):
        return cost, 1
    return VirtualEngineCost(cost, stages), stages


class ServingCostModel(Protocol):
    """A serving cost-model plug-in (registered in `cost_models.serving.registry`): builds
    the `InstanceCost` of one instance layout. Raises `specs.errors.InfeasiblePlan` when the
    layout cannot run (memory, divisibility, precision, topology). `layers` = (start, stop)
    prices one pipeline stage holding only those layers (pipeline 1; embedding on the stage
    that starts at 0, LM head and sampler on the one that ends at the last layer), the
    building block of an instance whose stages run on different hardware
    (`cost_models.serving.pipeline`)."""

    name: str

    def instance_cost(
        self,
        model: ModelSpec,
        cluster: ResolvedCluster,
        tensor: int,
        pipeline: int,
        expert: int,
        weight_precision: Literal["bf16", "fp16", "fp8", "int4"],
        kv_precision: Literal["bf16", "fp16", "fp8"],
        *,
        memory_utilization: float = 0.9,
        kv_transfer_tier: Literal["intra", "inter"] = "inter",
        layers: tuple[int, int] | None = None,
    ) -> InstanceCost: ...


__all__ = [
    "DEFAULT_SCHEDULER",
    "ForwardingCost",
    "InstanceCost",
    "IterationBatch",
    "PrefillPolicy",
    "SchedulerPolicy",
    "ServingCostModel",
    "VirtualEngineCost",
    "pipeline_engines",
    "scheduler_of",
]
