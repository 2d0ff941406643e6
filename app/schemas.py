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

from app.examples import ESTIMATE_EXAMPLES, RESOLVE_EXAMPLES, SEARCH_EXAMPLES
from hardware_catalog.schema import AcceleratorSpec, FabricSpec, SystemSpec
from specs.cluster import MAX_TOTAL_GPUS, ClusterSpec, NodeGroupSpec
from specs.constraints import Objective, SearchConstraints
from specs.model import ModelSpec
from specs.model_input import ModelInput
from specs.plan import (
    MemoryReport,
    Offload,
    ParallelDims,
    TrainingMetrics,
    TrainingPlan,
    Violation,
)
from specs.serving import ServingMetrics, ServingPlan
from specs.warnings import PlanWarning
from specs.workload import TrainingWorkload, Workload


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
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

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
    """A registered cost model (`GET /v1/cost-models`): `analytical` (the default),
    `calibrated` (fitted to the tenant's measured runs) or a plug-in."""
    config: dict[str, Any] | None = None
    """Options the cost model validates itself."""


class EstimateConstraints(_Body):
    """Limits an estimate checks the plan against."""

    memory_headroom_gib: float = Field(default=2.0, ge=0, le=1024)
    """Memory left free on every GPU, GiB."""
    allow_tensor_across_nodes: bool = False
    """Allow tensor (and expert-tensor) groups to span nodes."""


class ModelResolveRequest(_Body):
    """A model input to resolve to its explicit spec."""

    model: ModelInput
    """The model: `{"preset": name}` (`GET /v1/model-presets`), `{"hf_config": {...}}` (a
    Hugging Face `config.json`) or an explicit model spec."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [e["value"] for e in RESOLVE_EXAMPLES.values()]},
    )


class EstimateRequest(_Body):
    """One plan to price: the model, cluster, workload and the plan."""

    model: ModelInput
    """The model: `{"preset": name}` (`GET /v1/model-presets`), `{"hf_config": {...}}` (a
    Hugging Face `config.json`) or an explicit model spec."""
    cluster: ClusterSpec
    """The GPUs: node groups and, optionally, the scale-out layout."""
    workload: Workload
    """A training workload (`"kind": "training"`, the default) or a serving one
    (`"kind": "serving"`)."""
    plan: AnyPlan
    """A training plan for a training workload, a serving plan for a serving one."""
    constraints: EstimateConstraints | None = None
    """Memory headroom and placement limits; null: the defaults."""
    cost_model: CostModelRef | None = None
    """The cost model that prices the plan; null: `analytical`."""

    _workload_kind = field_validator("workload", mode="before")(_default_kind)

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [e["value"] for e in ESTIMATE_EXAMPLES.values()]},
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
    """The model: `{"preset": name}` (`GET /v1/model-presets`), `{"hf_config": {...}}` (a
    Hugging Face `config.json`) or an explicit model spec."""
    cluster: ClusterSpec
    """The GPUs: node groups and, optionally, the scale-out layout."""
    workload: Workload
    """A training workload (`"kind": "training"`, the default) or a serving one
    (`"kind": "serving"`)."""
    constraints: SearchConstraints | None = None
    """Restrictions on the searched space and the search's time limit; null: the
    defaults."""
    objective: Objective = "max_throughput"
    """What a training search ranks by: `max_throughput` (tokens per second on all the
    GPUs), `min_cost` (cost per million tokens: the node groups' `price_per_gpu_hour` or the
    catalog's default), `min_energy` (GPU energy per token), `min_time_to_train` (needs
    `workload.train_tokens`) or `min_gpus` (the fewest GPUs reaching
    `workload.target_tokens_per_s`, or train_tokens within deadline_days); all but
    max_throughput may leave GPUs idle (`metrics.gpus_used`). Serving searches rank by
    `workload.objective`."""
    top_k: int = Field(default=10, ge=1)
    """Plans kept, count (at most the service's max_top_k): non-dominated plans; plans
    folded under them (`?include_dominated=true`) do not count."""
    cost_model: CostModelRef | None = None
    """The cost model that prices the candidates; null: `analytical`."""
    callback_url: str | None = Field(default=None, min_length=1, max_length=CALLBACK_URL_MAX_LENGTH)
    """http(s) URL that receives a signed POST when the search finishes (succeeded, failed
    or cancelled); needs the service's `MESHPLAN_WEBHOOK_SECRET`."""

    _workload_kind = field_validator("workload", mode="before")(_default_kind)
    _callback = field_validator("callback_url")(_callback_url)

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [e["value"] for e in SEARCH_EXAMPLES.values()]},
    )


