"""Orchestration: resolve inputs (presets, HF configs, catalog) → build the cost model →
price one plan or run a search → shape the results for the API.

Every call into the lower layers (hardware_catalog, specs presets/model input, cost_models
registry, solver) lives in this module.

A `calibrated` cost model named without explicit parameters is fitted here to the stored
measurements of runs on the request's accelerator (`calibrated_cost_model_ref`), and the
fitted parameters are written into the cost model's config so the search is reproducible.

Input errors are re-labelled with the request field they came from (`model.num_kv_heads`,
`cluster.node_groups.0.accelerator`) and answered as 422 before anything is stored.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlmodel import Session

import hardware_catalog
import solver
from app.core.config import Settings
from app.db import crud
from app.db.models import DEFAULT_TENANT
from app.exports.registry import FORMATS, LAUNCHES, WRAPPERS
from app.schemas import CostModelRef, EstimateRequest, SearchCreate
from app.services import no_fit
from app.services.no_fit import MIXED_PRECISION_ADAM_BYTES_PER_PARAM
from cost_models import registry
from cost_models.analytical import AnalyticalConfig
from cost_models.base import TrainingCostModel, TrainingEstimate, TrainingProblem
from cost_models.calibrated import (
    CalibratedConfig,
    CalibratedTrainingCostModel,
    CalibrationFit,
    CalibrationSample,
    fit_calibration,
    fit_refusal,
)
from cost_models.frameworks import (
    DEFAULT_PREFERENCE,
    FrameworkConfig,
    FrameworkProfile,
    build_framework,
)
from cost_models.frameworks import list_frameworks as registered_frameworks
from cost_models.serving.engines import DEFAULT_ENGINE, build_engine
from cost_models.serving.engines import list_engines as registered_engines
from hardware_catalog.schema import AcceleratorSpec, FabricSpec, ResolvedCluster, SystemSpec
from solver import replan
from solver.estimate import estimate_with_warnings
from solver.objectives import check_objective, objective_search
from solver.placement_load import with_placement_load_factors
from solver.search.offload_phase import memory_pruned, search_offload_when_needed
from solver.space import DEFAULT_SEARCH_FRAMEWORK, check_framework, framework_options
from specs import model_input, presets
from specs.cluster import ClusterSpec
from specs.constraints import TRAINING_FIXABLE_FIELDS, SearchConstraints
from specs.errors import (
    CatalogLookupError,
    NoFeasiblePlan,
    PlannerError,
    SpecError,
)
from specs.model import ModelSpec
from specs.plan import PIPELINE_SCHEDULES, TrainingPlan, canonical_hash
from specs.serving import ServingWorkload, canonical_engine_name
from specs.warnings import PlanWarning
from specs.workload import TrainingWorkload

logger = logging.getLogger(__name__)

DEFAULT_COST_MODEL = "analytical"


class InputError(PlannerError):
    """Invalid request input with one or more field errors (422)."""

    problem_type = "invalid-input"
    title = "Invalid input"
    status = 422

    def __init__(self, detail: str, errors: list[dict[str, Any]], **extensions: Any) -> None:
        super().__init__(detail, errors=errors, **extensions)


class UnknownReference(CatalogLookupError):
    """A request names a catalog entry (accelerator, preset) that does not exist: 422,
    because the request body is what is wrong, not the URL."""

    status = 422


def _field_error(field: str, rule: str, value: Any, message: str) -> dict[str, Any]:
    return {"field": field, "rule": rule, "value": value, "message": message}


def _prefixed(prefix: str, field: str | None) -> str:
    if not field:
        return prefix
    if field == prefix or field.startswith(prefix + ".") or field.startswith(prefix + "["):
        return field
    return f"{prefix}.{field}"


def validation_errors(exc: ValidationError, prefix: str) -> list[dict[str, Any]]:
    """Field errors of a pydantic ValidationError, with dotted paths under `prefix`."""
    out = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ()))
        out.append(
            _field_error(
                _prefixed(prefix, loc),
                err.get("type", "invalid"),
                err.get("input"),
                err.get("msg", "invalid value"),
            )
        )
    return out


def _relabel(error: PlannerError, prefix: str) -> PlannerError:
    """Prefix the `errors[].field` of an input error with the request field."""
    errors = error.extensions.get("errors")
    if isinstance(errors, list):
        error.extensions["errors"] = [
            {**e, "field": _prefixed(prefix, str(e.get("field", "")))} if isinstance(e, dict) else e
            for e in errors
        ]
    return error


# ---- catalog -----------------------------------------------------------------------------
def list_hardware() -> list[AcceleratorSpec]:
    """Every accelerator of the catalog."""
    return hardware_catalog.list_accelerators()


def get_hardware(accelerator_id: str) -> AcceleratorSpec:
    """One accelerator (id or alias); CatalogLookupError (404) if unknown."""
    return hardware_catalog.get_accelerator(accelerator_id)


def list_systems() -> list[SystemSpec]:
    """Every system (node / rack type) of the catalog."""
    return hardware_catalog.list_systems()


def get_system(system_id: str) -> SystemSpec:
    """One system (id or alias); CatalogLookupError (404) if unknown."""
    return hardware_catalog.get_system(system_id)


def list_fabrics() -> list[FabricSpec]:
    """Every fabric (interconnect tier) of the catalog."""
    return hardware_catalog.list_fabrics()


def get_fabric(fabric_id: str) -> FabricSpec:
    """One fabric (id or alias); CatalogLookupError (404) if unknown."""
    return hardware_catalog.get_fabric(fabric_id)


def _one_line(text: str | None) -> str:
    """A docstring as one line (its line breaks are layout)."""
    return " ".join((text or "").split())


def framework_public(profile: FrameworkProfile) -> dict[str, Any]:
    """A framework profile as `GET /v1/frameworks` shows it: what it implements, where it
    ranks when a plan names no framework, which exports launch it, and its behaviour with
    each option's meaning, default and JSON Schema (what `cost_model.config.frameworks`
    accepts)."""
    config_cls = type(profile.config)
    properties = config_cls.model_json_schema().get("properties", {})
    defaults = profile.config.model_dump(mode="json")
    config = {}
    for option, info in config_cls.model_fields.items():
        base = FrameworkConfig.model_fields.get(option)
        meaning = _one_line((base.description if base else None) or info.description)
        own = _one_line(info.description)
        note = own if own and own != meaning else None
        schema = {
            k: v
            for k, v in properties.get(option, {}).items()
            if k not in ("title", "description", "default")
        }
        config[option] = {
            "default": defaults[option],
            "description": meaning,
            "default_note": note,
            "json_schema": schema,
        }
    launchers = sorted(name for name, runs in LAUNCHES.items() if profile.name in runs)
    formats = [f for f in FORMATS if f in launchers or (launchers and f in WRAPPERS)]
    return {
        "name": profile.name,
        "label": profile.label,
        "description": _one_line(inspect.getdoc(type(profile))),
        "zero_stages": sorted(profile.zero_stages),
        "supports_moe": profile.supports_moe,
        "rules": list(profile.rules),
        "offload": {
            "optimizer_devices": sorted(profile.offload_optimizer_devices),
            "parameter_devices": sorted(profile.offload_parameter_devices),
            "activations": profile.offload_activations,
            "states_together": profile.offload_states_together,
        },
        "default_for_search": profile.name == DEFAULT_SEARCH_FRAMEWORK,
        "preference_rank": (
            DEFAULT_PREFERENCE.index(profile.name) + 1
            if profile.name in DEFAULT_PREFERENCE
            else None
        ),
        "launchers": launchers,
        "export_formats": formats,
        "config": config,
    }


def list_frameworks() -> list[dict[str, Any]]:
    """Every registered framework profile, by name."""
    return [framework_public(build_framework(name)) for name in registered_frameworks()]


def get_framework(name: str) -> dict[str, Any]:
    """One framework profile; CatalogLookupError (404) if unknown."""
    if name not in registered_frameworks():
        known = ", ".join(registered_frameworks())
        raise CatalogLookupError(f"unknown framework {name!r}; registered: {known}")
    return framework_public(build_framework(name))


def list_serving_engines() -> list[dict[str, Any]]:
    """Every registered serving engine profile, by name."""
    return [get_serving_engine(name) for name in registered_engines()]


def get_serving_engine(name: str) -> dict[str, Any]:
    """One serving engine profile by its name or an alias (`TensorRT-LLM`);
    CatalogLookupError (404) if unknown."""
    name = canonical_engine_name(name)
    if name not in registered_engines():
        known = ", ".join(registered_engines())
        raise CatalogLookupError(f"unknown serving engine {name!r}; registered: {known}")
    return {**build_engine(name).describe(), "default": name == DEFAULT_ENGINE}


def model_public(spec: ModelSpec) -> dict[str, Any]:
    """The explicit spec plus `num_parameters` (and `num_active_parameters` for MoE)."""
    out: dict[str, Any] = spec.model_dump(mode="json")
    out["num_parameters"] = spec.num_parameters()
    if spec.is_moe:
        out["num_active_parameters"] = spec.num_active_parameters()
    return out


def list_model_presets() -> list[dict[str, Any]]:
    """Every preset with its parameter counts."""
    return [presets.preset_info(name) for name in presets.list_presets()]


def get_model_preset(name: str) -> dict[str, Any]:
    """One preset; CatalogLookupError (404) if unknown."""
    return presets.preset_info(name)


def resolve_model(value: Any, *, field: str = "model") -> ModelSpec:
    """A model input (preset, hf_config or explicit spec) → ModelSpec; 422 naming the field."""
    if not isinstance(value, dict):
        raise InputError(
            f"{field} must be an object: a preset, an hf_config or an explicit spec",
            [_field_error(field, "type", value, "must be an object")],
        )
    try:
        spec: ModelSpec = model_input.resolve_model(value)
    except ValidationError as exc:
        errors = validation_errors(exc, field)
        raise InputError(f"invalid {field}: {errors[0]['message']}", errors) from exc
    except CatalogLookupError as exc:
        name = value.get("preset")
        raise UnknownReference(
            exc.detail,
            errors=[_field_error(f"{field}.preset", "unknown preset", name, exc.detail)],
            **{k: v for k, v in exc.extensions.items() if k != "errors"},
        ) from exc
    except PlannerError as exc:
        raise _relabel(exc, field) from exc
    return spec


def resolve_cluster(cluster: ClusterSpec, *, field: str = "cluster") -> ResolvedCluster:
    """Look every accelerator and system up and fill the catalog defaults; 422 naming the
    node group's field."""
    errors = []
    for index, group in enumerate(cluster.node_groups):
        lookups = (
            ("accelerator", group.accelerator, hardware_catalog.get_accelerator),
            ("system", group.system, hardware_catalog.get_system),
        )
        for name, value, lookup in lookups:
            if value is None:
                continue
            try:
                lookup(value)
            except CatalogLookupError as exc:
                errors.append(
                    _field_error(
                        f"{field}.node_groups.{index}.{name}", f"unknown {name}", value, exc.detail
                    )
                )
    if errors:
        raise UnknownReference(
            "; ".join(e["message"] for e in errors),
            errors=errors,
        )
    try:
        resolved = hardware_catalog.resolve_cluster(cluster)
    except ValidationError as exc:
        errs = validation_errors(exc, field)
        raise InputError(f"invalid {field}: {errs[0]['message']}", errs) from exc
    except PlannerError as exc:
        raise _relabel(exc, field) from exc
    return resolved


