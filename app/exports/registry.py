"""The export registry shared by the HTTP route and the CLI:
`export_plan(plan_record, search_problem, format, options) -> ExportResult`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from app.exports import deepspeed, kubernetes, megatron, sglang, slurm, torchtitan, vllm
from app.exports.base import ExportContext, ExportResult, UnexpressiblePlan, UnknownFormat
from hardware_catalog.schema import ResolvedCluster
from specs.errors import PlannerError
from specs.model import ModelSpec
from specs.plan import TrainingPlan
from specs.serving import ServingPlan, ServingWorkload
from specs.workload import TrainingWorkload

Exporter = Callable[[ExportContext], ExportResult]

EXPORTERS: dict[str, Exporter] = {
    "megatron": megatron.export,
    "torchtitan": torchtitan.export,
    "deepspeed": deepspeed.export,
    "vllm": vllm.export,
    "sglang": sglang.export,
    "slurm": slurm.export,
    "kubernetes": kubernetes.export,
}
FORMATS: tuple[str, ...] = tuple(EXPORTERS)
"""Every export format, in the order API.md lists them."""

LAUNCHES: dict[str, frozenset[str]] = {
    "megatron": frozenset({"megatron_core", "megatron_lm"}),
    "torchtitan": frozenset({"torchtitan"}),
    "deepspeed": frozenset({"deepspeed"}),
}
"""The framework profiles (`cost_models.frameworks`) each training launcher runs: a plan is
priced for one framework (its overlaps, rules and memory) and launches only with it."""
WRAPPERS = frozenset({"slurm", "kubernetes"})
"""Formats that wrap a launcher (`?framework=`)."""


def _launcher_for(framework: str) -> str | None:
    return next((name for name, runs in LAUNCHES.items() if framework in runs), None)


def _check_framework(ctx: ExportContext, fmt: str) -> ExportContext:
    """Refuse (422, naming the rule) a training plan made for a framework the format does
    not launch; a wrapper without `?framework=` launches the plan's own framework. Plans
    stored before plans named their framework are taken as they are."""
    plan = ctx.training
    if plan is None or plan.framework is None:
        return ctx
    framework = plan.framework
    if fmt in WRAPPERS:
        launcher = ctx.options.get("framework") or _launcher_for(framework)
        if launcher is None:
            raise UnexpressiblePlan(
                fmt,
                f"{fmt}.framework",
                f"the plan was priced for {framework}, which no export launches "
                f"(launchers: {', '.join(sorted(LAUNCHES))}); search with "
                "constraints.fixed.framework set to one of their frameworks",
            )
        if "framework" not in ctx.options:
            ctx = dataclasses.replace(ctx, options={**ctx.options, "framework": launcher})
    else:
        launcher = fmt
    runs = LAUNCHES.get(launcher)
    if runs is not None and framework not in runs:
        own = _launcher_for(framework)
        instead = f"export it with {own}" if own else "no export launches that framework"
        raise UnexpressiblePlan(
            fmt,
            f"{launcher}.framework",
            f"the plan was priced for {framework} (its overlaps, combination rules and "
            f"memory), and {launcher} launches {', '.join(sorted(runs))}; {instead}, or "
            f"search with constraints.fixed.framework = {sorted(runs)[0]!r}",
        )
    return ctx


class StoredPlanUnreadable(PlannerError):
    """A stored plan or problem that no longer validates (a 500: the database is wrong)."""

    problem_type = "stored-plan-unreadable"
    title = "Stored plan unreadable"
    status = 500


def build_context(
    plan_record: Mapping[str, Any],
    problem: Mapping[str, Any],
    options: Mapping[str, str] | None = None,
) -> ExportContext:
    """Validate a stored plan row (`{"id"?, "plan": {...}}` or the plan dict itself) and its
    search's resolved problem into an `ExportContext`."""
    plan = plan_record.get("plan", plan_record)
    try:
        model = ModelSpec.model_validate(problem["model"])
        cluster = ResolvedCluster.model_validate(problem["cluster"])
        workload = problem["workload"]
        if isinstance(plan, Mapping) and "instances" in plan:
            serving = ServingPlan.model_validate(plan)
            return ExportContext(
                model=model,
                cluster=cluster,
                training=None,
                serving=serving,
                training_workload=None,
                serving_workload=ServingWorkload.model_validate(workload),
                options=dict(options or {}),
                plan_id=plan_record.get("id"),
            )
        training = TrainingPlan.model_validate(plan)
        return ExportContext(
            model=model,
            cluster=cluster,
            training=training,
            serving=None,
            training_workload=TrainingWorkload.model_validate(workload),
            serving_workload=None,
            options=dict(options or {}),
            plan_id=plan_record.get("id"),
        )
    except (KeyError, ValidationError) as exc:
        raise StoredPlanUnreadable(
            f"the stored plan or its search problem does not validate: {exc}"
        ) from exc


def export_plan(
    plan_record: Mapping[str, Any],
    problem: Mapping[str, Any],
    fmt: str,
    options: Mapping[str, str] | None = None,
) -> ExportResult:
    """Render a stored plan for `fmt` (one of `FORMATS`). Raises `UnknownFormat` (422,
    lists the formats) or `UnexpressiblePlan` (422, names the rule)."""
    exporter = EXPORTERS.get(fmt.lower())
    if exporter is None:
        raise UnknownFormat(
            f"unknown export format {fmt!r}; formats: {', '.join(FORMATS)}", formats=list(FORMATS)
        )
    ctx = _check_framework(build_context(plan_record, problem, options), fmt.lower())
    return exporter(ctx)
