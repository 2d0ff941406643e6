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

import dataclasses
import math
from typing import Any

from cost_models.base import (
    LayerProfile,
    TrainingCostModel,
    TrainingEstimate,
    TrainingProblem,
    check_key,
    profile_key,
)
from cost_models.economics import with_economics
from cost_models.mixed import (
    boundary_extra_s,
    check_data_shares,
    evaluate_data_shares,
    evaluate_mixed,
    pool_names,
    pool_problem,
    setup_gpus,
    stage_setups,
)
from solver.base import SolveStatus
from solver.formulations.mixed_partition import MixedSplit, solve_mixed_partition
from solver.formulations.stage_partition import DEFAULT_TIME_LIMIT_S, default_solver
from solver.space import check_framework
from solver.warnings import training_warnings
from specs.cluster import ClusterSpec
from specs.errors import InfeasiblePlan, SolverTimeout
from specs.plan import TrainingPlan, Violation
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
    """`_estimate_plan` with the GPU, energy and cost figures (`cost_models.economics`).

    On a homogeneous cluster a plan of fewer GPUs than the cluster holds runs on the first
    of them (whole nodes, or part of one node: `cost_models.mixed.pool_problem`) and the
    rest idle, as the objectives that leave GPUs idle plan them (`solver.objectives`)."""
    cluster = problem.cluster
    if (
        plan.stage_groups is None
        and plan.data_shares is None
        and cluster.is_homogeneous
        and plan.num_gpus < cluster.num_gpus
    ):
        problem = pool_problem(problem, cluster, plan.num_gpus)
    est = _estimate_plan(problem, cost_model, plan, time_limit_s=time_limit_s)
    return with_economics(problem, est)