# ---- responses --------------------------------------------------------------------------
class _Public(BaseModel):
    """Response bodies: field docstrings are their OpenAPI descriptions."""

    model_config = ConfigDict(use_attribute_docstrings=True)


class HealthPublic(_Public):
    """`GET /v1/health`: the process is alive."""

    status: Literal["ok"] = "ok"
    """Always `ok`: the process answers."""
    version: str
    """The service's version."""
    database: str
    """`sqlite` or `postgresql`."""
    pool: dict[str, Any] | None = None
    """The search worker pool (`SearchRunner.pool_state()`): `state` is `ok`, `broken`
    (a worker died and the pool is not rebuilt yet) or `stopped`."""


class ReadinessPublic(_Public):
    """`GET /v1/health/ready` when ready (a 503 `not-ready` problem carries the same
    `checks` otherwise)."""

    status: Literal["ready"] = "ready"
    """Always `ready` (otherwise the answer is a 503 problem)."""
    version: str
    """The service's version."""
    database: str
    """`sqlite` or `postgresql`."""
    checks: dict[str, Any]
    """`database` (`ok`, `latency_ms`, `error`), `workers` (executor, `workers`,
    `warm_workers`, `warm`, `active`), `database_pool` (size, checked out, overflow)."""


class AcceleratorList(_Public):
    items: list[AcceleratorSpec]
    """Every accelerator of the catalog."""


class SystemList(_Public):
    items: list[SystemSpec]
    """Every system (node or rack type) of the catalog."""


class FabricList(_Public):
    items: list[FabricSpec]
    """Every fabric (interconnect tier) of the catalog."""


def _spec_description(field: str) -> str | None:
    """The OpenAPI description of a `ModelSpec` field (its attribute docstring)."""
    return ModelSpec.model_fields[field].description


class ModelPublic(_Public):
    """An explicit model spec plus its parameter counts (extra spec fields pass through)."""

    model_config = ConfigDict(extra="allow")

    # the spec's own fields take `ModelSpec`'s descriptions (one text per field)
    name: str = Field(description=_spec_description("name"))
    num_layers: int = Field(description=_spec_description("num_layers"))
    hidden_size: int = Field(description=_spec_description("hidden_size"))
    num_attention_heads: int = Field(description=_spec_description("num_attention_heads"))
    num_kv_heads: int | None = Field(default=None, description=_spec_description("num_kv_heads"))
    ffn_hidden_size: int = Field(description=_spec_description("ffn_hidden_size"))
    vocab_size: int = Field(description=_spec_description("vocab_size"))
    num_parameters: int
    """Total parameters, count (MoE: every expert; embeddings and LM head included)."""
    num_active_parameters: int | None = None
    """Parameters one token passes through, count (MoE: the top_k routed experts); null
    for dense models."""


class ModelPresetList(_Public):
    items: list[ModelPublic]
    """Every built-in preset with its parameter counts."""


class FrameworkOptionPublic(_Public):
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


