"""Request and response bodies of the HTTP API (`*Create` in, `*Public` out), with the
examples `/docs` shows. Domain specs (ClusterSpec, TrainingWorkload, TrainingPlan,
SearchConstraints) are used as they are; these models only add the API's envelopes."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from hardware_catalog.schema import AcceleratorSpec, FabricSpec, SystemSpec
from specs.cluster import ClusterSpec
from specs.constraints import SearchConstraints
from specs.plan import MemoryReport, ParallelDims, TrainingMetrics, TrainingPlan, Violation
from specs.serving import ServingMetrics, ServingPlan
from specs.warnings import PlanWarning
from specs.workload import Workload

MODEL_EXAMPLES: list[dict[str, Any]] = [
    {"preset": "llama3-70b"},
    {
        "name": "my-70b",
        "num_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_kv_heads": 8,
        "ffn_hidden_size": 28672,
        "vocab_size": 128256,
        "gated_mlp": True,
        "tie_embeddings": False,
        "moe": None,
    },
]
CLUSTER_EXAMPLE: dict[str, Any] = {
    "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8, "gpus_per_node": 8}]
}
WORKLOAD_EXAMPLE: dict[str, Any] = {
    "kind": "training",
    "global_batch_size": 1024,
    "sequence_length": 4096,
    "precision": "bf16",
}
PLAN_EXAMPLE: dict[str, Any] = {
    "parallelism": {
        "data": 2,
        "tensor": 8,
        "pipeline": 4,
        "virtual_pipeline": 1,
        "context": 1,
        "expert": 1,
        "expert_tensor": 1,
        "sequence_parallel": True,
    },
    "micro_batch_size": 1,
    "zero_stage": 1,
    "recompute": "selective",
    "pipeline_schedule": "1f1b",
    "stage_layers": [20, 20, 20, 20],
}

SERVING_WORKLOAD_EXAMPLE: dict[str, Any] = {
    "kind": "serving",
    "prompt_tokens": 1024,
    "output_tokens": 256,
    "arrival_rate_rps": None,
    "slo": {"ttft_ms": 1000, "tpot_ms": 50, "percentile": 90},
    "precision": "bf16",
    "objective": "max_goodput_per_gpu",
}
SERVING_PLAN_EXAMPLE: dict[str, Any] = {
    "mode": "colocated",
    "instances": [
        {
            "role": "both",
            "count": 2,
            "parallelism": {"tensor": 4, "pipeline": 1, "expert": 1},
            "max_batch_size": 112,
            "chunk_size": 2048,
        }
    ],
}


def _plan_kind(value: Any) -> str:
    """A plan with `instances` or `mode` is a serving plan; anything else a training plan."""
    if isinstance(value, dict):
        return "serving" if ("instances" in value or "mode" in value) else "training"
    return "serving" if isinstance(value, ServingPlan) else "training"


AnyPlan = Annotated[
    Annotated[TrainingPlan, Tag("training")] | Annotated[ServingPlan, Tag("serving")],
    Discriminator(_plan_kind),
]
"""A training plan (`parallelism`, ...) or a serving plan (`mode`, `instances`)."""

ModelInput = dict[str, Any]
"""`{"preset": name}`, `{"hf_config": {...}}` or an explicit model spec."""


def lone_surrogate_path(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string (key or value) in `value` that is not valid
    Unicode text — a lone UTF-16 surrogate such as a JSON `"\\ud800"` escape, which
    Python's json module accepts but UTF-8 (SQLite, PostgreSQL) cannot store — or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "(body)"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            found = lone_surrogate_path(key, where) or lone_surrogate_path(item, where)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = lone_surrogate_path(item, f"{path}.{index}" if path else str(index))
            if found:
                return found
    return None


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        """422 for a lone surrogate anywhere in a request body (it would fail to store)."""
        found = lone_surrogate_path(data)
        if found is not None:
            raise ValueError(f"{found}: contains a lone UTF-16 surrogate (not valid Unicode)")
        return data


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
    plan: AnyPlan
    """A training plan for a training workload, a serving plan for a serving one."""
    constraints: EstimateConstraints | None = None
    cost_model: CostModelRef | None = None

    _workload_kind = field_validator("workload", mode="before")(_default_kind)

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "model": {"preset": "llama3-70b"},
                    "cluster": CLUSTER_EXAMPLE,
                    "workload": WORKLOAD_EXAMPLE,
                    "plan": PLAN_EXAMPLE,
                },
                {
                    "model": {"preset": "llama3-70b"},
                    "cluster": {
                        "node_groups": [
                            {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}
                        ]
                    },
                    "workload": SERVING_WORKLOAD_EXAMPLE,
                    "plan": SERVING_PLAN_EXAMPLE,
                },
            ]
        },
    )


CALLBACK_URL_MAX_LENGTH = 2048


def _callback_url(value: str | None) -> str | None:
    """An absolute http(s) URL with a host, no credentials, no spaces or control characters."""
    if value is None:
        return None
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in value):
        raise ValueError("must not contain spaces or control characters")
    try:
        parts = urlsplit(value)
        port = parts.port  # raises on a malformed port
    except ValueError as exc:
        raise ValueError(f"is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("must be an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError("must name a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry credentials (user:password@)")
    if port == 0:
        raise ValueError("must not use port 0")
    return value


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
    callback_url: str | None = Field(default=None, min_length=1, max_length=CALLBACK_URL_MAX_LENGTH)
    """http(s) URL that receives a signed POST when the search finishes (succeeded, failed
    or cancelled); needs the service's `MESHPLAN_WEBHOOK_SECRET`."""

    _workload_kind = field_validator("workload", mode="before")(_default_kind)
    _callback = field_validator("callback_url")(_callback_url)

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "model": {"preset": "llama3-70b"},
                    "cluster": CLUSTER_EXAMPLE,
                    "workload": WORKLOAD_EXAMPLE,
                    "constraints": {"time_limit_s": 30},
                    "top_k": 10,
                },
                {
                    "model": {"preset": "llama3-70b"},
                    "cluster": {
                        "node_groups": [
                            {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}
                        ]
                    },
                    "workload": SERVING_WORKLOAD_EXAMPLE,
                    "top_k": 5,
                },
            ]
        },
    )


