"""The OpenAPI links (app/api/links.py) are part of the documented contract: every link's
operationId names an operation of the document, its parameters are that operation's, each
runtime expression points at something the source exchange has (a property of the
documented response schema, a path parameter of the request), and on real answers the
expressions yield ids the target operations accept."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.links import LINKS, Link, add_links
from app.main import create_app

METHODS = ("get", "put", "post", "delete", "patch")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return create_app().openapi()


def _operations(document: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    return {
        op["operationId"]: (method, path, op)
        for path, item in document["paths"].items()
        for method, op in item.items()
        if method in METHODS
    }


def _deref(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """`node` with its `$ref`s followed (local references only, as FastAPI writes them)."""
    while "$ref" in node:
        target: Any = document
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def _pointer_exists(document: dict[str, Any], schema: dict[str, Any], pointer: str) -> bool:
    """Whether JSON pointer `pointer` (RFC 6901) can resolve in an instance of `schema`:
    each token a declared property (or an index into an array), through any branch of an
    `anyOf`/`oneOf`/`allOf`."""
    schema = _deref(document, schema)
    if not pointer:
        return True
    token, _, rest = pointer.removeprefix("/").partition("/")
    rest = f"/{rest}" if rest else ""
    for key in ("anyOf", "oneOf", "allOf"):
        if any(_pointer_exists(document, branch, pointer) for branch in schema.get(key, [])):
            return True
    if token.isdigit() and "items" in schema:
        return _pointer_exists(document, schema["items"], rest)
    properties = schema.get("properties", {})
    return token in properties and _pointer_exists(document, properties[token], rest)


def _links(document: dict[str, Any]) -> list[tuple[str, str, str, str, dict[str, Any]]]:
    return [
        (method, path, status, name, link)
        for path, item in document["paths"].items()
        for method, op in item.items()
        if method in METHODS
        for status, response in op["responses"].items()
        for name, link in response.get("links", {}).items()
    ]


def test_the_document_carries_every_link(document: dict[str, Any]) -> None:
    documented = {(m, p, s, n) for m, p, s, n, _ in _links(document)}
    declared = {(k.method, k.path, str(s), k.name) for k in LINKS for s in k.statuses}
    assert documented == declared
    assert ("post", "/v1/searches", "202", "GetSearch") in documented
    assert ("post", "/v1/admin/api-keys", "201", "RevokeApiKey") in documented
    assert not [k for k in LINKS if k.target == (k.method, k.path)], "links to themselves"


def test_every_link_resolves_in_the_document(document: dict[str, Any]) -> None:
    operations = _operations(document)
    for method, path, status, name, link in _links(document):
        where = f"{method.upper()} {path} {status} {name}"
        assert link["operationId"] in operations, where
        target_method, target_path, target = operations[link["operationId"]]
        declared = {p["name"]: p for p in target.get("parameters", [])}
        required_path = {n for n, p in declared.items() if p["in"] == "path"}
        assert required_path <= set(link["parameters"]), where  # every path id is supplied
        source = document["paths"][path][method]
        source_params = {p["name"]: p["in"] for p in source.get("parameters", [])}
        body_schema = source["responses"][status]["content"]["application/json"]["schema"]
        for parameter, expression in link["parameters"].items():
            assert parameter in declared, f"{where}: {parameter}"
            if expression.startswith("$response.body#"):
                pointer = expression.removeprefix("$response.body#")
                assert _pointer_exists(document, body_schema, pointer), f"{where}: {expression}"
            elif expression.startswith("$request.path."):
                name_in_path = expression.removeprefix("$request.path.")
                assert source_params.get(name_in_path) == "path", f"{where}: {expression}"
            else:
                assert not expression.startswith("$"), f"{where}: {expression}"
                enum = declared[parameter]["schema"].get("enum")
                assert enum is None or expression in enum, f"{where}: {expression}"
        assert target_method in METHODS and target_path in document["paths"]


def test_a_link_to_an_unknown_operation_is_refused(document: dict[str, Any]) -> None:
    copy = {"paths": {path: dict(item) for path, item in document["paths"].items()}}
    bad = Link("get", "/v1/searches", (200,), "Nowhere", ("get", "/v1/nowhere"))
    with pytest.raises(KeyError):
        add_links(copy, (bad,))


def test_the_pointer_check_tells_present_from_absent(document: dict[str, Any]) -> None:
    plans = document["paths"]["/v1/searches/{search_id}/plans"]["get"]["responses"]["200"]
    schema = plans["content"]["application/json"]["schema"]
    assert _pointer_exists(document, schema, "/items/0/id")
    assert _pointer_exists(document, schema, "/items/0/search_id")
    assert not _pointer_exists(document, schema, "/items/0/plan_id")
    assert not _pointer_exists(document, schema, "/id")


def _follow(response: Any, expression: str, request_path: dict[str, str]) -> Any:
    if expression.startswith("$request.path."):
        return request_path[expression.removeprefix("$request.path.")]
    if not expression.startswith("$response.body#"):
        return expression
    value = response.json()
    for token in expression.removeprefix("$response.body#/").split("/"):
        value = value[int(token)] if isinstance(value, list) else value[token]
    return value


def test_links_followed_on_real_answers_reach_their_resources(
    client: TestClient, tiny: dict[str, Any]
) -> None:
    document = client.app.openapi()  # type: ignore[attr-defined]
    operations = _operations(document)

    def follow(response: Any, method: str, path: str, status: int, name: str, **req: str) -> Any:
        link = document["paths"][path][method]["responses"][str(status)]["links"][name]
        target_method, target_path, _ = operations[link["operationId"]]
        values = {p: _follow(response, e, req) for p, e in link["parameters"].items()}
        url = target_path.format(**values)
        query = {k: v for k, v in values.items() if "{" + k + "}" not in target_path}
        answer = client.request(target_method.upper(), url, params=query)
        assert answer.status_code < 300, (name, url, answer.text)
        return answer

    created = client.post("/v1/searches?wait=30", json=tiny)
    assert created.status_code == 201
    search = follow(created, "post", "/v1/searches", 201, "GetSearch")
    assert search.json()["id"] == created.json()["id"]
    plans = follow(created, "post", "/v1/searches", 201, "ListSearchPlans")
    plan = follow(plans, "get", "/v1/searches/{search_id}/plans", 200, "GetPlan")
    assert plan.json()["id"] == plans.json()["items"][0]["id"]
    follow(plan, "get", "/v1/plans/{plan_id}", 200, "ExportMegatron")
    follow(plan, "get", "/v1/plans/{plan_id}", 200, "GetPlanSearch")
    measured = client.post(f"/v1/plans/{plan.json()['id']}/measurements", json={"step_time_s": 50})
    assert measured.status_code == 201, measured.text
    pid = plan.json()["id"]
    one = follow(
        measured, "post", "/v1/plans/{plan_id}/measurements", 201, "GetMeasurement", plan_id=pid
    )
    assert one.json()["id"] == measured.json()["id"]
    follow(
        measured, "post", "/v1/plans/{plan_id}/measurements", 201, "DeleteMeasurement", plan_id=pid
    )
    listed = client.get(f"/v1/plans/{pid}/measurements").json()
    assert listed["total"] == 0