class FrameworkOffloadPublic(_Public):
    """What a framework offloads, as its offload rules read it."""

    optimizer_devices: list[str]
    """Where it offloads optimizer states (`cpu`, `nvme`; empty: nowhere)."""
    parameter_devices: list[str]
    """Where it offloads ZeRO-3 sharded parameters."""
    activations: Literal["none", "layers", "checkpoints"]
    """How it offloads activations: `none`; `layers` (whole layers' activations, a fraction
    n / num_layers with n < num_layers, no pipelining or recompute: Megatron-Core
    `--cpu-offloading`); `checkpoints` (every checkpoint of full recompute, fraction 1:
    DeepSpeed `cpu_checkpointing`)."""
    states_together: bool
    """Parameters, gradients and optimizer states go to the CPU together or not at all
    (FSDP2 `CPUOffloadPolicy`)."""


class FrameworkPublic(_Public):
    """A training framework profile: what it implements, how it behaves, what launches it."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    name: str
    """The name plans, `constraints.frameworks` and `constraints.fixed.framework` use."""
    label: str
    """Human-readable name (explanations use it)."""
    description: str
    """What the framework is and how the profile models it."""
    zero_stages: list[int]
    """ZeRO stages the framework implements."""
    supports_moe: bool
    """Whether it trains mixture-of-experts models."""
    rules: list[str] = Field(default_factory=list)
    """The combinations it cannot run, in words, besides `zero_stages` and `supports_moe`
    (a plan breaking one is priced `feasible: false` with a `framework` violation)."""
    offload: FrameworkOffloadPublic | None = None
    """What the framework can offload (`plan.offload`)."""
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


class FrameworkList(_Public):
    items: list[FrameworkPublic]
    """Every registered training framework profile."""


class EnginePublic(_Public):
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


class EngineList(_Public):
    items: list[EnginePublic]
    """Every registered serving engine profile."""


class CostModelPublic(_Public):
    """A registered cost model."""

    model_config = ConfigDict(extra="allow")

    name: str
    """The name `cost_model.name` takes."""
    version: str | None = None
    """The model's version (stored with every plan it prices); null when it cannot be built
    with its default options."""
    description: str | None = None
    """A one-line summary of the model; null: the service does not fill it in yet."""


class CostModelList(_Public):
    items: list[CostModelPublic]
    """Every registered cost model."""


class EstimatePublic(_Public):
    """The price of one plan."""

    feasible: bool
    """Whether the plan can run: true when `violations` is empty."""
    violations: list[Violation]
    """The rules the plan breaks (memory, divisibility, topology, SLO, ...)."""
    metrics: TrainingMetrics | ServingMetrics | None
    """Training metrics, or serving metrics (null when a serving plan cannot run at all)."""
    memory: MemoryReport | dict[str, Any] | None = None
    """Training: memory per pipeline stage; serving: weights and KV cache per instance."""
    plan: AnyPlan
    """The plan as priced (training: stage_layers filled in)."""
    cost_model: dict[str, Any] = Field(default_factory=dict)
    """`{"name", "version"}` of the cost model used."""
    details: dict[str, Any] = Field(default_factory=dict)
    """The cost model's working figures (per-rank times in seconds, micro-batch count,
    collective tiers, ...; serving: per-instance costs); informative, not a stable
    contract."""
    calibration: dict[str, Any] | None = None
    """With `cost_model` `{"name": "calibrated"}` and no explicit parameters: the fit used
    (`accelerator`, `num_samples`, `parameters`, `error_before`, `error_after`, ...)."""
    warnings: list[PlanWarning] = Field(default_factory=list)
    """Advisory warnings (`{"code", "detail"}`, possibly empty); they never change
    `feasible`."""


class Progress(_Public):
    """How far a search has come."""

    evaluated: int
    """Work done so far, in the units of `total`: candidate plans covered (priced or
    pruned), or steps for a search over mixed hardware."""
    total: int | None
    """Work the search has in all (candidates in its space, or steps); null until it has
    counted them."""


class DeliveryAttemptPublic(_Public):
    """One attempt of a webhook delivery: an HTTP POST, unless the URL was refused first."""

    number: int
    """1 for the first attempt, then 2, 3, ..."""
    attempted_at: datetime
    """When the attempt started (RFC 3339, UTC)."""
    duration_s: float
    """How long the attempt took until the answer or the failure, seconds."""
    status_code: int | None
    """The receiver's HTTP status; null when no response came."""
    error: str | None
    """Why the attempt failed; null when it succeeded (2xx)."""


