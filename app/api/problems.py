"""RFC 9457 `application/problem+json` for every error the API answers.

- `PlannerError` (specs/errors.py) → its status, type `https://meshplan.dev/problems/<slug>`,
  title, detail, `instance` = request path, plus its extensions (`errors`, `reasons`, ...).
- `RequestValidationError` (bad types, malformed JSON) → 422 `invalid-input` with `errors`:
  `[{field (dotted path), rule (pydantic error type), value (the input), message}]`.
- Starlette HTTP errors (unknown route 404, 405, ...) → problems of the same status.
- Bodies above `max_request_bytes` → 413 (`BodyLimitMiddleware`, Content-Length and stream).
- The database unreachable or gone (SQLAlchemy `OperationalError`, `InterfaceError`, a
  DBAPI disconnect) → 503 `database-unavailable` with `Retry-After`; the engine's pool
  (`pool_pre_ping` on PostgreSQL) reconnects by itself on a later request. A full disk
  (SQLite `database or disk is full`, PostgreSQL SQLSTATE 53100) → 507 `storage-full`.
- Anything else → a generic 500 logged with the request id (`RequestContextMiddleware`);
  no traceback reaches the client.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.logs import request_id_var
from app.core.problems import (
    PROBLEM_CONTENT_TYPE,
    internal_problem,
    make_problem,
    problem_from_error,
    to_jsonable,
)
from specs.errors import PlannerError

logger = logging.getLogger("app.errors")

_LOCATIONS = ("body", "query", "path", "header", "cookie")


class ProblemResponse(JSONResponse):
    media_type = PROBLEM_CONTENT_TYPE


def problem_response(
    problem: dict[str, Any], headers: dict[str, str] | None = None
) -> ProblemResponse:
    return ProblemResponse(problem, status_code=int(problem["status"]), headers=headers)


def _request_id(request: Request) -> str | None:
    value = getattr(request.state, "request_id", None)
    return value if isinstance(value, str) else None


def _instance(request: Request) -> str:
    return request.url.path


_UNION_TAGS = ("training", "serving")
"""Tags of the workload and plan unions (`specs.workload.Workload`, `app.schemas.AnyPlan`)."""


def field_errors(errors: Any) -> list[dict[str, Any]]:
    """pydantic/FastAPI errors → `[{field, rule, value, message, location}]`."""
    out = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        location = loc[0] if loc and loc[0] in _LOCATIONS else None
        path = loc[1:] if location else loc
        # drop the discriminator tag pydantic inserts for tagged unions (workload.training.x,
        # plan.serving.instances)
        if len(path) >= 2 and path[0] in ("workload", "plan") and path[1] in _UNION_TAGS:
            path = [path[0], *path[2:]]
        if err.get("type") == "json_invalid":
            path = []  # the location is a character offset, not a field
        out.append(
            {
                "field": ".".join(path) if path else (location or ""),
                "rule": str(err.get("type", "invalid")),
                "value": to_jsonable(err.get("input")),
                "message": str(err.get("msg", "invalid value")),
                "location": location,
            }
        )
    return out


async def planner_error_handler(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, PlannerError)
    if exc.status >= 500:
        logger.error("request %s: %s", _request_id(request), exc.detail)
    headers = dict(getattr(exc, "headers", None) or {})  # e.g. WWW-Authenticate
    retry = exc.extensions.get("retry_after_s")
    if retry is not None:
        headers.setdefault("Retry-After", str(retry))
    return problem_response(
        problem_from_error(exc, instance=_instance(request)), headers=headers or None
    )


DATABASE_RETRY_AFTER_S = 2
"""Seconds a client is asked to wait after a 503 for an unreachable database: about a
reconnect attempt (psycopg's connect timeout is longer; most outages are restarts)."""


def _disk_full(exc: DBAPIError) -> bool:
    text = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
    return "disk is full" in text or getattr(exc.orig, "sqlstate", None) == "53100"


async def database_error_handler(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, DBAPIError)
    logger.error("request %s: database error: %s", _request_id(request), exc.orig)
    if _disk_full(exc):
        return problem_response(
            make_problem(
                status=507,
                slug="storage-full",
                title="Storage full",
                detail="the database could not write: its disk is full; free space on "
                "the volume holding the database and try again",
                instance=_instance(request),
            )
        )
    if isinstance(exc, OperationalError | InterfaceError) or exc.connection_invalidated:
        return problem_response(
            make_problem(
                status=503,
                slug="database-unavailable",
                title="Database unavailable",
                detail="the database cannot be reached right now; try again shortly",
                instance=_instance(request),
                retry_after_s=DATABASE_RETRY_AFTER_S,
            ),
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )
    logger.exception("request %s failed", _request_id(request), exc_info=exc)
    return problem_response(
        internal_problem(instance=_instance(request), request_id=_request_id(request))
    )


async def validation_error_handler(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, RequestValidationError)
    errors = field_errors(exc.errors())
    malformed = any(e["rule"] == "json_invalid" for e in errors)
    if malformed:
        detail = "the request body is not valid JSON"
    else:
        first = errors[0] if errors else None
        detail = f"{first['field']}: {first['message']}" if first else "the request is invalid"
        if len(errors) > 1:
            detail += f" (and {len(errors) - 1} more)"
    return problem_response(
        make_problem(
            status=422,
            slug="malformed-json" if malformed else "invalid-input",
            title="Malformed JSON" if malformed else "Invalid input",
            detail=detail,
            instance=_instance(request),
            errors=errors,
        )
    )


_HTTP_SLUGS = {404: "not-found", 405: "method-not-allowed", 413: "payload-too-large"}


def _allowed_methods(request: Request) -> list[str]:
    """Every method the app's OpenAPI document lists for this path (Starlette's own 405
    names only the first matching route's, and FastAPI makes one route per method)."""
    methods: set[str] = set()
    path = request.url.path
    for template, item in request.app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            methods |= {m.upper() for m in item if m in _METHODS}
    return sorted(methods)


async def http_error_handler(request: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    detail = exc.detail if isinstance(exc.detail, str) else phrase
    if status == 404 and detail == "Not Found":
        detail = f"no resource at {request.url.path}"
    headers = dict(exc.headers) if exc.headers else None
    if status == 405 and detail == "Method Not Allowed":
        detail = f"{request.method} is not allowed on {request.url.path}"
        headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
    slug = _HTTP_SLUGS.get(status, phrase.lower().replace(" ", "-"))
    return problem_response(
        make_problem(
            status=status, slug=slug, title=phrase, detail=detail, instance=_instance(request)
        ),
        headers=headers,
    )


def install_problem_handlers(app: FastAPI) -> None:
    """Register the handlers above on `app`."""
    app.add_exception_handler(PlannerError, planner_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
    app.add_exception_handler(DBAPIError, database_error_handler)


# ---- pure ASGI middlewares ----------------------------------------------------------------
async def _send_problem(
    send: Send, problem: dict[str, Any], extra_headers: list[tuple[bytes, bytes]]
) -> None:
    body = ProblemResponse(problem, status_code=int(problem["status"])).body
    headers = [
        (b"content-type", PROBLEM_CONTENT_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        *extra_headers,
    ]
    await send(
        {"type": "http.response.start", "status": int(problem["status"]), "headers": headers}
    )
    await send({"type": "http.response.body", "body": body})


class RequestContextMiddleware:
    """Assigns a request id (taken from the request header or generated), echoes it in the
    response and turns any unhandled exception into a logged, generic 500 problem."""

    def __init__(self, app: ASGIApp, header: str = "X-Request-ID") -> None:
        self.app = app
        self.header = header.lower().encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = None
        for key, value in scope.get("headers", []):
            if key == self.header:
                request_id = value.decode("latin-1")[:200]
                break
        request_id = request_id or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        id_header = (self.header, request_id.encode("latin-1"))
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), id_header]}
            await send(message)

        token = request_id_var.set(request_id)  # log records carry it (app.core.logs)
        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            logger.exception(
                "request %s %s %s failed", request_id, scope.get("method"), scope.get("path")
            )
            if started:
                raise
            await _send_problem(
                send,
                internal_problem(instance=scope.get("path"), request_id=request_id),
                [id_header],
            )
        finally:
            request_id_var.reset(token)


class BodyLimitMiddleware:
    """Answers 413 when a body exceeds `max_bytes`, by Content-Length or while streaming
    (the body is buffered, at most `max_bytes`, then replayed to the app)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path")
        for key, value in scope.get("headers", []):
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._too_large(send, path, declared)
                    return
        messages: list[Message] = []
        total = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            total += len(message.get("body", b""))
            if total > self.max_bytes:
                await self._too_large(send, path, total)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            if messages:
                return messages.pop(0)
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send, path: str | None, size: int) -> None:
        await _send_problem(
            send,
            make_problem(
                status=413,
                slug="payload-too-large",
                title="Payload too large",
                detail=f"the request body has at least {size} bytes; the limit is "
                f"{self.max_bytes} bytes",
                instance=path,
                max_bytes=self.max_bytes,
            ),
            [],
        )


ExceptionHandler = Callable[[Request, Exception], Awaitable[ProblemResponse]]


# ---- the problems in the OpenAPI document --------------------------------------------------
PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An RFC 9457 problem document; extensions (errors, rule, ...) vary.",
    "properties": {
        "type": {
            "type": "string",
            "description": "URI naming the kind of problem, "
            "`https://meshplan.dev/problems/<slug>` (`invalid-input`, `not-found`, ...).",
        },
        "title": {
            "type": "string",
            "description": "Short human-readable summary of the kind of problem (the same "
            "for every problem of one `type`).",
        },
        "status": {
            "type": "integer",
            "description": "The HTTP status code of the answer (RFC 9110).",
        },
        "detail": {
            "type": "string",
            "description": "What went wrong in this request, in a sentence with the values "
            "involved.",
        },
        "instance": {
            "type": ["string", "null"],
            "description": "The path of the resource the problem is about: the request "
            "path, or `/v1/searches/{id}` in a failed search's `error`.",
        },
        "errors": {
            "type": "array",
            "items": {"type": "object"},
            "description": "422 `invalid-input` and other input problems: one entry per bad "
            "field, `{field (dotted path), rule, value (the input), message}`.",
        },
    },
    "required": ["type", "title", "status", "detail"],
    "additionalProperties": True,
}
_EVERY_OPERATION = {
    500: "Unexpected failure (logged under the request id)",
    503: "Service unavailable (database gone, queue full): retry later",
    429: "Too many requests (rate limit): retry after Retry-After",
    507: "Insufficient storage: the database's disk is full, or solver work needs more "
    "memory than a worker may use",
}
_METHODS = ("get", "put", "post", "delete", "patch")


def _problem_statuses(path: str, method: str, operation: dict[str, Any]) -> dict[int, str]:
    """Which problems an operation can answer, besides the ones it documents itself."""
    out = dict(_EVERY_OPERATION)
    if operation.get("parameters") or operation.get("requestBody") or "{" in path:
        out[422] = "Invalid input: `errors` lists {field, rule, value, message}"
    if "{" in path:
        out[404] = "No such resource"
    if operation.get("requestBody"):
        out[400] = "The body cannot be parsed (not UTF-8 / not JSON)"
        out[413] = "Request body above the service's max_request_bytes"
    if method in ("post", "delete", "put", "patch"):
        out[409] = "Conflicts with the resource's state"
    if operation.get("security"):
        out[401] = "No valid API key (missing, unknown or revoked); `WWW-Authenticate: Bearer`"
        out[403] = "The key lacks the scope this operation needs (`required_scope`)"
    if path in ("/v1/estimate", "/v1/expert-placements"):
        out[504] = "The solver work passed MESHPLAN_REQUEST_TIMEOUT_S and was stopped"
    return out


def _one_of_to_any_of(node: Any) -> None:
    """`oneOf` without a discriminator → `anyOf`: pydantic writes tagged unions whose tag is a
    callable (workload/plan kinds) as `oneOf`, but a training plan also validates against
    the serving plan's schema, so "exactly one" would be a false promise."""
    if isinstance(node, dict):
        if "oneOf" in node and "discriminator" not in node:
            node["anyOf"] = node.pop("oneOf")
        for value in node.values():
            _one_of_to_any_of(value)
    elif isinstance(node, list):
        for value in node:
            _one_of_to_any_of(value)


def document_problems(app: FastAPI) -> None:
    """Make `app.openapi()` document every problem a route can answer: each operation gets
    its 4xx/5xx statuses (`_problem_statuses`) with the `Problem` schema under
    `application/problem+json`, and FastAPI's generic 422 (`HTTPValidationError`, which the
    service never answers) is replaced by the problem. One place for every route."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        schemas["Problem"] = PROBLEM_SCHEMA
        ref = {"$ref": "#/components/schemas/Problem"}
        for path, item in schema.get("paths", {}).items():
            for method in _METHODS:
                operation = item.get(method)
                if operation is None:
                    continue
                responses = operation.setdefault("responses", {})
                for status, description in _problem_statuses(path, method, operation).items():
                    entry = responses.setdefault(str(status), {"description": description})
                    content = entry.setdefault("content", {})
                    if status == 422:
                        content.pop("application/json", None)
                    content[PROBLEM_CONTENT_TYPE] = {"schema": ref}
        _one_of_to_any_of(schema)
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
