"""Issue 14 point 2: every field of the OpenAPI document has a description, and a
description of a quantity states the unit its name carries.

The project keeps units in field names (`_s` seconds, `_ms` milliseconds, `_us`
microseconds, `_gib` GiB, `_gb_s` GB/s, `_tflops` TFLOP/s, `_rps` requests per second,
`tokens_per_s`, `_w` watts, `_hour` per hour); `unit_problems` checks that each description
says the same. The table is matched against name tokens (split at `_`), so `ttft_ms_p90`,
`e2e_latency_s_p50` and `time_breakdown_s` are checked as well as plain suffixes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.main import create_app

Check = Callable[[str], bool]


def _has(*words: str) -> Check:
    """Every word appears (case-insensitive)."""
    return lambda text: all(w.lower() in text.lower() for w in words)


def _any(*checks: Check) -> Check:
    return lambda text: any(c(text) for c in checks)


def _word(pattern: str) -> Check:
    return lambda text: re.search(pattern, text) is not None


_PER_SECOND = _any(_has("second"), _has("/s"))
_FRACTION = _any(_has("fraction"), _has("0–1"))

COMPOUND_UNITS: list[tuple[str, str, Check]] = [
    # (name tokens, what the description must say, check) — matched before single tokens
    ("tokens_per_s", '"token" and "second" or "/s"', lambda t: _has("token")(t) and _PER_SECOND(t)),
    ("gb_s", '"GB/s"', lambda t: "GB/s" in t),
    ("per_gpu", '"GPU"', lambda t: "GPU" in t),
]
TOKEN_UNITS: dict[str, tuple[str, Check]] = {
    "s": ('"second"', _has("second")),
    "ms": ('"ms" or "millisecond"', _any(_word(r"\bms\b"), _has("millisecond"))),
    "us": ('"µs" or "microsecond"', _any(_has("µs"), _has("microsecond"))),
    "gib": ('"GiB"', lambda t: "GiB" in t),
    "tflops": ('"TFLOP/s"', lambda t: "TFLOP/s" in t),
    "rps": ('"request" and "/s" or "second"', lambda t: _has("request")(t) and _PER_SECOND(t)),
    "w": ('"watt"', _has("watt")),
    "hour": ('"hour"', _has("hour")),
    "tokens": ('"token"', _has("token")),
    "mfu": ('"fraction" or "0–1"', _FRACTION),
    "fraction": ('"fraction" or "0–1"', _FRACTION),
    "efficiency": ('"fraction" or "0–1"', _FRACTION),
    "attainment": ('"fraction" or "0–1"', _FRACTION),
}
PERCENTILE_TOKEN = re.compile(r"^p\d{2}$")
"""`p50`, `p90`, `p99`: the description names the percentile (or the median)."""
SCHEMA_UNITS: dict[str, tuple[str, Check]] = {
    "TimeBreakdown": ('"second"', _has("second")),
}
"""Schemas whose fields carry their unit in the schema's name rather than their own
(`time_breakdown_s`: every part is seconds)."""


def unit_problems(name: str, description: str, schema: str | None = None) -> list[str]:
    """What `description` fails to say about the unit of a field called `name`."""
    problems = []
    rest = name
    for compound, wanted, check in COMPOUND_UNITS:
        if re.search(rf"(^|_){compound}($|_)", rest):
            if not check(description):
                problems.append(wanted)
            rest = re.sub(rf"(^|_){compound}($|_)", "_", rest)
    for token in (t for t in rest.split("_") if t):
        if token in TOKEN_UNITS:
            wanted, check = TOKEN_UNITS[token]
            if not check(description):
                problems.append(wanted)
        elif PERCENTILE_TOKEN.match(token) and not _any(_has("percentile"), _has("median"))(
            description
        ):
            problems.append('"percentile" or "median"')
    if schema in SCHEMA_UNITS:
        wanted, check = SCHEMA_UNITS[schema]
        if not check(description):
            problems.append(wanted)
    return problems


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return create_app().openapi()


def _properties(document: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(schema, property, description) of every component-schema property."""
    for schema, body in document["components"]["schemas"].items():
        for prop, spec in (body.get("properties") or {}).items():
            yield schema, prop, str(spec.get("description") or "")


