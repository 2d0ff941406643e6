"""The registered "calibrated" training cost model: the analytical model with a few physical
parameters fitted to measured step times, and the fit itself (`fit_calibration`).

Parameters (few, physical, bounded; everything else stays the analytical model's):

| parameter | scope | bounds | replaces |
|---|---|---|---|
| `gemm_efficiency` | per accelerator id | 0.2–1.0 | `AcceleratorSpec.gemm_efficiency` |
| `scale_up_efficiency` | per accelerator id | 0.2–1.0 | the scale-up line rate, × value / catalog value |
| `scale_out_efficiency` | per accelerator id | 0.2–1.0 | the NIC line rate, × value / catalog value |
| `attention_efficiency` | global | 0.2–0.9 | `AnalyticalConfig.attention_efficiency` |
| `step_overhead_s` | global | 0–5 s | `AnalyticalConfig.step_overhead_s` |

Accelerator parameters apply by pricing a problem whose node groups are a
`model_copy(update=...)` of the resolved ones: `gemm_efficiency` replaces the accelerator's
(fp8 problems scale `gemm_efficiency_fp8` by the same factor: one fitted "how far below the
best-shape MAMF figure this machine runs" ratio per accelerator); the two fabric efficiencies
scale the groups' scale-up and NIC line rates by their ratio to the catalog's efficiency, so
the measured collective curves keep their shape and the fitted value reads as the achieved
fraction the catalog would have listed.

How many parameters a fit may move: each needs two measurements and one more is kept to
estimate the error, so n measurements fit at most (n − 1) // 2 of them — the ones the
samples move most (largest change of the log step times per unit change of the parameter);
the others keep their start values and the fit says why. One measurement fits nothing: it
cannot separate five efficiencies, and a fit that matches it exactly says nothing about the
next run. The fit reports each fitted parameter's standard error and 95 % interval from the
Jacobian at the optimum: cov = s²·(JᵀJ)⁻¹ with s² = RSS / (n − k) (Gauss–Newton
linearisation; Seber & Wild, "Nonlinear Regression", 1989, §2.1). A fitted model is reproducible from its config
alone: `{"base": <AnalyticalConfig fields>, "parameters": {"<accelerator id>": {...},
"attention_efficiency": ..., "step_overhead_s": ...}}`.

The fit (`fit_calibration`) is a bounded nonlinear least-squares problem on the log ratio of
predicted to measured step time, a symmetric relative error (Tofallis 2015, "A better
measure of relative prediction accuracy for model selection and model estimation", J. Oper.
Res. Soc. 66(8)), solved by scipy's trust-region-reflective method (Branch, Coleman & Li
1999, SIAM J. Sci. Comput. 21(1)). A small Tikhonov term (Tikhonov & Arsenin 1977) pulls
every parameter toward its catalog/base value so the problem stays well-posed when a few
samples cannot separate, e.g., GEMM from attention efficiency; parameters the samples do not
move at all (scale-out efficiency when no sample crosses a node) are not fitted.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.optimize import least_squares

from cost_models.analytical import AnalyticalConfig, AnalyticalTrainingCostModel
from cost_models.analytical.training import attention_efficiency
from cost_models.base import LayerProfile, TrainingEstimate, TrainingProblem
from cost_models.error_bars import ResidualQuantiles, quantiles_from_residuals
from cost_models.registry import register_cost_model
from hardware_catalog.schema import AcceleratorSpec
from specs.errors import SpecError
from specs.plan import PlanKey, TrainingPlan, Violation, canonical_hash

ACCELERATOR_BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_efficiency": (0.2, 1.0),
    "scale_up_efficiency": (0.2, 1.0),
    "scale_out_efficiency": (0.2, 1.0),
}
"""Per-accelerator parameters and their bounds (fractions of the catalog line rate/peak)."""
GLOBAL_BOUNDS: dict[str, tuple[float, float]] = {
    "attention_efficiency": (0.2, 0.9),
    "step_overhead_s": (0.0, 5.0),
}
"""Global parameters and their bounds."""
PRIOR_WEIGHT = 1e-4
"""Weight of the Tikhonov term per parameter, against the mean squared log error of the
samples: small enough that exact data moves a recovered value by ≪ 1 %, large enough that
directions the samples cannot see stay at the catalog values."""
MIN_SENSITIVITY = 1e-6
"""A parameter is fitted only when some sample's log step time moves by more than this per
unit change of the parameter's log (or of step_overhead_s / median measured step)."""
SIGNIFICANT_DIGITS = 6
"""Fitted values are rounded (stable hashes, readable configs); errors are computed after."""