# ---- cost models -------------------------------------------------------------------------
def list_cost_models() -> list[dict[str, Any]]:
    """Registered cost models as `{"name", "version"?, "description"?}`."""
    items = []
    for name in registry.list_cost_models():
        item: dict[str, Any] = {"name": name}
        try:
            item["version"] = str(registry.build_cost_model(name).version)
        except Exception:  # a plug-in that cannot build with defaults is still listed
            logger.warning("cost model %s cannot be built with defaults", name, exc_info=True)
        items.append(item)
    return items


def build_cost_model(ref: CostModelRef | None, *, field: str = "cost_model") -> TrainingCostModel:
    """The cost model a request names (default: analytical); 422 if unknown or misconfigured."""
    name = ref.name if ref else DEFAULT_COST_MODEL
    config = ref.config if ref else None
    try:
        model: TrainingCostModel = registry.build_cost_model(name, config)
    except ValidationError as exc:
        errs = validation_errors(exc, f"{field}.config")
        raise InputError(f"invalid {field}.config: {errs[0]['message']}", errs) from exc
    except SpecError as exc:
        errs = _framework_override_errors(exc)
        if errs:
            raise InputError("; ".join(e["message"] for e in errs), errs) from exc
        raise
    except PlannerError as exc:
        if "errors" not in exc.extensions:
            exc.extensions["errors"] = [
                _field_error(f"{field}.name", "unknown cost model", name, exc.detail)
            ]
        raise
    return model


