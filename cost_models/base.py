"""The contract between cost models and the solver.

A training cost model is a pure function of (problem, plan). The solver uses it in three
steps, each cheaper than the next is expensive:

1. `check(problem, plan)`: structural rules (divisibility, topology, batch, schedule), no
   costs. An empty list means the plan can be expressed.
2. `profile(problem, plan)`: per-layer time and memory for the plan's degrees, micro-batch,
   ZeRO stage and recompute, independent of the pipeline split (`stage_layers` is ignored).
   The pipeline-partition program and the search's bounds are built from it.
3. `evaluate(problem, plan)`: the full estimate for a plan whose `stage_layers` is set:
   metrics, memory per stage, violations. It raises `InfeasiblePlan` only when no number can
   be computed at all (GPU count mismatch, stage_layers not summing to the layer count).

Units: seconds, bytes (SI) and FLOP; per GPU unless a name says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from hardware_catalog.schema import ResolvedCluster
from specs.model import ModelSpec
from specs.plan import MemoryReport, PlanKey, TrainingMetrics, TrainingPlan, Violation
from specs.workload import TrainingWorkload


@dataclass(frozen=True)
class TrainingProblem:
    """A resolved training problem: what every cost model and solver works on."""

    model: ModelSpec
    cluster: ResolvedCluster
    workload: TrainingWorkload
    memory_headroom_gib: float = 2.0
    allow_tensor_across_nodes: bool = False

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def usable_memory_bytes(self) -> float:
        """Device memory less headroom: the feasibility limit per GPU."""
        return (self.cluster.accelerator.memory_gib - self.memory_headroom_gib) * 1024**3


@dataclass(frozen=True)
class LayerProfile:
    """Per-layer costs of one plan, for one GPU of the pipeline rank that holds the layer.

    Times are per micro-batch; `layer_time_s[l]` is forward + backward + recompute + the
    exposed tensor/context/expert-parallel communication of layer l. Memory is bytes per GPU.
    Chunk c (0-based, pipeline order) runs on pipeline rank c mod pipeline.
    """

    layer_time_s: tuple[float, ...]
    """Per layer: time per micro-batch (fwd + bwd + recompute + exposed intra-layer comm)."""
    layer_forward_time_s: tuple[float, ...]
    """Per layer: forward time per micro-batch (for warm-up accounting and explanations)."""
    layer_state_bytes: tuple[float, ...]
    """Per layer: weights + gradients + optimizer states held per GPU."""
    layer_activation_bytes: tuple[float, ...]
    """Per layer: activation bytes stored per in-flight micro-batch."""
    first_extra_time_s: float
    """Embedding (and position) work on the first chunk, per micro-batch."""
    last_extra_time_s: float
    """Final norm, LM head and loss on the last chunk, per micro-batch."""
    first_extra_state_bytes: float
    """Embedding weights + gradients + optimizer states on the first chunk's GPU."""
    last_extra_state_bytes: float
    """LM head (or the tied copy) and final norm states on the last chunk's GPU."""
    first_extra_activation_bytes: float
    """Embedding output stored per in-flight micro-batch on the first chunk."""
    last_extra_activation_bytes: float
    """Logits and their gradient on the last chunk (one micro-batch at a time, not per
    in-flight micro-batch)."""
    p2p_time_s: float
    """One send/recv of a micro-batch's boundary activation between consecutive chunks."""
    fixed_bytes: float
    """Per GPU, any stage: runtime context, communication buffers, allocator reserve."""
    inflight_microbatches: tuple[tuple[int, ...], ...]
    """[rank][local chunk]: micro-batches whose activations chunk (rank + local·pipeline)
    holds at the rank's memory peak under the plan's schedule."""
    num_microbatches: int
    """Micro-batches per step per pipeline (global batch / (micro_batch × data))."""
    usable_bytes: float
    """Device memory less headroom."""
    rank_extra_time_s: float = 0.0
    """Work every pipeline rank runs per micro-batch besides its layers and transfers (its
    vocabulary shard of the embedding and LM head under vocabulary parallelism; its bytes
    are in `fixed_bytes`)."""


@dataclass(frozen=True)
class TrainingEstimate:
    """A full estimate of one plan."""

    plan: TrainingPlan
    """The plan with stage_layers filled in."""
    feasible: bool
    violations: list[Violation]
    metrics: TrainingMetrics
    memory: MemoryReport
    details: dict[str, Any] = field(default_factory=dict)
    """Extra figures for explanations: per-rank times, comm tiers, exposed comm..."""


@runtime_checkable
class TrainingCostModel(Protocol):
    """A plug-in that prices training plans."""

    name: str
    version: str

    def check(self, problem: TrainingProblem, plan: TrainingPlan) -> list[Violation]:
        """Structural rules only (no costs); empty means the plan can be expressed."""
        ...

    def profile(self, problem: TrainingProblem, plan: TrainingPlan) -> LayerProfile:
        """Per-layer costs independent of the pipeline split."""
        ...

    def evaluate(self, problem: TrainingProblem, plan: TrainingPlan) -> TrainingEstimate:
        """Full estimate of a plan with stage_layers set; raises InfeasiblePlan only when
        nothing can be computed."""
        ...


@runtime_checkable
class KeyedTrainingCostModel(Protocol):
    """Optional fast entry points a cost model may add (the solver uses them when present
    and falls back to `check` / `profile` otherwise). Each must return exactly what the
    plain method returns for `key.to_plan()`; they exist so a search can screen tens of
    thousands of candidates without building a validated `TrainingPlan` for each."""

    def check_key(self, problem: TrainingProblem, key: PlanKey) -> list[Violation]:
        """`check(problem, key.to_plan())`."""
        ...

    def profile_key(self, problem: TrainingProblem, key: PlanKey) -> LayerProfile:
        """`profile(problem, key.to_plan())`."""
        ...


def check_key(
    cost_model: TrainingCostModel, problem: TrainingProblem, key: PlanKey
) -> list[Violation]:
    """`cost_model.check_key` when it offers one, else `check` of `key.to_plan()`."""
    if isinstance(cost_model, KeyedTrainingCostModel):
        return cost_model.check_key(problem, key)
    return cost_model.check(problem, key.to_plan())


def profile_key(
    cost_model: TrainingCostModel, problem: TrainingProblem, key: PlanKey
) -> LayerProfile:
    """`cost_model.profile_key` when it offers one, else `profile` of `key.to_plan()`."""
    if isinstance(cost_model, KeyedTrainingCostModel):
        return cost_model.profile_key(problem, key)
    return cost_model.profile(problem, key.to_plan())


@runtime_checkable
class BoundedTrainingCostModel(Protocol):
    """Optional bounds a cost model may guarantee so that an exact search can skip work:
    plans (or whole groups of plans) are dropped only when a bound proves they cannot fit or
    cannot be among the fastest, so the search result does not change."""

    def group_memory_lower_bound_bytes(self, problem: TrainingProblem, key: PlanKey) -> float:
        """A lower bound, bytes per GPU, on the peak memory (the busiest pipeline rank, as
        `evaluate` reports it in `memory.peak_gib`) of every plan that differs from `key` at
        most in `micro_batch_size`, `recompute`, `virtual_pipeline` and `pipeline_schedule`,
        under every `stage_layers` split. The caller may use any member's key and apply the
        answer to the whole group."""
        ...

    def step_time_lower_bound_s(self, problem: TrainingProblem, key: PlanKey) -> float:
        """A lower bound, seconds, on `evaluate(...).metrics.step_time_s` of plan `key` under
        every `stage_layers` split (up to floating-point rounding: callers leave a small
        relative slack)."""
        ...
