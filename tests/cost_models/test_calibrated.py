"""The calibrated cost model and `fit_calibration`: parameters apply as documented, the fit
recovers known parameters from synthetic measurements, only identifiable parameters move,
and a fitted model is reproducible from its config alone."""

from __future__ import annotations

import math

import pytest
from cm_support import gpt, make_cluster, make_h100

from cost_models import build_cost_model, list_cost_models
from cost_models.analytical import AnalyticalConfig, AnalyticalTrainingCostModel
from cost_models.base import TrainingProblem
from cost_models.calibrated import (
    CalibratedConfig,
    CalibratedTrainingCostModel,
    CalibrationSample,
    fit_calibration,
)
from specs.errors import SpecError
from specs.plan import TrainingPlan
from specs.workload import TrainingWorkload

TRUE_GEMM = 0.62
"""Synthetic "measured" GEMM efficiency (the catalog's H100 value is 0.803)."""
TRUE_ATTENTION = 0.45
"""Synthetic attention efficiency (the analytical default is 0.6)."""


def _problem(seq: int, nodes: int = 2, precision: str = "bf16") -> TrainingProblem:
    return TrainingProblem(
        model=gpt(layers=8, h=2048, a=16),
        cluster=make_cluster(make_h100(), nodes, 8),
        workload=TrainingWorkload(global_batch_size=64, sequence_length=seq, precision=precision),  # type: ignore[arg-type]
    )


