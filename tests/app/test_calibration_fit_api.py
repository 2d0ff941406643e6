"""GET /v1/calibration answers how many parameters the stored measurements support, which
were left at their start values and why, and how well each fitted one is pinned (value,
standard error, 95 % interval); the `calibration` summary of a calibrated estimate carries
the same."""

from __future__ import annotations

import math
from typing import Any

import pytest

PARAMETERS = {
    "h100-sxm.gemm_efficiency",
    "h100-sxm.scale_up_efficiency",
    "h100-sxm.scale_out_efficiency",
    "attention_efficiency",
    "step_overhead_s",
}
"""The calibrated model's parameters for runs on one accelerator (cost_models/calibrated.py)."""
BOUNDS = {
    "gemm_efficiency": (0.2, 1.0),
    "scale_up_efficiency": (0.2, 1.0),
    "scale_out_efficiency": (0.2, 1.0),
    "attention_efficiency": (0.2, 0.9),
    "step_overhead_s": (0.0, 5.0),
}
"""The documented bounds of each parameter (the module's table)."""
SLOWDOWNS = [1.1, 1.25, 0.95, 1.3, 1.15]
"""Measured / predicted step time of the runs posted back (not one common factor, so the
fit keeps residuals and its standard errors are not zero)."""


def _plans(client: Any, tiny: dict[str, Any]) -> list[dict[str, Any]]:
    search = client.post("/v1/searches?wait=30", json={**tiny, "top_k": 5}).json()
    assert search["status"] == "succeeded", search
    items: list[dict[str, Any]] = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    assert len(items) == 5
    return items


def _measure(client: Any, plan: dict[str, Any], slowdown: float) -> None:
    step = slowdown * plan["metrics"]["step_time_s"]
    response = client.post(f"/v1/plans/{plan['id']}/measurements", json={"step_time_s": step})
    assert response.status_code == 201, response.text


def _fit(client: Any) -> dict[str, Any]:
    response = client.get("/v1/calibration?accelerator=h100-sxm")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _parameter_value(parameters: dict[str, Any], name: str) -> float:
    accelerator, _, field = name.rpartition(".")
    value = parameters[accelerator][field] if accelerator else parameters[name]
    return float(value)


def test_one_measurement_fits_nothing_and_says_why(client: Any, tiny: dict[str, Any]) -> None:
    plan = _plans(client, tiny)[0]
    _measure(client, plan, 1.1)
    fit = _fit(client)
    assert fit["num_samples"] == 1
    assert fit["max_parameters"] == 0
    assert fit["fitted"] == [] and fit["uncertainty"] == {}
    assert set(fit["not_fitted"]) == PARAMETERS
    # one node: no sample crosses the network, whatever the number of measurements
    assert fit["not_fitted"]["h100-sxm.scale_out_efficiency"] == (
        "no sample's step time depends on it"
    )
    assert any("support 0 fitted parameters" in r for r in fit["not_fitted"].values())
    # nothing moved: the prediction is the plan's, 1/1.1 of the measurement
    assert fit["error_before"]["mean"] == pytest.approx(1 - 1 / 1.1, rel=1e-9)
    assert fit["error_after"] == fit["error_before"]


def test_more_measurements_fit_more_parameters_with_their_uncertainty(
    client: Any, tiny: dict[str, Any]
) -> None:
    plans = _plans(client, tiny)
    # n measurements support (n − 1) // 2 parameters: 3 → 1, 5 → 2
    posted = 0
    for count, supported in ((3, 1), (5, 2)):
        for plan, slowdown in zip(plans[posted:count], SLOWDOWNS[posted:count], strict=True):
            _measure(client, plan, slowdown)
        posted = count
        fit = _fit(client)
        assert fit["num_samples"] == count
        assert fit["max_parameters"] == supported
        fitted = set(fit["fitted"])
        assert 1 <= len(fitted) <= supported
        assert fitted | set(fit["not_fitted"]) == PARAMETERS
        assert not fitted & set(fit["not_fitted"])
        assert "h100-sxm.scale_out_efficiency" in fit["not_fitted"]
        assert set(fit["uncertainty"]) == fitted
        for name, u in fit["uncertainty"].items():
            assert set(u) == {"value", "std_error", "low", "high"}
            assert u["value"] == _parameter_value(fit["parameters"], name)
            assert u["std_error"] > 0
            lo, hi = BOUNDS[name.rpartition(".")[2]]
            assert lo <= u["low"] <= u["value"] <= u["high"] <= hi
            # 95 % interval: ± 1.96 standard errors, on the log of an efficiency (its
            # standard error is value × that of the log), linear for the overhead
            se = u["std_error"]
            if name == "step_overhead_s":
                expected = (u["value"] - 1.96 * se, u["value"] + 1.96 * se)
            else:
                spread = math.exp(1.96 * se / u["value"])
                expected = (u["value"] / spread, u["value"] * spread)
            assert u["low"] == pytest.approx(max(lo, expected[0]), rel=1e-4, abs=1e-12)
            assert u["high"] == pytest.approx(min(hi, expected[1]), rel=1e-4, abs=1e-12)
        assert fit["error_after"]["mean"] < fit["error_before"]["mean"]

    # a calibrated estimate reports the same fit in its `calibration` summary
    plan = {k: plans[0][k] for k in ("parallelism", "micro_batch_size", "zero_stage")}
    body = client.post(
        "/v1/estimate", json={**tiny, "plan": plan, "cost_model": {"name": "calibrated"}}
    ).json()
    summary = body["calibration"]
    assert summary["num_samples"] == 5 and summary["max_parameters"] == 2
    assert summary["uncertainty"] == fit["uncertainty"]
    assert summary["not_fitted"] == fit["not_fitted"]


def test_the_response_schema_declares_the_fit_fields(client: Any) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    properties = schemas["CalibrationPublic"]["properties"]
    for name in ("max_parameters", "uncertainty", "not_fitted"):
        assert name in properties
    assert set(schemas["ParameterUncertainty"]["properties"]) == {
        "value",
        "std_error",
        "low",
        "high",
    }
