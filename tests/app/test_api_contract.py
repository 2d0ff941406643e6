"""The OpenAPI document is a contract worth reading (issue 14, point 2) and `docs/api.md`
agrees with it (point 6):

- the document is valid OpenAPI 3.1 (openapi-spec-validator);
- `model` is the union of its three forms, `workload` is discriminated on `kind`;
- every error status is the problem+json schema (FastAPI's `HTTPValidationError`, which
  the service never answers, is gone), 404 wherever a path names a resource;
- export formats and their query options are enums / named parameters, the same set the
  exporters check;
- every named request example of every operation is posted and succeeds;
- every endpoint of `docs/api.md` exists, and its JSON samples validate against the
  document's schemas.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from openapi_spec_validator import validate

from app.api.routes.exports import export
from app.exports import FORMATS
from app.exports.parameters import RULES
from app.main import create_app

ROOT = Path(__file__).resolve().parents[2]
API_MD = ROOT / "docs" / "api.md"
DOCUMENT = create_app().openapi()
METHODS = ("get", "post", "put", "patch", "delete")


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, item[method])
        for path, item in DOCUMENT["paths"].items()
        for method in METHODS
        if method in item
    ]


def test_the_document_is_valid_openapi() -> None:
    assert DOCUMENT["openapi"].startswith("3.1")
    validate(DOCUMENT)  # raises on any violation of the OpenAPI 3.1 schema


def test_model_input_is_a_union_of_its_three_forms() -> None:
    schemas = DOCUMENT["components"]["schemas"]
    for body in ("SearchCreate", "EstimateRequest", "ModelResolveRequest"):
        model = schemas[body]["properties"]["model"]
        refs = [option["$ref"].rsplit("/", 1)[-1] for option in model["anyOf"]]
        assert refs == ["PresetModelInput", "HFConfigModelInput", "ModelSpec"], body
    spec = schemas["ModelSpec"]
    assert {"num_layers", "hidden_size", "vocab_size", "moe"} <= set(spec["properties"])
    assert schemas["PresetModelInput"]["required"] == ["preset"]
    assert schemas["HFConfigModelInput"]["required"] == ["hf_config"]


def test_workloads_are_discriminated_on_kind() -> None:
    workload = DOCUMENT["components"]["schemas"]["SearchCreate"]["properties"]["workload"]
    assert workload["discriminator"]["propertyName"] == "kind"
    assert set(workload["discriminator"]["mapping"]) == {"training", "serving"}


def test_every_error_status_is_a_problem() -> None:
    assert "HTTPValidationError" not in DOCUMENT["components"]["schemas"]
    problem = {"$ref": "#/components/schemas/Problem"}
    seen: set[str] = set()
    for method, path, operation in operations():
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                seen.add(status)
                content = response["content"]
                assert content == {"application/problem+json": {"schema": problem}}, (
                    method,
                    path,
                    status,
                )
        if "{" in path and not path.startswith("/v1/admin"):
            assert "404" in operation["responses"], (method, path)
        if method in ("post", "put", "patch") and "requestBody" in operation:
            assert {"413", "422"} <= set(operation["responses"]), (method, path)
    assert {"401", "403", "404", "409", "413", "422", "429", "504"} <= seen


def test_export_formats_and_options_are_documented() -> None:
    operation = DOCUMENT["paths"]["/v1/plans/{plan_id}/export/{format}"]["get"]
    params = {p["name"]: p for p in operation["parameters"]}
    assert params["format"]["schema"]["enum"] == list(FORMATS)
    options = {name for name, p in params.items() if p["in"] == "query"}
    assert options == set(RULES)  # every option an exporter checks, and no other
    declared = set(inspect.signature(export).parameters) - {
        "plan_id",
        "format",
        "session",
        "principal",
    }
    assert declared == set(RULES)
    frameworks = set(params["framework"]["schema"]["enum"])
    assert {"megatron", "torchtitan", "deepspeed", "vllm", "sglang", "trtllm"} == frameworks
    assert set(params["kind"]["schema"]["enum"]) == {"pytorchjob", "jobset"}
    assert all(p.get("description") for p in params.values())


def _named_examples() -> list[tuple[str, str, str, dict[str, Any]]]:
    found = []
    for method, path, operation in operations():
        content = operation.get("requestBody", {}).get("content", {}).get("application/json")
        for name, example in (content or {}).get("examples", {}).items():
            found.append((method, path, name, example["value"]))
    return found


EXAMPLES = _named_examples()


def test_the_bodies_with_examples_cover_each_kind_of_request() -> None:
    named = {(path, name) for _, path, name, _ in EXAMPLES}
    assert {
        ("/v1/searches", "dense-training"),
        ("/v1/searches", "moe-training"),
        ("/v1/searches", "mixed-cluster"),
        ("/v1/searches", "serving"),
        ("/v1/estimate", "training"),
        ("/v1/estimate", "moe-training"),
        ("/v1/estimate", "serving"),
    } <= named


@pytest.mark.parametrize(
    ("method", "path", "name", "body"),
    EXAMPLES,
    ids=[f"{m} {p} {n}" for m, p, n, _ in EXAMPLES],
)
def test_every_request_example_succeeds(
    client: Any, method: str, path: str, name: str, body: dict[str, Any]
) -> None:
    url = f"{path}?wait=60" if path == "/v1/searches" else path
    response = client.request(method.upper(), url, json=body)
    assert response.status_code in (200, 201), response.text
    answer = response.json()
    if path == "/v1/searches":
        assert answer["status"] == "succeeded", answer
        plans = client.get(answer["plans_url"]).json()["items"]
        assert plans, f"example {name} found no plan"
        if name == "mixed-cluster":  # the example exists to show a plan across groups
            groups = {g for plan in plans for g in (plan.get("stage_groups") or [])}
            assert groups, "no mixed-cluster plan names its node groups"
        if name == "moe-training":
            assert any(plan["parallelism"]["expert"] > 1 for plan in plans)
    elif path == "/v1/estimate":
        assert answer["feasible"] is True, answer["violations"]


# ---- docs/api.md ---------------------------------------------------------------------------

_ENDPOINT = re.compile(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`?\s]*)")


def _api_md() -> str:
    assert API_MD.is_file(), "docs/api.md (the HTTP contract) is missing"
    return API_MD.read_text(encoding="utf-8")


def _template(path: str) -> re.Pattern[str]:
    """`/v1/plans/{id}/export/{format}` matches the document's `{plan_id}` and `{format}`."""
    return re.compile("^" + re.sub(r"\\\{[^}]*\\\}", r"\\{[^}]+\\}", re.escape(path)) + "$")