def _framework_override_errors(exc: SpecError) -> list[dict[str, Any]]:
    """The field errors of a cost-model config whose framework overrides (a `frameworks`
    member: `cost_model.config.frameworks`, `cost_model.config.base.frameworks`) failed to
    validate: one per unknown framework (`<field>.<name>`, the registered names listed) and
    one per bad option (`<field>.<name>.<option>`). Empty for any other config error."""
    errors = exc.extensions.get("errors")
    if not isinstance(errors, list) or len(errors) != 1:
        return []
    field, overrides = str(errors[0].get("field", "")), errors[0].get("value")
    if not field.endswith(".frameworks") or not isinstance(overrides, dict):
        return []
    out: list[dict[str, Any]] = []
    for name, options in overrides.items():
        path = f"{field}.{name}"
        unknown = _framework_name_errors(name, path)
        if unknown:
            out.extend(unknown)
            continue
        try:
            build_framework(name, options)
        except SpecError as bad:
            for err in bad.extensions.get("errors", []):
                # the profile's Config names its options cost_model.config.<option>
                where = path + str(err.get("field", "")).removeprefix("cost_model.config")
                out.append(
                    _field_error(where, err["rule"], err.get("value"), f"{where}: {err['rule']}")
                )
    return out


def load_plugins(allowlist: Sequence[str]) -> list[str]:
    """Load the allowed third-party cost models of the `meshplan.cost_models` entry-point
    group. Failures are logged, never raised."""
    try:
        return registry.load_entry_point_plugins(list(allowlist))
    except Exception:
        logger.exception("loading cost-model plug-ins failed")
        return []


def warm_up() -> None:
    """Load the catalogs (with their name indexes) and build the default cost model once, so
    that a worker's first search, or the API's first concurrent requests, do not pay for it."""
    hardware_catalog.load_shipped()
    presets.list_presets()
    registry.build_cost_model(DEFAULT_COST_MODEL)


# ---- estimate ----------------------------------------------------------------------------
def _check_supported(
    model: ModelSpec, cluster: ResolvedCluster, workload: TrainingWorkload
) -> None:
    """Problem-level limits answered as a 422 before any search: a precision an
    accelerator has no dense peak for, MoE routing that does not fit the model."""
    routing = workload.moe_routing
    if routing is not None:
        if model.moe is None:
            raise InputError(
                f"{model.name} is a dense model; moe_routing applies to MoE models only",
                [
                    _field_error(
                        "workload.moe_routing",
                        "only for MoE models",
                        None,
                        "the model has no routed experts",
                    )
                ],
            )
        loads = routing.expert_loads
        if loads is not None and len(loads) != model.moe.num_experts:
            raise InputError(
                f"workload.moe_routing.expert_loads has {len(loads)} entries; "
                f"{model.name} has {model.moe.num_experts} routed experts",
                [
                    _field_error(
                        "workload.moe_routing.expert_loads",
                        f"one entry per routed expert ({model.moe.num_experts})",
                        len(loads),
                        "wrong number of entries",
                    )
                ],
            )
    for accelerator in {p.groups[0].accelerator.id: p.groups[0].accelerator
                        for p in cluster.pools().values()}.values():  # fmt: skip
        try:
            accelerator.peak_flops(workload.precision)
        except KeyError:
            supported = sorted(k for k, v in accelerator.peak_tflops.items() if v and k != "int8")
            raise InputError(
                f"{accelerator.id} has no dense {workload.precision} peak; it supports "
                f"{', '.join(supported)}",
                [
                    _field_error(
                        "workload.precision",
                        f"must be one of {supported} on {accelerator.id}",
                        workload.precision,
                        f"{accelerator.id} has no {workload.precision}",
                    )
                ],
            ) from None


