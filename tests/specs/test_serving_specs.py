"""Serving specs: length distributions (lognormal fits checked against their closed forms),
workload, plan and metrics rules."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest
from pydantic import ValidationError

from specs.errors import SpecError
from specs.serving import (
    MAX_TOKENS,
    LengthSpec,
    ServingInstance,
    ServingMetrics,
    ServingParallelism,
    ServingPlan,
    ServingSLO,
    ServingWorkload,
)

Z90 = 1.2815515655446004  # Φ⁻¹(0.9), from tables


def _workload(**over: Any) -> ServingWorkload:
    data: dict[str, Any] = {
        "kind": "serving",
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "slo": {"ttft_ms": 1000, "tpot_ms": 50},
    }
    data.update(over)
    return ServingWorkload.model_validate(data)


# ---- LengthSpec ---------------------------------------------------------------------------
def test_int_length_is_fixed_and_dumps_back_to_int() -> None:
    spec = LengthSpec.model_validate(1024)
    assert spec.fixed == 1024
    dumped: object = spec.model_dump()
    assert dumped == 1024
    assert spec.sample(random.Random(1), 5) == [1024] * 5
    assert spec.mean() == 1024.0 and spec.quantile(0.99) == 1024.0


def test_stats_dump_keeps_only_given_fields_under_their_names() -> None:
    spec = LengthSpec.model_validate({"mean": 800, "p90": 1500})
    assert spec.model_dump() == {"mean": 800.0, "p90": 1500.0}
    assert LengthSpec.model_validate(spec.model_dump()) == spec


def test_mean_alone_is_constant() -> None:
    spec = LengthSpec.model_validate({"mean": 300.4})
    assert spec.sample(random.Random(0), 4) == [300] * 4
    assert spec.mean() == 300.4


def test_mean_and_p50_fit() -> None:
    # μ = ln 800, σ = sqrt(2 ln(1000/800)) = 0.668; X's median 800, mean 1000.
    spec = LengthSpec.model_validate({"mean": 1000, "p50": 800})
    sigma = math.sqrt(2 * math.log(1000 / 800))
    assert spec.quantile(0.5) == pytest.approx(800.0)
    assert spec.quantile(0.9) == pytest.approx(800 * math.exp(sigma * Z90), rel=1e-9)
    draws = spec.sample(random.Random(7), 20000)
    assert statistics.fmean(draws) == pytest.approx(1000, rel=0.03)
    assert statistics.median(draws) == pytest.approx(800, rel=0.03)


def test_mean_and_p90_fit_reproduces_both() -> None:
    spec = LengthSpec.model_validate({"mean": 1000, "p90": 1800})
    # smaller root of σ²/2 − z·σ + ln(1.8) = 0
    sigma = Z90 - math.sqrt(Z90**2 - 2 * math.log(1.8))
    mu = math.log(1000) - sigma**2 / 2
    assert spec.quantile(0.9) == pytest.approx(1800.0, rel=1e-9)
    assert spec.quantile(0.5) == pytest.approx(math.exp(mu), rel=1e-9)
    assert math.exp(mu + sigma**2 / 2) == pytest.approx(1000, rel=1e-12)


def test_p50_and_p90_fix_the_shape() -> None:
    spec = LengthSpec.model_validate({"mean": 700, "p50": 500, "p90": 1200})
    assert spec.quantile(0.5) == pytest.approx(500.0)
    assert spec.quantile(0.9) == pytest.approx(1200.0)
    assert spec.mean() == 700.0


def test_impossible_statistics_rejected() -> None:
    with pytest.raises(ValidationError, match="mean .* must be at least p50"):
        LengthSpec.model_validate({"mean": 500, "p50": 800})
    # p90 / mean above exp(z²/2) = 2.274: no lognormal has it
    with pytest.raises(ValidationError, match="too far above the mean"):
        LengthSpec.model_validate({"mean": 100, "p90": 300})
    with pytest.raises(ValidationError, match="p90 .* must be at least p50"):
        LengthSpec.model_validate({"mean": 700, "p50": 600, "p90": 500})
    with pytest.raises(ValidationError, match="needs its mean"):
        LengthSpec.model_validate({"p50": 600})


def test_exactly_one_form() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        LengthSpec.model_validate({"fixed": 5, "samples": [1, 2]})
    with pytest.raises(ValidationError, match="exactly one"):
        LengthSpec.model_validate({})
    with pytest.raises(ValidationError):
        LengthSpec.model_validate(True)
    with pytest.raises(ValidationError):
        LengthSpec.model_validate(0)
    with pytest.raises(ValidationError, match=r"samples must lie in \[1, 131072\]"):
        LengthSpec.model_validate({"samples": [3, 0]})
    with pytest.raises(ValidationError):
        LengthSpec.model_validate({"samples": [1] * 20001})


def test_samples_resampled_deterministically() -> None:
    spec = LengthSpec.model_validate({"samples": [10, 20, 30, 40]})
    a = spec.sample(random.Random(3), 200)
    assert a == spec.sample(random.Random(3), 200)
    assert set(a) == {10, 20, 30, 40}
    assert spec.mean() == 25.0
    # nearest rank: ceil(0.5·4) = 2nd → 20; ceil(0.9·4) = 4th → 40
    assert spec.quantile(0.5) == 20.0 and spec.quantile(0.9) == 40.0


def test_lognormal_draws_are_clipped_to_bounds() -> None:
    spec = LengthSpec.model_validate({"mean": 100000, "p50": 2})  # σ ≈ 4.65
    draws = spec.sample(random.Random(0), 5000)
    assert min(draws) >= 1 and max(draws) <= MAX_TOKENS
    assert MAX_TOKENS in draws and 1 in draws


def test_quantile_argument_checked() -> None:
    with pytest.raises(ValueError, match=r"quantile q must be in \(0, 1\)"):
        LengthSpec.model_validate(5).quantile(1.0)


# ---- ServingWorkload ----------------------------------------------------------------------
def test_api_example_workload() -> None:
    w = ServingWorkload.model_validate(
        {
            "kind": "serving",
            "prompt_tokens": 1024,
            "output_tokens": 256,
            "arrival_rate_rps": None,
            "slo": {"ttft_ms": 1000, "tpot_ms": 50, "percentile": 90},
            "precision": "bf16",
            "objective": "max_goodput_per_gpu",
        }
    )
    assert w.kv_precision == "bf16" and w.num_requests == 600 and w.seed == 0
    assert w.weight_formats == ["bf16"]
    assert ServingWorkload.model_validate(w.model_dump(mode="json")) == w


def test_kv_precision_follows_weights_unless_given() -> None:
    assert _workload(precision="fp8").kv_precision == "fp8"
    assert _workload(precision="int4").kv_precision == "bf16"
    assert _workload(precision="fp8", kv_cache_precision="bf16").kv_precision == "bf16"


def test_weight_formats_put_precision_first_without_repeats() -> None:
    w = _workload(precision="fp8", precision_options=["bf16", "fp8", "int4"])
    assert w.weight_formats == ["fp8", "bf16", "int4"]
    with pytest.raises(ValidationError, match="must not repeat"):
        _workload(precision_options=["int4", "int4"])


def test_trace_replaces_lengths_and_rate() -> None:
    w = ServingWorkload.model_validate(
        {"kind": "serving", "trace": [[0.0, 100, 20], [0.5, 300, 40]], "slo": {"tpot_ms": 40}}
    )
    assert w.trace == [(0.0, 100, 20), (0.5, 300, 40)]
    with pytest.raises(ValidationError, match="trace replaces prompt_tokens"):
        _workload(trace=[[0.0, 100, 20]])
    with pytest.raises(ValidationError, match=r"trace\[1\] arrival_s must not decrease"):
        ServingWorkload.model_validate({"trace": [[1.0, 1, 1], [0.5, 1, 1]], "slo": {"ttft_ms": 1}})
    with pytest.raises(ValidationError, match=r"trace\[0\] output tokens must lie in"):
        ServingWorkload.model_validate({"trace": [[0.0, 1, 0]], "slo": {"ttft_ms": 1}})
    with pytest.raises(ValidationError, match=r"trace\[0\] arrival_s must be finite"):
        ServingWorkload.model_validate({"trace": [[-1.0, 1, 1]], "slo": {"ttft_ms": 1}})


def test_lengths_required_without_trace() -> None:
    with pytest.raises(ValidationError, match="output_tokens required"):
        ServingWorkload.model_validate({"prompt_tokens": 5, "slo": {"ttft_ms": 1}})


def test_objectives_need_what_they_optimise() -> None:
    """A search's rules (`check_objective`); the workload itself, which an estimate also
    takes, is valid without them."""
    no_slo = _workload(slo={})
    assert no_slo.slo == ServingSLO()
    with pytest.raises(SpecError, match="needs an SLO") as err:
        no_slo.check_objective()
    assert err.value.field == "workload.slo"
    with pytest.raises(SpecError, match="min_gpus needs arrival_rate_rps") as err:
        _workload(objective="min_gpus").check_objective()
    assert err.value.field == "workload.arrival_rate_rps"
    _workload(objective="min_gpus", arrival_rate_rps=4.0).check_objective()
    _workload(objective="min_latency", slo={}).check_objective()


def test_bounds() -> None:
    for over in (
        {"num_requests": 49},
        {"num_requests": 5001},
        {"arrival_rate_rps": 0},
        {"slo": {"ttft_ms": 0}},
        {"slo": {"ttft_ms": 10, "percentile": 99.95}},
        {"precision": "int8"},
        {"extra": 1},
    ):
        with pytest.raises(ValidationError):
            _workload(**over)


# ---- plans and metrics --------------------------------------------------------------------
def test_api_example_plan_and_gpu_count() -> None:
    plan = ServingPlan.model_validate(
        {
            "mode": "colocated",
            "instances": [
                {
                    "role": "both",
                    "count": 2,
                    "parallelism": {"tensor": 4, "pipeline": 1, "expert": 1},
                    "max_batch_size": 112,
                }
            ],
        }
    )
    assert plan.gpus_used == 8
    assert plan.instance("both").max_batch_size == 112
    with pytest.raises(KeyError):
        plan.instance("prefill")


def test_disaggregated_plan_roles_and_gpus() -> None:
    plan = ServingPlan(
        mode="disaggregated",
        instances=[
            ServingInstance(role="prefill", count=3, parallelism=ServingParallelism(tensor=2)),
            ServingInstance(
                role="decode",
                count=1,
                parallelism=ServingParallelism(tensor=2, pipeline=2, expert=2),
                chunk_size=None,
                precision="fp8",
            ),
        ],
    )
    assert plan.gpus_used == 3 * 2 + 1 * 8
    with pytest.raises(ValidationError, match="one 'prefill' and one 'decode'"):
        ServingPlan(mode="disaggregated", instances=[ServingInstance(role="prefill")])
    with pytest.raises(ValidationError, match="exactly one instance with role 'both'"):
        ServingPlan(mode="colocated", instances=[ServingInstance(role="decode")])
    with pytest.raises(ValidationError):
        ServingInstance(max_batch_size=0)


def test_metrics_bounds() -> None:
    base: dict[str, Any] = {
        "ttft_ms_p50": 10,
        "ttft_ms_p90": 20,
        "ttft_ms_p99": 30,
        "tpot_ms_p50": 5,
        "tpot_ms_p90": 6,
        "tpot_ms_p99": 7,
        "e2e_latency_s_p50": 1,
        "e2e_latency_s_p90": 2,
        "throughput_tokens_per_s": 1000,
        "goodput_rps": 3,
        "goodput_rps_per_gpu": 1.5,
        "gpus_used": 2,
        "kv_cache_gib": 50,
        "max_concurrent_sequences": 40,
        "arrival_rate_rps": 3,
        "slo_attainment": 0.9,
    }
    assert ServingMetrics.model_validate(base).slo_attainment == 0.9
    with pytest.raises(ValidationError):
        ServingMetrics.model_validate({**base, "slo_attainment": 1.2})


# ---- percentiles and named datasets ------------------------------------------------------------
def test_percentiles_are_sampled_by_inverse_transform() -> None:
    import random

    spec = LengthSpec.model_validate({"percentiles": [10, 20, 40, 100]})
    # three equal-probability segments, linear inside: median 30, mean of the midpoints
    assert spec.quantile(0.5) == 30.0
    assert spec.quantile(1 / 3) == 20.0
    assert spec.mean() == pytest.approx((15 + 30 + 70) / 3)
    draws = spec.sample(random.Random(1), 3000)
    assert min(draws) >= 10 and max(draws) <= 100
    assert sum(d <= 20 for d in draws) / 3000 == pytest.approx(1 / 3, abs=0.03)
    assert LengthSpec.model_validate(spec.model_dump()) == spec
    for bad in ([5, 3], [0, 4], [7]):
        with pytest.raises(ValidationError):
            LengthSpec.model_validate({"percentiles": bad})


def _dataset_medians_and_p90s(name: str) -> tuple[ServingWorkload, list[float]]:
    """A workload of the named dataset, and its prompt p50, p90, output p50, p90."""
    workload = ServingWorkload.model_validate(
        {"kind": "serving", "dataset": name, "slo": {"ttft_ms": 1000}}
    )
    assert workload.prompt_tokens is not None and workload.output_tokens is not None
    sides = (workload.prompt_tokens, workload.output_tokens)
    return workload, [side.quantile(q) for side in sides for q in (0.5, 0.9)]


def test_a_named_dataset_gives_the_trace_skew() -> None:
    from specs.serving import length_datasets

    workload, quantiles = _dataset_medians_and_p90s("azure_conversation")
    assert workload.prompt_tokens is not None
    # Azure's 2023 conversation trace (Splitwise): prompt p50 1020 / p90 2735, output 129 / 424
    assert quantiles == [1020.0, 2735.0, 129.0, 424.0]
    data = length_datasets()["azure_conversation"]
    assert data["requests"] == 19366 and "Splitwise" in data["source"]
    # the piecewise-linear mean is within 5 % of the trace's own mean (its tail is long)
    assert workload.prompt_tokens.mean() == pytest.approx(data["prompt"]["mean"], rel=0.05)
    dumped = workload.model_dump(mode="json")
    assert dumped["dataset"] == "azure_conversation" and "prompt_tokens" not in dumped
    assert ServingWorkload.model_validate(dumped) == workload
    with pytest.raises(ValidationError, match="dataset must be one of"):
        ServingWorkload.model_validate(
            {"kind": "serving", "dataset": "lmsys_chat", "slo": {"ttft_ms": 1}}
        )
    with pytest.raises(ValidationError, match="dataset replaces prompt_tokens"):
        ServingWorkload.model_validate(
            {"kind": "serving", "dataset": "azure_code", "prompt_tokens": 100,
             "slo": {"ttft_ms": 1}}
        )  # fmt: skip


def test_sharegpt_dataset_has_the_skew_sarathi_serve_published() -> None:
    """Sarathi-Serve (OSDI'24) Table 3, openchat_sharegpt4: prompt median 1730, P90 5696;
    output median 415, P90 834 tokens (Llama-2 tokenizer, requests up to 8k tokens)."""
    workload, quantiles = _dataset_medians_and_p90s("openchat_sharegpt4")
    assert quantiles == [1730.0, 5696.0, 415.0, 834.0]
    # no request past the 8192-token filter
    assert workload.prompt_tokens is not None and workload.prompt_tokens.percentiles is not None
    assert workload.output_tokens is not None and workload.output_tokens.percentiles is not None
    assert workload.prompt_tokens.percentiles[-1] + workload.output_tokens.percentiles[0] <= 8192


def test_length_distribution_names_a_dataset_or_the_lengths() -> None:
    """`length_distribution` (the contract's name) is `dataset`, or the two lengths, in one
    field; giving a field it names differently is refused."""
    from specs.serving import ServingWorkload

    slo = {"slo": {"ttft_ms": 1000, "tpot_ms": 50}}
    named = ServingWorkload.model_validate({**slo, "length_distribution": "azure_conversation"})
    direct = ServingWorkload.model_validate({**slo, "dataset": "azure_conversation"})
    assert (named.prompt_tokens, named.output_tokens) == (
        direct.prompt_tokens,
        direct.output_tokens,
    )
    lengths = {"prompt_tokens": {"mean": 900, "p50": 700}, "output_tokens": 128}
    spelled = ServingWorkload.model_validate({**slo, "length_distribution": lengths})
    plain = ServingWorkload.model_validate({**slo, **lengths})
    assert (spelled.prompt_tokens, spelled.output_tokens) == (
        plain.prompt_tokens,
        plain.output_tokens,
    )
    # a stored workload validates again to itself
    again = ServingWorkload.model_validate(named.model_dump(mode="json"))
    assert again.prompt_tokens == named.prompt_tokens
    with pytest.raises(ValueError, match="length_distribution gives output_tokens too"):
        ServingWorkload.model_validate({**slo, "length_distribution": lengths, "output_tokens": 64})
    with pytest.raises(ValueError, match="not trace"):
        ServingWorkload.model_validate({**slo, "length_distribution": {"trace": []}})
    with pytest.raises(ValueError):
        ServingWorkload.model_validate({**slo, "length_distribution": "no-such-dataset"})
