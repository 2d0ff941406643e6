"""Training plans (what a search returns and `/v1/estimate` takes) and their metrics.

`content_hash()` keys deduplication: update it when a field that changes the answer is added.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal, NamedTuple, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from specs._base import Spec

Recompute = Literal["none", "selective", "full"]
PipelineSchedule = Literal[
    "gpipe",
    "1f1b",
    "interleaved_1f1b",
    "zero_bubble_h1",
    "zero_bubble_h2",
    "zero_bubble_v",
    "v_half",
    "dualpipe",
    "dualpipe_v",
]
"""The pipeline schedules the cost model prices (`cost_models.analytical.schedules`, whose
registry must list exactly these, in this order)."""
PIPELINE_SCHEDULES: tuple[str, ...] = get_args(PipelineSchedule)
SCHEDULE_CHUNKS: dict[str, tuple[int, int | None]] = {
    "gpipe": (1, 1),
    "1f1b": (1, 1),
    "interleaved_1f1b": (2, None),
    "zero_bubble_h1": (1, 1),
    "zero_bubble_h2": (1, 1),
    "zero_bubble_v": (2, 2),
    "v_half": (2, 2),
    "dualpipe": (1, 1),
    "dualpipe_v": (2, 2),
}
"""Model chunks per pipeline rank (`parallelism.virtual_pipeline`) each schedule runs:
(least, most; None = no limit). The V-shape schedules run 2, in a V."""

ContextParallelAlgorithm = Literal["ring", "ulysses", "all_gather", "hybrid"]
"""How the context-parallel ranks exchange attention inputs (`cost_models.analytical.
context_parallel` prices each): `ring` passes K/V blocks around the ring, overlapped with the
attention blocks (Liu et al. 2023; Megatron-Core `--cp-comm-type p2p`); `ulysses` re-splits
Q, K, V and the output from sequence to heads with all-to-alls (Jacobs et al. 2023,
DeepSpeed-Ulysses; `a2a`); `all_gather` gathers the whole sequence's K/V before a local
attention (Llama 3, Dubey et al. 2024 §3.3.2; `allgather`); `hybrid` runs Ulysses inside
groups of `context_parallel_heads` ranks and a ring across the groups (USP, Fang & Zhao 2024,
arXiv 2405.07719; LoongTrain's 2D attention, Gu et al. 2024, arXiv 2406.18485; `a2a+p2p`)."""
CONTEXT_PARALLEL_ALGORITHMS: tuple[str, ...] = get_args(ContextParallelAlgorithm)

OffloadDevice = Literal["none", "cpu", "nvme"]
"""Where offloaded model states live: on the GPU (`none`), in host memory (`cpu`) or on the
node's NVMe drives through host memory (`nvme`, ZeRO-Infinity)."""
OFFLOAD_DEVICES: tuple[str, ...] = get_args(OffloadDevice)


class Offload(Spec):
    """What a training plan moves off the GPU (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity,
    Rajbhandari et al. 2021; activation offloading, PipeOffload / Megatron-Core
    `--cpu-offloading`). The default offloads nothing."""

    activations: float = Field(default=0.0, ge=0.0, le=1.0)
    """Fraction of the activations saved for the backward pass that wait in host memory
    (copied out during the forward, back before the backward), fraction 0–1."""
    optimizer: OffloadDevice = "none"
    """Where the optimizer states (fp32 master weights, Adam moments) and the Adam step
    live: `none` (GPU), `cpu` (host memory, CPU Adam) or `nvme`."""
    parameters: OffloadDevice = "none"
    """Where the (ZeRO-3 sharded) parameters live between uses: `none` (GPU), `cpu` or
    `nvme`; anything but `none` needs zero_stage 3."""

    @property
    def enabled(self) -> bool:
        return self.activations > 0.0 or self.optimizer != "none" or self.parameters != "none"


class ParallelDims(Spec):
    """Parallel degrees. `data × tensor × pipeline × context` is the GPU count; expert groups
    are carved out of `data × context × tensor` as in Megatron-Core."""

    data: int = Field(default=1, ge=1, le=1_048_576)
    """Data-parallel degree (replicas of the model)."""
    tensor: int = Field(default=1, ge=1, le=1024)
    """Tensor-parallel degree (Megatron column/row split of every GEMM)."""
    pipeline: int = Field(default=1, ge=1, le=1024)
    """Pipeline-parallel stages (devices along the pipeline)."""
    virtual_pipeline: int = Field(default=1, ge=1, le=64)
    """Model chunks per pipeline rank (interleaved 1F1B when > 1)."""
    context: int = Field(default=1, ge=1, le=1024)
    """Context-parallel degree (sequence split of attention, ring exchange of K/V)."""
    expert: int = Field(default=1, ge=1, le=4096)
    """Expert-parallel degree (MoE layers)."""
    expert_tensor: int = Field(default=1, ge=1, le=1024)
    """Tensor-parallel degree inside each expert (MoE layers)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism of norms/dropout across the tensor group."""

    @model_validator(mode="after")
    def _check(self) -> ParallelDims:
        if self.sequence_parallel and self.tensor == 1:
            raise ValueError("sequence_parallel requires tensor > 1 (got tensor = 1)")
        return self

    @property
    def world_size(self) -> int:
        return self.data * self.tensor * self.pipeline * self.context

    @property
    def dp(self) -> int:
        return self.data

    @property
    def tp(self) -> int:
        return self.tensor

    @property
    def pp(self) -> int:
        return self.pipeline

    @property
    def vp(self) -> int:
        return self.virtual_pipeline

    @property
    def cp(self) -> int:
        return self.context

    @property
    def ep(self) -> int:
        return self.expert

    @property
    def etp(self) -> int:
        return self.expert_tensor

    @property
    def pipeline_enabled(self) -> bool:
        return self.pipeline > 1

    @property
    def tensor_enabled(self) -> bool:
        return self.tensor > 1

    @property
    def context_enabled(self) -> bool:
        return self.context > 1

    @property
    def expert_enabled(self) -> bool:
        return self.expert > 1


FRAMEWORK_ALIASES = {
    "megatron": "megatron_core",
    "mcore": "megatron_core",
    "megatron_core": "megatron_core",
    "nemo": "megatron_core",
    "megatron_lm": "megatron_lm",
    "fsdp": "fsdp",
    "fsdp1": "fsdp",
    "fsdp2": "fsdp",
    "pytorch_fsdp": "fsdp",
    "torch_fsdp": "fsdp",
    "deepspeed": "deepspeed",
    "torchtitan": "torchtitan",
}
"""Common spellings of the built-in frameworks' names (after lower-casing and turning spaces
and hyphens into underscores)."""


def canonical_framework_name(value: Any) -> Any:
    """A framework name as the registry spells it: case, spaces and hyphens ignored
    (`Megatron-Core`, `megatron core`), common aliases (`mcore`, `FSDP2`, `PyTorch FSDP`)
    mapped; any other string is kept (plug-in frameworks) and non-strings pass through for
    the validator to refuse."""
    if not isinstance(value, str):
        return value
    key = value.strip().lower().replace("-", "_").replace(" ", "_")
    return FRAMEWORK_ALIASES.get(key, key if key else value)


class DataShare(Spec):
    """Data-parallel replicas on one node group and the sequences each takes per step."""

    group: str = Field(min_length=1, max_length=64)
    """The node group (or pool, by its first group's name) the replicas run on."""
    replicas: int = Field(ge=1, le=1_048_576)
    """Data-parallel replicas on the group (each tensor × pipeline × context GPUs)."""
    sequences: int = Field(ge=1, le=16_777_216)
    """Sequences per step of each of these replicas (a multiple of micro_batch_size)."""


def _check_per_stage(field: str, what: str, value: list[Any], p: ParallelDims) -> None:
    """A per-stage list (`stage_groups`, `stage_tensor`): one entry per pipeline stage, and
    several distinct entries only with one chunk per stage (the composed pipeline is priced
    for 1F1B)."""
    if len(value) != p.pipeline:
        raise ValueError(
            f"{field} has {len(value)} entries; it must have one per pipeline stage ({p.pipeline})"
        )
    if p.virtual_pipeline > 1 and len(set(value)) > 1:
        raise ValueError(
            f"{field} with several values and virtual_pipeline > 1 is not priced yet: give "
            f"virtual_pipeline 1, or one {what} for every stage"
        )


class TrainingPlan(Spec):
    """One parallel execution plan for a training step."""

    parallelism: ParallelDims
    """The parallel degrees (data, tensor, pipeline, virtual pipeline, context, expert,
    expert tensor) and sequence parallelism."""
    micro_batch_size: int = Field(default=1, ge=1, le=65_536)
    """Sequences per micro-batch per data-parallel rank."""
    zero_stage: Literal[0, 1, 2, 3] = 1
    """ZeRO stage; 1 is Megatron's distributed optimizer."""
    recompute: Recompute = "none"
    """Activation recomputation: none, selective (attention core) or full (whole layer)."""
    pipeline_schedule: PipelineSchedule = "1f1b"
    """Pipeline schedule (`GET /v1/frameworks` lists which framework runs which):
    gpipe, 1f1b, interleaved_1f1b (virtual_pipeline > 1), the zero-bubble family
    zero_bubble_h1 / zero_bubble_h2 (one chunk per rank), zero_bubble_v / v_half /
    dualpipe_v (virtual_pipeline = 2 in a V: rank j runs chunks j and 2p−1−j) and dualpipe
    (both directions, two parameter copies per rank)."""
    stage_layers: list[int] | None = Field(default=None, max_length=65_536)
    """Layers per pipeline chunk, length pipeline × virtual_pipeline, in pipeline order
    (chunk c runs on rank c mod pipeline); null lets the service choose the split."""
    flash_attention: bool = True
    """Fused (flash) attention: no s×s score matrices are stored."""
    context_parallel_algorithm: ContextParallelAlgorithm = "ring"
    """How the `parallelism.context` ranks exchange attention inputs: `ring` (K/V blocks
    passed around a ring, overlapped with attention), `ulysses` (all-to-alls from sequence to
    heads: the per-tensor-rank query and KV heads must divide by the context degree),
    `all_gather` (the whole sequence's K/V gathered before a local attention, exposed) or
    `hybrid` (Ulysses inside groups of `context_parallel_heads` ranks, a ring across them).
    Anything but `ring` needs `parallelism.context` > 1."""
    context_parallel_heads: int = Field(default=1, ge=1, le=1024)
    """With `context_parallel_algorithm` = `hybrid`: the degree of its head-parallel
    (Ulysses, all-to-all) part, ranks per head group (consecutive ranks, inside a node when
    they fit); the ring part has `parallelism.context / context_parallel_heads` ranks. It
    must divide the context degree and lie strictly between 1 and it. 1 for every other
    algorithm."""
    stage_groups: list[str] | None = Field(default=None, min_length=1, max_length=65_536)
    """On a cluster of mixed hardware: the node group (or pool of identical groups, by the
    name of its first group; `cluster.node_groups[].name`, default the accelerator id) that
    runs each pipeline stage, one name per stage (length `pipeline`). The tensor, context
    and data degrees are the same on every stage; each stage takes tensor × context × data
    GPUs of its group, and groups left out stay idle. Null on a homogeneous cluster."""
    stage_tensor: list[int] | None = Field(default=None, min_length=1, max_length=65_536)
    """With `stage_groups`: the tensor-parallel degree of each pipeline stage, one per stage
    (HexiScale / FlashFlex: wide tensor groups on the slower or smaller GPUs, narrow ones
    where the GPUs are fast or the scale-up link is PCIe); each stage then takes its tensor
    × context × data GPUs. `parallelism.tensor` is the widest stage's degree. Null: every
    stage runs `parallelism.tensor`. No launcher exported here runs it (Megatron-LM,
    torchtitan and DeepSpeed give every stage one tensor degree): such plans are estimates
    of what the hardware allows, and exports refuse them by rule."""
    data_shares: list[DataShare] | None = Field(default=None, min_length=1, max_length=64)
    """On a cluster of mixed hardware: data-parallel replicas on several node groups with
    uneven shares of the batch (Cephalo, Poplar), so that slower GPUs take fewer sequences;
    the replicas count to `parallelism.data` and their sequences to the global batch. Each
    replica sits on one group, every replica splits the layers alike (`stage_layers`), and
    the gradients are reduced across the groups. Not with `stage_groups`."""
    vocab_parallel: bool = False
    """Vocabulary parallelism (Yeung et al., "Balancing Pipeline Parallelism with Vocabulary
    Parallelism", MLSys 2025, arXiv 2411.05288): the input embedding and the output layer (LM
    head and its softmax cross-entropy) are split along the vocabulary over all pipeline
    stages (each GPU holds vocab / (tensor × pipeline) rows) instead of living on the first
    and last stage; their compute, parameters, gradients, optimizer states and logits are
    spread evenly, at the price of small per-micro-batch collectives over the pipeline group
    (a broadcast of the last stage's output, the softmax all-reduce barrier, the reduction
    of the input gradient) and one more micro-batch of activations in flight. Run by the
    sail-sg/VocabularyParallelism fork of Megatron-LM (`--enable-vocab-parallel`,
    1F1B; V-Half on its zero-bubble branch). Needs `parallelism.pipeline` > 1 and untied
    embeddings. False: Megatron's layout (embedding on the first stage, LM head on the
    last), whose imbalance the layer split (`stage_layers`) can only partly offset (what
    `--account-for-embedding-in-pipeline-split` / `--account-for-loss-in-pipeline-split`
    do)."""
    framework: str | None = Field(default=None, min_length=1, max_length=64)
    """The training framework that runs the plan (`megatron_core`, `torchtitan`,
    `deepspeed`, `fsdp`, `megatron_lm`; `GET /v1/frameworks`); it sets what overlaps with
    what and which combinations are allowed. Null lets the service pick the first framework
    that can run the plan."""
    offload: Offload = Field(default_factory=Offload)
    """What the plan keeps off the GPU: a fraction of the saved activations, the optimizer
    states and the parameters (`cpu` or `nvme`); default (or null, as plan listings show
    it) nothing."""

    @field_validator("offload", mode="before")
    @classmethod
    def _no_offload(cls, value: Any) -> Any:
        """null is no offload (a plan as `GET /v1/plans/{id}` shows it posts back as is)."""
        return Offload() if value is None else value

    @field_validator("framework", mode="before")
    @classmethod
    def _canonical_framework(cls, value: Any) -> Any:
        return canonical_framework_name(value)

    @field_validator("context_parallel_algorithm")
    @classmethod
    def _algorithm_needs_context(cls, value: str, info: ValidationInfo) -> str:
        """Only the ring (the default) without context parallelism (reported at
        `plan.context_parallel_algorithm`)."""
        p = info.data.get("parallelism")
        if value != "ring" and isinstance(p, ParallelDims) and p.context == 1:
            raise ValueError(
                f"context_parallel_algorithm {value} needs parallelism.context > 1 (got 1)"
            )
        return value

    @field_validator("vocab_parallel")
    @classmethod
    def _vocab_needs_pipeline(cls, value: bool, info: ValidationInfo) -> bool:
        """Vocabulary parallelism splits over the pipeline stages: pipeline > 1 (reported
        at `plan.vocab_parallel`)."""
        p = info.data.get("parallelism")
        if value and isinstance(p, ParallelDims) and p.pipeline == 1:
            raise ValueError("vocab_parallel needs parallelism.pipeline > 1 (got 1)")
        return value

    @model_validator(mode="after")
    def _vocab_on_one_kind(self) -> TrainingPlan:
        """Vocabulary parallelism is priced on one kind of hardware: with stage_groups all
        on one group (a pool's plan on a mixed cluster), never across groups or with
        data_shares (reported at `plan.vocab_parallel`)."""
        across = self.stage_groups is not None and len(set(self.stage_groups)) > 1
        if self.vocab_parallel and (across or self.data_shares):
            raise ValueError(
                "vocab_parallel with stage_groups on several groups or with data_shares is "
                "not priced: give one or the other"
            )
        return self

    @field_validator("context_parallel_heads")
    @classmethod
    def _heads_degree(cls, value: int, info: ValidationInfo) -> int:
        """The hybrid's head degree divides the context degree, strictly between 1 and it;
        1 for the other algorithms (reported at `plan.context_parallel_heads`)."""
        p = info.data.get("parallelism")
        algorithm = info.data.get("context_parallel_algorithm")
        if not isinstance(p, ParallelDims) or algorithm is None:
            return value
        c = p.context
        if algorithm != "hybrid":
            if value != 1:
                raise ValueError(
                    f"context_parallel_heads must be 1 unless context_parallel_algorithm is "
                    f"hybrid (got {value} with {algorithm})"
                )
            return value
        if not 1 < value < c or c % value:
            raise ValueError(
                f"context_parallel_heads of a hybrid must divide parallelism.context ({c}) "
                f"and lie strictly between 1 and it (got {value}); use ulysses or ring for "
                "the ends"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> TrainingPlan:
        p = self.parallelism
        lo, hi = SCHEDULE_CHUNKS[self.pipeline_schedule]
        if self.pipeline_schedule == "interleaved_1f1b" and p.virtual_pipeline < 2:
            raise ValueError(
                "pipeline_schedule interleaved_1f1b requires parallelism.virtual_pipeline > 1 "
                f"(got {p.virtual_pipeline})"
            )
        if self.pipeline_schedule == "1f1b" and p.virtual_pipeline > 1:
            raise ValueError(
                "parallelism.virtual_pipeline > 1 requires pipeline_schedule interleaved_1f1b "
                f"(got {self.pipeline_schedule})"
            )
        if self.offload.parameters != "none" and self.zero_stage != 3:
            raise ValueError(
                f"offload.parameters {self.offload.parameters} needs zero_stage 3 (the "
                f"parameters are sharded before they are offloaded; got zero_stage "
                f"{self.zero_stage})"
            )
        if p.virtual_pipeline < lo or (hi is not None and p.virtual_pipeline > hi):
            want = f"exactly {lo}" if lo == hi else f"at least {lo}"
            raise ValueError(
                f"pipeline_schedule {self.pipeline_schedule} runs {want} model chunk(s) per "
                f"pipeline rank: parallelism.virtual_pipeline must be {lo if lo == hi else f'>= {lo}'} "
                f"(got {p.virtual_pipeline})"
            )
        return self

    @field_validator("stage_layers")
    @classmethod
    def _one_entry_per_chunk(cls, value: list[int] | None, info: ValidationInfo) -> Any:
        """pipeline × virtual_pipeline entries, each at least one layer (reported at
        `plan.stage_layers`)."""
        p = info.data.get("parallelism")
        if value is None or not isinstance(p, ParallelDims):
            return value
        chunks = p.pipeline * p.virtual_pipeline
        if len(value) != chunks:
            raise ValueError(
                f"stage_layers has {len(value)} entries; it must have "
                f"pipeline × virtual_pipeline = {p.pipeline} × {p.virtual_pipeline} = {chunks}"
            )
        if any(n < 1 for n in value):
            raise ValueError(f"every stage_layers entry must be >= 1 (got {value})")
        return value

    @field_validator("data_shares")
    @classmethod
    def _shares_count_replicas(cls, value: list[DataShare] | None, info: ValidationInfo) -> Any:
        """The shares' replicas are the data degree; one share per group; not with
        stage_groups."""
        p = info.data.get("parallelism")
        if value is None or not isinstance(p, ParallelDims):
            return value
        if info.data.get("stage_groups") is not None:
            raise ValueError("give stage_groups or data_shares, not both")
        replicas = sum(share.replicas for share in value)
        if replicas != p.data:
            raise ValueError(f"data_shares hold {replicas} replicas; parallelism.data is {p.data}")
        groups = [share.group for share in value]
        if len(set(groups)) != len(groups):
            raise ValueError(f"data_shares name a group twice ({groups})")
        return value

    @field_validator("stage_groups")
    @classmethod
    def _one_group_per_stage(cls, value: list[str] | None, info: ValidationInfo) -> Any:
        """One name per pipeline stage; several groups only with one chunk per stage."""
        p = info.data.get("parallelism")
        if value is None or not isinstance(p, ParallelDims):
            return value
        _check_per_stage("stage_groups", "group", value, p)
        return value

    @field_validator("stage_tensor")
    @classmethod
    def _one_degree_per_stage(cls, value: list[int] | None, info: ValidationInfo) -> Any:
        """One degree per stage, with stage_groups, the widest equal to parallelism.tensor."""
        p = info.data.get("parallelism")
        if value is None or not isinstance(p, ParallelDims):
            return value
        if info.data.get("stage_groups") is None:
            raise ValueError("stage_tensor needs stage_groups (the node group of every stage)")
        _check_per_stage("stage_tensor", "degree", value, p)
        if any(t < 1 for t in value):
            raise ValueError(f"every stage_tensor entry must be >= 1 (got {value})")
        if max(value) != p.tensor:
            raise ValueError(
                f"parallelism.tensor ({p.tensor}) must be the widest stage's degree "
                f"(max of stage_tensor {value} = {max(value)})"
            )
        return value

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A plan without stage groups dumps (and hashes) as before the field existed."""
        data = handler(self)
        if isinstance(data, dict):
            for name in ("stage_groups", "stage_tensor", "data_shares"):
                if data.get(name, 0) is None:
                    data.pop(name)
            if data.get("offload") == _NO_OFFLOAD:
                data.pop("offload")
        return data

    def stage_tensor_degrees(self) -> list[int]:
        """The tensor degree of every pipeline stage (`stage_tensor`, or
        `parallelism.tensor` on each)."""
        if self.stage_tensor is not None:
            return list(self.stage_tensor)
        return [self.parallelism.tensor] * self.parallelism.pipeline

    @property
    def num_gpus(self) -> int:
        """GPUs the plan runs on: `parallelism.world_size`, or with `stage_tensor` the sum of
        every stage's tensor × context × data."""
        if self.stage_tensor is None:
            return self.parallelism.world_size
        p = self.parallelism
        return sum(self.stage_tensor) * p.context * p.data

    def content_hash(self) -> str:
        """Hash of the canonical JSON of every field (update me when you add a field); the
        ring with no head degree (the context-parallel defaults) hashes as before those
        fields existed, and so does a plan without vocabulary parallelism, so that stored plans
        keep their hashes."""
        data = self.model_dump(mode="json")
        if data.get("context_parallel_algorithm") == "ring":
            data.pop("context_parallel_algorithm")
        if data.get("context_parallel_heads") == 1:
            data.pop("context_parallel_heads")
        if data.get("vocab_parallel") is False:
            data.pop("vocab_parallel")
        return canonical_hash(data)

    def key(self) -> PlanKey:
        """The plan as a `PlanKey` (the search's and the cost models' encoding)."""
        p = self.parallelism
        return PlanKey(
            data=p.data,
            tensor=p.tensor,
            pipeline=p.pipeline,
            virtual_pipeline=p.virtual_pipeline,
            context=p.context,
            expert=p.expert,
            expert_tensor=p.expert_tensor,
            sequence_parallel=p.sequence_parallel,
            micro_batch_size=self.micro_batch_size,
            zero_stage=self.zero_stage,
            recompute=self.recompute,
            pipeline_schedule=self.pipeline_schedule,
            stage_layers=tuple(self.stage_layers) if self.stage_layers else (),
            flash_attention=self.flash_attention,
            framework=self.framework or "",
            context_parallel_algorithm=self.context_parallel_algorithm,
            context_parallel_heads=self.context_parallel_heads,
            vocab_parallel=self.vocab_parallel,
            offload_activations=self.offload.activations,
            offload_optimizer=self.offload.optimizer,
            offload_parameters=self.offload.parameters,
        )


_NO_OFFLOAD = {"activations": 0.0, "optimizer": "none", "parameters": "none"}
"""A plan that offloads nothing dumps (and hashes) without `offload`, as before the field
existed."""


class PlanKey(NamedTuple):
    """One training plan as a plain tuple with named fields: the single encoding the search
    space, the search and the cost models share (cheap to build, hash and compare, no
    validation). Fields are read by name. The field order is the canonical order: two keys
    compare as their fields in this order, which breaks ties between equally fast plans
    deterministically.

    The values must be those of a valid `TrainingPlan` (`to_plan()` builds and validates
    it; `TrainingPlan.key()` is the inverse); the defaults are `TrainingPlan`'s."""

    data: int = 1
    tensor: int = 1
    pipeline: int = 1
    virtual_pipeline: int = 1
    context: int = 1
    expert: int = 1
    expert_tensor: int = 1
    sequence_parallel: bool = False
    micro_batch_size: int = 1
    zero_stage: int = 1
    recompute: str = "none"
    pipeline_schedule: str = "1f1b"
    stage_layers: tuple[int, ...] = ()
    """Layers per pipeline chunk, or () when the partition program chooses them."""
    flash_attention: bool = True
    framework: str = ""
    """The framework's registered name, or "" when the service is to pick one."""
    context_parallel_algorithm: str = "ring"
    context_parallel_heads: int = 1
    """The hybrid's head-parallel degree (1 otherwise)."""
    vocab_parallel: bool = False
    """Embedding and LM head split over the pipeline stages (`TrainingPlan.vocab_parallel`)."""
    offload_activations: float = 0.0
    """`TrainingPlan.offload.activations`."""
    offload_optimizer: str = "none"
    """`TrainingPlan.offload.optimizer`."""
    offload_parameters: str = "none"
    """`TrainingPlan.offload.parameters`."""

    @property
    def world_size(self) -> int:
        return self.data * self.tensor * self.pipeline * self.context

    @property
    def offloads(self) -> bool:
        """Whether the plan offloads anything."""
        return (
            self.offload_activations > 0.0
            or self.offload_optimizer != "none"
            or self.offload_parameters != "none"
        )

    def without_split(self) -> PlanKey:
        """The same plan with its pipeline split left to the partition program."""
        return self._replace(stage_layers=()) if self.stage_layers else self

    def to_plan(self, stage_layers: tuple[int, ...] | list[int] | None = None) -> TrainingPlan:
        """The validated plan of this key, with `stage_layers` when given (else the key's own
        split, if it has one)."""
        layers = stage_layers if stage_layers is not None else (self.stage_layers or None)
        return TrainingPlan(
            parallelism=ParallelDims(
                data=self.data,
                tensor=self.tensor,
                pipeline=self.pipeline,
                virtual_pipeline=self.virtual_pipeline,
                context=self.context,
                expert=self.expert,
                expert_tensor=self.expert_tensor,
                sequence_parallel=self.sequence_parallel,
            ),
            micro_batch_size=self.micro_batch_size,
            zero_stage=self.zero_stage,
            recompute=self.recompute,
            pipeline_schedule=self.pipeline_schedule,
            stage_layers=list(layers) if layers is not None else None,
            flash_attention=self.flash_attention,
            framework=self.framework or None,
            context_parallel_algorithm=self.context_parallel_algorithm,
            context_parallel_heads=self.context_parallel_heads,
            vocab_parallel=self.vocab_parallel,
            offload=Offload(
                activations=self.offload_activations,
                optimizer=self.offload_optimizer,
                parameters=self.offload_parameters,
            ),
        )


def canonical_hash(payload: Any) -> str:
    """SHA-256 of canonical JSON (sorted keys, no whitespace): stable under key order."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class _Out(BaseModel):
    """Output records: plain, frozen, extra fields forbidden."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class TimeBreakdown(_Out):
    """Where a step's time goes (seconds on the critical path, exposed communication only).
    Every field but `recompute` adds up to the step time; `recompute` is the part of
    `compute` spent re-running forwards."""

    compute: float
    """Forward and backward GEMM / attention / elementwise kernels of the critical pipeline
    rank over all its micro-batches, recomputation included, seconds per step."""
    tensor_parallel_comm: float = 0.0
    """Tensor-parallel (and sequence-parallel) collectives on the critical rank not hidden
    behind compute, seconds per step."""
    data_parallel_comm: float = 0.0
    """Gradient reduction and ZeRO parameter gathers not hidden behind compute (plus the
    slowdown the overlapped part causes to the compute it hides in) and the tied-embedding
    gradient sync, seconds per step."""
    pipeline_comm: float = 0.0
    """Exposed point-to-point activation / gradient sends between pipeline stages on the
    critical rank, plus the pipeline fill and drain of overlapped sends, seconds per
    step."""
    context_parallel_comm: float = 0.0
    """Context-parallel K/V exchange on the critical rank not hidden behind attention,
    seconds per step."""
    expert_parallel_comm: float = 0.0
    """Expert-parallel all-to-all (token dispatch and combine) on the critical rank not
    hidden behind compute, seconds per step."""
    bubble: float = 0.0
    """Pipeline bubble: time the critical rank idles waiting for other stages under the
    plan's pipeline schedule, seconds per step."""
    optimizer: float = 0.0
    """Optimizer (Adam) step of the busiest rank, seconds per step."""
    recompute: float = 0.0
    """Extra forward compute re-run for activation recomputation (part of compute), seconds
    per step."""
    overhead: float = 0.0
    """Fixed per-step overhead (launch, data loading, synchronisation), host time per
    micro-batch, fp8 weight casts and straggler slowdown, seconds per step."""
    offload: float = 0.0
    """Offloading (`plan.offload`) on the busiest pipeline rank: host-link (PCIe /
    NVLink-C2C) and NVMe transfers not hidden behind compute, plus the CPU Adam step of
    offloaded optimizer states, seconds per step (0 without offload)."""


class TrainingMetrics(_Out):
    """What a training plan achieves per optimizer step."""

    step_time_s: float
    """Predicted wall time of one optimizer step (the whole global batch), seconds."""
    tokens_per_s: float
    """Training throughput of the whole job in real (non-padding) tokens:
    global_batch_size × sequence_length / step_time_s, tokens per second; with
    `workload.sequence_lengths` and packing `pad`, only the documents' tokens
    (global_batch_size × mean length) count, never the padding."""
    model_tflops_per_gpu: float
    """Model FLOPs per step (forward + backward = 3 × forward, no recompute) / step time /
    GPUs, TFLOP/s per GPU. Counts the real tokens only: with `workload.sequence_lengths`,
    the attention core per document (Σ sᵢ², not sequence_length²) and no padding."""
    mfu: float
    """Model FLOPs utilisation (real tokens and per-document attention, as
    `model_tflops_per_gpu`): model FLOPs per second per GPU (no recompute) over the
    accelerator's dense peak at the workload precision (the FP8 peak for FP8 training),
    fraction 0–1; on a mixed cluster, model FLOPs per second over the summed peaks of the
    GPUs used. Published FP8 results quote `mfu_bf16_peak`."""
    peak_memory_gib: float
    """Peak memory of the busiest GPU (the largest `memory.by_stage[].total_gib`), GiB."""
    bubble_fraction: float
    """Share of the step the pipeline bubble takes (`time_breakdown_s.bubble` /
    `step_time_s`), fraction 0–1."""
    time_breakdown_s: TimeBreakdown
    """Where the step time goes, seconds per part."""
    hardware_tflops_per_gpu: float | None = None
    """Achieved FLOP rate counting recomputation: (model + recompute FLOPs) per step / step
    time / GPUs, TFLOP/s per GPU; the model FLOPs here are those of the work done, padding
    of a `pad` document mix included."""
    mfu_bf16_peak: float | None = None
    """MFU against the dense BF16 (FP16) peak (set for BF16, FP16 and FP8 training): the
    basis published FP8 tables use; a fraction of that peak (FP8 training can exceed 1)."""
    mfu_fp8_peak: float | None = None
    """MFU against the dense FP8 peak (FP8 training only), fraction 0–1."""
    step_time_s_low: float | None = None
    """Lower end of the step time's 80 % prediction interval, seconds: step_time_s ×
    e^q10, q10 the 10th percentile of ln(measured / predicted) over the published runs
    (`cost_models/data/residuals.json`) or over the calibrated fit's measurements; null
    when the cost model has none."""
    step_time_s_high: float | None = None
    """Upper end of the same interval (the 90th percentile), seconds."""
    gpus_used: int | None = None
    """GPUs the plan runs on, count: fewer than the cluster holds when an objective leaves
    the rest idle (`min_cost`, `min_energy`, `min_gpus`, ...)."""
    power_per_gpu_w: float | None = None
    """Average board power of a GPU the plan uses, watts: TDP × (0.43 + 0.43 × hardware
    FLOPs utilisation), `cost_models/economics.py`; null when the accelerator's TDP is not
    sourced."""
    energy_per_token_j: float | None = None
    """GPU board energy per trained token, joules per token (GPUs used × power × step time
    / tokens per step, padding of a `pad` document mix excluded; host, network and cooling
    not counted)."""
    price_per_gpu_hour: float | None = None
    """Average price of one GPU-hour of the GPUs used (the request's `price_per_gpu_hour`,
    else the catalog's default), currency per GPU-hour; null when a group has no price."""
    cost_per_million_tokens: float | None = None
    """What a million trained tokens (padding excluded) cost on the GPUs used, currency per
    million tokens; null when a group has no price."""
    time_to_train_days: float | None = None
    """`workload.train_tokens` / tokens_per_s, days; null without train_tokens."""
    restart_peer_bytes: float | None = None
    """Re-planned plans (`POST /v1/plans/{id}/replan`): model state its ranks fetch from
    surviving GPUs of the old layout, bytes (`solver/replan.py`); null otherwise."""
    restart_reload_bytes: float | None = None
    """Re-planned plans: model state no surviving GPU held, read back from the checkpoint,
    bytes."""
    restart_s: float | None = None
    """Re-planned plans: relaunch overhead + the slowest rank's peer transfer + the
    checkpoint reload, seconds."""
    break_even_s: float | None = None
    """Re-planned plans: seconds after the change from which this plan has trained more
    tokens than the best plan keeping the old plan's degrees; null when it never does."""


class StageMemory(_Out):
    """Peak memory of the busiest GPU of one pipeline rank, GiB."""

    weights_gib: float
    """Parameters held on the GPU (its ZeRO / tensor / pipeline share, plus ZeRO-3's
    gathered working copy), GiB."""
    gradients_gib: float
    """Gradients held on the GPU (its ZeRO share), GiB."""
    optimizer_gib: float
    """Optimizer states (fp32 master weights, Adam moments; its ZeRO share), GiB."""
    activations_gib: float
    """Activations stored for the backward pass of the micro-batches in flight under the
    pipeline schedule (and recomputation's working set), GiB."""
    other_gib: float
    """CUDA context, NCCL and framework buffers, data-parallel gradient buckets and allocator
    fragmentation (a fraction of the activations), GiB."""
    total_gib: float
    """Sum of the parts above, GiB: compared with `usable_gib`."""


class MemoryReport(_Out):
    """Memory per pipeline rank against the device's capacity."""

    peak_gib: float
    """The largest `by_stage[].total_gib`, GiB."""
    capacity_gib: float
    """Device memory as the device reports it, GiB."""
    usable_gib: float
    """Capacity less the requested `memory_headroom_gib`: the feasibility limit, GiB."""
    by_stage: list[StageMemory]
    """One entry per pipeline rank, in pipeline order."""


class Violation(_Out):
    """A rule the plan breaks (it is then `feasible: false`)."""

    kind: str
    """Short machine-readable reason: memory, divisibility, topology, batch, schedule..."""
    detail: str
    """A plain sentence naming the rule and the numbers that break it."""
    field: str | None = None
    """The plan or request field the rule constrains, dotted as in 422 problems
    (`plan.parallelism.tensor`, `workload.sequence_length`); null when the rule binds the
    plan as a whole (memory)."""