def _training_workload(workload: Any) -> TrainingWorkload:
    if not isinstance(workload, TrainingWorkload):
        raise InputError(
            "only training workloads are supported",
            [
                _field_error(
                    "workload.kind",
                    "unsupported",
                    getattr(workload, "kind", None),
                    "only kind=training is supported",
                )
            ],
        )
    return workload


def estimate(
    body: EstimateRequest, session: Session | None = None, *, tenant: str = DEFAULT_TENANT
) -> dict[str, Any]:
    """Price one plan (`POST /v1/estimate`); `session` gives a `calibrated` cost model the
    stored measurements of `tenant`. Serving workloads go to `app.services.serving`."""
    if isinstance(body.workload, ServingWorkload):
        from app.services import serving

        return serving.estimate(body)
    if not isinstance(body.plan, TrainingPlan):
        raise InputError(
            'a training workload takes a training plan ({"parallelism", ...})',
            [
                _field_error(
                    "plan",
                    "training plan for a training workload",
                    "serving plan",
                    "plan has `instances`",
                )
            ],
        )
    model = resolve_model(body.model)
    cluster = resolve_cluster(body.cluster)
    workload = _training_workload(body.workload)
    _check_supported(model, cluster, workload)
    constraints = body.constraints
    problem = TrainingProblem(
        model=model,
        cluster=cluster,
        workload=workload,
        memory_headroom_gib=constraints.memory_headroom_gib if constraints else 2.0,
        allow_tensor_across_nodes=constraints.allow_tensor_across_nodes if constraints else False,
    )
    _check_stage_layers(body.plan.stage_layers, model.num_layers, "plan.stage_layers")
    ref, calibration = calibrated_cost_model_ref(body.cost_model, cluster, session, tenant=tenant)
    cost_model = build_cost_model(ref)
    problem = with_placement_load_factors(problem, [body.plan.parallelism.expert])
    result, warnings = estimate_with_warnings(problem, cost_model, body.plan, cluster=body.cluster)
    public = estimate_public(result, cost_model, warnings)
    public["calibration"] = calibration
    return public


def estimate_public(
    result: TrainingEstimate,
    cost_model: TrainingCostModel,
    warnings: Sequence[PlanWarning] = (),
) -> dict[str, Any]:
    """The `/v1/estimate` answer for one estimate."""
    return {
        "feasible": result.feasible,
        "violations": [v.model_dump(mode="json") for v in result.violations],
        "metrics": result.metrics.model_dump(mode="json"),
        "memory": result.memory.model_dump(mode="json"),
        "plan": result.plan.model_dump(mode="json"),
        "cost_model": {"name": cost_model.name, "version": str(cost_model.version)},
        "details": _jsonable_details(result.details),
        "warnings": [w.model_dump(mode="json") for w in warnings],
    }


def _jsonable_details(details: dict[str, Any]) -> dict[str, Any]:
    from app.core.problems import to_jsonable

    out = to_jsonable(details)
    return out if isinstance(out, dict) else {}


def _check_stage_layers(stage_layers: Any, num_layers: int, field: str) -> None:
    if stage_layers is not None and sum(stage_layers) != num_layers:
        raise InputError(
            f"{field} sums to {sum(stage_layers)}; the model has {num_layers} layers",
            [
                _field_error(
                    field,
                    f"must sum to num_layers ({num_layers})",
                    stage_layers,
                    f"{field} sums to {sum(stage_layers)}, not {num_layers}",
                )
            ],
        )


# ---- searches ----------------------------------------------------------------------------
_DEGREES = ("data", "tensor", "pipeline", "virtual_pipeline", "context", "expert", "expert_tensor")
_CHOICES: dict[str, tuple[Any, ...]] = {
    "zero_stage": (0, 1, 2, 3),
    "recompute": ("none", "selective", "full"),
    "pipeline_schedule": PIPELINE_SCHEDULES,
}


def _check_fixed(
    fixed: dict[str, Any],
    num_gpus: int | None,
    num_layers: int,
    *,
    num_heads: int | None = None,
    total_gpus: int | None = None,
) -> None:
    """Type/range checks of `constraints.fixed` done before the search is stored.
    `num_gpus`: the GPU count the degrees must divide (a homogeneous cluster); otherwise
    (a mixed cluster, whose plans may leave GPUs idle) they must fit in `total_gpus`, and a
    fixed tensor degree must divide the `num_heads` attention heads either way."""
    errors = []
    for key, value in fixed.items():
        field = f"constraints.fixed.{key}"
        if key not in TRAINING_FIXABLE_FIELDS:
            errors.append(
                _field_error(
                    field,
                    f"a training search fixes only {sorted(TRAINING_FIXABLE_FIELDS)}",
                    value,
                    f"{field} fixes a serving plan, not a training plan",
                )
            )
        elif key in _DEGREES or key == "micro_batch_size":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                errors.append(
                    _field_error(
                        field, "positive integer", value, f"{field} must be a positive integer"
                    )
                )
        elif key in ("sequence_parallel", "flash_attention"):
            if not isinstance(value, bool):
                errors.append(_field_error(field, "boolean", value, f"{field} must be a boolean"))
        elif key == "framework":
            errors.extend(_framework_name_errors(value, field))
        elif key in _CHOICES:
            if value not in _CHOICES[key] or isinstance(value, bool):
                errors.append(
                    _field_error(
                        field,
                        f"one of {list(_CHOICES[key])}",
                        value,
                        f"{field} must be one of {list(_CHOICES[key])}",
                    )
                )
        elif key == "stage_layers":
            if not (
                isinstance(value, list)
                and value
                and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
            ):
                errors.append(
                    _field_error(
                        field,
                        "list of positive integers",
                        value,
                        f"{field} must be a list of positive integers",
                    )
                )
            elif sum(value) != num_layers:
                errors.append(
                    _field_error(
                        field,
                        f"must sum to num_layers ({num_layers})",
                        value,
                        f"{field} sums to {sum(value)}",
                    )
                )
    tensor = fixed.get("tensor")
    if not errors and num_heads is not None and tensor is not None and num_heads % tensor:
        errors.append(
            _field_error(
                "constraints.fixed.tensor",
                f"must divide the attention heads ({num_heads})",
                tensor,
                f"constraints.fixed.tensor {tensor} does not divide the model's {num_heads} "
                "attention heads",
            )
        )
    if errors:
        raise InputError("; ".join(e["message"] for e in errors), errors)
    product = 1
    for key in ("data", "tensor", "pipeline", "context"):
        product *= int(fixed.get(key, 1))
    if total_gpus is not None and product > total_gpus:
        raise InputError(
            f"fixed data × tensor × pipeline × context = {product} exceeds the cluster's "
            f"{total_gpus} GPUs",
            [
                _field_error(
                    "constraints.fixed",
                    f"degrees must fit in the cluster's {total_gpus} GPUs",
                    fixed,
                    f"product {product} > {total_gpus}",
                )
            ],
        )
    if num_gpus is not None and num_gpus % product:
        raise InputError(
            f"fixed data × tensor × pipeline × context = {product} does not divide the "
            f"cluster's {num_gpus} GPUs",
            [
                _field_error(
                    "constraints.fixed",
                    f"degrees must divide the GPU count ({num_gpus})",
                    fixed,
                    f"product {product} does not divide {num_gpus}",
                )
            ],
        )