REFUSE_ERROR = 0.5
"""A fit is refused (`fit_refusal`) when a fitted parameter ends on a bound and the fitted
model still misses the samples by more than this mean |relative error|."""

_ACCELERATOR_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


class AcceleratorParameters(BaseModel):
    """Fitted values for one accelerator id (None: the catalog's)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    gemm_efficiency: float | None = Field(default=None, ge=0.2, le=1.0)
    """Achieved fraction of the dense peak on the best GEMM shapes."""
    scale_up_efficiency: float | None = Field(default=None, ge=0.2, le=1.0)
    """Achieved bus bandwidth / line rate on the scale-up fabric."""
    scale_out_efficiency: float | None = Field(default=None, ge=0.2, le=1.0)
    """Achieved bus bandwidth / line rate on the NIC."""


class CalibrationParameters(BaseModel):
    """`{"<accelerator id>": AcceleratorParameters, "attention_efficiency", "step_overhead_s"}`."""

    model_config = ConfigDict(frozen=True, extra="allow", use_attribute_docstrings=True)

    __pydantic_extra__: dict[str, AcceleratorParameters] = Field(init=False)

    attention_efficiency: float | None = Field(default=None, ge=0.2, le=0.9)
    """Flash-attention achieved fraction of the bf16 peak (None: the base config's)."""
    step_overhead_s: float | None = Field(default=None, ge=0.0, le=5.0)
    """Fixed per-step overhead, seconds (None: the base config's)."""

    @model_validator(mode="after")
    def _accelerator_ids(self) -> CalibrationParameters:
        for key in self.accelerators():
            if not _ACCELERATOR_ID.match(key):
                raise ValueError(
                    f"parameter key {key!r} must be a lower-case accelerator id "
                    "(letters, digits, '.', '_', '-') or a global parameter name"
                )
        return self

    def accelerators(self) -> dict[str, AcceleratorParameters]:
        """The per-accelerator entries, by id."""
        return dict(self.model_extra or {})


MIN_SAMPLES_FOR_ERROR_BARS = 5
"""Fewer measurements than this keep the analytical model's error bars (from the published
runs): a 10th/90th percentile of four numbers says little."""


class ErrorBars(BaseModel):
    """ln(measured / predicted) quantiles of the fitted model on its own measurements."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    num_samples: int = Field(ge=MIN_SAMPLES_FOR_ERROR_BARS)
    q_low: float = Field(ge=-5, le=5)
    """10th percentile of ln(measured / predicted)."""
    q_high: float = Field(ge=-5, le=5)
    """90th percentile of ln(measured / predicted)."""


class CalibratedConfig(BaseModel):
    """Options of the calibrated cost model: the analytical base and the fitted values."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    base: AnalyticalConfig = Field(default_factory=AnalyticalConfig)
    """Analytical model options the fit starts from (and keeps for everything unfitted)."""
    parameters: CalibrationParameters = Field(default_factory=CalibrationParameters)
    """Fitted values; an empty object prices exactly like `analytical` with `base`."""
    error_bars: ErrorBars | None = None
    """Step-time interval from the fit's own residuals; null keeps the analytical model's."""


def _accelerator_update(acc: AcceleratorSpec, params: AcceleratorParameters) -> dict[str, Any]:
    update: dict[str, Any] = {}
    if params.gemm_efficiency is not None:
        update["gemm_efficiency"] = params.gemm_efficiency
        if acc.gemm_efficiency_fp8 is not None:
            ratio = params.gemm_efficiency / acc.gemm_efficiency
            update["gemm_efficiency_fp8"] = min(1.0, acc.gemm_efficiency_fp8 * ratio)
    if params.scale_up_efficiency is not None:
        update["scale_up_efficiency"] = params.scale_up_efficiency
    if params.scale_out_efficiency is not None:
        update["scale_out_efficiency"] = params.scale_out_efficiency
    return update


def calibrated_problem(
    problem: TrainingProblem, parameters: CalibrationParameters
) -> TrainingProblem:
    """`problem` with every node group's accelerator updated by its fitted values (the same
    object when no parameter applies)."""
    by_id = parameters.accelerators()
    groups = []
    changed = False
    for group in problem.cluster.groups:
        params = by_id.get(group.accelerator.id)
        if params:
            update = _group_update(group, group.accelerator, params)
            acc_update = _accelerator_update(group.accelerator, params)
            if acc_update:
                update["accelerator"] = group.accelerator.model_copy(update=acc_update)
            if update:
                changed = True
                group = group.model_copy(update=update)
        groups.append(group)
    if not changed:
        return problem
    cluster = problem.cluster.model_copy(update={"groups": groups})
    return dataclasses.replace(problem, cluster=cluster)


def _group_update(
    group: Any, acc: AcceleratorSpec, params: AcceleratorParameters
) -> dict[str, Any]:
    """The node group's fabric line rates scaled by the fitted / catalog efficiency."""
    update: dict[str, Any] = {}
    if params.scale_up_efficiency is not None:
        ratio = params.scale_up_efficiency / acc.scale_up_efficiency
        update["intra_node_bandwidth_gb_s"] = group.intra_node_bandwidth_gb_s * ratio
    if params.scale_out_efficiency is not None:
        ratio = params.scale_out_efficiency / acc.scale_out_efficiency
        update["inter_node_bandwidth_gb_s"] = group.inter_node_bandwidth_gb_s * ratio
    return update


def _inner_config(config: CalibratedConfig) -> AnalyticalConfig:
    update = {
        key: value
        for key in GLOBAL_BOUNDS
        if (value := getattr(config.parameters, key)) is not None
    }
    if not update:
        return config.base
    return AnalyticalConfig.model_validate({**config.base.model_dump(), **update})


def config_hash(config: CalibratedConfig) -> str:
    """Short hash of the options that change an answer (base and parameters)."""
    payload = {
        "base": config.base.model_dump(mode="json"),
        "parameters": config.parameters.model_dump(mode="json", exclude_none=True),
    }
    return canonical_hash(payload)[:10]


_MAX_PROBLEMS = 32


@register_cost_model("calibrated")
class CalibratedTrainingCostModel:
    """The analytical model priced with fitted GEMM, fabric and attention efficiencies and a
    fixed step overhead. Implements the same optional keyed and bounded entry points (each
    delegates on the calibrated problem, so the search's bounds stay valid)."""

    name = "calibrated"
    Config = CalibratedConfig

    def __init__(self, config: CalibratedConfig | None = None) -> None:
        self.config = config or CalibratedConfig()
        self.inner = AnalyticalTrainingCostModel(_inner_config(self.config))
        self.version = f"{self.inner.version}+cal.{config_hash(self.config)}"
        self._problems: dict[int, tuple[TrainingProblem, TrainingProblem]] = {}

    def calibrated(self, problem: TrainingProblem) -> TrainingProblem:
        """The problem the analytical model prices (cached per problem object)."""
        hit = self._problems.get(id(problem))
        if hit is not None and hit[0] is problem:
            return hit[1]
        if len(self._problems) >= _MAX_PROBLEMS:
            self._problems.clear()
        out = calibrated_problem(problem, self.config.parameters)
        self._problems[id(problem)] = (problem, out)
        return out

    def check(self, problem: TrainingProblem, plan: TrainingPlan) -> list[Violation]:
        """The analytical rules (calibration changes speeds, not rules)."""
        return self.inner.check(self.calibrated(problem), plan)

    def check_key(self, problem: TrainingProblem, key: PlanKey) -> list[Violation]:
        """`check()` of the plan `key` describes."""
        return self.inner.check_key(self.calibrated(problem), key)

    def profile(self, problem: TrainingProblem, plan: TrainingPlan) -> LayerProfile:
        """Per-layer costs with the fitted parameters."""
        return self.inner.profile(self.calibrated(problem), plan)

    def profile_key(self, problem: TrainingProblem, key: PlanKey) -> LayerProfile:
        """`profile()` of the plan `key` describes."""
        return self.inner.profile_key(self.calibrated(problem), key)

    def evaluate(self, problem: TrainingProblem, plan: TrainingPlan) -> TrainingEstimate:
        """Full estimate with the fitted parameters (and the fit's own error bars)."""
        est = self.inner.evaluate(self.calibrated(problem), plan)
        bars = self.config.error_bars
        if bars is None:
            return est
        quantiles = ResidualQuantiles(self.name, bars.num_samples, bars.q_low, bars.q_high)
        low, high = quantiles.interval(est.metrics.step_time_s)
        metrics = est.metrics.model_copy(update={"step_time_s_low": low, "step_time_s_high": high})
        return dataclasses.replace(est, metrics=metrics)

    def group_memory_lower_bound_bytes(self, problem: TrainingProblem, key: PlanKey) -> float:
        """The analytical bound (memory does not depend on the fitted parameters)."""
        return self.inner.group_memory_lower_bound_bytes(self.calibrated(problem), key)

    def step_time_lower_bound_s(self, problem: TrainingProblem, key: PlanKey) -> float:
        """The analytical bound on the calibrated problem."""
        return self.inner.step_time_lower_bound_s(self.calibrated(problem), key)

    def context_free_step_lower_bound_s(
        self, problem: TrainingProblem, key: PlanKey, work_floor_s: float = 0.0
    ) -> float:
        """The analytical bound under every context-parallel algorithm, on the calibrated
        problem (`solver.search.cp_groups`)."""
        return self.inner.context_free_step_lower_bound_s(
            self.calibrated(problem), key, work_floor_s
        )

    def context_free_profile_key(
        self, problem: TrainingProblem, key: PlanKey
    ) -> LayerProfile | None:
        """The analytical context-free profile on the calibrated problem."""
        return self.inner.context_free_profile_key(self.calibrated(problem), key)


# ---- the fit ----------------------------------------------------------------------------
class CalibrationSample(NamedTuple):
    """One measured run: the problem, the plan it ran (stage_layers set), its step time."""

    problem: TrainingProblem
    plan: TrainingPlan
    measured_step_s: float


@dataclass(frozen=True)
class ErrorSummary:
    """Absolute relative step-time errors |predicted / measured − 1| over the samples."""

    mean: float
    max: float

    @classmethod
    def of(cls, relative_errors: Sequence[float]) -> ErrorSummary:
        values = [abs(e) for e in relative_errors]
        return cls(mean=sum(values) / len(values), max=max(values))

    def to_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "max": self.max}


