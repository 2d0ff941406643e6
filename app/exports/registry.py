"""The export registry shared by the HTTP route and the CLI:
`export_plan(plan_record, search_problem, format, options) -> ExportResult`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from app.exports import (
    deepspeed,
    kubernetes,
    megatron,
    sglang,
    slurm,
    torchtitan,
    trtllm,
    vllm,
)
from app.exports.base import ExportContext, ExportResult, UnexpressiblePlan, UnknownFormat
from app.exports.parameters import validate_options
from app.exports.serving_groups import engine_exporter
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
    "vllm": engine_exporter("vllm", vllm.export),
    "sglang": engine_exporter("sglang", sglang.export),
    "slurm": slurm.export,
    "kubernetes": kubernetes.export,
    "trtllm": engine_exporter("trtllm", trtllm.export),
}
FORMATS: tuple[str, ...] = tuple(EXPORTERS)
"""Every export format, in the order API.md lists them (then the ones added since)."""

LAUNCHES: dict[str, frozenset[str]] = {
    "megatron": frozenset({"megatron_core", "megatron_lm"}),
    "torchtitan": frozenset({"torchtitan"}),
    "deepspeed": frozenset({"deepspeed"}),
}
"""The framework profiles (`cost_models.frameworks`) each training launcher runs: a plan is
priced for one framework (its overlaps, rules and memory) and launches only with it."""
WRAPPERS = frozenset({"slurm", "kubernetes"})
"""Formats that wrap a launcher (`?framework=`)."""
SERVING_LAUNCHES: dict[str, frozenset[str]] = {
    "vllm": frozenset({"vllm", "vllm_v0"}),
    "sglang": frozenset({"sglang"}),
    "trtllm": frozenset({"tensorrt_llm"}),
}
"""The serving engine profiles (`cost_models.serving.engines`) each serving launcher runs:
a plan is priced for one engine (its scheduler and host costs) and launches only with it."""


@dataclasses.dataclass(frozen=True)
class _Runner:
    """What a plan is priced for and launches with: a training framework or a serving
    engine, with the launchers that run each."""

    kind: str
    """`framework` or `engine` (the plan field and the `constraints.fixed` key)."""
    launches: Mapping[str, frozenset[str]]
    priced: str
    """What the price depends on, in words."""


TRAINING_RUNNER = _Runner("framework", LAUNCHES, "its overlaps, combination rules and memory")
SERVING_RUNNER = _Runner("engine", SERVING_LAUNCHES, "its scheduler and per-iteration host costs")


def _check_framework(ctx: ExportContext, fmt: str) -> ExportContext:
    """Refuse (422, naming the rule) a plan priced for a training framework or serving
    engine the format does not launch; a wrapper without `?framework=` launches the plan's
    own. Plans stored before plans named their framework or engine are taken as they are."""
    if ctx.serving is not None:
        name, runner = ctx.serving.engine, SERVING_RUNNER
    elif ctx.training is not None:
        name, runner = ctx.training.framework, TRAINING_RUNNER
    else:
        return ctx
    if name is None:
        return ctx
    kind = runner.kind
    own = next((launcher for launcher, runs in runner.launches.items() if name in runs), None)
    if fmt in WRAPPERS:
        launcher = ctx.options.get("framework") or own
        if launcher is None:
            raise UnexpressiblePlan(
                fmt,
                f"{fmt}.{kind}",
                f"the plan was priced for {name}, which no export launches (launchers: "
                f"{', '.join(sorted(runner.launches))}); search with "
                f"constraints.fixed.{kind} set to one they run",
            )
        if "framework" not in ctx.options:
            ctx = dataclasses.replace(ctx, options={**ctx.options, "framework": launcher})
    else:
        launcher = fmt
    runs = runner.launches.get(launcher)
    if runs is not None and name not in runs:
        instead = f"export it with {own}" if own else f"no export launches that {kind}"
        raise UnexpressiblePlan(
            fmt,
            f"{launcher}.{kind}",
            f"the plan was priced for {name} ({runner.priced}), and {launcher} launches "
            f"{', '.join(sorted(runs))}; {instead}, or search with "
            f"constraints.fixed.{kind} = {sorted(runs)[0]!r}",
        )
    return ctx


class StoredPlanUnreadable(PlannerError):
    """A stored plan or problem that no longer validates (a 500: the database is wrong)."""

    problem_type = "stored-plan-unreadable"
    title = "Stored plan unreadable"
    status = 500


def _one_pool(cluster: ResolvedCluster, name: str) -> ResolvedCluster:
    """The pool `name` (a pool's or one of its groups' name) as a cluster of its own; the
    whole cluster when the name is unknown (the exporters then refuse by rule)."""
    for pool_name, pool in cluster.pools().items():
        if name == pool_name or any(g.name == name for g in pool.groups):
            return pool
    return cluster


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
            groups = {i.group for i in serving.instances}
            node_group = None
            if len(groups) == 1 and None not in groups:
                node_group = str(next(iter(groups))) if not cluster.is_homogeneous else None
                cluster = _one_pool(cluster, str(next(iter(groups))))
            return ExportContext(
                model=model,
                cluster=cluster,
                training=None,
                serving=serving,
                training_workload=None,
                serving_workload=ServingWorkload.model_validate(workload),
                options=dict(options or {}),
                plan_id=plan_record.get("id"),
                cost_model=problem.get("cost_model"),
                node_group=node_group,
            )
        training = TrainingPlan.model_validate(plan)
        if training.stage_tensor is not None and len(set(training.stage_tensor)) == 1:
            training = training.model_copy(update={"stage_tensor": None})  # one degree after all
        node_group = None
        if (
            training.stage_groups is not None
            and training.stage_tensor is None
            and len(set(training.stage_groups)) == 1
        ):
            # a plan on one group of a mixed cluster launches like one on that group alone
            node_group = training.stage_groups[0] if not cluster.is_homogeneous else None
            cluster = _one_pool(cluster, training.stage_groups[0])
            training = training.model_copy(update={"stage_groups": None})
        return ExportContext(
            model=model,
            cluster=cluster,
            training=training,
            serving=None,
            training_workload=TrainingWorkload.model_validate(workload),
            serving_workload=None,
            options=dict(options or {}),
            plan_id=plan_record.get("id"),
            node_group=node_group,
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
    lists the formats), `SpecError` (422, a bad query parameter: `parameters.RULES`) or
    `UnexpressiblePlan` (422, names the rule)."""
    exporter = EXPORTERS.get(fmt.lower())
    if exporter is None:
        raise UnknownFormat(
            f"unknown export format {fmt!r}; formats: {', '.join(FORMATS)}", formats=list(FORMATS)
        )
    checked = validate_options(options or {})
    ctx = _check_framework(build_context(plan_record, problem, checked), fmt.lower())
    launcher = ctx.options.get("framework", fmt.lower()) if fmt.lower() in WRAPPERS else fmt.lower()
    if (
        ctx.training is not None
        and ctx.training.stage_tensor is not None
        and launcher in TRAINING_RUNNER.launches
    ):
        raise UnexpressiblePlan(
            fmt.lower(),
            "per-stage-tensor",
            f"the plan gives its pipeline stages different tensor degrees (stage_tensor "
            f"{ctx.training.stage_tensor}); Megatron-LM, torchtitan and DeepSpeed run one "
            "tensor degree on every stage: search without constraints.per_stage_tensor for a "
            "launchable plan",
        )
    result = exporter(ctx)
    if ctx.node_group is None:
        return result
    acc = ctx.cluster.accelerator
    pinned = (
        f"the plan runs on node group {ctx.node_group} alone ({ctx.cluster.num_nodes} nodes "
        f"of {ctx.cluster.gpus_per_node} × {acc.id}): start it on that group's nodes"
    )
    return dataclasses.replace(result, notes=[*result.notes, pinned])