def _framework_name_errors(name: Any, field: str) -> list[dict[str, Any]]:
    """`[]` when `name` is a registered framework, else the field error naming it."""
    try:
        check_framework(name, field)
    except SpecError as exc:
        return list(exc.extensions.get("errors", []))
    return []


def _check_frameworks(frameworks: Sequence[str] | None) -> None:
    """Every entry of `constraints.frameworks` is a registered framework (422 listing each
    unknown one, at the request's index, before the search is stored)."""
    errors = [
        err
        for index, name in enumerate(frameworks or ())
        for err in _framework_name_errors(name, f"constraints.frameworks.{index}")
    ]
    if errors:
        raise InputError("; ".join(e["message"] for e in errors), errors)


@dataclass(frozen=True)
class PreparedSearch:
    """A validated search request, ready to store and run."""

    request: dict[str, Any]
    """The request as received, defaults filled in."""
    problem: dict[str, Any]
    """Everything the worker needs, resolved (explicit model, resolved cluster...)."""
    request_hash: str
    cost_model_name: str
    cost_model_version: str


def prepare_search(
    body: SearchCreate,
    settings: Settings,
    session: Session | None = None,
    *,
    tenant: str = DEFAULT_TENANT,
) -> PreparedSearch:
    """Resolve and validate a search request synchronously (422 before anything is stored);
    `session` gives a `calibrated` cost model the stored measurements of `tenant`."""
    if body.top_k > settings.max_top_k:
        raise InputError(
            f"top_k must be between 1 and {settings.max_top_k} (got {body.top_k})",
            [
                _field_error(
                    "top_k",
                    f"between 1 and {settings.max_top_k}",
                    body.top_k,
                    f"top_k must be at most {settings.max_top_k}",
                )
            ],
        )
    constraints = body.constraints or SearchConstraints()
    if "time_limit_s" not in constraints.model_fields_set:
        constraints = constraints.model_copy(
            update={"time_limit_s": settings.default_search_time_limit_s}
        )
    elif constraints.time_limit_s > settings.max_search_time_limit_s:
        raise InputError(
            f"constraints.time_limit_s must be at most {settings.max_search_time_limit_s} s",
            [
                _field_error(
                    "constraints.time_limit_s",
                    f"at most {settings.max_search_time_limit_s}",
                    constraints.time_limit_s,
                    "time limit above the service maximum",
                )
            ],
        )
    _check_frameworks(constraints.frameworks)
    if isinstance(body.workload, ServingWorkload):
        from app.services import serving

        if body.objective != "max_throughput":
            raise SpecError(
                "objective",
                "training searches only; a serving search ranks by workload.objective",
                body.objective,
                f"objective {body.objective} ranks training plans; a serving search takes its "
                "objective in workload.objective (max_goodput_per_gpu, min_gpus, min_cost, ...)",
            )
        return serving.prepare_search(body, constraints)
    if constraints.engines is not None or constraints.engine_options is not None:
        raise InputError(
            "constraints.engines compares serving engines; a training search compares "
            "frameworks (constraints.frameworks)",
            [
                _field_error(
                    "constraints.engines"
                    if constraints.engines is not None
                    else "constraints.engine_options",
                    "only for serving workloads",
                    constraints.engines or constraints.engine_options,
                    "serving engines in a training search",
                )
            ],
        )
    model = resolve_model(body.model)
    cluster = resolve_cluster(body.cluster)
    workload = _training_workload(body.workload)
    _check_supported(model, cluster, workload)
    check_objective(
        TrainingProblem(model=model, cluster=cluster, workload=workload), body.objective
    )
    # on a mixed cluster a plan may leave GPUs idle: its degrees need not divide the total
    _check_fixed(
        constraints.fixed,
        cluster.num_gpus if cluster.is_homogeneous else None,
        model.num_layers,
        num_heads=model.num_attention_heads,
        total_gpus=cluster.num_gpus,
    )
    framework_options(constraints)  # a pinned framework among the listed ones
    cost_ref, calibration = calibrated_cost_model_ref(
        body.cost_model or CostModelRef(), cluster, session, tenant=tenant
    )
    assert cost_ref is not None
    cost_model = build_cost_model(cost_ref)
    cost_entry: dict[str, Any] = {
        "name": cost_ref.name,
        "config": cost_ref.config,
        "version": str(cost_model.version),
    }
    if calibration is not None:
        cost_entry["calibration"] = calibration
    problem = {
        "model": model.model_dump(mode="json"),
        "cluster": cluster.model_dump(mode="json"),
        "workload": workload.model_dump(mode="json"),
        "constraints": constraints.model_dump(mode="json"),
        "objective": body.objective,
        "top_k": body.top_k,
        "cost_model": cost_entry,
    }
    request = body.model_dump(mode="json")
    request["constraints"] = constraints.model_dump(mode="json", exclude_defaults=False)
    return PreparedSearch(
        request=request,
        problem=problem,
        request_hash=canonical_hash(problem),
        cost_model_name=cost_ref.name,
        cost_model_version=str(cost_model.version),
    )