@dataclass(frozen=True)
class CalibrationFit:
    """The outcome of `fit_calibration`."""

    parameters: dict[str, Any]
    """The `parameters` member of a `CalibratedConfig` (empty without samples)."""
    num_samples: int
    error_before: ErrorSummary | None
    """With the catalog and base values (what `analytical` predicts)."""
    error_after: ErrorSummary | None
    """With the fitted (rounded) values, exactly as the calibrated model prices."""
    residuals: tuple[float, ...]
    """Per sample, predicted / measured − 1 after the fit."""
    residuals_before: tuple[float, ...]
    """Per sample, predicted / measured − 1 before the fit."""
    fitted: tuple[str, ...]
    """Names of the parameters fitted (`h100-sxm.gemm_efficiency`, `attention_efficiency`);
    the others keep their start values."""
    nfev: int = 0
    message: str = ""
    uncertainty: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per fitted parameter: `value`, `std_error`, and the 95 % interval `low`, `high`
    (module docstring); empty when no degree of freedom is left."""
    not_fitted: dict[str, str] = field(default_factory=dict)
    """Parameters left at their start values, with the reason."""
    max_parameters: int = 0
    """How many parameters the samples support: (n − 1) // 2."""
    refusal: str | None = None
    """Set by the service when it refused a fit (`fit_refusal`) and serves the base values."""

    def config(self, base: AnalyticalConfig | None = None) -> dict[str, Any]:
        """The calibrated model's config (JSON) for these parameters, with error bars from
        the fit's residuals once there are enough samples."""
        out: dict[str, Any] = {
            "base": (base or AnalyticalConfig()).model_dump(mode="json"),
            "parameters": dict(self.parameters),
        }
        if self.num_samples >= MIN_SAMPLES_FOR_ERROR_BARS:
            # residual = predicted / measured − 1, so ln(measured / predicted) = −ln(1 + r)
            q = quantiles_from_residuals("calibrated", [-math.log1p(r) for r in self.residuals])
            out["error_bars"] = {
                "num_samples": q.num_rows,
                "q_low": round(q.q_low, 6),
                "q_high": round(q.q_high, 6),
            }
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameters": dict(self.parameters),
            "num_samples": self.num_samples,
            "error_before": self.error_before.to_dict() if self.error_before else None,
            "error_after": self.error_after.to_dict() if self.error_after else None,
            "residuals": list(self.residuals),
            "residuals_before": list(self.residuals_before),
            "fitted": list(self.fitted),
            "nfev": self.nfev,
            "message": self.message,
            "uncertainty": {k: dict(v) for k, v in self.uncertainty.items()},
            "not_fitted": dict(self.not_fitted),
            "max_parameters": self.max_parameters,
        }


