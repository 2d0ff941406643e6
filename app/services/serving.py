"""Orchestration of serving requests (`workload.kind` = `serving`): resolve the inputs, build
the serving cost model, price one serving plan or run a serving search, and shape the
results for the API. Training requests go through `app.services.planning`, which hands
serving ones to this module; both share the search records, the runner and the plan table.
"""

from __future__ import annotations

import time
from typing import Any

from app.schemas import CostModelRef, EstimateRequest, SearchCreate
from app.services.planning import (
    InputError,
    PreparedSearch,
    ProgressFn,
    SearchOutcome,
    _field_error,
    resolve_cluster,
    resolve_model,
)
from cost_models.serving.base import ServingCostModel
from cost_models.serving.engines import DEFAULT_ENGINE, build_engine
from cost_models.serving.registry import build_serving_cost_model, list_serving_cost_models
from hardware_catalog.schema import ResolvedCluster
from solver.serving import replan as serving_replan
from solver.serving.diverse import fold as fold_serving
from solver.serving.evaluate import InstanceCosts, ServingEstimate, ServingProblem, evaluate_plan
from solver.serving.mix import mixed_serving_search
from solver.serving.search import (
    check_engine,
    check_engine_options,
    check_fixed,
    serving_search,
)
from specs.constraints import SearchConstraints
from specs.errors import NoFeasiblePlan
from specs.model import ModelSpec
from specs.plan import canonical_hash
from specs.serving import ServingPlan, ServingWorkload

DEFAULT_SERVING_COST_MODEL = "analytical"


def _check_prices(cluster: ResolvedCluster, workload: ServingWorkload) -> None:
    """`min_cost` needs a price on every node group (422 naming each one without)."""
    if workload.objective != "min_cost":
        return
    missing = [i for i, g in enumerate(cluster.groups) if g.price_per_gpu_hour is None]
    if missing:
        raise InputError(
            "objective min_cost needs price_per_gpu_hour on every node group",
            [
                _field_error(
                    f"cluster.node_groups.{i}.price_per_gpu_hour",
                    "required by objective min_cost",
                    None,
                    "no price for this group",
                )
                for i in missing
            ],
        )


def _check_workload(workload: ServingWorkload) -> None:
    if workload.trace is not None and len(workload.trace) < 2:
        raise InputError(
            "a trace needs at least two requests (its rate is scaled by the goodput search)",
            [
                _field_error(
                    "workload.trace",
                    "at least 2 rows",
                    len(workload.trace),
                    "a single-row trace has no arrival rate",
                )
            ],
        )


def _cost_model(ref: CostModelRef | None) -> ServingCostModel:
    name = ref.name if ref is not None else DEFAULT_SERVING_COST_MODEL
    known = list_serving_cost_models()
    if name not in known:
        raise InputError(
            f"cost model {name!r} does not price serving plans; serving cost models: {known}",
            [
                _field_error(
                    "cost_model.name",
                    f"one of {known} for serving",
                    name,
                    "unknown serving cost model",
                )
            ],
        )
    return build_serving_cost_model(name, ref.config if ref is not None else None)


def _problem(
    model: ModelSpec, cluster: ResolvedCluster, workload: ServingWorkload
) -> ServingProblem:
    """The serving problem (a cluster of several kinds of node included: its plans' instances
    name their groups)."""
    _check_workload(workload)
    problem = ServingProblem(model=model, cluster=cluster, workload=workload)
    if workload.objective == "min_gpus" and problem.target_rate_rps is None:
        raise InputError(
            "objective min_gpus needs an arrival rate; the trace's requests all arrive at the "
            "same instant, so it has none",
            [
                _field_error(
                    "workload.trace",
                    "arrivals spread over time for min_gpus",
                    len(workload.trace or []),
                    "a trace arriving at once has no rate",
                )
            ],
        )
    return problem


def estimate_public(est: ServingEstimate, cost_model: ServingCostModel) -> dict[str, Any]:
    return {
        "feasible": est.feasible,
        "violations": [v.model_dump(mode="json") for v in est.violations],
        "metrics": None if est.metrics is None else est.metrics.model_dump(mode="json"),
        "memory": serving_memory(est.details),
        "plan": est.plan.model_dump(mode="json"),
        "cost_model": {"name": cost_model.name, "version": str(getattr(cost_model, "version", ""))},
        "details": est.details,
        "warnings": [w.model_dump(mode="json") for w in est.warnings],
    }