def _served_and_reserved() -> tuple[str, str]:
    text = _api_md()
    served, _, reserved = text.partition("\n## Reserved")
    return served, reserved


def _matching(path: str) -> list[str]:
    pattern = _template(path)
    return [p for p in DOCUMENT["paths"] if pattern.match(p)]


def test_every_endpoint_of_the_contract_exists() -> None:
    endpoints = _ENDPOINT.findall(_served_and_reserved()[0])
    assert len(endpoints) >= 20, "the contract lists too few endpoints to be the contract"
    ui_and_docs = ("/docs", "/redoc", "/openapi.json", "/ui", "/metrics", "/")
    for method, path in endpoints:
        if path.startswith(ui_and_docs) and not path.startswith("/v1"):
            continue
        matches = _matching(path)
        assert matches, f"{method} {path}: not in the OpenAPI document"
        assert any(method.lower() in DOCUMENT["paths"][p] for p in matches), (method, path)


_FIELD = re.compile(r"`([a-z][a-z0-9_]*)`")


def test_reserved_names_are_not_served_yet() -> None:
    """Once an endpoint or a field is built, docs/api.md must list it with the served ones
    (the section may be empty when everything promised is built)."""
    section = _served_and_reserved()[1]
    for method, path in _ENDPOINT.findall(section):
        served = [p for p in _matching(path) if method.lower() in DOCUMENT["paths"][p]]
        assert not served, f"{method} {path} is served: move it out of 'Reserved'"
    properties = {
        name
        for schema in DOCUMENT["components"]["schemas"].values()
        for name in (schema.get("properties") or {})
    }
    for name in _FIELD.findall(_ENDPOINT.sub("", section)):
        assert name not in properties, f"`{name}` is served: move it out of 'Reserved'"


_SAMPLE = re.compile(r"<!-- schema: (\w+) -->\s*```json\n(.*?)```", re.S)


def _resolver_schema(name: str) -> dict[str, Any]:
    """A component schema with the document's components, for jsonschema to resolve refs."""
    return {
        **DOCUMENT["components"]["schemas"][name],
        "components": DOCUMENT["components"],
    }


def test_the_contracts_samples_validate_against_the_document() -> None:
    samples = _SAMPLE.findall(_api_md())
    assert len(samples) >= 8, "the contract's JSON samples are not tagged with their schema"
    for name, text in samples:
        sample = json.loads(text)
        validator = jsonschema.Draft202012Validator(_resolver_schema(name))
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(sample)]
        assert not errors, f"docs/api.md sample of {name}: {errors}"