@dataclass(frozen=True)
class _Param:
    name: str
    """`<accelerator id>.<field>` or a global name."""
    accelerator: str | None
    field: str
    start: float
    lower: float
    upper: float
    scale: float
    """Coordinates: 1 + log(value / start) for efficiencies, 1 + value / scale for the
    overhead (offset by 1 so the solver's first trust region, |x0|, is not empty)."""

    @property
    def is_log(self) -> bool:
        return self.field != "step_overhead_s"

    def to_x(self, value: float) -> float:
        return 1.0 + (math.log(value / self.start) if self.is_log else value / self.scale)

    def from_x(self, x: float) -> float:
        return self.start * math.exp(x - 1.0) if self.is_log else (x - 1.0) * self.scale

    @property
    def x_bounds(self) -> tuple[float, float]:
        return self.to_x(self.lower), self.to_x(self.upper)


def _round(value: float) -> float:
    if value == 0:
        return 0.0
    digits = SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(abs(value)))
    return round(value, digits)


def _clip(value: float, lower: float, upper: float) -> float:
    return min(max(value, lower), upper)


def _parameters(params: Sequence[_Param], values: Sequence[float]) -> CalibrationParameters:
    out: dict[str, Any] = {}
    for param, value in zip(params, values, strict=True):
        value = _clip(value, param.lower, param.upper)
        if param.accelerator is None:
            out[param.field] = value
        else:
            out.setdefault(param.accelerator, {})[param.field] = value
    return CalibrationParameters.model_validate(out)


