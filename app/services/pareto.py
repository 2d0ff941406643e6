"""`GET /v1/searches/{id}/pareto`: the exact Pareto front of a stored training search
(`solver.search.pareto`), recomputed from the stored problem (its model, cluster, workload,
constraints, objective and cost model: all the front depends on) in a request worker.

On a mixed cluster the front covers each pool alone (at every size the objective searches,
each plan restated with every stage on its pool: `solver.objectives.onto_pool`) exactly,
and of the plans across pools those the search stored (the mixed search's fastest,
`solver.search.mixed`), priced again on the stored problem."""

from __future__ import annotations

from typing import Any

from app.services.planning import training_inputs
from cost_models.base import TrainingEstimate, TrainingProblem
from cost_models.mixed import plan_pools, pool_problem
from solver.estimate import estimate_plan
from solver.objectives import candidate_sizes, onto_pool
from solver.search.pareto import PARETO_FIGURES, pareto_front
from specs.plan import TrainingPlan


def front(payload: tuple[Any, ...]) -> dict[str, Any]:
    """The front document of `(stored problem, time limit s[, stored plans])`, within the
    time limit of work; the stored plans (plan documents) matter on a mixed cluster only."""
    problem, time_limit_s, *rest = payload
    stored: list[dict[str, Any]] = rest[0] if rest else []
    training, cost_model, constraints = training_inputs(problem)
    constraints = constraints.model_copy(
        update={"time_limit_s": min(constraints.time_limit_s, time_limit_s)}
    )
    objective = str(problem.get("objective") or "max_throughput")
    cluster = training.cluster
    if cluster.is_homogeneous:
        if objective == "max_throughput":
            sizes = [training]
        else:
            sizes = [
                training if g == cluster.num_gpus else pool_problem(training, cluster, g)
                for g in candidate_sizes(cluster.gpus_per_node, cluster.num_nodes)
            ]
        result = pareto_front(sizes, cost_model, constraints)
    else:
        names: list[str] = []
        sizes = []
        for name, pool in cluster.pools().items():
            counts = (
                [pool.num_gpus]
                if objective == "max_throughput"
                else candidate_sizes(pool.gpus_per_node, pool.num_nodes)
            )
            for g in counts:
                names.append(name)
                sizes.append(pool_problem(training, pool, g))

        def carry(i: int, est: TrainingEstimate) -> TrainingEstimate:
            return onto_pool(training, cost_model, est, names[i])

        result = pareto_front(
            sizes,
            cost_model,
            constraints,
            seed=_across_pools(training, cost_model, stored),
            carry=carry,
        )
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


def _across_pools(
    training: TrainingProblem, cost_model: Any, stored: list[dict[str, Any]]
) -> list[TrainingEstimate]:
    """The stored plans that run on two pools or more, priced on the problem."""
    out = []
    for document in stored:
        plan = TrainingPlan.model_validate(document)
        if len(plan_pools(plan)) > 1:
            out.append(estimate_plan(training, cost_model, plan))
    return out