def _estimate_plan(
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
    mixed = plan.data_shares is not None or plan.stage_groups is not None
    if plan.offload.enabled and (mixed or not problem.cluster.is_homogeneous):
        detail = "offload is priced on a cluster of one kind of node only (not with stage_groups or data_shares)"
        raise InfeasiblePlan(
            "offload",
            detail,
            errors=[
                {
                    "field": "plan.offload",
                    "rule": "one kind of node",
                    "value": None,
                    "message": detail,
                }
            ],
        )
    if plan.data_shares is not None:
        return _estimate_shares(problem, cost_model, plan)
    if plan.stage_groups is not None or not problem.cluster.is_homogeneous:
        return _estimate_mixed(problem, cost_model, plan)
    if plan.stage_layers is not None:
        return cost_model.evaluate(problem, plan)
    _raise_blocking(problem, plan, cost_model.check(problem, plan))
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


def _estimate_shares(
    problem: TrainingProblem, cost_model: TrainingCostModel, plan: TrainingPlan
) -> TrainingEstimate:
    """A plan with `data_shares`: every replica splits the layers alike, so a missing split
    is the one the slowest group's replicas would take (the partition on its hardware), and
    `evaluate_data_shares` prices it."""
    shares = plan.data_shares
    assert shares is not None
    names = check_data_shares(problem, plan)  # the rules first: 422s at their fields
    if plan.stage_layers is None:
        pools = problem.cluster.pools()
        p = plan.parallelism
        speeds = {n: pools[n].groups[0].accelerator.peak_flops(problem.workload.precision)
                  for n in names}  # fmt: skip
        slow = min(range(len(shares)), key=lambda j: speeds[names[j]])
        share = shares[slow]
        gpus = share.replicas * p.tensor * p.pipeline * p.context
        sub = pool_problem(problem, pools[names[slow]], gpus)
        sub = dataclasses.replace(
            sub,
            workload=problem.workload.model_copy(
                update={"global_batch_size": share.replicas * share.sequences}
            ),
        )
        part = plan.model_copy(
            update={
                "data_shares": None,
                "parallelism": p.model_copy(update={"data": share.replicas}),
            }
        )
        chunks = _estimate_plan(sub, cost_model, part).plan.stage_layers
        plan = plan.model_copy(update={"stage_layers": chunks})
    return evaluate_data_shares(cost_model, problem, plan)


def _estimate_mixed(
    problem: TrainingProblem, cost_model: TrainingCostModel, plan: TrainingPlan
) -> TrainingEstimate:
    """A plan on a cluster of several device pools (`cost_models.mixed`): its stages' pools
    are required; a missing split is the exact mixed split (`solve_mixed_partition`), or the
    time-optimal one ignoring memory when nothing fits, so the estimate names the stage
    that runs out."""
    pools = problem.cluster.pools()
    if plan.stage_groups is None:
        detail = (
            f"the cluster mixes {len(pools)} kinds of node ({', '.join(pools)}): give "
            "plan.stage_groups, the node group of every pipeline stage"
        )
        raise InfeasiblePlan(
            "topology",
            detail,
            errors=[
                {
                    "field": "plan.stage_groups",
                    "rule": "required on a mixed cluster",
                    "value": None,
                    "message": detail,
                }
            ],
        )
    if plan.stage_layers is not None:
        return evaluate_mixed(cost_model, problem, plan)
    names = pool_names(problem.cluster, plan.stage_groups)
    if len(set(stage_setups(plan, names))) == 1:  # one pool, one degree: its own estimate
        sub = pool_problem(problem, pools[names[0]], plan.parallelism.world_size)
        base = plan.model_copy(update={"stage_groups": None, "stage_tensor": None})
        chunks = estimate_plan(sub, cost_model, base).plan.stage_layers
        return evaluate_mixed(cost_model, problem, plan.model_copy(update={"stage_layers": chunks}))
    mixed = mixed_split(problem, cost_model, plan, names)
    if isinstance(mixed, MixedViolations):
        _raise_blocking(mixed.problem, plan, mixed.violations)
        raise AssertionError("unreachable: mixed_split returns blocking violations only")
    split = mixed.split
    if split is None:
        unlimited = [dataclasses.replace(x, usable_bytes=math.inf) for x in mixed.profiles]
        split = solve_mixed_partition(unlimited, mixed.extra_s)
    if split is None:
        raise InfeasiblePlan(
            "stage_layers",
            f"no split of {problem.model.num_layers} layers into {len(names)} stages exists",
        )
    return evaluate_mixed(
        cost_model, problem, plan.model_copy(update={"stage_layers": split.stage_layers})
    )


@dataclasses.dataclass(frozen=True)
class MixedProfiles:
    """The stage profiles of a mixed plan (each on its pool at its tensor degree) and the
    hand-off time each stage adds: what the mixed split takes."""

    profiles: list[LayerProfile]
    extra_s: list[float]


@dataclasses.dataclass(frozen=True)
class MixedSplitResult(MixedProfiles):
    """`MixedProfiles` and the best split (None when no split fits in memory)."""

    split: MixedSplit | None


@dataclasses.dataclass(frozen=True)
class MixedViolations:
    """A pool on which the plan breaks a rule that leaves nothing to price."""

    problem: TrainingProblem
    violations: list[Violation]


def mixed_split(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    plan: TrainingPlan,
    names: list[str],
) -> MixedSplitResult | MixedViolations:
    """Profile `plan` (split and stage groups ignored) on every pool its stages use
    (`names`, one pool per stage) and split the layers exactly over the stages."""
    found = mixed_profiles(problem, cost_model, plan, names)
    if isinstance(found, MixedViolations):
        return found
    split = solve_mixed_partition(found.profiles, found.extra_s)
    return MixedSplitResult(found.profiles, found.extra_s, split)


def _per_stage_fields(
    plan: TrainingPlan, tensor: int, violations: list[Violation]
) -> list[Violation]:
    """With `stage_tensor`, a rule broken at tensor degree `tensor` names the first stage
    of that degree (`plan.stage_tensor.<j>`) instead of `plan.parallelism.tensor`."""
    if plan.stage_tensor is None:
        return violations
    where = f"plan.stage_tensor.{plan.stage_tensor.index(tensor)}"
    return [
        v.model_copy(update={"field": where}) if v.field == "plan.parallelism.tensor" else v
        for v in violations
    ]


def mixed_profiles(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    plan: TrainingPlan,
    names: list[str],
) -> MixedProfiles | MixedViolations:
    """The layer profile of every stage of `plan` (split and stage groups ignored) on its
    pool (`names`) at its tensor degree, and each stage's hand-off time; or the rules a
    pool's job breaks."""
    pools = problem.cluster.pools()
    setups = stage_setups(plan, names)
    key = plan.key().without_split()
    profiles: dict[tuple[str, int], LayerProfile] = {}
    for name, t in dict.fromkeys(setups):
        sub = pool_problem(problem, pools[name], setup_gpus(plan, t))
        at = key._replace(tensor=t, sequence_parallel=key.sequence_parallel and t > 1)
        violations = check_key(cost_model, sub, at)  # plug-ins may lack the keyed methods
        if any(v.kind not in PRICEABLE_VIOLATIONS for v in violations):
            return MixedViolations(sub, _per_stage_fields(plan, t, violations))
        profiles[name, t] = profile_key(cost_model, sub, at)
    stage_profiles = [profiles[s] for s in setups]
    return MixedProfiles(stage_profiles, boundary_extra_s(problem, plan, names, stage_profiles))


def _raise_blocking(
    problem: TrainingProblem, plan: TrainingPlan, violations: list[Violation]
) -> None:
    """Raise the first violation outside `PRICEABLE_VIOLATIONS` as a 422 naming its field."""
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
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value