def _plan(t: int, pp: int, d: int) -> TrainingPlan:
    return TrainingPlan.model_validate(
        {
            "parallelism": {"data": d, "tensor": t, "pipeline": pp},
            "micro_batch_size": 1,
            "zero_stage": 1,
            "recompute": "selective",
            "pipeline_schedule": "1f1b",
            "stage_layers": [8 // pp] * pp,
        }
    )


def _true_step_s(problem: TrainingProblem, plan: TrainingPlan) -> float:
    """The analytical model on a machine whose GEMMs reach 0.62 of peak and attention 0.45:
    the accelerator record is edited directly, independently of the calibrated model."""
    acc = problem.cluster.accelerator.model_copy(update={"gemm_efficiency": TRUE_GEMM})
    group = problem.cluster.groups[0].model_copy(update={"accelerator": acc})
    truth = TrainingProblem(
        model=problem.model,
        cluster=problem.cluster.model_copy(update={"groups": [group]}),
        workload=problem.workload,
    )
    model = AnalyticalTrainingCostModel(AnalyticalConfig(attention_efficiency=TRUE_ATTENTION))
    return model.evaluate(truth, plan).metrics.step_time_s


def _synthetic_samples(nodes: int = 2) -> list[CalibrationSample]:
    """Sequence lengths 1k-16k change the attention share of the step (s² vs s), so GEMM
    and attention efficiency are separable; the plans mix TP, PP and DP."""
    samples = []
    for seq in (1024, 4096, 16384):
        problem = _problem(seq, nodes)
        for t, pp, d in ((2, 2, 4 * nodes // 2), (8, 1, nodes), (1, 2, 8 * nodes // 2)):
            plan = _plan(t, pp, d)
            samples.append(CalibrationSample(problem, plan, _true_step_s(problem, plan)))
    return samples


def test_registered_by_name() -> None:
    assert "calibrated" in list_cost_models()
    model = build_cost_model("calibrated", {"parameters": {"attention_efficiency": 0.5}})
    assert isinstance(model, CalibratedTrainingCostModel)
    assert model.inner.config.attention_efficiency == 0.5


def test_without_parameters_it_prices_like_analytical() -> None:
    problem, plan = _problem(4096), _plan(2, 2, 4)
    plain = AnalyticalTrainingCostModel().evaluate(problem, plan)
    calibrated = CalibratedTrainingCostModel().evaluate(problem, plan)
    assert calibrated.metrics == plain.metrics
    assert calibrated.memory == plain.memory


def test_gemm_efficiency_applies_to_the_accelerator_and_fp8_by_the_same_ratio() -> None:
    problem, plan = _problem(4096, precision="fp8"), _plan(2, 2, 4)
    # fp8 GEMMs: 0.709 (catalog fp8 efficiency) × 0.62 / 0.803 = 0.54742
    acc = problem.cluster.accelerator.model_copy(
        update={"gemm_efficiency": 0.62, "gemm_efficiency_fp8": 0.709 * 0.62 / 0.803}
    )
    group = problem.cluster.groups[0].model_copy(update={"accelerator": acc})
    edited = TrainingProblem(
        model=problem.model,
        cluster=problem.cluster.model_copy(update={"groups": [group]}),
        workload=problem.workload,
    )
    expected = AnalyticalTrainingCostModel().evaluate(edited, plan).metrics.step_time_s
    model = build_cost_model("calibrated", {"parameters": {"h100-sxm": {"gemm_efficiency": 0.62}}})
    got = model.evaluate(problem, plan).metrics.step_time_s
    assert got == pytest.approx(expected, rel=1e-12)
    assert got > AnalyticalTrainingCostModel().evaluate(problem, plan).metrics.step_time_s
    # another accelerator's entry does not touch an H100 problem
    other = build_cost_model(
        "calibrated", {"parameters": {"a100-sxm4-80gb": {"gemm_efficiency": 0.3}}}
    )
    assert (
        other.evaluate(problem, plan).metrics
        == AnalyticalTrainingCostModel().evaluate(problem, plan).metrics
    )


def test_step_overhead_adds_to_the_step() -> None:
    problem, plan = _problem(4096), _plan(2, 2, 4)
    base = CalibratedTrainingCostModel().evaluate(problem, plan).metrics.step_time_s
    model = build_cost_model("calibrated", {"parameters": {"step_overhead_s": 0.25}})
    assert model.evaluate(problem, plan).metrics.step_time_s == pytest.approx(base + 0.25)


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({"h100-sxm": {"gemm_efficiency": 0.1}}, "parameters.h100-sxm.gemm_efficiency"),
        ({"h100-sxm": {"scale_out_efficiency": 1.2}}, "parameters.h100-sxm.scale_out_efficiency"),
        ({"attention_efficiency": 0.95}, "parameters.attention_efficiency"),
        ({"step_overhead_s": 6.0}, "parameters.step_overhead_s"),
        ({"H100 SXM": {"gemm_efficiency": 0.5}}, "parameters"),
    ],
)
def test_parameters_are_bounded(parameters: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as exc:
        build_cost_model("calibrated", {"parameters": parameters})
    assert exc.value.extensions["errors"][0]["field"] == f"cost_model.config.{field}"


def test_version_hashes_the_parameters() -> None:
    a = build_cost_model("calibrated", {"parameters": {"attention_efficiency": 0.5}})
    b = build_cost_model("calibrated", {"parameters": {"attention_efficiency": 0.5}})
    c = build_cost_model("calibrated", {"parameters": {"attention_efficiency": 0.51}})
    assert a.version == b.version != c.version
    assert a.version.startswith("1+cal.") and len(a.version) <= 50


def test_fit_recovers_known_parameters() -> None:
    samples = _synthetic_samples()
    fit = fit_calibration(samples)
    params = fit.parameters
    assert params["h100-sxm"]["gemm_efficiency"] == pytest.approx(TRUE_GEMM, rel=0.02)
    assert params["attention_efficiency"] == pytest.approx(TRUE_ATTENTION, rel=0.02)
    assert fit.num_samples == len(samples) == 9
    assert fit.error_before is not None and fit.error_after is not None
    assert fit.error_before.mean > 0.10  # catalog 0.803 / 0.6 predict 3-20 % too fast
    assert fit.error_after.max < 0.01
    assert len(fit.residuals) == 9 and max(abs(r) for r in fit.residuals) < 0.01


def test_fitted_config_reproduces_the_fit() -> None:
    samples = _synthetic_samples()
    fit = fit_calibration(samples)
    model = build_cost_model("calibrated", fit.config())
    for sample, residual in zip(samples, fit.residuals, strict=True):
        predicted = model.evaluate(sample.problem, sample.plan).metrics.step_time_s
        assert predicted / sample.measured_step_s - 1 == residual
    again = fit_calibration(samples)  # deterministic
    assert again.parameters == fit.parameters and again.residuals == fit.residuals


def test_scale_out_is_not_fitted_without_inter_node_traffic() -> None:
    samples = _synthetic_samples(nodes=1)
    fit = fit_calibration(samples)
    assert "h100-sxm.scale_out_efficiency" not in fit.fitted
    assert "h100-sxm.gemm_efficiency" in fit.fitted
    assert fit.parameters["h100-sxm"]["scale_out_efficiency"] == 0.97  # the catalog value
    assert fit.not_fitted["h100-sxm.scale_out_efficiency"] == "no sample's step time depends on it"
    two_nodes = fit_calibration(_synthetic_samples(nodes=2))
    # across nodes the NIC matters: it competes for a slot instead of being ignored
    reason = two_nodes.not_fitted.get("h100-sxm.scale_out_efficiency")
    assert reason is None or reason.startswith("9 measurements support 4")


def test_the_fit_moves_no_more_parameters_than_its_measurements_support() -> None:
    """One measurement fits nothing (it used to fit all five and report 0 % error); three
    fit one; nine fit four, with standard errors that the residuals determine."""
    samples = _synthetic_samples()
    one = fit_calibration(samples[:1])
    assert one.fitted == () and one.max_parameters == 0
    assert one.error_after == one.error_before  # the analytical model's prediction
    assert all("support 0" in r for r in one.not_fitted.values() if "support" in r)
    three = fit_calibration(samples[:3])
    assert len(three.fitted) == 1 and three.max_parameters == 1
    nine = fit_calibration(samples)
    assert len(nine.fitted) == 4 and nine.max_parameters == 4
    for name in nine.fitted:
        u = nine.uncertainty[name]
        assert u["low"] <= u["value"] <= u["high"]
        assert u["std_error"] >= 0


def test_uncertainty_grows_with_noise() -> None:
    clean = _synthetic_samples()
    noisy = [
        s._replace(measured_step_s=s.measured_step_s * (1.08 if i % 2 else 0.93))
        for i, s in enumerate(clean)
    ]
    a = fit_calibration(clean).uncertainty["h100-sxm.gemm_efficiency"]["std_error"]
    b = fit_calibration(noisy).uncertainty["h100-sxm.gemm_efficiency"]["std_error"]
    assert b > 5 * a


def test_no_samples_is_the_analytical_model() -> None:
    fit = fit_calibration([])
    assert fit.num_samples == 0 and fit.parameters == {} and fit.error_after is None
    model = build_cost_model("calibrated", fit.config())
    problem, plan = _problem(4096), _plan(2, 2, 4)
    assert (
        model.evaluate(problem, plan).metrics
        == AnalyticalTrainingCostModel().evaluate(problem, plan).metrics
    )


def test_bad_samples_name_the_sample() -> None:
    problem = _problem(4096)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(SpecError) as exc:
            fit_calibration(
                [
                    CalibrationSample(problem, _plan(2, 2, 4), 1.0),
                    CalibrationSample(problem, _plan(2, 2, 4), bad),
                ]
            )
        assert exc.value.field == "samples.1.measured_step_s"
    open_split = _plan(2, 2, 4).model_copy(update={"stage_layers": None})
    with pytest.raises(SpecError) as exc:
        fit_calibration([CalibrationSample(problem, open_split, 1.0)])
    assert exc.value.field == "samples.0.plan.stage_layers"


def test_config_round_trips() -> None:
    config = CalibratedConfig.model_validate(
        {
            "base": {"kernel_launch_s": 4e-6},
            "parameters": {"h100-sxm": {"gemm_efficiency": 0.7}, "step_overhead_s": 0.1},
        }
    )
    dumped = config.model_dump(mode="json", exclude_none=True)
    assert CalibratedConfig.model_validate(dumped) == config
    assert dumped["parameters"] == {"h100-sxm": {"gemm_efficiency": 0.7}, "step_overhead_s": 0.1}


def test_fitted_model_carries_error_bars_from_its_own_residuals() -> None:
    # Measurements 10 % slower / faster than the truth alternately: no parameter set fits
    # them all, so the residuals spread and the interval must cover about ±10 %.
    samples = [
        CalibrationSample(s.problem, s.plan, s.measured_step_s * (1.1 if i % 2 else 0.9))
        for i, s in enumerate(_synthetic_samples())
    ]
    fit = fit_calibration(samples)
    config = fit.config()
    bars = config["error_bars"]
    assert bars["num_samples"] == len(samples) == 9
    log_ratios = sorted(-math.log1p(r) for r in fit.residuals)
    # type-7 quantiles of 9 values: positions 0.8 and 7.2
    assert bars["q_low"] == pytest.approx(
        log_ratios[0] + 0.8 * (log_ratios[1] - log_ratios[0]), abs=1e-6
    )
    assert bars["q_high"] == pytest.approx(
        log_ratios[7] + 0.2 * (log_ratios[8] - log_ratios[7]), abs=1e-6
    )
    assert bars["q_low"] < -0.05 and bars["q_high"] > 0.05
    model = build_cost_model("calibrated", config)
    est = model.evaluate(samples[0].problem, samples[0].plan)
    step = est.metrics.step_time_s
    assert est.metrics.step_time_s_low == pytest.approx(step * math.exp(bars["q_low"]))
    assert est.metrics.step_time_s_high == pytest.approx(step * math.exp(bars["q_high"]))


def test_few_samples_keep_the_analytical_error_bars() -> None:
    samples = _synthetic_samples()[:4]
    config = fit_calibration(samples).config()
    assert "error_bars" not in config
    model = build_cost_model("calibrated", config)
    analytical = build_cost_model("analytical")
    est = model.evaluate(samples[0].problem, samples[0].plan)
    ref = analytical.evaluate(samples[0].problem, samples[0].plan)
    ratio = est.metrics.step_time_s_high / est.metrics.step_time_s
    assert ratio == pytest.approx(ref.metrics.step_time_s_high / ref.metrics.step_time_s)
