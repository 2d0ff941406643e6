"""Request and response bodies of the HTTP API (`*Create` in, `*Public` out), with the
examples `/docs` shows. Domain specs (ClusterSpec, TrainingWorkload, TrainingPlan,
SearchConstraints) are used as they are; these models only add the API's envelopes."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hardware_catalog.schema import AcceleratorSpec
from specs.cluster import ClusterSpec
from specs.constraints import SearchConstraints
from specs.plan import MemoryReport, ParallelDims, TrainingMetrics, TrainingPlan, Violation
from specs.workload import Workload

MODEL_EXAMPLES: list[dict[str, Any]] = [
    {"preset": "llama3-70b"},
    {
        "name": "my-70b", "num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
        "num_kv_heads": 8, "ffn_hidden_size": 28672, "vocab_size": 128256,
        "gated_mlp": True, "tie_embeddings": False, "moe": None,
    },
]
CLUSTER_EXAMPLE: dict[str, Any] = {
    "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8, "gpus_per_node": 8}]
}
WORKLOAD_EXAMPLE: dict[str, Any] = {
    "kind": "training", "global_batch_size": 1024, "sequence_length": 4096, "precision": "bf16"
}
PLAN_EXAMPLE: dict[str, Any] = {
    "parallelism": {"data": 2, "tensor": 8, "pipeline": 4, "virtual_pipeline": 1,
                    "context": 1, "expert": 1, "expert_tensor": 1, "sequence_parallel": True},
    "micro_batch_size": 1, "zero_stage": 1, "recompute": "selective",
    "pipeline_schedule": "1f1b", "stage_layers": [20, 20, 20, 20],
}

ModelInput = dict[str, Any]
"""`{"preset": name}`, `{"hf_config": {...}}` or an explicit model spec."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _default_kind(value: Any) -> Any:
    """A workload without `kind` is a training workload (the only kind so far)."""
    if isinstance(value, dict) and "kind" not in value:
        return {"kind": "training", **value}
    return value


class CostModelRef(_Body):
    """Which cost model prices the plans, with its options."""

    name: str = Field(default="analytical", min_length=1, max_length=100)
    config: dict[str, Any] | None = None
    """Options the cost model validates itself."""


class EstimateConstraints(_Body):
    memory_headroom_gib: float = Field(default=2.0, ge=0, le=1024)
    """Memory left free on every GPU."""
    allow_tensor_across_nodes: bool = False


class ModelResolveRequest(_Body):
    model: ModelInput = Field(examples=MODEL_EXAMPLES)

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"model": {"preset": "llama3-8b"}}]}
    )


class EstimateRequest(_Body):
    """One plan to price: the model, cluster, workload and the plan."""

    model: ModelInput
    cluster: ClusterSpec
    workload: Workload
    plan: TrainingPlan
    constraints: EstimateConstraints | None = None
    cost_model: CostModelRef | None = None

    _workload_kind = field_validator("workload", mode="before")(_default_kind)

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"model": {"preset": "llama3-70b"}, "cluster": CLUSTER_EXAMPLE,
                 "workload": WORKLOAD_EXAMPLE, "plan": PLAN_EXAMPLE}
            ]
        },
    )


class SearchCreate(_Body):
    """A plan search request."""

    model: ModelInput
    cluster: ClusterSpec
    workload: Workload
    constraints: SearchConstraints | None = None
    objective: Literal["max_throughput"] = "max_throughput"
    top_k: int = Field(default=10, ge=1)
    """Plans kept (at most the service's max_top_k)."""
    cost_model: CostModelRef | None = None

    _workload_kind = field_validator("workload", mode="before")(_default_kind)

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"model": {"preset": "llama3-70b"}, "cluster": CLUSTER_EXAMPLE,
                 "workload": WORKLOAD_EXAMPLE, "constraints": {"time_limit_s": 30},
                 "top_k": 10}
            ]
        },
    )


# ---- responses --------------------------------------------------------------------------
class HealthPublic(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    database: str
    """`sqlite` or `postgresql`."""


class AcceleratorList(BaseModel):
    items: list[AcceleratorSpec]


class ModelPublic(BaseModel):
    """An explicit model spec plus its parameter counts (extra spec fields pass through)."""

    model_config = ConfigDict(extra="allow")

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int | None = None
    ffn_hidden_size: int
    vocab_size: int
    num_parameters: int
    num_active_parameters: int | None = None


class ModelPresetList(BaseModel):
    items: list[ModelPublic]


class CostModelPublic(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    version: str | None = None
    description: str | None = None


class CostModelList(BaseModel):
    items: list[CostModelPublic]


class EstimatePublic(BaseModel):
    feasible: bool
    violations: list[Violation]
    metrics: TrainingMetrics
    memory: MemoryReport
    plan: TrainingPlan
    """The plan as priced, stage_layers filled in."""
    cost_model: dict[str, Any] = Field(default_factory=dict)
    """`{"name", "version"}` of the cost model used."""
    details: dict[str, Any] = Field(default_factory=dict)


class Progress(BaseModel):
    evaluated: int
    total: int | None


class SearchPublic(BaseModel):
    """A search: state, progress, statistics and (when it failed) the problem."""

    id: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    progress: Progress
    stats: dict[str, Any]
    """Search statistics (`wall_time_s`, candidates enumerated/evaluated, pruned by reason)."""
    error: dict[str, Any] | None
    """An RFC 9457 problem when the search failed."""
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    attempts: int
    objective: str
    top_k: int
    model: ModelInput
    """The model as requested."""
    model_name: str
    num_gpus: int
    cluster: dict[str, Any]
    workload: dict[str, Any]
    constraints: dict[str, Any]
    cost_model: dict[str, Any]
    num_plans: int | None = None
    plans_url: str


class SearchList(BaseModel):
    items: list[SearchPublic]
    total: int
    limit: int
    offset: int


class PlanPublic(BaseModel):
    """One ranked plan of a search."""

    id: str
    search_id: str
    rank: int
    """1 = best."""
    parallelism: ParallelDims
    micro_batch_size: int
    zero_stage: int
    recompute: str
    pipeline_schedule: str
    stage_layers: list[int] | None
    flash_attention: bool
    metrics: dict[str, Any]
    memory: dict[str, Any]
    explanation: str
    feasible: bool
    violations: list[dict[str, Any]]


class PlanList(BaseModel):
    items: list[PlanPublic]
    total: int