def _relative_errors(samples: Sequence[CalibrationSample], config: CalibratedConfig) -> list[float]:
    model = CalibratedTrainingCostModel(config)
    return [
        model.evaluate(s.problem, s.plan).metrics.step_time_s / s.measured_step_s - 1.0
        for s in samples
    ]


def _check_samples(samples: Sequence[CalibrationSample]) -> None:
    for index, sample in enumerate(samples):
        measured = sample.measured_step_s
        if not (isinstance(measured, int | float) and math.isfinite(measured) and measured > 0):
            raise SpecError(f"samples.{index}.measured_step_s", "finite and > 0", measured)
        if sample.plan.stage_layers is None:
            raise SpecError(
                f"samples.{index}.plan.stage_layers",
                "required",
                None,
                "calibration samples need the plan's stage_layers",
            )


def _start_parameters(samples: Sequence[CalibrationSample], base: AnalyticalConfig) -> list[_Param]:
    accelerators: dict[str, AcceleratorSpec] = {}
    for sample in samples:
        for group in sample.problem.cluster.groups:
            accelerators.setdefault(group.accelerator.id, group.accelerator)
    median_step_s = float(np.median([s.measured_step_s for s in samples]))
    params = []
    for acc_id in sorted(accelerators):
        acc = accelerators[acc_id]
        for name, (lo, hi) in ACCELERATOR_BOUNDS.items():
            start = _clip(float(getattr(acc, name)), lo, hi)
            params.append(_Param(f"{acc_id}.{name}", acc_id, name, start, lo, hi, 1.0))
    for name, (lo, hi) in GLOBAL_BOUNDS.items():
        value = getattr(base, name)
        if value is None and name == "attention_efficiency":  # the catalog's, averaged
            value = float(np.mean([attention_efficiency(base, a) for a in accelerators.values()]))
        start = _clip(float(value), lo, hi)
        scale = 1.0 if name != "step_overhead_s" else max(median_step_s, 1e-9)
        params.append(_Param(name, None, name, start, lo, hi, scale))
    return params


