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
the step, SGLang with `--nnodes/--node-rank/--dist-init-addr`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from app.exports import deepspeed, megatron, torchtitan, trtllm
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
        lines.append(f"#SBATCH --time={ctx.options['time']}")
    lines += [
        f"# meshplan plan {ctx.plan_id or ''}: {what}",
        "set -euo pipefail",
        "",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export MASTER_ADDR",
        "export MASTER_PORT=${MASTER_PORT:-29500}",
    ]
    return lines


def _heredoc(path: str, text: str) -> list[str]:
    require(HEREDOC not in text, FORMAT, "slurm.heredoc", "config text holds the heredoc end")
    return [f"cat > {path} <<'{HEREDOC}'", text.rstrip("\n"), HEREDOC]


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
    lines = _header(
        ctx,
        layout.blocks[0].nodes,
        layout.gpus_per_node,
        f"megatron training on {world} GPUs across {len(layout.blocks)} node groups",
    )
    at = lines.index("set -euo pipefail")
    component = lines[1 : lines.index("#SBATCH --output=%x-%j.out") + 1]

    def where(i: int) -> str:
        block = layout.blocks[i]
        return (
            f"# component {i}: {block_notes(layout)[i]}; it must get {block.accelerator} "
            "nodes: add the --partition or --constraint that selects them"
        )

    het: list[str] = [where(0)]
    for i, block in enumerate(layout.blocks[1:], start=1):
        het += [
            "#SBATCH hetjob",
            where(i),
            *(
                f"#SBATCH --nodes={block.nodes}" if line.startswith("#SBATCH --nodes=") else line
                for line in component
                if not line.startswith(("#SBATCH --job-name", "#SBATCH --output"))
            ),
        ]
    lines[at - 1 : at - 1] = het
    lines = [
        line.replace("$SLURM_JOB_NODELIST", "$SLURM_JOB_NODELIST_HET_GROUP_0") for line in lines
    ]
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


def _place(ctx: ExportContext) -> tuple[list[_Step], int]:
    """Replicas → node indices: multi-node instances take whole nodes, smaller ones are
    packed first-fit onto nodes with free GPUs."""
    plan, _ = ctx.serving_plan(FORMAT)
    gpn = ctx.cluster.gpus_per_node
    free: list[int] = []
    steps: list[_Step] = []
    instances = sorted(plan.instances, key=lambda i: ROLE_ORDER.index(i.role))
    for n, inst in enumerate(instances):
        shape = instance_shape(FORMAT, ctx.cluster, inst)
        for r in range(inst.count):
            port = 8000 + 100 * n + r
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
        len(free) <= ctx.cluster.num_nodes,
        FORMAT,
        "world-size",
        f"the plan's instances need {len(free)} nodes; the cluster has {ctx.cluster.num_nodes}",
    )
    return steps, len(free)


def _serving(ctx: ExportContext, framework: str) -> ExportResult:
    plan, workload = ctx.serving_plan(FORMAT)
    refuse_stages_across_groups(
        FORMAT,
        plan,
        "a Slurm job of one engine instance over heterogeneous node groups (a Ray cluster across hetjob components) is not generated; export it as vllm and start its Ray cluster on both groups",
    )
    if framework == "trtllm":
        trtllm.check_plan(FORMAT, plan, ctx.cluster)
    steps, num_nodes = _place(ctx)
    gpn = ctx.cluster.gpus_per_node
    env: dict[str, str] = {}
    model_ref = model_reference(ctx.model, env)
    lines = _header(ctx, num_nodes, gpn, f"{framework} serving ({plan.mode})")
    lines += ['mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")']
    role_args: dict[str, list[str]] = {}
    for inst in sorted(plan.instances, key=lambda i: ROLE_ORDER.index(i.role)):
        shape = instance_shape(FORMAT, ctx.cluster, inst)
        args = serve_args(
            framework,
            ctx.model,
            model_ref,
            inst,
            workload,
            ctx.cluster,
            0,
            plan.engine,
            plan.engine_options,
        )
        port_at = len(args) - 1 - args[::-1].index("--port")
        args[port_at + 1] = "${PORT}"
        role_args[inst.role] = args
        script = ["#!/usr/bin/env bash", "set -euo pipefail"]
        if framework == "vllm" and plan.engine == "vllm_v0":
            script.append("export VLLM_USE_V1=0  # priced as vLLM's V0 engine")
        if framework == "trtllm":
            options = trtllm.options_yaml(inst, workload, plan.engine_options)
            script += [f"cat > {trtllm.OPTIONS_FILE} <<'OPTIONS'", options.rstrip("\n"), "OPTIONS"]
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
        lines += ["", *_heredoc(f"serve_{inst.role}.sh", "\n".join(script))]
    lines.append("")
    for step in steps:
        nodelist = ",".join(f"${{NODES[{i}]}}" for i in step.nodes)
        k = len(step.nodes)
        srun = (
            f'srun --nodes={k} --ntasks={k} --ntasks-per-node=1 --nodelist="{nodelist}" '
            f"--gpus-per-task={step.gpus} --exact --export=ALL,PORT={step.port} "
            f"bash serve_{step.role}.sh &"
        )
        lines.append(f"# {step.role} replica {step.replica} on port {step.port}")
        lines.append(srun)
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