@dataclass(frozen=True)
class SearchOutcome:
    """What a finished search stores: plans (best first, as dicts; a training plan folded
    under another has its `dominated_by`, the other's rank in this list) and stats."""

    plans: list[dict[str, Any]]
    stats: dict[str, Any]


ProgressFn = Callable[[int, int | None], None]


def run_problem(
    problem: dict[str, Any],
    *,
    progress: ProgressFn,
    should_stop: Callable[[], bool],
    homogeneous_search: Callable[..., Any] | None = None,
) -> SearchOutcome:
    """Run the search a stored problem describes (the worker's job). `homogeneous_search`
    replaces `solver.search` for training on one node group (a sharded search on Ray)."""
    if (problem.get("workload") or {}).get("kind") == "serving":
        from app.services import serving

        return serving.run_problem(problem, progress=progress, should_stop=should_stop)
    training, cost_model, constraints = training_inputs(problem)
    started = time.perf_counter()
    if training.cluster.is_homogeneous:
        run = homogeneous_search or solver.search
    else:
        run = solver.mixed_search
    objective = str(problem.get("objective") or "max_throughput")
    offload_searched = False
    plain: Callable[..., Any] = run

    def with_offload_phase(*args: Any, **kwargs: Any) -> Any:
        """`run`, then the space with offload when nothing fit (`offload_phase`)."""
        nonlocal offload_searched
        found, ran = search_offload_when_needed(plain, *args, **kwargs)
        offload_searched = offload_searched or ran
        return found

    # offload is searched when nothing fits, for the throughput objective (the others
    # search smaller GPU counts that are expected not to fit)
    searcher = with_offload_phase if objective == "max_throughput" else plain

    result = objective_search(
        training,
        cost_model,
        constraints,
        objective=objective,
        top_k=int(problem.get("top_k", 10)),
        progress=progress,
        should_stop=should_stop,
        run=searcher,
    )
    if problem.get("replan") is not None:
        result = replan.annotate(result, training, cost_model, constraints, problem["replan"], run)
    stats = result.stats.to_dict()
    if offload_searched:  # nothing fit without offload: the space with it was searched
        stats["offload_searched"] = True
    stats.setdefault("wall_time_s", time.perf_counter() - started)
    # every plan shown with include_dominated: the non-dominated ones and those folded under
    # them (`dominated_by`: the rank of the dominator in this list)
    plans = [_ranked_plan_dict(p) for p in result.ranked(include_dominated=True)]
    if not plans and not should_stop():
        raise NoFeasiblePlan(
            _no_plan_detail(training, stats),
            reasons=stats.get("pruned", {}),
            stats=stats,
            suggestions=_suggestions(training, cost_model, constraints, stats),
        )
    return SearchOutcome(plans=plans, stats=stats)


def _suggestions(
    training: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    stats: dict[str, Any],
) -> dict[str, Any]:
    """What would fit (`app.services.no_fit`) when memory pruned candidates of a complete
    search on one kind of node; every entry null otherwise."""
    if not stats.get("complete") or not memory_pruned(stats.get("pruned") or {}):
        return {"offload": None, "num_nodes": None, "sequence_length": None}
    return no_fit.suggestions(solver.search, training, cost_model, constraints)


def training_inputs(
    problem: dict[str, Any],
) -> tuple[TrainingProblem, TrainingCostModel, SearchConstraints]:
    """The training problem (with MoE placement load factors), cost model and constraints
    of a stored search problem."""
    constraints = SearchConstraints.model_validate(problem["constraints"])
    training = training_problem(problem)
    if training.model.moe is not None:
        fixed_expert = constraints.fixed.get("expert")
        degrees = (
            [int(fixed_expert)]
            if fixed_expert
            else [
                e
                for e in range(1, training.model.moe.num_experts + 1)
                if training.model.moe.num_experts % e == 0 and e <= training.num_gpus
            ]
        )
        training = with_placement_load_factors(training, degrees)
    ref = problem.get("cost_model") or {}
    cost_model = build_cost_model(
        CostModelRef(name=ref.get("name", DEFAULT_COST_MODEL), config=ref.get("config"))
    )
    return training, cost_model, constraints


def training_problem(problem: dict[str, Any]) -> TrainingProblem:
    """The TrainingProblem of a stored search problem."""
    constraints = SearchConstraints.model_validate(problem["constraints"])
    return TrainingProblem(
        model=ModelSpec.model_validate(problem["model"]),
        cluster=ResolvedCluster.model_validate(problem["cluster"]),
        workload=TrainingWorkload.model_validate(problem["workload"]),
        memory_headroom_gib=constraints.memory_headroom_gib,
        allow_tensor_across_nodes=constraints.allow_tensor_across_nodes,
    )