class DeliveryPublic(_Public):
    """The completion webhook of a search for one callback URL."""

    id: str
    """Also sent as `X-Meshplan-Delivery` and `delivery_id` in the body."""
    search_id: str
    """The search whose completion is delivered."""
    url: str
    """The callback URL the POSTs go to."""
    status: Literal["waiting", "pending", "delivered", "failed"]
    """waiting: the search has not finished; pending: due or retrying; delivered: a 2xx
    answer came; failed: every attempt failed."""
    event: str | None
    """`search.succeeded`, `search.failed` or `search.cancelled` once the search finished."""
    attempt_count: int
    """Attempts so far (count); each is a POST unless the URL was refused before sending
    (`error` `refused (...)`)."""
    next_attempt_at: datetime | None
    """When the next POST is due (exponential backoff after a failure; RFC 3339, UTC); null
    when none is scheduled."""
    created_at: datetime
    """When the delivery was registered (RFC 3339, UTC)."""
    delivered_at: datetime | None
    """When a 2xx answer came (RFC 3339, UTC); null until then."""
    attempts: list[DeliveryAttemptPublic]
    """Every attempt, oldest first."""


class DeliveryList(_Public):
    items: list[DeliveryPublic]
    """The search's webhook deliveries, one per callback URL."""
    total: int
    """Number of deliveries listed."""


class SearchPublic(_Public):
    """A search: state, progress, statistics and (when it failed) the problem."""

    id: str
    """The search's id (a UUID)."""
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    """queued: waiting for a worker; running; succeeded: plans stored; failed: see
    `error`; cancelled: stopped on request, with the plans found so far."""
    progress: Progress
    """How far the search has come."""
    stats: dict[str, Any]
    """Search statistics (`wall_time_s` in seconds, candidates enumerated / evaluated, pruned
    by reason)."""
    error: dict[str, Any] | None
    """An RFC 9457 problem when the search failed."""
    created_at: datetime
    """When the search was created (RFC 3339, UTC)."""
    started_at: datetime | None
    """When a worker last started running it (RFC 3339, UTC); null while queued."""
    finished_at: datetime | None
    """When it succeeded, failed or was cancelled (RFC 3339, UTC); null before."""
    attempts: int
    """Times a worker has started the search (a search interrupted by a restart or a dead
    worker is run again, up to the service's max_attempts)."""
    objective: str
    """What the search ranks by: the request's `objective` (`max_throughput`) for a training
    search, `workload.objective` (`max_goodput_per_gpu`, `min_gpus`, `min_cost`,
    `min_latency`) for a serving one."""
    top_k: int
    """Plans kept at most, count."""
    model: ModelInput
    """The model as requested."""
    model_name: str
    """The resolved model's `name`."""
    num_gpus: int
    """GPUs in the cluster (nodes × GPUs per node, summed over the node groups)."""
    cluster: dict[str, Any]
    """The cluster as requested."""
    workload: dict[str, Any]
    """The workload as the search ran it (defaults filled in)."""
    constraints: dict[str, Any]
    """The search constraints as the search ran them (defaults filled in)."""
    cost_model: dict[str, Any]
    """`{"name", "version", "config"}` of the cost model that prices the plans."""
    num_plans: int | None = None
    """Non-dominated plans stored for the search, the default plan list's total
    (succeeded or cancelled searches; null while it is queued, running, or when it
    failed), in the search list as in a single search."""
    plans_url: str
    """Where the search's plans are listed (`GET /v1/searches/{id}/plans`)."""
    calibration: dict[str, Any] | None = None
    """The fit behind a `calibrated` cost model without explicit parameters."""
    callback_url: str | None = None
    """The `callback_url` of the request that created the search."""
    events_url: str
    """Server-Sent Events of the search's progress."""
    deliveries: list[DeliveryPublic] | None = None
    """`GET /v1/searches/{id}` only: the webhook deliveries of the search with their
    attempts (as `GET /v1/searches/{id}/deliveries` lists them)."""


