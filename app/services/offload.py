"""The solver work of single requests, as jobs a request worker runs (`app.services.pool`).

The API process never runs these solvers itself: an expert placement (CP-SAT), a serving
estimate (a discrete-event simulation whose cost grows with the request count) and a
training estimate that places experts can each take seconds and hundreds of MB, which in the
API process would block its threads and never return the memory. A job returns
`("ok", value)` or `("problem", problem_dict)`: domain errors travel as problem documents,
because `PlannerError` subclasses do not survive pickling.
"""

from __future__ import annotations

from typing import Any

from app.core.problems import problem_from_error
from specs.errors import PlannerError


def expert_placement(body: Any) -> dict[str, Any]:
    """`POST /v1/expert-placements`: the answer document for `body`."""
    from solver.formulations.expert_placement import solve_expert_placement

    result = solve_expert_placement(body)
    answer = result.to_dict()
    answer.update(
        num_ranks=body.num_ranks,
        ranks_per_node=body.ranks_per_node,
        slots_per_rank=body.slots_per_rank,
    )
    return answer


def estimate(body: Any) -> dict[str, Any]:
    """`POST /v1/estimate` without stored measurements (no `calibrated` cost model)."""
    from app.services import planning

    return planning.estimate(body, None)


def capacity(payload: Any) -> dict[str, Any]:
    """`POST /v1/capacity`: `(body, max_time_limit_s)` → the answer document."""
    from app.services.capacity import answer

    body, max_time_limit_s = payload
    return answer(body, max_time_limit_s=max_time_limit_s)


def pareto(payload: Any) -> dict[str, Any]:
    """`GET /v1/searches/{id}/pareto`: `(stored problem, time limit)` → the front."""
    from app.services.pareto import front

    return front(payload)


JOBS = {
    "expert_placement": expert_placement,
    "estimate": estimate,
    "capacity": capacity,
    "pareto": pareto,
}


def run_job(name: str, payload: Any) -> tuple[str, Any]:
    """Run job `name` on `payload` inside a worker."""
    try:
        return "ok", JOBS[name](payload)
    except PlannerError as exc:
        return "problem", problem_from_error(exc)


def needs_worker(body: Any) -> bool:
    """Whether an estimate goes to a worker: every serving estimate (its simulation grows
    with the request count), and a training estimate that runs the expert-placement solver
    (`moe_routing.optimize_placement`) unless it reads stored measurements (`calibrated`,
    which needs the API's database session). Other training estimates are closed-form
    (about 1–3 ms) and stay in the API process: a round trip to a worker would cost more
    than the work (README "Operations: faults")."""
    from specs.serving import ServingWorkload

    if isinstance(body.workload, ServingWorkload):
        return True
    routing = getattr(body.workload, "moe_routing", None)
    places = bool(routing is not None and getattr(routing, "optimize_placement", False))
    calibrated = body.cost_model is not None and getattr(body.cost_model, "name", "") == (
        "calibrated"
    )
    return places and not calibrated