def fit_calibration(
    samples: list[CalibrationSample],
    base_config: AnalyticalConfig | None = None,
    *,
    max_nfev: int = 200,
) -> CalibrationFit:
    """Fit the calibrated model's parameters to measured step times.

    Minimises  Σ_i (log(T̂_i(θ) / T_i))² / N  +  λ Σ_j (x_j − x_j⁰)²  over the bounded
    parameters θ (module docstring), where T̂_i is the analytical step time of sample i with
    θ applied, x_j = log(θ_j / θ_j⁰) for the efficiencies and (θ_j − θ_j⁰) / median(T) for
    the step overhead, and λ = PRIOR_WEIGHT. Only parameters with a measurable effect on some sample
    (`MIN_SENSITIVITY`) are free. Deterministic (no random start, no sampling).

    Args:
        samples: measured runs; each plan must have stage_layers.
        base_config: the analytical options the fit starts from (default: the defaults).
        max_nfev: function evaluations allowed to the least-squares solver.

    Returns:
        The fitted parameters (start values for those not fitted), the errors before and
        after, and per-sample residuals.

    Raises:
        SpecError: a sample has a non-positive step time or no stage_layers.
    """
    base = base_config or AnalyticalConfig()
    if not samples:
        return CalibrationFit(
            parameters={},
            num_samples=0,
            error_before=None,
            error_after=None,
            residuals=(),
            residuals_before=(),
            fitted=(),
            message="no samples: the analytical model's values",
        )
    _check_samples(samples)
    params = _start_parameters(samples, base)
    measured = np.array([s.measured_step_s for s in samples], dtype=float)
    norm = 1.0 / math.sqrt(len(samples))

    def log_errors(values: Sequence[float]) -> np.ndarray:
        config = CalibratedConfig(base=base, parameters=_parameters(params, values))
        model = CalibratedTrainingCostModel(config)
        predicted = np.array(
            [model.evaluate(s.problem, s.plan).metrics.step_time_s for s in samples]
        )
        out: np.ndarray = np.log(predicted / measured)
        return out

    x0 = np.array([p.to_x(p.start) for p in params])
    start_values = [p.start for p in params]
    r0 = log_errors(start_values)
    sensitivity: dict[int, float] = {}
    not_fitted: dict[str, str] = {}
    for j, param in enumerate(params):
        lo, hi = param.x_bounds
        step = 1e-3 if x0[j] + 1e-3 <= hi else -1e-3
        if not lo <= x0[j] + step <= hi:
            not_fitted[param.name] = "its start value is at a bound"
            continue
        moved = list(start_values)
        moved[j] = param.from_x(x0[j] + step)
        change = log_errors(moved) - r0
        if float(np.max(np.abs(change))) / abs(step) > MIN_SENSITIVITY:
            sensitivity[j] = float(np.linalg.norm(change)) / abs(step)
        else:
            not_fitted[param.name] = "no sample's step time depends on it"
    max_parameters = (len(samples) - 1) // 2
    ranked = sorted(sensitivity, key=lambda j: (-sensitivity[j], j))
    free = sorted(ranked[:max_parameters])
    for j in ranked[max_parameters:]:
        not_fitted[params[j].name] = (
            f"{len(samples)} measurements support {max_parameters} fitted parameters "
            "(two each, and one more to estimate the error); others move the step times more"
        )

    def full_values(x_free: np.ndarray) -> list[float]:
        x = x0.copy()
        x[free] = x_free
        return [p.from_x(float(xj)) for p, xj in zip(params, x, strict=True)]

    def residuals(x_free: np.ndarray) -> np.ndarray:
        data = log_errors(full_values(x_free)) * norm
        prior = math.sqrt(PRIOR_WEIGHT) * (x_free - x0[free])
        return np.concatenate([data, prior])

    nfev = 0
    message = (
        "no parameter affects the samples"
        if not sensitivity
        else f"{len(samples)} measurements support no fitted parameter"
    )
    values = start_values
    uncertainty: dict[str, dict[str, float]] = {}
    if free:
        lower = np.array([params[j].x_bounds[0] for j in free])
        upper = np.array([params[j].x_bounds[1] for j in free])
        result = least_squares(
            residuals, x0[free], bounds=(lower, upper), method="trf", max_nfev=max_nfev
        )
        values = full_values(result.x)
        nfev, message = int(result.nfev), str(result.message)
        uncertainty = _uncertainty(
            [params[j] for j in free], result.x, result.jac[: len(samples)] / norm, result.fun
        )
    rounded = [_clip(_round(v), p.lower, p.upper) for p, v in zip(params, values, strict=True)]
    parameters = _parameters(params, rounded)
    before = _relative_errors(samples, CalibratedConfig(base=base))
    after = _relative_errors(samples, CalibratedConfig(base=base, parameters=parameters))
    return CalibrationFit(
        parameters=parameters.model_dump(mode="json", exclude_none=True),
        num_samples=len(samples),
        error_before=ErrorSummary.of(before),
        error_after=ErrorSummary.of(after),
        residuals=tuple(after),
        residuals_before=tuple(before),
        fitted=tuple(params[j].name for j in free),
        nfev=nfev,
        message=message,
        uncertainty=uncertainty,
        not_fitted=not_fitted,
        max_parameters=max_parameters,
    )