def estimate(body: EstimateRequest) -> dict[str, Any]:
    """Price one serving plan (`POST /v1/estimate` with a serving workload)."""
    assert isinstance(body.workload, ServingWorkload)
    if not isinstance(body.plan, ServingPlan):
        raise InputError(
            'a serving workload takes a serving plan ({"mode", "instances"})',
            [
                _field_error(
                    "plan",
                    "serving plan for a serving workload",
                    "training plan",
                    "plan has no `instances`",
                )
            ],
        )
    problem = _problem(resolve_model(body.model), resolve_cluster(body.cluster), body.workload)
    plan = body.plan
    if plan.engine is not None:
        check_engine(plan.engine, "plan.engine")
    problem = problem.with_engine(plan.engine, plan.engine_options)
    build_engine(problem.engine, dict(problem.engine_options))  # 422 on a bad option
    cost_model = _cost_model(body.cost_model)
    est = evaluate_plan(
        problem, body.plan, InstanceCosts(problem, cost_model), cluster=body.cluster
    )
    return estimate_public(est, cost_model)


def prepare_search(body: SearchCreate, constraints: SearchConstraints) -> PreparedSearch:
    """Validate and resolve a serving search (422 before anything is stored)."""
    assert isinstance(body.workload, ServingWorkload)
    model = resolve_model(body.model)
    cluster = resolve_cluster(body.cluster)
    body.workload.check_objective()  # an estimate needs none of these rules
    _problem(model, cluster, body.workload)
    _check_prices(cluster, body.workload)
    check_fixed(constraints.fixed)
    for i, name in enumerate(constraints.engines or []):
        check_engine(name, f"constraints.engines.{i}")
    pinned_engine = constraints.fixed.get("engine")
    if (
        pinned_engine is not None
        and constraints.engines
        and pinned_engine not in constraints.engines
    ):
        raise InputError(
            "constraints.fixed.engine must be one of constraints.engines when both are given",
            [
                _field_error(
                    "constraints.fixed.engine",
                    f"one of constraints.engines ({constraints.engines})",
                    pinned_engine,
                    "a pinned engine the comparison does not run",
                )
            ],
        )
    if constraints.engine_options:
        pinned = constraints.fixed.get("engine")
        searched = [pinned] if pinned else (constraints.engines or [DEFAULT_ENGINE])
        check_engine_options(constraints.engine_options, searched)
    cost_model = _cost_model(body.cost_model)
    ref = body.cost_model or CostModelRef(name=DEFAULT_SERVING_COST_MODEL)
    version = str(getattr(cost_model, "version", ""))
    problem = {
        "model": model.model_dump(mode="json"),
        "cluster": cluster.model_dump(mode="json"),
        "workload": body.workload.model_dump(mode="json"),
        "constraints": constraints.model_dump(mode="json"),
        "objective": body.workload.objective,
        "top_k": body.top_k,
        "cost_model": {"name": ref.name, "config": ref.config, "version": version},
    }
    request = body.model_dump(mode="json")
    request["constraints"] = constraints.model_dump(mode="json", exclude_defaults=False)
    return PreparedSearch(
        request=request,
        problem=problem,
        request_hash=canonical_hash(problem),
        cost_model_name=ref.name,
        cost_model_version=version,
    )


def _plan_dict(ranked: Any) -> dict[str, Any]:
    est: ServingEstimate = ranked.estimate
    return {
        "kind": "serving",
        "rank": int(ranked.rank),
        "plan": est.plan.model_dump(mode="json"),
        "feasible": bool(est.feasible),
        "violations": [v.model_dump(mode="json") for v in est.violations],
        "metrics": None if est.metrics is None else est.metrics.model_dump(mode="json"),
        "memory": serving_memory(est.details),
        "explanation": str(ranked.explanation),
        "warnings": [w.model_dump(mode="json") for w in est.warnings],
    }