def _no_plan_detail(problem: TrainingProblem, stats: dict[str, Any]) -> str:
    """Why nothing fits, in the terms of what pruned the candidates: an empty space, a rule
    every candidate breaks, or memory (model states against the cluster's memory)."""
    pruned: dict[str, int] = stats.get("pruned") or {}
    enumerated = int(stats.get("enumerated") or 0)
    if enumerated == 0:
        return (
            "the search space is empty: no combination of degrees, micro-batch size and fixed "
            f"fields divides global_batch_size {problem.workload.global_batch_size} over "
            f"{problem.num_gpus} GPUs (check constraints.micro_batch_sizes and "
            "constraints.fixed)"
        )
    rules = {k.removeprefix("rule:"): v for k, v in pruned.items() if k.startswith("rule:")}
    if rules and sum(rules.values()) >= enumerated:
        listed = ", ".join(
            f"{kind} ({n})" for kind, n in sorted(rules.items(), key=lambda x: -x[1])
        )
        return (
            f"every one of the {enumerated} candidates breaks a rule: {listed}; estimate one "
            "plan (POST /v1/estimate) to read the rule's detail"
        )
    params = problem.model.num_parameters()
    states_tb = params * MIXED_PRECISION_ADAM_BYTES_PER_PARAM / 1e12
    parts = [
        (g.num_gpus, g.accelerator.id, g.accelerator.memory_gib) for g in problem.cluster.groups
    ]
    memory_tb = sum(n * gib for n, _, gib in parts) * 1024**3 / 1e12
    gpus = " + ".join(f"{n} × {acc}" for n, acc, _ in parts)
    memories = " + ".join(f"{n} × {gib:.1f} GiB" for n, _, gib in parts)
    return (
        f"no plan of the searched space fits {problem.model.name} on {gpus}: its "
        f"{params / 1e9:.2f}e9 parameters need "
        f"{states_tb:.2f} TB of weights, gradients and Adam states (16 bytes per parameter) "
        f"before activations; the cluster has {memories} = {memory_tb:.2f} TB, of which "
        f"memory_headroom_gib = {problem.memory_headroom_gib:g} per GPU is kept free (see "
        "`reasons` for what pruned the candidates)"
    )


def _ranked_plan_dict(ranked: Any) -> dict[str, Any]:
    est: TrainingEstimate = ranked.estimate
    return {
        "rank": int(ranked.rank),
        "plan": est.plan.model_dump(mode="json"),
        "feasible": bool(est.feasible),
        "violations": [v.model_dump(mode="json") for v in est.violations],
        "metrics": est.metrics.model_dump(mode="json"),
        "memory": est.memory.model_dump(mode="json"),
        "explanation": str(ranked.explanation),
        "warnings": [w.model_dump(mode="json") for w in getattr(ranked, "warnings", ())],
        "dominated_by": getattr(ranked, "dominated_by", None),
        "dominated_reason": getattr(ranked, "dominated_reason", None),
    }


def plan_public(plan: dict[str, Any], *, plan_id: str, search_id: str) -> dict[str, Any]:
    """A stored plan as the API shows it: the plan fields flattened next to its results."""
    body_plan = plan.get("plan")
    if isinstance(body_plan, dict) and "instances" in body_plan:
        from app.services import serving

        return serving.plan_public(plan, plan_id=plan_id, search_id=search_id)
    body = TrainingPlan.model_validate(plan["plan"]).model_dump(mode="json")
    return {
        "id": plan_id,
        "search_id": search_id,
        "rank": plan["rank"],
        **body,
        "metrics": plan["metrics"],
        "memory": plan["memory"],
        "explanation": plan.get("explanation", ""),
        "feasible": plan.get("feasible", True),
        "violations": plan.get("violations", []),
        "warnings": plan.get("warnings") or [],
        "dominated_by": plan.get("dominated_by"),
        "dominated_reason": plan.get("dominated_reason"),
    }


# ---- calibration from measured runs -------------------------------------------------------
CALIBRATED_COST_MODEL = "calibrated"
_MAX_FITS = 64
_FITS: dict[str, CalibrationFit] = {}
"""Fits by the hash of (accelerator, measurement ids, base config): measurements are never
edited, so the ids name the data."""
_FITS_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Samples:
    samples: list[CalibrationSample]
    measurement_ids: list[str]
    plan_ids: list[str]


def _calibration_samples(
    session: Session | None, accelerator_id: str, tenant: str = DEFAULT_TENANT
) -> _Samples:
    """The stored measurements of `tenant` on `accelerator_id` as fit samples (rows whose stored problem
    or plan no longer validates are skipped and logged)."""
    out = _Samples([], [], [])
    if session is None:
        return out
    for measurement, plan, search in crud.calibration_rows(
        session=session, accelerator_id=accelerator_id, tenant=tenant
    ):
        try:
            sample = CalibrationSample(
                training_problem(search.problem),
                TrainingPlan.model_validate(plan.plan),
                measurement.step_time_s,
            )
        except (ValidationError, PlannerError, KeyError, TypeError):
            logger.warning(
                "measurement %s skipped: its plan or search no longer validates",
                measurement.id,
                exc_info=True,
            )
            continue
        if sample.plan.stage_layers is None:
            continue
        out.samples.append(sample)
        out.measurement_ids.append(measurement.id)
        out.plan_ids.append(plan.id)
    return out