def fit_refusal(fit: CalibrationFit) -> str | None:
    """Why a fit must not be served, or None. A fitted parameter pinned on a bound of
    `ACCELERATOR_BOUNDS` / `GLOBAL_BOUNDS` means the least-squares optimum lies outside the
    physical range; when the bounded fit still misses the samples by more than
    `REFUSE_ERROR` on average, the measurements are not runs the model can describe (e.g. a
    step faster than the hardware allows) and the calibrated model keeps the base values."""
    if fit.error_after is None or fit.error_after.mean <= REFUSE_ERROR:
        return None
    pinned = []
    for name in fit.fitted:
        scope, _, param = name.rpartition(".")
        bounds = ACCELERATOR_BOUNDS.get(param) if scope else GLOBAL_BOUNDS.get(param)
        value = (fit.parameters.get(scope) or {}).get(param) if scope else fit.parameters.get(param)
        if bounds is None or value is None:
            continue
        if any(math.isclose(float(value), b, rel_tol=1e-6, abs_tol=1e-12) for b in bounds):
            pinned.append(f"{name} = {value:g} (bounds {bounds[0]:g}–{bounds[1]:g})")
    if not pinned:
        return None
    return (
        f"the fit would leave the physical bounds ({'; '.join(pinned)}) and still misses the "
        f"measurements by {fit.error_after.mean:.0%} on average: the measurements are refused "
        "and the base (analytical) values are used; delete the outlying measurements"
    )


def _uncertainty(
    params: Sequence[_Param], x: np.ndarray, jac: np.ndarray, fun: np.ndarray
) -> dict[str, dict[str, float]]:
    """Standard errors and 95 % intervals of the fitted parameters from the data part of the
    Jacobian (log step time per coordinate) at the optimum (module docstring)."""
    n, k = jac.shape
    if n <= k:
        return {}
    data = np.asarray(fun[:n], dtype=float) * math.sqrt(n)  # undo the 1/sqrt(n) weighting
    s2 = float(data @ data) / (n - k)
    try:
        cov = s2 * np.linalg.inv(jac.T @ jac)
    except np.linalg.LinAlgError:
        return {}
    out: dict[str, dict[str, float]] = {}
    for i, param in enumerate(params):
        sd_x = math.sqrt(max(0.0, float(cov[i, i])))
        value = param.from_x(float(x[i]))
        low = param.from_x(float(x[i]) - 1.96 * sd_x)
        high = param.from_x(float(x[i]) + 1.96 * sd_x)
        std_error = value * sd_x if param.is_log else sd_x * param.scale
        out[param.name] = {
            "value": _round(value),
            "std_error": _round(std_error),
            "low": _round(max(param.lower, low)),
            "high": _round(min(param.upper, high)),
        }
    return out
