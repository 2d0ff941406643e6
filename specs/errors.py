"""One hierarchy of domain errors, mapped to RFC 9457 problems at the HTTP boundary.

```
PlannerError                      base: problem_type slug, title, HTTP status
 ├── SpecError                    422 invalid input; `errors` lists {field, rule, value, message}
 ├── UnsupportedModelError        422 a model we cannot read (unknown architecture)
 ├── CatalogLookupError           404/422 unknown accelerator or preset
 ├── PluginNotFound               422 unknown cost-model or solver name
 ├── InfeasiblePlan               422 a plan that cannot run; `reason` is machine readable
 ├── NoFeasiblePlan               422 a search found nothing that fits; `reasons` counts
 ├── SolverTimeout                504 a solver ran out of time without a usable answer
 ├── NotFound                     404 a stored resource that does not exist
 └── Conflict                     409 the request conflicts with stored state
```
"""

from __future__ import annotations

from typing import Any


class PlannerError(Exception):
    """Base of every error the planner raises on purpose."""

    problem_type: str = "planner-error"
    title: str = "Planner error"
    status: int = 500

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extensions: dict[str, Any] = extensions


class SpecError(PlannerError):
    """Invalid input: names the field, the rule and the value."""

    problem_type = "invalid-input"
    title = "Invalid input"
    status = 422

    def __init__(self, field: str, rule: str, value: Any, message: str | None = None) -> None:
        msg = message or f"{field} {rule} (got {value!r})"
        super().__init__(
            msg, errors=[{"field": field, "rule": rule, "value": value, "message": msg}]
        )
        self.field = field
        self.rule = rule
        self.value = value


class UnsupportedModelError(PlannerError):
    problem_type = "unsupported-model"
    title = "Unsupported model"
    status = 422


class CatalogLookupError(PlannerError):
    problem_type = "unknown-catalog-entry"
    title = "Unknown catalog entry"
    status = 404


class PluginNotFound(PlannerError):
    problem_type = "plugin-not-found"
    title = "Unknown plug-in"
    status = 422


class InfeasiblePlan(PlannerError):
    """A plan that cannot run. `kind` is a short machine-readable reason such as
    `memory`, `divisibility`, `batch`, `topology`."""

    problem_type = "infeasible-plan"
    title = "Infeasible plan"
    status = 422

    def __init__(self, kind: str, detail: str, **extensions: Any) -> None:
        super().__init__(detail, kind=kind, **extensions)
        self.kind = kind


class NoFeasiblePlan(PlannerError):
    problem_type = "no-feasible-plan"
    title = "No feasible plan"
    status = 422


class SolverTimeout(PlannerError):
    problem_type = "solver-timeout"
    title = "Solver time limit reached"
    status = 504


class NotFound(PlannerError):
    problem_type = "not-found"
    title = "Not found"
    status = 404


class Conflict(PlannerError):
    problem_type = "conflict"
    title = "Conflict"
    status = 409
