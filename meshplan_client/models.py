"""Typed views of the service's JSON bodies (API.md). Every model keeps unknown members
(`extra="allow"`), so a newer service that adds fields never breaks an older client; the
members listed here are the ones the contract promises."""

from __future__ import annotations

import shlex
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Accelerator",
    "Calibration",
    "Estimate",
    "Export",
    "FieldError",
    "Framework",
    "FrameworkOption",
    "Health",
    "Measurement",
    "Metrics",
    "ModelInfo",
    "Parallelism",
    "Placement",
    "Plan",
    "PlanWarning",
    "Problem",
    "Progress",
    "Search",
    "ServingInstance",
    "ServingParallelism",
    "TERMINAL_STATUSES",
    "Violation",
]

TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
"""Search states that do not change any more."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class FieldError(_Body):
    """One broken rule of an `invalid-input` problem."""

    field: str = ""
    """Dotted path of the offending field (empty: the whole body)."""
    rule: str = ""
    value: Any = None
    message: str = ""


class Problem(_Body):
    """An RFC 9457 problem document (`application/problem+json`)."""

    type: str = "about:blank"
    title: str = ""
    status: int | None = None
    detail: str = ""
    instance: str | None = None
    errors: list[FieldError] = Field(default_factory=list)
    """Field errors of `invalid-input` problems."""


class Health(_Body):
    status: str
    version: str = ""
    database: str = ""


class Accelerator(_Body):
    """One accelerator of the hardware catalog."""

    id: str
    name: str = ""
    vendor: str = ""
    memory_gib: float | None = None
    memory_bandwidth_gb_s: float | None = None
    peak_tflops: dict[str, float | None] = Field(default_factory=dict)
    """Dense peak by precision (`bf16`, `fp8`, ...)."""
    scale_up_bandwidth_gb_s: float | None = None
    scale_out_bandwidth_gb_s: float | None = None
    sources: Any = None


class FrameworkOption(_Body):
    """One behaviour option of a framework profile."""

    default: Any = None
    """What the service prices with unless a request overrides it."""
    description: str = ""
    default_note: str | None = None
    """Why this framework's default is what it is (None: the common default)."""
    json_schema: dict[str, Any] = Field(default_factory=dict)


class Framework(_Body):
    """A training framework profile (`GET /v1/frameworks`): the value of a plan's
    `framework`, `constraints.frameworks` and `constraints.fixed.framework`."""

    name: str
    label: str = ""
    description: str = ""
    zero_stages: list[int] = Field(default_factory=list)
    supports_moe: bool = True
    default_for_search: bool = False
    preference_rank: int | None = None
    """Where it ranks when an estimate picks the framework (1 = first; None: never)."""
    launchers: list[str] = Field(default_factory=list)
    """Export formats that launch it."""
    export_formats: list[str] = Field(default_factory=list)
    """Every export format that can launch it (launchers and their wrappers)."""
    config: dict[str, FrameworkOption] = Field(default_factory=dict)
    """Its behaviour by option (override with the analytical cost model's `frameworks`)."""


class ModelInfo(_Body):
    """An explicit model spec plus its parameter counts (presets and `resolve_model`)."""

    name: str
    num_layers: int | None = None
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    num_kv_heads: int | None = None
    ffn_hidden_size: int | None = None
    vocab_size: int | None = None
    num_parameters: int | None = None
    num_active_parameters: int | None = None
    moe: dict[str, Any] | None = None


class Progress(_Body):
    evaluated: int = 0
    total: int | None = None


class Search(_Body):
    """A plan search: state, progress, statistics and, when it failed, the problem."""

    id: str
    status: str
    """queued, running, succeeded, failed or cancelled."""
    progress: Progress = Field(default_factory=Progress)
    stats: dict[str, Any] = Field(default_factory=dict)
    error: Problem | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    objective: str | None = None
    top_k: int | None = None
    model_name: str | None = None
    num_gpus: int | None = None
    num_plans: int | None = None
    plans_url: str | None = None
    workload: dict[str, Any] = Field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """succeeded, failed or cancelled."""
        return self.status in TERMINAL_STATUSES

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


class Parallelism(_Body):
    """Training parallel degrees (`data × tensor × pipeline × context` = GPUs)."""

    data: int = 1
    tensor: int = 1
    pipeline: int = 1
    virtual_pipeline: int = 1
    context: int = 1
    expert: int = 1
    expert_tensor: int = 1
    sequence_parallel: bool = False


class ServingParallelism(_Body):
    tensor: int = 1
    pipeline: int = 1
    expert: int = 1


class ServingInstance(_Body):
    """One engine instance kind of a serving plan and its replica count."""

    role: str = "both"
    count: int = 1
    parallelism: ServingParallelism = Field(default_factory=ServingParallelism)
    max_batch_size: int | None = None
    chunk_size: int | None = None
    precision: str | None = None


class Metrics(_Body):
    """What a plan achieves: training members or serving members (the others are None)."""

    # training
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    model_tflops_per_gpu: float | None = None
    mfu: float | None = None
    peak_memory_gib: float | None = None
    bubble_fraction: float | None = None
    time_breakdown_s: dict[str, float] | None = None
    # serving
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    ttft_ms_p99: float | None = None
    tpot_ms_p50: float | None = None
    tpot_ms_p90: float | None = None
    tpot_ms_p99: float | None = None
    throughput_tokens_per_s: float | None = None
    goodput_rps: float | None = None
    goodput_rps_per_gpu: float | None = None
    gpus_used: int | None = None
    kv_cache_gib: float | None = None
    max_concurrent_sequences: int | None = None


class Violation(_Body):
    kind: str = ""
    detail: str = ""