class SearchList(_Public):
    items: list[SearchPublic]
    """One page of searches, newest first."""
    total: int
    """Searches matching the filter (all pages)."""
    limit: int
    """The page size asked for (`?limit=`)."""
    offset: int
    """Searches skipped before this page (`?offset=`)."""
    next_cursor: str | None = None
    """Pass as `?cursor=` for the next page; null on the last page."""


class PlanPublic(_Public):
    """One ranked plan of a search."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    id: str
    """The plan's id (a UUID): `GET /v1/plans/{id}`, exports and measurements use it."""
    search_id: str
    """The search that found the plan."""
    rank: int
    """Place in the search's ranking, 1 = best."""
    kind: Literal["training", "serving"] = "training"
    """`training` or `serving`: which of the plan fields below are set."""
    parallelism: ParallelDims | None = None
    """Training plans: the parallel degrees (data, tensor, pipeline, virtual pipeline,
    context, expert, expert tensor) and sequence parallelism."""
    micro_batch_size: int | None = None
    """Training plans: sequences per micro-batch per data-parallel rank."""
    zero_stage: int | None = None
    """Training plans: ZeRO stage; 1 is Megatron's distributed optimizer."""
    recompute: str | None = None
    """Training plans: activation recomputation: none, selective (attention core) or full
    (whole layer)."""
    pipeline_schedule: str | None = None
    """Training plans: the pipeline schedule (`gpipe`, `1f1b`, `interleaved_1f1b`, the
    zero-bubble family, `dualpipe`, ...; as `plan.pipeline_schedule`)."""
    stage_layers: list[int] | None = None
    """Training plans: layers per pipeline chunk, length pipeline × virtual_pipeline, in
    pipeline order (chunk c runs on rank c mod pipeline)."""
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
    """Training plans: fused (flash) attention: no s×s score matrices are stored."""
    framework: str | None = None
    """Training plans: the framework the plan was priced for (`GET /v1/frameworks`); its
    overlaps and rules are part of the price, and exports refuse another launcher."""
    offload: Offload | None = None
    """Training plans that offload (`plan.offload`): the fraction 0–1 of the saved
    activations kept in host memory and where the optimizer states and parameters live
    (`none`, `cpu`, `nvme`); null: nothing offloaded."""
    context_parallel_algorithm: str | None = None
    """Training plans: how the context-parallel ranks exchange K/V (`ring`, `ulysses`,
    `all_gather`, `hybrid`; as `plan.context_parallel_algorithm`)."""
    context_parallel_heads: int | None = None
    """Training plans: the hybrid's head-parallel degree (1 otherwise)."""
    vocab_parallel: bool | None = None
    """Training plans: the embedding and LM head split over the pipeline stages
    (`plan.vocab_parallel`)."""
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
    """Training plans: `TrainingMetrics` (step time in seconds, tokens per second, MFU,
    ...); serving plans: `ServingMetrics` (TTFT / TPOT in ms, goodput in requests/s, ...)."""
    memory: dict[str, Any] | None = None
    """Training plans: `MemoryReport` (GiB per pipeline rank); serving plans: weights and
    KV cache per instance (`{"instances": [{"role", "gpus", "weights_gib",
    "kv_cache_gib", "kv_capacity_tokens", ...}]}`)."""
    explanation: str
    """A sentence or two on why the plan ranks where it does (what limits it, how it
    compares with the plan above)."""
    feasible: bool
    """Whether the plan can run: true when `violations` is empty."""
    violations: list[dict[str, Any]]
    """The rules the plan breaks, as `Violation` objects (`{"kind", "detail", "field"}`)."""
    warnings: list[PlanWarning] = Field(default_factory=list)
    """Advisory warnings (`{"code", "detail"}`, possibly empty); they never change the
    plan's feasibility or rank."""
    dominated_by: str | None = None
    """The id of the better-ranked plan of the same search this one is folded under (same
    layout, no better on any reported metric; listed only with `?include_dominated=true`);
    null when not dominated."""
    dominated_reason: str | None = None
    """Why it is folded: the knobs that differ and the metrics it is no better on."""


