"""A colocated serving plan across node groups (one `both` instance per group of a mixed
cluster, `ServingInstance.group`) as launches: each group's engine replicas on that group's
nodes, with that group's own parallelism and limits, behind one capacity-weighted router
(`app.exports.router`).

The router weights are the instances' speeds as the serving cost model prices them
(`solver.serving.evaluate.instance_speeds`, the figure `simulate_colocated_mix` routes by),
so an export routes the way its plan was priced. What is refused by rule: disaggregated
plans across groups (`serving-across-groups.disaggregated`: no KV transfer between groups is
priced or generated) and instances wider than a node of their group
(`serving-across-groups.multi-node`: a multi-node engine per group is not generated).

`script_export` is the vllm / sglang / trtllm export of such a plan: one script whose first
argument picks the group to start a replica of, or the router; Slurm and Kubernetes build
their own launches from `group_launches`.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.exports import router, trtllm
from app.exports.base import (
    ExportContext,
    ExportResult,
    UnexpressiblePlan,
    model_reference,
    require,
    shell_command,
)
from app.exports.serve_command import serve_args
from app.exports.serving_common import InstanceShape, instance_shape
from cost_models.serving.registry import build_serving_cost_model
from hardware_catalog.schema import ResolvedCluster
from solver.serving.evaluate import InstanceCosts, ServingProblem, instance_speeds
from specs.errors import PlannerError
from specs.serving import ServingInstance, ServingPlan, ServingWorkload

SCRIPT_TITLES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
ENGINE_PORTS = {"vllm": 8000, "sglang": 30000, "trtllm": 8000}
"""The port an engine replica listens on by default (each framework's own default)."""
SPEED_SOURCE = (
    "solver.serving.simulate.instance_speed: 1 / one decode step of one sequence at 1,024 "
    "tokens of context on the group's hardware, times the pipeline stages; the figure the "
    "mix simulator routes by"
)


@dataclass(frozen=True)
class GroupLaunch:
    """One group's instance: its engine replicas, where they run and their router weight."""

    index: int
    group: str
    instance: ServingInstance
    cluster: ResolvedCluster
    """The group's nodes (its pool) as a cluster of their own."""
    shape: InstanceShape
    nodes: int
    """Nodes of the group its replicas take (each replica inside one node, packed)."""
    speed: float
    """One replica's speed (`instance_speed`)."""
    weight: int
    """One replica's router weight (`router.weights` of the speeds)."""

    def describe(self) -> str:
        par = self.instance.parallelism
        layout = f"tensor {par.tensor}, pipeline {par.pipeline}" + (
            f", expert {par.expert}" if par.expert > 1 else ""
        )
        return (
            f"group {self.group}: {self.instance.count} replica(s) of {self.shape.gpus} GPU(s) "
            f"({layout}, max batch {self.instance.max_batch_size}) on {self.nodes} of its "
            f"{self.cluster.num_nodes} node(s) of {self.cluster.gpus_per_node} × "
            f"{self.cluster.accelerator.id}; speed {self.speed:.4g}/s, router weight "
            f"{self.weight} per replica"
        )


def across_groups(ctx: ExportContext) -> bool:
    """The context holds a serving plan whose instances name more than one node group."""
    return len(ctx.serving_groups) > 1


def group_launches(ctx: ExportContext, fmt: str) -> list[GroupLaunch]:
    """Each group's instance of a plan across node groups, in plan order, with its nodes,
    speed and router weight (module docstring for what is refused)."""
    plan, workload = ctx.serving_plan(fmt, across_groups=True)
    groups = ", ".join(ctx.serving_groups)
    require(
        plan.mode == "colocated",
        fmt,
        "serving-across-groups.disaggregated",
        f"the plan is disaggregated across node groups ({groups}): that needs KV-cache "
        "transfers between groups and a proxy pairing prefill and decode replicas, neither "
        "priced nor generated here; serve a disaggregated plan from one group",
    )
    problem = ServingProblem(ctx.model, ctx.cluster, workload).with_engine(
        plan.engine, plan.engine_options
    )
    try:
        pools = [problem.pool(inst.group) for inst in plan.instances]
    except PlannerError as exc:
        raise UnexpressiblePlan(fmt, "serving-across-groups.group", exc.detail) from exc
    shapes = []
    for inst, pool in zip(plan.instances, pools, strict=True):
        shape = instance_shape(fmt, pool, inst)
        require(
            shape.nodes == 1,
            fmt,
            "serving-across-groups.multi-node",
            f"group {inst.group}'s instance of {shape.gpus} GPUs spans {shape.nodes} nodes of "
            f"{pool.gpus_per_node} GPUs; across node groups only instances inside one node "
            "are launched (a multi-node engine on one group's nodes, Ray or LeaderWorkerSet, "
            "is not generated here)",
        )
        nodes = math.ceil(inst.count / (pool.gpus_per_node // shape.gpus))
        require(
            nodes <= pool.num_nodes,
            fmt,
            "world-size",
            f"group {inst.group}'s {inst.count} replica(s) of {shape.gpus} GPU(s) need "
            f"{nodes} nodes; the group has {pool.num_nodes}",
        )
        shapes.append((shape, nodes))
    ref = ctx.cost_model or {}
    try:
        model = build_serving_cost_model(ref.get("name", "analytical"), ref.get("config"))
        speeds = instance_speeds(problem, plan, InstanceCosts(problem, model))
    except PlannerError as exc:
        raise UnexpressiblePlan(
            fmt,
            "serving-across-groups.speed",
            f"the router weights are the instances' priced speeds, and pricing them "
            f"failed: {exc.detail}",
        ) from exc
    return [
        GroupLaunch(i, str(inst.group), inst, pool, shape, nodes, speed, weight)
        for i, (inst, pool, (shape, nodes), speed, weight) in enumerate(
            zip(plan.instances, pools, shapes, speeds, router.weights(speeds), strict=True)
        )
    ]


def weight_notes(launches: Sequence[GroupLaunch]) -> list[str]:
    """What each group runs, and where the router weights come from."""
    return [
        *(launch.describe() for launch in launches),
        f"router: nginx least_conn, weight = speed scaled so the fastest replica weighs "
        f"{router.WEIGHT_SCALE} (speed from {SPEED_SOURCE})",
    ]


def set_port(args: Sequence[str], value: str) -> list[str]:
    """`args` with the value of its last `--port` replaced by `value` (a shell variable)."""
    out = list(args)
    at = len(out) - 1 - out[::-1].index("--port")
    out[at + 1] = value
    return out


def group_commands(
    ctx: ExportContext,
    fmt: str,
    framework: str,
    launches: Sequence[GroupLaunch],
    env: dict[str, str],
) -> dict[str, list[str]]:
    """Each group's engine command under `framework`, checked by its rules, listening on
    `${PORT}`; `env` receives the variables they need documented."""
    plan, workload = ctx.serving_plan(fmt, across_groups=True)
    model_ref = model_reference(ctx.model, env)
    return {
        launch.group: set_port(
            serve_args(
                framework,
                ctx.model,
                model_ref,
                launch.instance,
                workload,
                launch.cluster,
                0,
                plan.engine,
                plan.engine_options,
            ),
            "${PORT}",
        )
        for launch in launches
    }


def setup_lines(
    framework: str, plan: ServingPlan, inst: ServingInstance, workload: ServingWorkload
) -> list[str]:
    """Shell lines a replica's script runs before its engine: vLLM's V0 switch, or
    TensorRT-LLM's options file (`trtllm.options_yaml`) for this group's instance."""
    if framework == "vllm" and plan.engine == "vllm_v0":
        return ["export VLLM_USE_V1=0  # priced as vLLM's V0 engine"]
    if framework == "trtllm":
        options = trtllm.options_yaml(inst, workload, plan.engine_options)
        return [f"cat > {trtllm.OPTIONS_FILE} <<'OPTIONS'", options.rstrip("\n"), "OPTIONS"]
    return []


def script_export(ctx: ExportContext, fmt: str) -> ExportResult:
    """The vllm / sglang / trtllm export of a plan across groups: `serve.sh <group>` starts
    one replica of that group's instance on the node it runs on (port `$PORT`), `serve.sh
    router` writes the router's configuration with every replica's address (`G<i>_R<r>`,
    host:port of replica r of the i-th group) and starts it."""
    launches = group_launches(ctx, fmt)
    plan, workload = ctx.serving_plan(fmt, across_groups=True)
    env: dict[str, str] = {}
    commands = group_commands(ctx, fmt, fmt, launches, env)
    names = "|".join(launch.group for launch in launches)
    backends = [
        router.Backend(
            f"${{G{launch.index}_R{r}:?host:port of replica {r} of group {launch.index}}}",
            launch.weight,
            f"group {launch.group}, replica {r}",
        )
        for launch in launches
        for r in range(launch.instance.count)
    ]
    lines = [
        "#!/usr/bin/env bash",
        f"# {SCRIPT_TITLES[fmt]} serving of meshplan plan {ctx.plan_id or ''} (colocated) on "
        f"{len(launches)} node groups behind one router.",
        f"# usage: $0 {names}  start one replica of the group's engine here (port $PORT)",
        f"#        $0 router  start the router on port {router.ROUTER_PORT}; G<i>_R<r> = "
        "host:port of replica r of group i",
        *(f"#   G{launch.index}: {launch.describe()}" for launch in launches),
        "set -euo pipefail",
        f"PORT=${{PORT:-{ENGINE_PORTS[fmt]}}}",
        'case "${1:-}" in',
    ]
    for launch in launches:
        lines += [
            f"  {shlex.quote(launch.group)})",
            *setup_lines(fmt, plan, launch.instance, workload),  # here-documents: unindented
            "    exec " + shell_command(commands[launch.group], indent="      "),
            "    ;;",
        ]
    lines += [
        "  router)",
        f"    mkdir -p {router.ROUTER_DIR}",
        f"    cat > {router.ROUTER_DIR}/nginx.conf <<MESHPLAN_EOF",
        router.nginx_conf(backends).rstrip("\n"),
        "MESHPLAN_EOF",
        "    exec " + router.nginx_shell(),
        "    ;;",
        "  *)",
        f'    echo "usage: $0 {names}|router" >&2',
        "    exit 2",
        "    ;;",
        "esac",
    ]
    first = launches[0].group
    return ExportResult(
        format=fmt,
        filename=f"serve_{fmt}.sh",
        content="\n".join(lines) + "\n",
        args=commands[first],
        env=env,
        groups=commands,
        notes=[
            "each group's args start one replica of its instance; run `count` of them on "
            "the group's nodes, then the router with their addresses",
            *weight_notes(launches),
        ],
    )


def engine_exporter(
    fmt: str, single: Callable[[ExportContext], ExportResult]
) -> Callable[[ExportContext], ExportResult]:
    """The `fmt` exporter: `single` for a plan on one group, `script_export` across groups."""

    def export(ctx: ExportContext) -> ExportResult:
        return script_export(ctx, fmt) if across_groups(ctx) else single(ctx)

    return export