class PlanWarning(_Body):
    """An advisory warning on a plan or an estimate (it never changes feasibility or rank)."""

    code: str = ""
    """Stable snake_case code, e.g. `mfu_above_measured`, `outside_validated_range`."""
    detail: str = ""
    """A plain sentence with the numbers behind the warning."""


_TRAINING_PLAN_FIELDS = (
    "parallelism",
    "micro_batch_size",
    "zero_stage",
    "recompute",
    "pipeline_schedule",
    "stage_layers",
    "flash_attention",
    "framework",
    "context_parallel_algorithm",
    "context_parallel_heads",
    "stage_groups",
    "stage_tensor",
    "data_shares",
    "vocab_parallel",
    "offload",
)
"""Every field of a training plan (the service's `TrainingPlan`): a plan posted back prices
as it was stored."""
_SERVING_PLAN_FIELDS = ("mode", "instances")


class Plan(_Body):
    """One ranked plan of a search: a training plan (`parallelism`, `micro_batch_size`, ...)
    or a serving plan (`mode`, `instances`), with its metrics and explanation."""

    id: str
    search_id: str | None = None
    rank: int | None = None
    """1 = best."""
    kind: str | None = None
    # training plans
    parallelism: Parallelism | None = None
    micro_batch_size: int | None = None
    zero_stage: int | None = None
    recompute: str | None = None
    pipeline_schedule: str | None = None
    stage_layers: list[int] | None = None
    flash_attention: bool | None = None
    framework: str | None = None
    """The framework the plan was priced for (None from services that predate it)."""
    context_parallel_algorithm: str | None = None
    context_parallel_heads: int | None = None
    stage_groups: list[str] | None = None
    """Mixed clusters: the node group of every pipeline stage."""
    stage_tensor: list[int] | None = None
    data_shares: list[dict[str, Any]] | None = None
    vocab_parallel: bool | None = None
    offload: dict[str, Any] | None = None
    # serving plans
    mode: str | None = None
    instances: list[ServingInstance] | None = None
    metrics: Metrics = Field(default_factory=Metrics)
    memory: dict[str, Any] | None = None
    explanation: str = ""
    feasible: bool = True
    violations: list[Violation] = Field(default_factory=list)
    warnings: list[PlanWarning] = Field(default_factory=list)
    """Advisory warnings (empty from services that predate them)."""
    dominated_by: str | None = None
    """The id of the better plan of the same search this one is folded under (listed only
    with `include_dominated`); None when not dominated."""
    dominated_reason: str | None = None
    """Why it is folded: the knobs that differ and the metrics it is no better on."""

    @property
    def is_serving(self) -> bool:
        if self.kind is not None:
            return self.kind == "serving"
        return self.instances is not None or self.mode is not None

    def plan_fields(self) -> dict[str, Any]:
        """The plan alone (what `POST /v1/estimate` takes as `plan`)."""
        names = _SERVING_PLAN_FIELDS if self.is_serving else _TRAINING_PLAN_FIELDS
        dumped = self.model_dump(mode="json", include=set(names), exclude_none=True)
        return {name: dumped[name] for name in names if name in dumped}


class Estimate(_Body):
    """The price of one plan (`POST /v1/estimate`)."""

    feasible: bool
    violations: list[Violation] = Field(default_factory=list)
    metrics: Metrics | None = None
    memory: dict[str, Any] | None = None
    plan: dict[str, Any] = Field(default_factory=dict)
    """The plan as priced (training: `stage_layers` filled in)."""
    cost_model: dict[str, Any] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)
    warnings: list[PlanWarning] = Field(default_factory=list)
    """Advisory warnings (empty from services that predate them)."""


class Export(_Body):
    """A plan rendered for a launcher (`GET /v1/plans/{id}/export/{format}`)."""

    format: str
    filename: str
    content: str
    """The file to write (script, TOML, JSON or YAML)."""
    args: list[str] = Field(default_factory=list)
    """Command-line formats: the whole argument list."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment the launcher must set."""

    def write(self, path: str | Path | None = None) -> Path:
        """Write `content` to `path` (default: `filename` in the working directory); shell
        scripts (a `#!` first line) are made executable."""
        target = Path(path) if path is not None else Path(self.filename)
        target.write_text(self.content, encoding="utf-8")
        if self.content.startswith("#!"):
            target.chmod(target.stat().st_mode | 0o111)
        return target

    def command_line(self) -> str:
        """`ENV=... arg arg ...`, shell-quoted (empty when the format has no `args`)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return " ".join(part for part in (env, shlex.join(self.args)) if part)


class Placement(_Body):
    """An expert placement (`POST /v1/expert-placements`)."""

    status: str
    gap: float | None = None
    max_imbalance: float | None = None
    layers: list[dict[str, Any]] = Field(default_factory=list)


class Measurement(_Body):
    """A measured run of a plan and the prediction's error."""

    id: str
    plan_id: str
    step_time_s: float
    tokens_per_s: float | None = None
    peak_memory_gib: float | list[float] | None = None
    notes: str | None = None
    predicted_step_time_s: float | None = None
    error: float | None = None
    """measured / predicted − 1."""


class Calibration(_Body):
    """The calibrated cost model's current fit for one accelerator."""

    accelerator: str
    num_samples: int = 0
    parameters: dict[str, Any] = Field(default_factory=dict)
    fitted: list[str] = Field(default_factory=list)
    error_before: dict[str, Any] | None = None
    error_after: dict[str, Any] | None = None
    max_parameters: int | None = None
    """How many parameters the measurements support (None from older services)."""
    uncertainty: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Per fitted parameter: `value`, `std_error` and the 95 % interval `low`, `high`."""
    not_fitted: dict[str, str] = Field(default_factory=dict)
    """Parameters left at their start values, with the reason."""
    cost_model: dict[str, Any] = Field(default_factory=dict)