class PlanList(_Public):
    items: list[PlanPublic]
    """One page of the search's plans, best (rank 1) first."""
    total: int
    """Plans the search stored (all pages)."""
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
    """Measured wall time of one optimizer step, seconds."""
    tokens_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Measured training throughput, tokens per second (whole job)."""
    peak_memory_gib: PeakMemoryGiB = None
    """Peak device memory, GiB: one figure, or one per pipeline rank (at most the device's
    capacity × 1.05)."""
    notes: str | None = Field(default=None, max_length=4000)
    """Free text about the run (which steps, software versions, ...)."""
    measured_at: datetime | None = None
    """When the run was measured (RFC 3339; default: unknown)."""

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


class MeasurementPublic(_Public):
    """A stored measurement and how far the plan's prediction was from it."""

    id: str
    """The measurement's id (a UUID)."""
    plan_id: str
    """The measured plan."""
    search_id: str
    """The search that found the plan."""
    accelerator_id: str
    """Catalog id of the accelerator the plan ran on (the calibration groups by it)."""
    step_time_s: float
    """Measured wall time of one optimizer step, seconds (derived from `tokens_per_s` when
    only that was given)."""
    tokens_per_s: float
    """Measured training throughput, tokens per second (whole job; derived from
    `step_time_s` when only that was given)."""
    peak_memory_gib: float | list[float] | None
    """Peak device memory as posted, GiB: one figure or one per pipeline rank; null when not
    given."""
    notes: str | None
    """Free text about the run, as posted."""
    measured_at: datetime | None
    """When the run was measured (RFC 3339, UTC); null: unknown."""
    created_at: datetime
    """When the measurement was stored (RFC 3339, UTC)."""
    predicted_step_time_s: float
    """The plan's predicted step time, seconds."""
    error: float
    """measured / predicted − 1 (positive: the run was slower than predicted)."""


class MeasurementList(_Public):
    items: list[MeasurementPublic]
    """One page of the plan's measurements, oldest first."""
    total: int
    """Measurements of the plan (all pages)."""


class CalibrationError(_Public):
    """Absolute relative step-time errors over the measured runs."""

    mean: float
    """Mean of |predicted / measured − 1| over the samples (a fraction: 0.1 = 10 %)."""
    max: float
    """Largest |predicted / measured − 1| over the samples (a fraction)."""


class ParameterUncertainty(_Public):
    """How well the measurements pin one fitted parameter (Gauss–Newton linearisation at
    the optimum)."""

    value: float
    """The fitted value in the parameter's own unit (the efficiencies: a fraction 0–1;
    `step_overhead_s`: seconds)."""
    std_error: float
    """Its standard error, in the same unit."""
    low: float
    """Lower end of the 95 % interval, in the same unit (within the parameter's bounds)."""
    high: float
    """Upper end of the 95 % interval, in the same unit (within the parameter's bounds)."""


class CalibrationPublic(_Public):
    """The calibrated cost model's current fit for one accelerator."""

    model_config = ConfigDict(extra="allow")

    accelerator: str
    """Catalog id of the accelerator."""
    num_samples: int
    """Measured runs the fit uses (the tenant's measurements on this accelerator)."""
    parameters: dict[str, Any]
    """The `parameters` member of the calibrated model's config."""
    error_before: CalibrationError | None
    """Step-time error with the catalog values (the analytical model); null without
    measurements."""
    error_after: CalibrationError | None
    """Step-time error with the fitted values; null without measurements."""
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


# ---- capacity: how many nodes (issue 16, point 3) --------------------------------------------
MAX_CAPACITY_NODE_TYPES = 8


