"""Estimate one plan, choosing the pipeline split when the plan leaves it open.

When `stage_layers` is None the partition program picks the time-optimal split that fits in
memory; when no split fits, the time-optimal split ignoring memory is used so the estimate
reports the memory violation (with numbers) instead of failing. Likewise a well-formed plan
that its named framework cannot run (a `framework` violation: DeepSpeed with an interleaved
schedule, FSDP with tensor parallelism) is priced under that framework's behaviour and
comes back infeasible with the rule, like a plan that does not fit; any other broken rule
means there is nothing to price and raises. `estimate_with_warnings` adds the advisory
warnings of `solver.warnings` (which never change the estimate).
"""

from __future__ import annotations

from typing import Any

from cost_models.base import TrainingCostModel, TrainingEstimate, TrainingProblem
from solver.base import SolveStatus
from solver.formulations.stage_partition import DEFAULT_TIME_LIMIT_S, default_solver
from solver.space import check_framework
from solver.warnings import training_warnings
from specs.cluster import ClusterSpec
from specs.errors import InfeasiblePlan, SolverTimeout
from specs.plan import TrainingPlan
from specs.warnings import PlanWarning

PRICEABLE_VIOLATIONS = frozenset({"framework"})
"""Violation kinds of a well-formed plan that can still be priced: the estimate reports them
(infeasible) instead of raising."""


def estimate_plan(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    plan: TrainingPlan,
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
) -> TrainingEstimate:
    """The cost model's estimate of `plan`, with the split filled in when absent.

    Raises:
        SpecError: `plan.framework` names no registered framework (field `plan.framework`).
        InfeasiblePlan: the cost model cannot price the plan at all (e.g. GPU count mismatch);
            violations of `PRICEABLE_VIOLATIONS` alone are reported in the estimate instead.
        SolverTimeout: the partition program found no split within `time_limit_s`.
    """
    if plan.framework is not None:
        check_framework(plan.framework, "plan.framework")
    if plan.stage_layers is not None:
        return cost_model.evaluate(problem, plan)
    violations = cost_model.check(problem, plan)
    blocking = [v for v in violations if v.kind not in PRICEABLE_VIOLATIONS]
    if blocking:
        first = blocking[0]
        raise InfeasiblePlan(
            first.kind,
            first.detail,
            violations=[v.model_dump() for v in violations],
            errors=[
                {
                    "field": v.field,
                    "rule": v.kind,
                    "value": _value_at(problem, plan, v.field),
                    "message": v.detail,
                }
                for v in blocking
                if v.field is not None
            ],
        )
    profile = cost_model.profile(problem, plan)
    p, v = plan.parallelism.pipeline, plan.parallelism.virtual_pipeline
    solver = default_solver()
    res = solver.solve(profile, p, v, time_limit_s=time_limit_s)
    if res.status == SolveStatus.INFEASIBLE:
        res = solver.solve(profile, p, v, time_limit_s=time_limit_s, ignore_memory=True)
    if res.stage_layers is None:
        if res.status == SolveStatus.INFEASIBLE:
            raise InfeasiblePlan(
                "stage_layers",
                f"no split of {problem.model.num_layers} layers into pipeline {p} × "
                f"virtual {v} chunks exists",
            )
        raise SolverTimeout(f"the pipeline partition found no split within {time_limit_s} s")
    split = plan.model_copy(update={"stage_layers": res.stage_layers})
    return cost_model.evaluate(problem, TrainingPlan.model_validate(split.model_dump()))


def estimate_with_warnings(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    plan: TrainingPlan,
    *,
    cluster: ClusterSpec | None = None,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
) -> tuple[TrainingEstimate, list[PlanWarning]]:
    """`estimate_plan` and the estimate's warnings (`solver.warnings.training_warnings`;
    `cluster`: the request's cluster spec, whose explicit bandwidths are checked).

    Raises:
        SpecError, InfeasiblePlan, SolverTimeout: as `estimate_plan`.
    """
    est = estimate_plan(problem, cost_model, plan, time_limit_s=time_limit_s)
    return est, training_warnings(problem, est, cluster=cluster)


def _value_at(problem: TrainingProblem, plan: TrainingPlan, field: str) -> Any:
    """The request's value at a dotted `plan.…` or `workload.…` path (the whole object for
    a prefix such as `plan.parallelism`); None elsewhere (`cluster.node_groups`)."""
    head, _, rest = field.partition(".")
    sources: dict[str, Any] = {"plan": plan, "workload": problem.workload}
    if head not in sources:
        return None
    value: Any = sources[head].model_dump(mode="json")
    for part in rest.split(".") if rest else ():
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