def _parameters(document: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(operation, parameter name, description) of every path, query and header parameter."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if not isinstance(operation, dict):
                continue
            for param in operation.get("parameters", []):
                where = f"{method.upper()} {path} ({param['in']})"
                yield where, param["name"], str(param.get("description") or "")


def test_the_document_has_fields_to_check(document: dict[str, Any]) -> None:
    """Guard against the checks below passing vacuously (a broken walk finds nothing)."""
    props = list(_properties(document))
    params = list(_parameters(document))
    assert len(props) > 400
    assert len(params) > 30
    names = {p for _, p, _ in props}
    assert {"step_time_s", "mfu", "ttft_ms_p90", "memory_gib", "peak_tflops"} <= names


def test_every_component_property_has_a_description(document: dict[str, Any]) -> None:
    missing = [f"{schema}.{prop}" for schema, prop, text in _properties(document) if not text]
    assert not missing, "properties without a description:\n" + "\n".join(missing)


def test_every_operation_parameter_has_a_description(document: dict[str, Any]) -> None:
    missing = [f"{op} {name}" for op, name, text in _parameters(document) if not text.strip()]
    assert not missing, "parameters without a description:\n" + "\n".join(missing)


def test_descriptions_state_the_unit_of_the_name(document: dict[str, Any]) -> None:
    offending = []
    for schema, prop, text in _properties(document):
        for wanted in unit_problems(prop, text, schema):
            offending.append(f"{schema}.{prop}: should mention {wanted}: {text[:100]!r}")
    for op, name, text in _parameters(document):
        for wanted in unit_problems(name.lower().replace("-", "_"), text):
            offending.append(f"{op} {name}: should mention {wanted}: {text[:100]!r}")
    assert not offending, "descriptions that do not state the field's unit:\n" + "\n".join(
        offending
    )


def test_the_wait_parameter_is_in_seconds(document: dict[str, Any]) -> None:
    """A parameter without a unit suffix can still be checked by hand where it matters."""
    wait = [text for op, name, text in _parameters(document) if name == "wait"]
    assert wait and "second" in wait[0].lower()


@pytest.mark.parametrize(
    ("name", "description", "expected"),
    [
        ("step_time_s", "Wall time of one step, seconds.", []),
        ("step_time_s", "Wall time of one step.", ['"second"']),
        ("ttft_ms_p90", "Time to first token, 90th percentile, ms.", []),
        ("ttft_ms_p90", "Time to first token, 90th percentile.", ['"ms" or "millisecond"']),
        ("ttft_ms_p90", "Time to first token in ms (terms apply).", ['"percentile" or "median"']),
        ("memory_bandwidth_gb_s", "HBM bandwidth, GB/s.", []),
        ("memory_bandwidth_gb_s", "HBM bandwidth, seconds.", ['"GB/s"']),
        ("throughput_tokens_per_s", "Output tokens per second.", []),
        ("throughput_tokens_per_s", "Output per second.", ['"token" and "second" or "/s"']),
        ("goodput_rps_per_gpu", "Goodput per GPU, requests/s.", []),
        ("goodput_rps_per_gpu", "Goodput, requests/s.", ['"GPU"']),
        ("peak_memory_gib", "Peak memory, GB.", ['"GiB"']),
        ("model_tflops_per_gpu", "Achieved TFLOP/s per GPU.", []),
        ("model_tflops_per_gpu", "Achieved TFLOPS per GPU.", ['"TFLOP/s"']),
        ("mfu", "Model FLOPs utilisation, 0–1.", []),
        ("mfu", "Model FLOPs utilisation.", ['"fraction" or "0–1"']),
        ("latency_us", "Fixed latency, µs.", []),
        ("tdp_w", "Board power, watts.", []),
        ("tdp_w", "Board power.", ['"watt"']),
        ("e2e_latency_s_p50", "End-to-end latency, median, seconds.", []),
        ("num_layers", "Transformer layers.", []),
    ],
)
def test_unit_rules(name: str, description: str, expected: list[str]) -> None:
    """The rule table itself: each rule fires on a description without its unit and not on
    one with it."""
    assert unit_problems(name, description) == expected


def test_schema_level_units() -> None:
    assert unit_problems("bubble", "Pipeline bubble, seconds.", "TimeBreakdown") == []
    assert unit_problems("bubble", "Pipeline bubble.", "TimeBreakdown") == ['"second"']


SAME_FIELD_GROUPS: list[list[tuple[str, str]]] = [
    [("SearchConstraints", "memory_headroom_gib"), ("EstimateConstraints", "memory_headroom_gib")],
    [
        ("SearchConstraints", "allow_tensor_across_nodes"),
        ("EstimateConstraints", "allow_tensor_across_nodes"),
    ],
    [("EstimateRequest", "model"), ("SearchCreate", "model"), ("ModelResolveRequest", "model")],
    [("EstimateRequest", "cluster"), ("SearchCreate", "cluster")],
    [("EstimateRequest", "workload"), ("SearchCreate", "workload")],
    [("ApiKeyPublic", "scopes"), ("ApiKeyCreated", "scopes"), ("WhoAmI", "scopes")],
    [("ApiKeyPublic", "tenant"), ("ApiKeyCreated", "tenant")],
    [("HealthPublic", "database"), ("ReadinessPublic", "database")],
    [("HealthPublic", "version"), ("ReadinessPublic", "version")],
    [("MeasurementPublic", "search_id"), ("PlanPublic", "search_id")],
]
"""The same field on several models (a request and its twin, a record and its listing):
one meaning, one description."""
PLAN_ECHOES = ("micro_batch_size", "zero_stage", "recompute", "flash_attention", "parallelism")
"""`PlanPublic` fields that echo a training plan's field: "Training plans: " + its text."""


def _description(document: dict[str, Any], schema: str, prop: str) -> str:
    """The description with its whitespace normalised (docstrings wrap where they like)."""
    text = document["components"]["schemas"][schema]["properties"][prop]["description"]
    return " ".join(str(text).split())


def _lower_first(text: str) -> str:
    """`Sequences per ...` → `sequences per ...`; an acronym (`ZeRO`) stays."""
    first_word = text.split(" ", 1)[0]
    return text[0].lower() + text[1:] if first_word[1:].islower() else text


def test_a_field_repeated_on_several_models_has_one_description(
    document: dict[str, Any],
) -> None:
    differing = []
    for group in SAME_FIELD_GROUPS:
        texts = {f"{s}.{p}": _description(document, s, p) for s, p in group}
        if len(set(texts.values())) > 1:
            differing.append("\n".join(f"  {k}: {v!r}" for k, v in texts.items()))
    assert not differing, "descriptions that should be one:\n" + "\n\n".join(differing)


def test_plan_listing_echoes_the_training_plan_descriptions(document: dict[str, Any]) -> None:
    differing = []
    for prop in PLAN_ECHOES:
        plan = _description(document, "TrainingPlan-Input", prop)
        listed = _description(document, "PlanPublic", prop)
        expected = "Training plans: " + _lower_first(plan)
        if listed != expected:
            differing.append(f"PlanPublic.{prop}: {listed!r}\n  expected {expected!r}")
    assert not differing, "\n".join(differing)


def test_model_listing_takes_the_model_spec_descriptions(document: dict[str, Any]) -> None:
    """`ModelPublic` shows a resolved `ModelSpec`: the spec's fields read the same."""
    from specs.model import ModelSpec

    spec = ModelSpec.model_json_schema()["properties"]
    listed = document["components"]["schemas"]["ModelPublic"]["properties"]
    shared = sorted(set(spec) & set(listed))
    assert len(shared) >= 7
    differing = [p for p in shared if spec[p].get("description") != listed[p].get("description")]
    assert not differing, f"ModelPublic descriptions that differ from ModelSpec's: {differing}"