class CapacityRequest(_Body):
    """How many nodes a training run needs: the model, the workload and the node types to
    size, each a node group whose `num_nodes` is the most nodes of that type to consider."""

    model: ModelInput
    """The model: `{"preset": name}`, `{"hf_config": {...}}` or an explicit model spec."""
    node_types: list[NodeGroupSpec] = Field(min_length=1, max_length=MAX_CAPACITY_NODE_TYPES)
    """Node types to size: each a node group (accelerator, system, node size, price per
    GPU-hour, ...) whose `num_nodes` is the largest node count to consider."""
    workload: TrainingWorkload
    """The training workload; its `target_tokens_per_s`, or `train_tokens` with
    `deadline_days`, is the throughput a size must reach."""
    min_nodes: int = Field(default=1, ge=1, le=MAX_TOTAL_GPUS)
    """Smallest node count to consider, count."""
    node_counts: list[Annotated[int, Field(ge=1, le=MAX_TOTAL_GPUS)]] | None = Field(
        default=None, min_length=1, max_length=64
    )
    """Node counts to search (within min_nodes..num_nodes); null: every count of the range
    (above 16 counts: the first 16, the powers of two and the largest)."""
    budget: float | None = Field(default=None, gt=0, le=1e15)
    """Most the whole run may cost, currency (the node types' price per GPU-hour): needs
    `workload.train_tokens`."""
    constraints: SearchConstraints | None = None
    """The searched space at each size and the time limit of the whole question (seconds;
    at most the service's max_search_time_limit_s)."""
    cost_model: CostModelRef | None = None
    """The cost model that prices the plans; null: `analytical`."""

    _workload_kind = field_validator("workload", mode="before")(_default_kind)


class CapacitySize(_Public):
    """The fastest plan at one cluster size of one node type, or why there is none."""

    num_nodes: int
    """Nodes of this size, count."""
    gpus: int
    """GPUs of this size, count."""
    plan: TrainingPlan | None
    """The fastest plan at this size; null when none fits (see `reason`)."""
    metrics: TrainingMetrics | None
    """Its metrics (step time, tokens per second, cost and energy per token, ...)."""
    reason: str | None
    """Why there is no plan (memory, the time limit), null with a plan."""
    complete: bool
    """Whether the size was searched completely (the plan is the fastest there is)."""
    meets_target: bool | None
    """Whether the plan reaches the target throughput; null without a target."""
    run_cost: float | None
    """train_tokens × cost per token, currency; null without train_tokens or a price."""
    within_budget: bool | None
    """Whether run_cost is at most the budget; null without a budget or a cost."""


class CapacityNodeType(_Public):
    """Every searched size of one node type, smallest first."""

    index: int
    """Index of the node type in the request's `node_types`."""
    node_group: NodeGroupSpec
    """The node type as requested."""
    sizes: list[CapacitySize]
    """Each searched size, smallest first."""
    smallest_meeting: int | None
    """Smallest node count meeting the target and the budget, count; null when none does
    or neither is given."""
    nearest_fit: CapacitySize | None
    """When nothing in the range fits: the first doubling of the node count past it that
    does (up to 16 × the largest count); null otherwise."""


class CapacityRecommendation(_Public):
    """The size to run: the fewest GPUs meeting the target and budget (cheapest among equal
    counts); with neither, the cheapest run per token (or the fastest, without prices)."""

    index: int
    """Index of the node type in the request's `node_types`."""
    size: CapacitySize
    """The recommended size and its plan."""


class CapacityPublic(_Public):
    """The answer to a capacity question (`POST /v1/capacity`)."""

    node_types: list[CapacityNodeType]
    """Per node type, every size searched."""
    recommendation: CapacityRecommendation | None
    """The size to run; null when no size of any node type qualifies."""
    target_tokens_per_s: float | None
    """The throughput a size must reach, tokens per second (the workload's target, or
    train_tokens / deadline_days); null without one."""
    budget: float | None
    """The request's budget for the whole run, currency; null without one."""