# ---- responses --------------------------------------------------------------------------
class HealthPublic(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    database: str
    """`sqlite` or `postgresql`."""
    pool: dict[str, Any] | None = None
    """The search worker pool (`SearchRunner.pool_state()`): `state` is `ok`, `broken`
    (a worker died and the pool is not rebuilt yet) or `stopped`."""


class ReadinessPublic(BaseModel):
    """`GET /v1/health/ready` when ready (a 503 `not-ready` problem carries the same
    `checks` otherwise)."""

    status: Literal["ready"] = "ready"
    version: str
    database: str
    checks: dict[str, Any]
    """`database` (`ok`, `latency_ms`, `error`), `workers` (executor, `workers`,
    `warm_workers`, `warm`, `active`), `database_pool` (size, checked out, overflow)."""


class AcceleratorList(BaseModel):
    items: list[AcceleratorSpec]


class SystemList(BaseModel):
    items: list[SystemSpec]


class FabricList(BaseModel):
    items: list[FabricSpec]


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


class FrameworkOptionPublic(BaseModel):
    """One behaviour option of a framework profile."""

    default: bool | float | str | None
    """The value the service prices with unless `cost_model.config.frameworks.<name>`
    overrides it."""
    description: str
    """What the option means (the same for every framework)."""
    default_note: str | None = None
    """Why this framework's default is what it is (its launch flags or library defaults);
    null when it keeps the common default."""
    json_schema: dict[str, Any] = Field(default_factory=dict)
    """The option's JSON Schema (type, bounds, allowed values) as an override is
    validated."""


class FrameworkPublic(BaseModel):
    """A training framework profile: what it implements, how it behaves, what launches it."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    name: str
    """The name plans, `constraints.frameworks` and `constraints.fixed.framework` use."""
    label: str
    """Human-readable name (explanations use it)."""
    description: str
    zero_stages: list[int]
    """ZeRO stages the framework implements."""
    supports_moe: bool
    """Whether it trains mixture-of-experts models."""
    rules: list[str] = Field(default_factory=list)
    """The combinations it cannot run, in words, besides `zero_stages` and `supports_moe`
    (a plan breaking one is priced `feasible: false` with a `framework` violation)."""
    default_for_search: bool
    """Searches price candidates under this framework when the request names none."""
    preference_rank: int | None
    """Its place (1 = first) in the order an estimate picks a framework for a plan that
    names none: the first that can run the plan; null when it is never picked."""
    launchers: list[str]
    """Training export formats that launch it (`GET /v1/plans/{id}/export/{format}`); an
    export refuses a plan priced for another framework."""
    export_formats: list[str]
    """Every export format that can launch it: its launchers and the formats wrapping
    them (`slurm`, `kubernetes`)."""
    config: dict[str, FrameworkOptionPublic]
    """Its behaviour, option by option; override per request with the analytical cost
    model's `frameworks` option (`{"cost_model": {"name": "analytical", "config":
    {"frameworks": {"<name>": {"<option>": value}}}}}`)."""


class FrameworkList(BaseModel):
    items: list[FrameworkPublic]


class EnginePublic(BaseModel):
    """A serving engine profile: how it schedules iterations and what its host side costs."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    name: str
    """The name `plan.engine`, `constraints.engines` and `constraints.fixed.engine` use."""
    label: str
    """The engine as people name it, with the versions the profile describes."""
    default: bool
    """Plans that name no engine are priced for it."""
    launcher: str | None
    """The serving export format that launches it (null: none yet); an export refuses a plan
    priced for another engine."""
    prefill: str
    """`mixed` (prompt chunks share iterations with the decodes), `separate` (an iteration
    with prompts stalls the decodes) or `separate_unless_chunked` (separate without a
    `chunk_size`)."""
    decode_steps_per_schedule: int
    """Decode steps per scheduler call (multi-step scheduling); new prompts join between
    blocks."""
    split_prompts: bool
    """Whether a prompt may be split over iterations (chunked prefill)."""
    prefix_caching: bool
    """Whether prompt prefixes already in the KV cache are reused (the workload's
    `shared_prefix_tokens` are then prefilled once per instance)."""
    kv_allocation: str
    """`reserve` (a request is admitted when its prompt and whole output fit; never evicted)
    or `paged` (admitted when its prompt fits, its cache grows per token, the last admitted
    is preempted and recomputed when the cache runs out; colocated instances)."""
    host_fixed_ms: float
    """CPU time per scheduler step, fixed part, ms (`host_cost_scale` applied)."""
    host_per_sequence_us: float
    """CPU time per scheduler step per sequence in the batch, µs."""
    host_overlapped: bool
    """The engine prepares the next step while the GPU runs this one: an iteration takes
    max(GPU, CPU) instead of their sum."""
    host_serial_fixed_ms: float
    """CPU time per scheduler step that stays on the critical path even when the rest is
    overlapped (vLLM V0's scheduling and input preparation), fixed part, ms."""
    host_serial_per_sequence_us: float
    """The same, per sequence in the batch, µs."""
    options: dict[str, Any]
    """The profile's settings at their defaults (`plan.engine_options`)."""
    options_schema: dict[str, Any]
    """JSON Schema of `plan.engine_options` for this engine."""
    sources: list[str]
    """Where the profile's figures come from."""


class EngineList(BaseModel):
    items: list[EnginePublic]


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
    metrics: TrainingMetrics | ServingMetrics | None
    """Training metrics, or serving metrics (null when a serving plan cannot run at all)."""
    memory: MemoryReport | dict[str, Any] | None = None
    """Training: memory per pipeline stage; serving: weights and KV cache per instance."""
    plan: AnyPlan
    """The plan as priced (training: stage_layers filled in)."""
    cost_model: dict[str, Any] = Field(default_factory=dict)
    """`{"name", "version"}` of the cost model used."""
    details: dict[str, Any] = Field(default_factory=dict)
    calibration: dict[str, Any] | None = None
    """With `cost_model` `{"name": "calibrated"}` and no explicit parameters: the fit used
    (`accelerator`, `num_samples`, `parameters`, `error_before`, `error_after`, ...)."""
    warnings: list[PlanWarning] = Field(default_factory=list)
    """Advisory warnings (`{"code", "detail"}`, possibly empty); they never change
    `feasible`."""


class Progress(BaseModel):
    evaluated: int
    total: int | None


class DeliveryAttemptPublic(BaseModel):
    """One HTTP POST of a webhook delivery."""

    number: int
    attempted_at: datetime
    duration_s: float
    status_code: int | None
    """The receiver's HTTP status; null when no response came."""
    error: str | None
    """Why the attempt failed; null when it succeeded (2xx)."""


class DeliveryPublic(BaseModel):
    """The completion webhook of a search for one callback URL."""

    id: str
    """Also sent as `X-Meshplan-Delivery` and `delivery_id` in the body."""
    search_id: str
    url: str
    status: Literal["waiting", "pending", "delivered", "failed"]
    """waiting: the search has not finished; pending: due or retrying; delivered: a 2xx
    answer came; failed: every attempt failed."""
    event: str | None
    """`search.succeeded`, `search.failed` or `search.cancelled` once the search finished."""
    attempt_count: int
    next_attempt_at: datetime | None
    created_at: datetime
    delivered_at: datetime | None
    attempts: list[DeliveryAttemptPublic]


class DeliveryList(BaseModel):
    items: list[DeliveryPublic]
    total: int


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
    """Plans stored for the search (succeeded or cancelled searches; null while it is queued,
    running, or when it failed), in the search list as in a single search."""
    plans_url: str
    calibration: dict[str, Any] | None = None
    """The fit behind a `calibrated` cost model without explicit parameters."""
    callback_url: str | None = None
    """The `callback_url` of the request that created the search."""
    events_url: str
    """Server-Sent Events of the search's progress."""
    deliveries: list[DeliveryPublic] | None = None
    """`GET /v1/searches/{id}` only: the webhook deliveries of the search with their
    attempts (as `GET /v1/searches/{id}/deliveries` lists them)."""


class SearchList(BaseModel):
    items: list[SearchPublic]
    total: int
    """Searches matching the filter (all pages)."""
    limit: int
    offset: int
    next_cursor: str | None = None
    """Pass as `?cursor=` for the next page; null on the last page."""


class PlanPublic(BaseModel):
    """One ranked plan of a search."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    id: str
    search_id: str
    rank: int
    """1 = best."""
    kind: Literal["training", "serving"] = "training"
    parallelism: ParallelDims | None = None
    micro_batch_size: int | None = None
    zero_stage: int | None = None
    recompute: str | None = None
    pipeline_schedule: str | None = None
    stage_layers: list[int] | None = None
    stage_groups: list[str] | None = None
    """Training plans on a mixed cluster: the node group (pool) of every pipeline stage;
    groups not named stay idle."""
    stage_tensor: list[int] | None = None
    """Training plans on a mixed cluster searched with `constraints.per_stage_tensor`: the
    tensor degree of every pipeline stage (null: `parallelism.tensor` on every stage)."""
    data_shares: list[dict[str, Any]] | None = None
    """Training plans on a mixed cluster: data-parallel replicas per node group and the
    sequences each takes per step (`{"group", "replicas", "sequences"}`)."""
    flash_attention: bool | None = None
    framework: str | None = None
    """Training plans: the framework the plan was priced for (`GET /v1/frameworks`); its
    overlaps and rules are part of the price, and exports refuse another launcher."""
    mode: Literal["colocated", "disaggregated"] | None = None
    """Serving plans: colocated or prefill/decode disaggregated."""
    instances: list[dict[str, Any]] | None = None
    """Serving plans: the engine instances (role, count, parallelism, max_batch_size,
    chunk_size, precision)."""
    engine: str | None = None
    """Serving plans: the engine the plan was priced for (`GET /v1/engines`); its scheduler
    and host costs are part of the price, and exports refuse another launcher."""
    engine_options: dict[str, Any] | None = None
    """Serving plans: the engine's settings the plan was priced with."""
    metrics: dict[str, Any]
    memory: dict[str, Any] | None = None
    explanation: str
    feasible: bool
    violations: list[dict[str, Any]]
    warnings: list[PlanWarning] = Field(default_factory=list)
    """Advisory warnings (`{"code", "detail"}`, possibly empty); they never change the
    plan's feasibility or rank."""
    dominated_by: str | None = None
    """The id of the better-ranked plan of the same search this one is folded under (same
    layout, no better on any reported metric; listed only with `?include_dominated=true`);
    null when not dominated."""
    dominated_reason: str | None = None
    """Why it is folded: the knobs that differ and the metrics it is no better on."""


class PlanList(BaseModel):
    items: list[PlanPublic]
    total: int
    next_cursor: str | None = None
    """Pass as `?cursor=` for the next page; null on the last page."""


# ---- measured runs and calibration --------------------------------------------------------
MAX_PIPELINE_RANKS = 4096


def _positive_gib(value: Any) -> Any:
    """One positive finite number, or a non-empty list of them (one per pipeline rank); the
    error names the field itself rather than pydantic's union branches."""

    def ok(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool) and 0 < x < math.inf

    if value is None or ok(value):
        return value
    if isinstance(value, list) and 0 < len(value) <= MAX_PIPELINE_RANKS:
        bad = [i for i, x in enumerate(value) if not ok(x)]
        if not bad:
            return value
        raise ValueError(f"peak_memory_gib[{bad[0]}] must be a positive number of GiB")
    raise ValueError(
        "must be a positive number of GiB, or a list of them (one per pipeline "
        f"rank, at most {MAX_PIPELINE_RANKS})"
    )


PeakMemoryGiB = Annotated[float | list[float] | None, BeforeValidator(_positive_gib)]


class MeasurementCreate(_Body):
    """A measured run of a stored plan. At least one of `step_time_s` and `tokens_per_s`;
    when both come they must agree with the plan's tokens per step within 5 %."""

    step_time_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Measured seconds per optimizer step."""
    tokens_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Measured training throughput, tokens per second (whole job)."""
    peak_memory_gib: PeakMemoryGiB = None
    """Peak device memory: one figure, or one per pipeline rank (at most the device's
    capacity × 1.05)."""
    notes: str | None = Field(default=None, max_length=4000)
    measured_at: datetime | None = None
    """When the run was measured (default: unknown)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "step_time_s": 9.4,
                    "peak_memory_gib": [70.2, 66.0, 66.0, 68.5],
                    "notes": "steps 100-200 of the nightly run",
                }
            ]
        },
    )


class MeasurementPublic(BaseModel):
    """A stored measurement and how far the plan's prediction was from it."""

    id: str
    plan_id: str
    search_id: str
    accelerator_id: str
    step_time_s: float
    tokens_per_s: float
    peak_memory_gib: float | list[float] | None
    notes: str | None
    measured_at: datetime | None
    created_at: datetime
    predicted_step_time_s: float
    """The plan's predicted step time."""
    error: float
    """measured / predicted − 1 (positive: the run was slower than predicted)."""


class MeasurementList(BaseModel):
    items: list[MeasurementPublic]
    total: int


class CalibrationError(BaseModel):
    mean: float
    """Mean of |predicted / measured − 1| over the samples."""
    max: float


class ParameterUncertainty(BaseModel):
    """How well the measurements pin one fitted parameter (Gauss–Newton linearisation at
    the optimum)."""

    value: float
    std_error: float
    low: float
    """Lower end of the 95 % interval (within the parameter's bounds)."""
    high: float
    """Upper end of the 95 % interval (within the parameter's bounds)."""


class CalibrationPublic(BaseModel):
    """The calibrated cost model's current fit for one accelerator."""

    model_config = ConfigDict(extra="allow")

    accelerator: str
    num_samples: int
    parameters: dict[str, Any]
    """The `parameters` member of the calibrated model's config."""
    error_before: CalibrationError | None
    """With the catalog values (the analytical model)."""
    error_after: CalibrationError | None
    """With the fitted values."""
    fitted: list[str]
    """Parameters the samples could identify; the others keep their catalog values."""
    max_parameters: int = 0
    """How many parameters the measurements support: (n − 1) // 2 for n measurements (two
    per parameter, one more to estimate the error)."""
    uncertainty: dict[str, ParameterUncertainty] = Field(default_factory=dict)
    """Per fitted parameter: its value, standard error and 95 % interval; empty when the
    fit leaves no degree of freedom."""
    not_fitted: dict[str, str] = Field(default_factory=dict)
    """Parameters left at their start values, each with the reason."""
    refused: str | None = None
    """Why the fit to these measurements was refused (`cost_models.calibrated.fit_refusal`:
    it would leave the parameters' physical bounds, or it failed); the calibrated model then
    prices with the base values until the outlying measurements are deleted."""
    cost_model: dict[str, Any]
    """`{"name": "calibrated", "version", "config"}`: reproduces the fit's predictions."""
