"""`GET /v1/searches/{id}/pareto`: the exact Pareto front of a stored training search
(`solver.search.pareto`), recomputed from the stored problem (its model, cluster, workload,
constraints, objective and cost model: all the front depends on) in a request worker."""

from __future__ import annotations

from typing import Any

from app.services.planning import training_inputs
from cost_models.mixed import pool_problem
from solver.objectives import candidate_sizes
from solver.search.pareto import PARETO_FIGURES, pareto_front


def front(payload: tuple[dict[str, Any], float]) -> dict[str, Any]:
    """The front document of a stored problem, within `time_limit_s` of work."""
    problem, time_limit_s = payload
    training, cost_model, constraints = training_inputs(problem)
    constraints = constraints.model_copy(
        update={"time_limit_s": min(constraints.time_limit_s, time_limit_s)}
    )
    objective = str(problem.get("objective") or "max_throughput")
    cluster = training.cluster
    if objective == "max_throughput" or not cluster.is_homogeneous:
        sizes = [training]
    else:
        sizes = [
            training if g == cluster.num_gpus else pool_problem(training, cluster, g)
            for g in candidate_sizes(cluster.gpus_per_node, cluster.num_nodes)
        ]
    result = pareto_front(sizes, cost_model, constraints)
    return {
        "figures": list(PARETO_FIGURES),
        "plans": [
            {
                "plan": e.plan.model_dump(mode="json"),
                "metrics": e.metrics.model_dump(mode="json"),
                "memory": e.memory.model_dump(mode="json"),
            }
            for e in result.plans
        ],
        "stats": result.stats.to_dict(),
    }