# ---- the Pareto front of a search (issue 16, point 2) ----------------------------------------
class ParetoPlan(_Public):
    """One plan of the front."""

    id: str | None
    """The stored plan's id when the search kept this plan among its ranked plans (exports
    and measurements take it); null for a front plan outside the top-k."""
    plan: TrainingPlan
    """The plan (its split filled in)."""
    metrics: TrainingMetrics
    """Its metrics: tokens per second, GPUs used, cost and energy per token, ..."""
    memory: MemoryReport
    """Its memory per pipeline stage; `peak_gib` is the figure the front trades."""


class ParetoPublic(_Public):
    """The plans of a training search that no other plan of its space beats on every one of
    `figures` (throughput, GPUs used, cost per token, energy per token, peak memory)."""

    search_id: str
    """The search."""
    figures: list[str]
    """The figures traded: tokens_per_s (higher is better), gpus_used,
    cost_per_million_tokens, energy_per_token_j and peak_memory_gib (lower is better)."""
    plans: list[ParetoPlan]
    """The front, fastest first."""
    complete: bool
    """Whether every candidate was priced or bounded (the front is exact); false when the
    time limit stopped it."""
    stats: dict[str, Any]
    """What the front search did: candidates enumerated, evaluated, pruned by reason
    (`pareto_bound`: a found plan beats the candidate's bounds), wall time in seconds."""


# ---- re-plan after a cluster change (issue 16, point 4) --------------------------------------
class ReplanRequest(_Body):
    """What changed in the cluster a stored training or serving plan runs on."""

    lost_nodes: int | list[Annotated[int, Field(ge=0, le=MAX_TOTAL_GPUS)]] | None = Field(
        default=None
    )
    """Nodes of `node_group` that failed: a count (the group's last nodes) or their indices
    in the group (0-based), count or list."""
    lost_gpus: int | None = Field(default=None, ge=1, le=MAX_TOTAL_GPUS)
    """GPUs of `node_group` that failed (the group's last GPUs), count."""
    node_group: int = Field(default=0, ge=0, le=64)
    """Index of the node group (in the search's `cluster.node_groups`) that lost them."""
    added_node_groups: list[NodeGroupSpec] | None = Field(default=None, max_length=16)
    """Node groups that joined the cluster (after the existing ones)."""
    top_k: int | None = Field(default=None, ge=1)
    """Plans kept, count; null: the original search's top_k."""
    restart_overhead_s: float = Field(default=120.0, ge=0, le=86_400)
    """Relaunch time of the job (scheduler, process start, NCCL set-up), or of one serving
    engine instance before its weights load (process start, CUDA graph capture), seconds:
    an assumption to set from your own restarts."""
    storage_read_gb_s: float = Field(default=10.0, gt=0, le=100_000)
    """Checkpoint read rate per node, GB/s: an assumption to set from your storage (serving
    weights load at it when neither `weights_read_gb_s` nor the catalog gives a rate)."""
    weights_read_gb_s: float | None = Field(default=None, gt=0, le=100_000)
    """Serving plans: the read rate per node of the engine weights a restarted instance
    loads, GB/s; null: the node's local NVMe rate from the catalog
    (`host_link.nvme_bandwidth_gb_s`), else `storage_read_gb_s`. Either is capped by the
    catalog's host link per GPU loading, where it has one."""

    @model_validator(mode="after")
    def _says_what_changed(self) -> ReplanRequest:
        if isinstance(self.lost_nodes, int) and self.lost_nodes < 1:
            raise ValueError(f"lost_nodes must be at least 1 (got {self.lost_nodes})")
        if self.lost_nodes is not None and self.lost_gpus is not None:
            raise ValueError("give lost_nodes or lost_gpus, not both")
        if self.lost_nodes is None and self.lost_gpus is None and not self.added_node_groups:
            raise ValueError("say what changed: lost_nodes, lost_gpus or added_node_groups")
        return self
