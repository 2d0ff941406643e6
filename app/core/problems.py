"""RFC 9457 problem documents as plain dicts (no web framework here), shared by the HTTP
handlers and the search runner, which stores a failed search's problem in the database."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from specs.errors import PlannerError

PROBLEM_TYPE_BASE = "https://meshplan.dev/problems/"
PROBLEM_CONTENT_TYPE = "application/problem+json"
_RESERVED = frozenset({"type", "title", "status", "detail", "instance"})


def problem_type_uri(slug: str) -> str:
    """`https://meshplan.dev/problems/<slug>`."""
    return PROBLEM_TYPE_BASE + slug


def text(value: str) -> str:
    """`value` as valid Unicode: lone surrogates (a JSON `"\\ud800"` escape) become their
    `\\udXXX` escape, so a problem that echoes bad input can always be encoded as UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def to_jsonable(value: Any) -> Any:
    """Best-effort JSON-safe copy: containers recurse, non-finite floats and unknown objects
    become strings, so a problem document can always be serialised."""
    if isinstance(value, str):
        return text(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return to_jsonable(dump(mode="json"))
        except Exception:  # a broken model_dump must not break error reporting
            pass
    return str(value)


def make_problem(
    *,
    status: int,
    slug: str,
    title: str,
    detail: str,
    instance: str | None = None,
    **extensions: Any,
) -> dict[str, Any]:
    """A problem document; extensions never overwrite the five standard members."""
    problem: dict[str, Any] = {
        "type": problem_type_uri(slug),
        "title": title,
        "status": status,
        "detail": text(detail),
        "instance": instance,
    }
    for key, value in extensions.items():
        if key not in _RESERVED:
            problem[key] = to_jsonable(value)
    return problem


def problem_from_error(error: PlannerError, *, instance: str | None = None) -> dict[str, Any]:
    """The problem document of a domain error (type from its `problem_type` slug)."""
    return make_problem(
        status=error.status,
        slug=error.problem_type,
        title=error.title,
        detail=error.detail,
        instance=instance,
        **error.extensions,
    )


def internal_problem(*, instance: str | None, request_id: str | None) -> dict[str, Any]:
    """The generic 500 problem: no traceback, only the request id to find the log line."""
    return make_problem(
        status=500,
        slug="internal-error",
        title="Internal server error",
        detail="The service failed unexpectedly; the error is logged under this request id.",
        instance=instance,
        request_id=request_id,
    )
