"""OpenAPI links between operations: where an answer's ids are the input of another operation.

OpenAPI 3.1, "Link Object" (https://spec.openapis.org/oas/v3.1.0#link-object): a response
names, under `links`, operations a client can call next (`operationId`) and how each of
their parameters is taken from this exchange (runtime expressions such as
`$response.body#/id` or `$request.path.plan_id`, "Runtime Expressions"; a value that is
not an expression is a constant). Clients and fuzzers (schemathesis' stateful phase) follow
them: a search created by `POST /v1/searches` is read, listed, streamed and cancelled by its
id; a plan id from a search's plans is read, exported and measured; a measurement or an
API key is read and deleted by the id its creation answered.

Links name their target by method and path here; `document_links` writes the target's
operationId as the document spells it, so a renamed operation cannot leave a dangling link
(tests/app/test_links.py resolves every operationId and expression in the document).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI

from app.exports.registry import FORMATS

SEARCH = "/v1/searches/{search_id}"
PLAN = "/v1/plans/{plan_id}"
MEASUREMENT = "/v1/plans/{plan_id}/measurements/{measurement_id}"


@dataclass(frozen=True)
class Link:
    """`name` under `responses[status].links` of `method path`, to `target` (method, path)."""

    method: str
    path: str
    statuses: tuple[int, ...]
    name: str
    target: tuple[str, str]
    parameters: dict[str, str] = field(default_factory=dict)
    description: str = ""


def _search_links(method: str, path: str, statuses: tuple[int, ...], id_from: str) -> list[Link]:
    """From an answer holding a search (its id at `id_from`) to everything done with it."""
    params = {"search_id": id_from}
    return [
        Link(method, path, statuses, "GetSearch", ("get", SEARCH), params, "Read the search"),
        Link(
            method,
            path,
            statuses,
            "ListSearchPlans",
            ("get", f"{SEARCH}/plans"),
            params,
            "The search's plans, best first",
        ),
        Link(
            method,
            path,
            statuses,
            "ListSearchDeliveries",
            ("get", f"{SEARCH}/deliveries"),
            params,
            "The search's webhook deliveries",
        ),
        Link(
            method,
            path,
            statuses,
            "StreamSearchEvents",
            ("get", f"{SEARCH}/events"),
            params,
            "The search's progress as Server-Sent Events",
        ),
        Link(
            method,
            path,
            statuses,
            "CancelSearch",
            ("post", f"{SEARCH}/cancel"),
            params,
            "Cancel the search while it is queued or running",
        ),
    ]


def _plan_links(method: str, path: str, id_from: str, *, exports: bool) -> list[Link]:
    """From an answer holding a plan (its id at `id_from`) to its reads and measurements."""
    params = {"plan_id": id_from}
    links = [
        Link(method, path, (200,), "GetPlan", ("get", PLAN), params, "Read the plan"),
        Link(
            method,
            path,
            (200,),
            "RecordMeasurement",
            ("post", f"{PLAN}/measurements"),
            params,
            "Record a measured run of the plan",
        ),
        Link(
            method,
            path,
            (200,),
            "ListMeasurements",
            ("get", f"{PLAN}/measurements"),
            params,
            "The plan's measurements",
        ),
    ]
    if exports:
        links += [
            Link(
                method,
                path,
                (200,),
                f"Export{fmt.title().replace('_', '')}",
                ("get", f"{PLAN}/export/{{format}}"),
                {**params, "format": fmt},
                f"Render the plan as `{fmt}`",
            )
            for fmt in FORMATS
        ]
    return links


def _measurement_links(
    method: str, path: str, statuses: tuple[int, ...], id_from: str, plan_from: str
) -> list[Link]:
    """From an answer holding a measurement to its read and its two deletions."""
    both = {"plan_id": plan_from, "measurement_id": id_from}
    return [
        Link(method, path, statuses, "GetMeasurement", ("get", MEASUREMENT), both),
        Link(method, path, statuses, "DeleteMeasurement", ("delete", MEASUREMENT), both),
        Link(
            method,
            path,
            statuses,
            "DeleteMeasurementById",
            ("delete", "/v1/measurements/{measurement_id}"),
            {"measurement_id": id_from},
        ),
    ]


_ALL: tuple[Link, ...] = (
    *_search_links("post", "/v1/searches", (201, 202), "$response.body#/id"),
    *_search_links("get", SEARCH, (200,), "$response.body#/id"),
    *_search_links("get", "/v1/searches", (200,), "$response.body#/items/0/id"),
    Link(
        "post",
        f"{SEARCH}/cancel",
        (200,),
        "GetSearch",
        ("get", SEARCH),
        {"search_id": "$response.body#/id"},
        "Read the cancelled search",
    ),
    *_plan_links("get", f"{SEARCH}/plans", "$response.body#/items/0/id", exports=False),
    *_plan_links("get", PLAN, "$response.body#/id", exports=True),
    Link(
        "get",
        PLAN,
        (200,),
        "GetPlanSearch",
        ("get", SEARCH),
        {"search_id": "$response.body#/search_id"},
        "The search that found the plan",
    ),
    *_measurement_links(
        "post",
        f"{PLAN}/measurements",
        (201,),
        "$response.body#/id",
        "$request.path.plan_id",
    ),
    *_measurement_links(
        "get",
        f"{PLAN}/measurements",
        (200,),
        "$response.body#/items/0/id",
        "$request.path.plan_id",
    ),
    *_measurement_links(
        "get", MEASUREMENT, (200,), "$response.body#/id", "$response.body#/plan_id"
    ),
    Link(
        "post",
        "/v1/admin/api-keys",
        (201,),
        "RevokeApiKey",
        ("delete", "/v1/admin/api-keys/{key_id}"),
        {"key_id": "$response.body#/id"},
        "Revoke the key just made",
    ),
    Link(
        "post",
        "/v1/admin/api-keys",
        (201,),
        "ListTenantKeys",
        ("get", "/v1/admin/api-keys"),
        {"tenant": "$response.body#/tenant"},
        "The keys of the tenant the key was made for",
    ),
    Link(
        "get",
        "/v1/admin/api-keys",
        (200,),
        "RevokeApiKey",
        ("delete", "/v1/admin/api-keys/{key_id}"),
        {"key_id": "$response.body#/items/0/id"},
        "Revoke the first key listed",
    ),
)
LINKS: tuple[Link, ...] = tuple(link for link in _ALL if link.target != (link.method, link.path))
"""Every link the service documents (none from an operation to itself)."""


def add_links(document: dict[str, Any], links: tuple[Link, ...] = LINKS) -> None:
    """Write `links` into an OpenAPI `document` (in place), each target's operationId looked
    up by method and path; KeyError when a source or target operation is missing."""
    paths = document["paths"]
    for link in links:
        target_method, target_path = link.target
        operation_id = paths[target_path][target_method]["operationId"]
        entry: dict[str, Any] = {"operationId": operation_id, "parameters": dict(link.parameters)}
        if link.description:
            entry["description"] = link.description
        responses = paths[link.path][link.method]["responses"]
        for status in link.statuses:
            responses[str(status)].setdefault("links", {})[link.name] = entry


def document_links(app: FastAPI) -> None:
    """Make `app.openapi()` carry `LINKS` (once: the document is built and cached once)."""
    build = app.openapi
    linked: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        document = build()
        if not any(document is done for done in linked):
            add_links(document)
            linked.append(document)
        return document

    app.openapi = openapi  # type: ignore[method-assign]
