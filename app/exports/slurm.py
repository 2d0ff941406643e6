"""Slurm export: an sbatch script that launches the plan.

Training plans: one task per node (`--ntasks-per-node=1`, `--gpus-per-node`), the rendezvous
host is the first node of the allocation (`scontrol show hostnames`), and
`srun torchrun --nnodes N --nproc-per-node G --rdzv-backend c10d --rdzv-endpoint
$MASTER_ADDR:$MASTER_PORT` starts the framework command on every node: Megatron-LM by
default, torchtitan or DeepSpeed with `?framework=` (their config files are written by the
script). The framework's own export runs first, so its rule checks apply.

Serving plans: every replica of every instance is its own job step (vLLM by default,
`?framework=sglang`): single-node instances are packed onto nodes with `--gpus-per-task`
and `--exact`, multi-node instances get whole nodes (vLLM through a Ray cluster started in
the step, SGLang with `--nnodes/--node-rank/--dist-init-addr`). A plan across node groups
is a heterogeneous job: one component per group, its replicas packed onto that component's
nodes, and the weighted nginx router (`app.exports.router`) in the batch step.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from app.exports import deepspeed, megatron, router, torchtitan, trtllm
from app.exports.base import (
    ExportContext,
    ExportResult,
    UnexpressiblePlan,
    block_notes,
    model_reference,
    node_layout,
    plan_node_layout,
    require,
    shell_command,
    torchrun_args,
)
from app.exports.serve_command import serve_args
from app.exports.serving_common import ROLE_ORDER, instance_shape, refuse_stages_across_groups
from app.exports.serving_groups import (
    across_groups,
    group_launches,
    set_port,
    setup_lines,
    weight_notes,
)
from hardware_catalog.schema import ResolvedCluster
from specs.serving import ServingInstance

FORMAT = "slurm"
TRAINING_FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")
SERVING_FRAMEWORKS = ("vllm", "sglang", "trtllm")
HEREDOC = "MESHPLAN_EOF"


def _header(ctx: ExportContext, nodes: int, gpus_per_node: int, what: str) -> list[str]:
    cpus = ctx.options.get("cpus_per_task", str(8 * gpus_per_node))
    require(
        cpus.isdigit() and int(cpus) > 0,
        FORMAT,
        "slurm.cpus-per-task",
        f"cpus_per_task must be a positive integer (got {cpus!r})",
    )
    name = "meshplan-" + (ctx.plan_id or "plan")[:8]
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus_per_node}",
        f"#SBATCH --cpus-per-task={cpus}",
        "#SBATCH --exclusive",
        "#SBATCH --output=%x-%j.out",
    ]
    if "time" in ctx.options:
        # validated as a Slurm duration (app.exports.parameters); quoted all the same
        lines.append(f"#SBATCH --time={shlex.quote(ctx.options['time'])}")
    if ctx.node_group is not None:
        lines.append(
            f"# node group {ctx.node_group} of a mixed cluster: add the --partition or "
            "--constraint that selects its nodes"
        )
    lines += [
        f"# meshplan plan {ctx.plan_id or ''}: {what}",
        "set -euo pipefail",
        "",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export MASTER_ADDR",
        "export MASTER_PORT=${MASTER_PORT:-29500}",
    ]
    return lines


@dataclass(frozen=True)
class _Component:
    """One component of a heterogeneous job: its nodes, GPUs per node, and what runs there."""

    nodes: int
    gpus_per_node: int
    what: str


def _het_header(ctx: ExportContext, components: list[_Component], what: str) -> list[str]:
    """The header of a heterogeneous job: one `#SBATCH` block per component (`#SBATCH
    hetjob` between them, each saying what it runs and which nodes it needs), the rest as
    `_header`'s with the first component's first node as MASTER_ADDR."""
    lines = _header(ctx, components[0].nodes, components[0].gpus_per_node, what)
    at = lines.index("set -euo pipefail")

    def where(i: int) -> str:
        return (
            f"# component {i}: {components[i].what}: add the --partition or --constraint "
            "that selects them"
        )

    het: list[str] = [where(0)]
    for i, part in enumerate(components[1:], start=1):
        sbatch = _header(ctx, part.nodes, part.gpus_per_node, what)
        het += [
            "#SBATCH hetjob",
            where(i),
            *(
                line
                for line in sbatch[1 : sbatch.index("#SBATCH --output=%x-%j.out")]
                if not line.startswith("#SBATCH --job-name")
            ),
        ]
    lines[at - 1 : at - 1] = het
    return [
        line.replace("$SLURM_JOB_NODELIST", "$SLURM_JOB_NODELIST_HET_GROUP_0") for line in lines
    ]


def _heredoc(path: str, text: str, *, expand: bool = False) -> list[str]:
    """Shell lines writing `text` to `path`; `expand`: the shell expands `$` references in
    it (node names known at run time), else it is written as it is."""
    require(HEREDOC not in text, FORMAT, "slurm.heredoc", "config text holds the heredoc end")
    end = HEREDOC if expand else f"'{HEREDOC}'"
    return [f"cat > {path} <<{end}", text.rstrip("\n"), HEREDOC]


def _training(ctx: ExportContext, framework: str) -> ExportResult:
    plan, _ = ctx.training_plan(FORMAT)
    world = plan.parallelism.world_size
    if (plan.stage_groups is not None or plan.data_shares is not None) and (
        framework == "megatron"
    ):
        return _training_across_groups(ctx)
    layout = node_layout(FORMAT, ctx.cluster, world)
    torchrun = torchrun_args(layout, "${SLURM_JOB_ID}")
    lines = _header(
        ctx, layout.num_nodes, layout.gpus_per_node, f"{framework} training on {world} GPUs"
    )
    if framework == "megatron":
        inner = megatron.export(ctx)
        command = [*torchrun, megatron.ENTRYPOINT, *inner.args]
    elif framework == "torchtitan":
        inner = torchtitan.export(ctx)
        lines += _heredoc(inner.filename, inner.content)
        command = [*torchrun, "-m", "torchtitan.train", "--job.config_file", inner.filename]
    else:
        inner = deepspeed.export(ctx)
        lines += _heredoc(inner.filename, inner.content)
        command = [
            *torchrun,
            "${TRAIN_SCRIPT}",
            "--deepspeed",
            "--deepspeed_config",
            inner.filename,
        ]
    env = dict(inner.env)
    lines += [f"export {k}=${{{k}:-{v}}}" for k, v in env.items()]
    srun = ["srun", "--nodes", str(layout.num_nodes), "--ntasks-per-node", "1"]
    lines += ["", shell_command([*srun, *command])]
    return ExportResult(
        format=FORMAT,
        filename="meshplan.sbatch",
        content="\n".join(lines) + "\n",
        args=[*srun, *command],
        env={**env, "MASTER_PORT": "29500"},
        notes=[f"framework: {framework}", *inner.notes],
    )


def _training_across_groups(ctx: ExportContext) -> ExportResult:
    """A Megatron-LM plan across node groups as a heterogeneous Slurm job: one component
    per group, in pipeline order (`#SBATCH hetjob` between them), one step over all of them
    whose global task id is the node rank (`torchrun --node-rank $SLURM_PROCID`, static
    rendezvous at the first node)."""
    plan, _ = ctx.training_plan(FORMAT)
    world = plan.parallelism.world_size
    layout = plan_node_layout(FORMAT, ctx.cluster, plan)
    inner = megatron.export(ctx)
    lines = _het_header(
        ctx,
        [
            _Component(
                block.nodes,
                layout.gpus_per_node,
                f"{block_notes(layout)[i]}; it must get {block.accelerator} nodes",
            )
            for i, block in enumerate(layout.blocks)
        ],
        f"megatron training on {world} GPUs across {len(layout.blocks)} node groups",
    )
    env = dict(inner.env)
    lines += [f"export {k}=${{{k}:-{v}}}" for k, v in env.items()]
    torchrun = torchrun_args(layout, None, node_rank="$SLURM_PROCID")
    task = "exec " + shell_command([*torchrun, megatron.ENTRYPOINT, *inner.args])
    groups = ",".join(str(i) for i in range(len(layout.blocks)))
    srun = ["srun", f"--het-group={groups}", "--ntasks-per-node", "1"]
    lines += ["", " ".join(srun) + " bash -c " + shlex.quote(task)]
    return ExportResult(
        format=FORMAT,
        filename="meshplan.sbatch",
        content="\n".join(lines) + "\n",
        args=[*srun, "bash", "-c", task],
        env={**env, "MASTER_PORT": "29500"},
        notes=[
            "framework: megatron",
            "heterogeneous job: one component per node group, each on its group's nodes",
            *inner.notes,
        ],
    )


@dataclass
class _Step:
    role: str
    replica: int
    nodes: list[int]
    gpus: int
    port: int


def _place(
    instances: list[ServingInstance], cluster: ResolvedCluster, port_base: int = 8000
) -> tuple[list[_Step], int]:
    """Replicas → node indices of `cluster`: multi-node instances take whole nodes, smaller
    ones are packed first-fit onto nodes with free GPUs; replica r of the n-th instance
    listens on `port_base` + 100·n + r."""
    gpn = cluster.gpus_per_node
    free: list[int] = []
    steps: list[_Step] = []
    for n, inst in enumerate(instances):
        shape = instance_shape(FORMAT, cluster, inst)
        for r in range(inst.count):
            port = port_base + 100 * n + r
            if shape.nodes > 1:
                first = len(free)
                free += [0] * shape.nodes
                steps.append(
                    _Step(
                        inst.role,
                        r,
                        list(range(first, first + shape.nodes)),
                        shape.gpus_per_node,
                        port,
                    )
                )
                continue
            for idx, room in enumerate(free):
                if room >= shape.gpus:
                    free[idx] -= shape.gpus
                    steps.append(_Step(inst.role, r, [idx], shape.gpus, port))
                    break
            else:
                free.append(gpn - shape.gpus)
                steps.append(_Step(inst.role, r, [len(free) - 1], shape.gpus, port))
    require(
        len(free) <= cluster.num_nodes,
        FORMAT,
        "world-size",
        f"the plan's instances need {len(free)} nodes; the cluster has {cluster.num_nodes}",
    )
    return steps, len(free)


def _serve_script(
    ctx: ExportContext,
    framework: str,
    inst: ServingInstance,
    cluster: ResolvedCluster,
    model_ref: str,
) -> tuple[list[str], list[str]]:
    """(the instance's serve command listening on `$PORT`, the script one of its job steps
    runs: the engine's setup, a Ray cluster or node rank for a multi-node instance, then the
    command)."""
    plan, workload = ctx.serving_plan(FORMAT, across_groups=True)
    shape = instance_shape(FORMAT, cluster, inst)
    args = serve_args(
        framework,
        ctx.model,
        model_ref,
        inst,
        workload,
        cluster,
        0,
        plan.engine,
        plan.engine_options,
    )
    args = set_port(args, "${PORT}")
    script = [
        "#!/usr/bin/env bash",
        "set -euo pipefail",
        *setup_lines(framework, plan, inst, workload),
    ]
    if shape.nodes > 1 and framework == "vllm":
        script += [
            'LEADER=$(scontrol show hostnames "$SLURM_STEP_NODELIST" | head -n 1)',
            'if [ "$SLURM_PROCID" -ne 0 ]; then',
            '  exec ray start --address="$LEADER:6379" --block',
            "fi",
            "ray start --head --port=6379",
            "sleep 20  # let the other nodes join the Ray cluster",
        ]
    elif shape.nodes > 1:
        script += [
            "export NODE_RANK=$SLURM_PROCID",
            'LEADER_ADDR=$(scontrol show hostnames "$SLURM_STEP_NODELIST" | head -n 1)',
            "export LEADER_ADDR",
        ]
    script.append("exec " + shell_command(args))
    return args, script


def _srun(step: _Step, nodes: str, script: str, het_group: int | None = None) -> str:
    """The job step of one replica (in the background), on the nodes of array `nodes`."""
    nodelist = ",".join(f"${{{nodes}[{i}]}}" for i in step.nodes)
    k = len(step.nodes)
    het = f"--het-group={het_group} " if het_group is not None else ""
    return (
        f'srun {het}--nodes={k} --ntasks={k} --ntasks-per-node=1 --nodelist="{nodelist}" '
        f"--gpus-per-task={step.gpus} --exact --export=ALL,PORT={step.port} "
        f"bash {script} &"
    )


def _serving(ctx: ExportContext, framework: str) -> ExportResult:
    if across_groups(ctx):
        return _serving_across_groups(ctx, framework)
    plan, workload = ctx.serving_plan(FORMAT)
    refuse_stages_across_groups(
        FORMAT,
        plan,
        "a Slurm job of one engine instance over heterogeneous node groups (a Ray cluster across hetjob components) is not generated; export it as vllm and start its Ray cluster on both groups",
    )
    if framework == "trtllm":
        trtllm.check_plan(FORMAT, plan, ctx.cluster)
    instances = sorted(plan.instances, key=lambda i: ROLE_ORDER.index(i.role))
    steps, num_nodes = _place(instances, ctx.cluster)
    gpn = ctx.cluster.gpus_per_node
    env: dict[str, str] = {}
    model_ref = model_reference(ctx.model, env)
    lines = _header(ctx, num_nodes, gpn, f"{framework} serving ({plan.mode})")
    lines += ['mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")']
    role_args: dict[str, list[str]] = {}
    for inst in instances:
        args, script = _serve_script(ctx, framework, inst, ctx.cluster, model_ref)
        role_args[inst.role] = args
        lines += ["", *_heredoc(f"serve_{inst.role}.sh", "\n".join(script))]
    lines.append("")
    for step in steps:
        lines.append(f"# {step.role} replica {step.replica} on port {step.port}")
        lines.append(_srun(step, "NODES", f"serve_{step.role}.sh"))
    lines.append("wait")
    first_role = next(iter(role_args))
    return ExportResult(
        format=FORMAT,
        filename="meshplan.sbatch",
        content="\n".join(lines) + "\n",
        args=role_args[first_role],
        env={**env, "MASTER_PORT": "29500"},
        roles=role_args if plan.mode == "disaggregated" else None,
        notes=[f"framework: {framework}", f"{len(steps)} engine replica(s) on {num_nodes} node(s)"],
    )


def _serving_across_groups(ctx: ExportContext, framework: str) -> ExportResult:
    """A serving plan across node groups as a heterogeneous job: one component per group
    (its nodes, its GPUs per node), each group's replicas job steps on its component's
    nodes (`--het-group`), and the router (nginx, `app.exports.router`) in the batch step on
    the first node of component 0, its configuration written once the node names are known."""
    launches = group_launches(ctx, FORMAT)
    env: dict[str, str] = {}
    model_ref = model_reference(ctx.model, env)
    placed = [_place([launch.instance], launch.cluster) for launch in launches]
    lines = _het_header(
        ctx,
        [
            _Component(
                nodes,
                launch.cluster.gpus_per_node,
                f"{launch.describe()}; it must get {launch.cluster.accelerator.id} nodes",
            )
            for launch, (_, nodes) in zip(launches, placed, strict=True)
        ],
        f"{framework} serving (colocated) across {len(launches)} node groups",
    )
    lines += [
        f'mapfile -t NODES_{i} < <(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_{i}")'
        for i in range(len(launches))
    ]
    group_args: dict[str, list[str]] = {}
    for launch in launches:
        args, script = _serve_script(ctx, framework, launch.instance, launch.cluster, model_ref)
        group_args[launch.group] = args
        lines += ["", *_heredoc(f"serve_g{launch.index}.sh", "\n".join(script))]
    backends = [
        router.Backend(
            f"${{NODES_{launch.index}[{step.nodes[0]}]}}:{step.port}",
            launch.weight,
            f"group {launch.group}, replica {step.replica}",
        )
        for launch, (steps, _) in zip(launches, placed, strict=True)
        for step in steps
    ]
    lines += [
        "",
        f"# the router, on this node (the first of component 0), port {router.ROUTER_PORT}",
        f"mkdir -p {router.ROUTER_DIR}",
        *_heredoc(f"{router.ROUTER_DIR}/nginx.conf", router.nginx_conf(backends), expand=True),
        router.nginx_shell() + " &",
        "",
    ]
    for launch, (steps, _) in zip(launches, placed, strict=True):
        for step in steps:
            lines.append(f"# group {launch.group} replica {step.replica} on port {step.port}")
            lines.append(
                _srun(step, f"NODES_{launch.index}", f"serve_g{launch.index}.sh", launch.index)
            )
    lines.append("wait")
    replicas = sum(len(steps) for steps, _ in placed)
    return ExportResult(
        format=FORMAT,
        filename="meshplan.sbatch",
        content="\n".join(lines) + "\n",
        args=group_args[launches[0].group],
        env={**env, "MASTER_PORT": "29500"},
        groups=group_args,
        notes=[
            f"framework: {framework}",
            "heterogeneous job: one component per node group, each on its group's nodes",
            f"{replicas} engine replica(s); clients reach the router on the first node of "
            f"component 0, port {router.ROUTER_PORT}",
            *weight_notes(launches),
        ],
    )


def export(ctx: ExportContext) -> ExportResult:
    if ctx.is_training:
        framework = ctx.options.get("framework", "megatron")
        if framework not in TRAINING_FRAMEWORKS:
            raise UnexpressiblePlan(
                FORMAT,
                "slurm.framework",
                f"framework must be one of {', '.join(TRAINING_FRAMEWORKS)} "
                f"for a training plan (got {framework!r})",
            )
        return _training(ctx, framework)
    framework = ctx.options.get("framework", "vllm")
    if framework not in SERVING_FRAMEWORKS:
        raise UnexpressiblePlan(
            FORMAT,
            "slurm.framework",
            f"framework must be one of {', '.join(SERVING_FRAMEWORKS)} for "
            f"a serving plan (got {framework!r})",
        )
    return _serving(ctx, framework)