def run_problem(
    problem: dict[str, Any], *, progress: ProgressFn, should_stop: Any
) -> SearchOutcome:
    """Run a stored serving search (the worker's job)."""
    constraints = SearchConstraints.model_validate(problem["constraints"])
    workload = ServingWorkload.model_validate(problem["workload"])
    serving = ServingProblem(
        model=ModelSpec.model_validate(problem["model"]),
        cluster=ResolvedCluster.model_validate(problem["cluster"]),
        workload=workload,
    )
    ref = problem.get("cost_model") or {}
    cost_model = build_serving_cost_model(
        ref.get("name", DEFAULT_SERVING_COST_MODEL), ref.get("config")
    )
    started = time.perf_counter()
    run = serving_search if serving.cluster.is_homogeneous else mixed_serving_search
    result = run(
        serving,
        cost_model,
        fixed=constraints.fixed,
        engines=constraints.engines,
        engine_options=constraints.engine_options,
        time_limit_s=constraints.time_limit_s,
        top_k=int(problem.get("top_k", 10)),
        progress=progress,
        should_stop=should_stop,
    )
    if problem.get("replan") is not None:  # POST /v1/plans/{id}/replan of a serving plan
        result = serving_replan.annotate(result, serving, cost_model, problem["replan"])
    stats = result.stats.to_dict()
    stats.setdefault("wall_time_s", time.perf_counter() - started)
    plans = [_plan_dict(p) for p in result.plans]
    # plans a better-ranked one of the same layout matches on every metric fold under it
    # (`solver.serving.diverse`; `dominated_by`: the dominator's rank in this list)
    folds = fold_serving([(p.estimate.plan, p.estimate.metrics) for p in result.plans])
    for entry, folded in zip(plans, folds, strict=True):
        keep = bool((entry["metrics"] or {}).get("replan_keep"))  # a re-plan's baseline shows
        if folded.dominated_by is not None and not keep:
            entry["dominated_by"] = plans[folded.dominated_by]["rank"]
            entry["dominated_reason"] = folded.reason
    if not plans and not should_stop():
        detail = _no_plan_detail(serving)
        if not result.stats.complete:  # stopped before any plan was found
            detail = (
                f"the search stopped ({result.stats.status}) before it found a plan; a longer "
                "constraints.time_limit_s lets it finish. " + detail
            )
        raise NoFeasiblePlan(detail, reasons=stats.get("pruned", {}), stats=stats)
    return SearchOutcome(plans=plans, stats=stats)


def _no_plan_detail(problem: ServingProblem) -> str:
    wl = problem.workload
    slo = wl.slo
    weights_gb = (
        problem.model.num_parameters() * {"int4": 0.5, "fp8": 1.0}.get(wl.precision, 2.0) / 1e9
    )
    groups = problem.cluster.groups  # every group, a mixed cluster's too
    memory_gb = sum(g.num_gpus * g.accelerator.memory_gib for g in groups) * 1024**3 / 1e9
    gpus = " + ".join(f"{g.num_gpus} × {g.accelerator.id}" for g in groups)
    return (
        f"no serving plan of the searched space serves {problem.model.name} on "
        f"{gpus} within the SLO (TTFT "
        f"{slo.ttft_ms} ms, TPOT {slo.tpot_ms} ms at P{slo.percentile:g}): the {wl.precision} "
        f"weights are {weights_gb:.1f} GB against {memory_gb:.0f} GB of device memory (see "
        "`reasons` for what pruned the candidates)"
    )


def plan_public(plan: dict[str, Any], *, plan_id: str, search_id: str) -> dict[str, Any]:
    """A stored serving plan as the API shows it."""
    body = ServingPlan.model_validate(plan["plan"]).model_dump(mode="json")
    return {
        "id": plan_id,
        "search_id": search_id,
        "rank": plan["rank"],
        "kind": "serving",
        **body,
        "metrics": plan["metrics"] or {},
        "memory": plan.get("memory") or {},
        "explanation": plan.get("explanation", ""),
        "feasible": plan.get("feasible", True),
        "violations": plan.get("violations", []),
        "warnings": plan.get("warnings") or [],
        "dominated_by": plan.get("dominated_by"),
        "dominated_reason": plan.get("dominated_reason"),
    }


def is_serving_plan(plan: dict[str, Any]) -> bool:
    """A stored plan row's `plan` is a serving plan (it has `instances`)."""
    body = plan.get("plan")
    return isinstance(body, dict) and "instances" in body


def serving_memory(details: dict[str, Any]) -> dict[str, Any]:
    """The memory view of a serving plan: per instance role, weights, KV cache and the KV
    capacity (what the plan table's `memory` column and the API's `memory` hold)."""
    keys = ("role", "gpus", "weights_gib", "kv_cache_gib", "kv_capacity_tokens", "kv_limited_batch")
    return {"instances": [{k: d[k] for k in keys if k in d} for d in details.get("instances", [])]}