def _fit_or_refusal(samples: Any, base: AnalyticalConfig, accelerator_id: str) -> CalibrationFit:
    """The fit of `samples`, or, when it fails or leaves its bounds, the unfitted base with
    the reason as `refusal` (served as such, never as a 500)."""
    try:
        fit = fit_calibration(samples, base)
    except (ArithmeticError, ValueError) as exc:  # numpy's LinAlgError is a ValueError
        refused: str | None = f"the fit failed ({type(exc).__name__}: {exc})"
    else:
        refused = fit_refusal(fit)
        if refused is None:
            return fit
    logger.warning("calibration of %s refused: %s", accelerator_id, refused)
    return dataclasses.replace(fit_calibration([], base), num_samples=len(samples), refusal=refused)


def current_calibration(
    session: Session | None,
    accelerator_id: str,
    base: AnalyticalConfig | None = None,
    *,
    field: str = "accelerator",
    tenant: str = DEFAULT_TENANT,
) -> dict[str, Any]:
    """The calibrated model's fit for one accelerator from every measurement `tenant` stored
    on it
    (cached per measurement set and base config). 422 naming `field` for an unknown id."""
    try:
        accelerator = hardware_catalog.get_accelerator(accelerator_id)
    except CatalogLookupError as exc:
        raise UnknownReference(
            exc.detail,
            errors=[_field_error(field, "unknown accelerator", accelerator_id, exc.detail)],
        ) from exc
    base = base or AnalyticalConfig()
    data = _calibration_samples(session, accelerator.id, tenant)
    key = canonical_hash(
        {
            "accelerator": accelerator.id,
            "measurements": data.measurement_ids,
            "base": base.model_dump(mode="json"),
        }
    )
    with _FITS_LOCK:
        cached = _FITS.get(key)
    fit = cached if cached is not None else _fit_or_refusal(data.samples, base, accelerator.id)
    if cached is None:
        with _FITS_LOCK:
            if len(_FITS) >= _MAX_FITS:
                _FITS.clear()
            _FITS[key] = fit
    config = fit.config(base)
    model = CalibratedTrainingCostModel(CalibratedConfig.model_validate(config))
    if fit.refusal is not None:
        detail = f"calibration on {accelerator.id} refused: {fit.refusal}"
    elif fit.num_samples == 0:
        detail = f"no measurements on {accelerator.id} yet: priced exactly as the analytical model"
    else:
        assert fit.error_before is not None and fit.error_after is not None
        detail = (
            f"fitted to {fit.num_samples} measured runs on {accelerator.id}: mean "
            f"|error| {fit.error_before.mean:.1%} before, {fit.error_after.mean:.1%} after"
        )
    return {
        "accelerator": accelerator.id,
        "num_samples": fit.num_samples,
        "parameters": fit.parameters,
        "error_before": fit.error_before.to_dict() if fit.error_before else None,
        "error_after": fit.error_after.to_dict() if fit.error_after else None,
        "fitted": list(fit.fitted),
        "max_parameters": fit.max_parameters,
        "uncertainty": {name: dict(values) for name, values in fit.uncertainty.items()},
        "not_fitted": dict(fit.not_fitted),
        "measurements_hash": key[:16],
        "refused": fit.refusal,
        "detail": detail,
        "samples": [
            {
                "measurement_id": m,
                "plan_id": p,
                "measured_step_time_s": s.measured_step_s,
                "error_before": before,
                "error_after": after,
            }
            for m, p, s, before, after in zip(
                data.measurement_ids,
                data.plan_ids,
                data.samples,
                fit.residuals_before or (None,) * len(data.samples),
                fit.residuals or (None,) * len(data.samples),
                strict=True,
            )
        ],
        "cost_model": {
            "name": CALIBRATED_COST_MODEL,
            "version": str(model.version),
            "config": config,
        },
    }


def calibrated_cost_model_ref(
    ref: CostModelRef | None,
    cluster: ResolvedCluster,
    session: Session | None,
    *,
    field: str = "cost_model",
    tenant: str = DEFAULT_TENANT,
) -> tuple[CostModelRef | None, dict[str, Any] | None]:
    """A `calibrated` reference without `config.parameters` → the same reference with the
    current fit's parameters filled in (the fit of the cluster's accelerator), and the fit's
    summary (the response's `calibration`). Any other reference comes back unchanged with
    None.

    Raises:
        SpecError: a `calibrated` reference on a cluster of several kinds of node: one fit
            describes one accelerator, and the pools would all be priced with it."""
    if ref is None or ref.name != CALIBRATED_COST_MODEL:
        return ref, None
    if ref.config is not None and "parameters" in ref.config:
        return ref, None
    if not cluster.is_homogeneous:
        kinds = ", ".join(p.groups[0].accelerator.id for p in cluster.pools().values())
        raise SpecError(
            f"{field}.name",
            "one accelerator per calibration",
            ref.name,
            f"the calibrated cost model fits one accelerator; this cluster mixes {kinds}: use "
            "the analytical cost model, or give config.parameters",
        )
    accelerator_id = cluster.accelerator.id
    model = build_cost_model(ref, field=field)  # 422 for a bad `base` before any fitting
    assert isinstance(model, CalibratedTrainingCostModel)
    summary = current_calibration(session, accelerator_id, model.config.base, tenant=tenant)
    filled = CostModelRef(name=ref.name, config=summary["cost_model"]["config"])
    return filled, {k: v for k, v in summary.items() if k not in ("cost_model", "samples")}


def raise_spec_error(field: str, rule: str, value: Any, message: str) -> None:
    """Raise the 422 for one bad request field (query parameters checked by the routes)."""
    raise SpecError(field, rule, value, message)
