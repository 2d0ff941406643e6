"""Errors the client raises. Every failure the service answers is an RFC 9457 problem
(`application/problem+json`); the client turns it into an exception that carries it.

```
MeshplanError                 any failure; `.problem` holds the RFC 9457 body
├── InvalidInput              400 / 422: a field breaks a rule (`.errors` names them)
├── NotFound                  404: unknown search, plan, accelerator, preset or route
├── Conflict                  409 / 412: e.g. cancelling a finished search, idempotency-key reuse
├── MeshplanConnectionError   the service could not be reached (no HTTP answer at all)
└── SearchTimeout             `wait_for_search` gave up; `.search` is the last state seen
```
"""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from meshplan_client.models import Problem

if TYPE_CHECKING:
    import httpx

    from meshplan_client.models import FieldError, Search

__all__ = [
    "Conflict",
    "InvalidInput",
    "MeshplanConnectionError",
    "MeshplanError",
    "NotFound",
    "SearchTimeout",
    "error_from_response",
    "problem_from_response",
]


class MeshplanError(Exception):
    """A failed call; `problem` is the service's RFC 9457 problem (or one the client made up
    when the answer was not a problem document)."""

    def __init__(self, problem: Problem, response: httpx.Response | None = None) -> None:
        self.problem = problem
        self.response = response
        super().__init__(self._message())

    @property
    def status(self) -> int | None:
        return self.problem.status

    @property
    def type(self) -> str:
        return self.problem.type

    @property
    def title(self) -> str:
        return self.problem.title

    @property
    def detail(self) -> str:
        return self.problem.detail

    @property
    def errors(self) -> list[FieldError]:
        return self.problem.errors

    def _message(self) -> str:
        head = self.problem.title or "Error"
        if self.problem.status:
            head += f" ({self.problem.status})"
        lines = [f"{head}: {self.problem.detail}" if self.problem.detail else head]
        for error in self.problem.errors:
            lines.append(f"  - {error.field or '(body)'}: {error.message or error.rule}")
        return "\n".join(lines)


class InvalidInput(MeshplanError):
    """400 / 422: the request breaks a rule; `errors` lists `{field, rule, value, message}`."""


class NotFound(MeshplanError):
    """404: no such resource."""


class Conflict(MeshplanError):
    """409 / 412: the resource is not in a state that allows the call."""


class MeshplanConnectionError(MeshplanError):
    """The service could not be reached or the connection broke before an answer."""


class SearchTimeout(MeshplanError, TimeoutError):
    """`wait_for_search` ran out of time; the search goes on running on the service."""

    def __init__(self, search: Search, timeout_s: float) -> None:
        self.search = search
        super().__init__(
            Problem(
                type="about:blank",
                title="Search still running",
                status=None,
                detail=f"search {search.id} is still {search.status} after {timeout_s:g} s",
            )
        )


_BY_STATUS: dict[int, type[MeshplanError]] = {
    400: InvalidInput,
    404: NotFound,
    409: Conflict,
    412: Conflict,
    422: InvalidInput,
}


def problem_from_response(response: httpx.Response) -> Problem:
    """The problem document of an error answer; a plain answer becomes an `about:blank`
    problem with the HTTP reason as title and the start of the body as detail."""
    body: Any = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and ("title" in body or "type" in body):
        data = dict(body)
        data.setdefault("status", response.status_code)
        return Problem.model_validate(data)
    try:
        phrase = HTTPStatus(response.status_code).phrase
    except ValueError:
        phrase = "Error"
    return Problem(
        type="about:blank",
        title=phrase,
        status=response.status_code,
        detail=response.text[:500],
    )


def error_from_response(response: httpx.Response) -> MeshplanError:
    """The exception for an HTTP error answer (class by status)."""
    problem = problem_from_response(response)
    cls = _BY_STATUS.get(response.status_code, MeshplanError)
    return cls(problem, response)


def connection_error(exc: Exception, url: str) -> MeshplanConnectionError:
    """A transport failure (refused, DNS, timeout) as a client error."""
    return MeshplanConnectionError(
        Problem(
            type="about:blank",
            title="Service unreachable",
            status=None,
            detail=f"cannot reach {url}: {exc.__class__.__name__}: {exc}",
        )
    )
