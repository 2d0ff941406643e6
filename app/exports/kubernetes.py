"""Kubernetes export: YAML manifests that launch the plan.

Training plans: a Kubeflow training-operator `PyTorchJob` (kubeflow.org/v1; one Master and
N − 1 Worker pods, each with the node's GPUs as `nvidia.com/gpu` limits; the operator sets
MASTER_ADDR, MASTER_PORT and RANK in every pod) or, with `?kind=jobset`, a JobSet
(jobset.x-k8s.io/v1alpha2; one indexed Job of N pods, the node rank from the
`batch.kubernetes.io/job-completion-index` annotation, the rendezvous host the first pod's
stable DNS name `<jobset>-<job>-0-0.<jobset>`). The framework is Megatron-LM by default, or
torchtitan / DeepSpeed with `?framework=` (their config file in a ConfigMap).

Serving plans: an instance wider than a node becomes a LeaderWorkerSet
(leaderworkerset.x-k8s.io/v1; `size` = nodes per instance, `replicas` = instance count; vLLM
runs its workers in a Ray cluster the leader heads, SGLang passes `LWS_WORKER_INDEX` as node
rank and `LWS_LEADER_ADDRESS` as the init address); a single-node instance becomes a
Deployment with a Service. Disaggregated plans have one workload per role. The launcher is
the plan's engine's (vLLM by default), or `?framework=`; TensorRT-LLM's options file comes
in a ConfigMap mounted at /config (single-node colocated instances, as `trtllm` exports). A
plan across node groups has a Deployment per group on that group's labelled nodes and the
weighted nginx router (`app.exports.router`) in front. `?image=` overrides the container
image, `?router_image=` the router's. Every document is plain YAML
(`yaml.safe_load_all` reads it back).
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from app.exports import deepspeed, megatron, router, torchtitan, trtllm
from app.exports.base import (
    ExportContext,
    ExportResult,
    UnexpressiblePlan,
    gpu_resource_name,
    model_reference,
    node_layout,
    plan_node_layout,
    require,
    static_torchrun_args,
)
from app.exports.serve_command import serve_args
from app.exports.serving_common import ROLE_ORDER, instance_shape, refuse_stages_across_groups
from app.exports.serving_groups import (
    ENGINE_PORTS,
    across_groups,
    group_launches,
    weight_notes,
)
from hardware_catalog.schema import ResolvedCluster
from specs.serving import ServingInstance

FORMAT = "kubernetes"
TRAINING_FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")
SERVING_FRAMEWORKS = ("vllm", "sglang", "trtllm")
DEFAULT_IMAGES = {
    "megatron": "nvcr.io/nvidia/pytorch:25.06-py3",
    "torchtitan": "pytorch/pytorch:latest",
    "deepspeed": "pytorch/pytorch:latest",
    "vllm": "vllm/vllm-openai:latest",
    "sglang": "lmsysorg/sglang:latest",
    "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:latest",
}
MASTER_PORT = 29500


class _Dumper(yaml.SafeDumper):
    """Safe YAML with multi-line strings (config files, scripts) as literal blocks and no
    anchors or aliases."""

    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002 (every node, no aliases)
        return True


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def dump_yaml(docs: list[dict[str, Any]]) -> str:
    """Documents as one YAML stream (`---` between them); `yaml.safe_load_all` reads it."""
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def _name(ctx: ExportContext, suffix: str = "") -> str:
    base = "meshplan-" + (ctx.plan_id or "plan")[:8].lower()
    return base + (f"-{suffix}" if suffix else "")


def _env_list(env: dict[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in env.items()]


def _shm() -> tuple[dict[str, Any], dict[str, Any]]:
    """A memory-backed /dev/shm (NCCL and dataloaders need more than the 64 MiB default)."""
    return (
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {"name": "dshm", "mountPath": "/dev/shm"},
    )


def _training(ctx: ExportContext, framework: str, kind: str) -> ExportResult:
    plan, _ = ctx.training_plan(FORMAT)
    world = plan.parallelism.world_size
    if plan.stage_groups is not None or plan.data_shares is not None:
        require(
            framework == "megatron",
            FORMAT,
            "kubernetes.framework",
            f"a plan across node groups launches with Megatron-LM here (got {framework!r})",
        )
        return _training_across_groups(ctx)
    layout = node_layout(FORMAT, ctx.cluster, world)
    name = _name(ctx)
    config_map: dict[str, Any] | None = None
    if framework == "megatron":
        inner = megatron.export(ctx)
        program = [megatron.ENTRYPOINT, *inner.args]
    elif framework == "torchtitan":
        inner = torchtitan.export(ctx)
        program = ["-m", "torchtitan.train", "--job.config_file", f"/config/{inner.filename}"]
    else:
        inner = deepspeed.export(ctx)
        program = [
            inner.env.get("TRAIN_SCRIPT", "train.py"),
            "--deepspeed",
            "--deepspeed_config",
            f"/config/{inner.filename}",
        ]
    if framework != "megatron":
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-config"},
            "data": {inner.filename: inner.content},
        }
    if kind == "pytorchjob":
        master, rank = "$(MASTER_ADDR)", "$(RANK)"
        port = "$(MASTER_PORT)"
    else:
        master, rank, port = f"{name}-workers-0-0.{name}", "$(NODE_RANK)", str(MASTER_PORT)
    command = [*static_torchrun_args(layout, rank, master, port), *program]
    gpu = gpu_resource_name(layout.vendor)
    shm_volume, shm_mount = _shm()
    mounts = [shm_mount]
    volumes = [shm_volume]
    if config_map is not None:
        volumes.append({"name": "config", "configMap": {"name": f"{name}-config"}})
        mounts.append({"name": "config", "mountPath": "/config"})
    env = dict(inner.env)
    container: dict[str, Any] = {
        "name": "pytorch",
        "image": ctx.options.get("image", DEFAULT_IMAGES[framework]),
        "command": command,
        "resources": {"limits": {gpu: layout.gpus_per_node}},
        "volumeMounts": mounts,
    }
    if env:
        container["env"] = _env_list(env)
    pod_spec: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if ctx.node_group is not None:  # one group of a mixed cluster: its nodes only
        pod_spec["nodeSelector"] = {GROUP_LABEL: ctx.node_group}
    if kind == "pytorchjob":
        replica = {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": pod_spec}}
        specs: dict[str, Any] = {"Master": replica}
        if layout.num_nodes > 1:
            specs["Worker"] = {**replica, "replicas": layout.num_nodes - 1}
        job: dict[str, Any] = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name},
            "spec": {"nprocPerNode": str(layout.gpus_per_node), "pytorchReplicaSpecs": specs},
        }
    else:
        container["env"] = [
            {
                "name": "NODE_RANK",
                "valueFrom": {
                    "fieldRef": {
                        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                    }
                },
            },
            *container.get("env", []),
        ]
        pod_spec["restartPolicy"] = "Never"
        job = _jobset(
            name,
            [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": layout.num_nodes,
                            "completions": layout.num_nodes,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": {"spec": pod_spec},
                        }
                    },
                }
            ],
        )
    docs = [d for d in (config_map, job) if d is not None]
    return ExportResult(
        format=FORMAT,
        filename=f"{name}.yaml",
        content=dump_yaml(docs),
        args=command,
        env=env,
        notes=[f"framework: {framework}", f"kind: {kind}", *inner.notes],
    )


def _jobset(name: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """A JobSet of `jobs` (replicated jobs) with stable pod host names."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {"maxRestarts": 3},
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": jobs,
        },
    }


GROUP_LABEL = "meshplan.dev/node-group"
"""The node label a plan across node groups selects each group's nodes by (label the nodes
of every group with its name)."""


def _training_across_groups(ctx: ExportContext) -> ExportResult:
    """A Megatron-LM plan across node groups as one JobSet: one indexed Job per group, in
    pipeline order, its pods on that group's nodes (`nodeSelector` on `GROUP_LABEL`), node
    rank = the group's first node rank + the pod's completion index, a static torchrun
    rendezvous at the first pod of the first group."""
    plan, _ = ctx.training_plan(FORMAT)
    layout = plan_node_layout(FORMAT, ctx.cluster, plan)
    inner = megatron.export(ctx)
    name = _name(ctx)
    master = f"{name}-g0-0-0.{name}"
    command = [
        *static_torchrun_args(layout, "$NODE_RANK", master, str(MASTER_PORT)),
        megatron.ENTRYPOINT,
        *inner.args,
    ]
    shell = (
        "NODE_RANK=$((GROUP_FIRST_NODE + JOB_COMPLETION_INDEX)); export NODE_RANK; exec "
        + " ".join(shlex.quote(w) if not w.startswith("$") else w for w in command)
    )
    gpu = gpu_resource_name(layout.vendor)
    shm_volume, shm_mount = _shm()
    jobs = []
    for i, block in enumerate(layout.blocks):
        container: dict[str, Any] = {
            "name": "pytorch",
            "image": ctx.options.get("image", DEFAULT_IMAGES["megatron"]),
            "command": ["sh", "-c", shell],
            "env": _env_list({**inner.env, "GROUP_FIRST_NODE": str(block.first_node)}),
            "resources": {"limits": {gpu: layout.gpus_per_node}},
            "volumeMounts": [shm_mount],
        }
        jobs.append(
            {
                "name": f"g{i}",
                "replicas": 1,
                "template": {
                    "spec": {
                        "parallelism": block.nodes,
                        "completions": block.nodes,
                        "completionMode": "Indexed",
                        "backoffLimit": 0,
                        "template": {
                            "metadata": {"labels": {GROUP_LABEL: block.group}},
                            "spec": {
                                "containers": [container],
                                "volumes": [shm_volume],
                                "nodeSelector": {GROUP_LABEL: block.group},
                                "restartPolicy": "Never",
                            },
                        },
                    }
                },
            }
        )
    job = _jobset(name, jobs)
    return ExportResult(
        format=FORMAT,
        filename=f"{name}.yaml",
        content=dump_yaml([job]),
        args=command,
        env=dict(inner.env),
        notes=[
            "framework: megatron",
            "kind: jobset (one indexed Job per node group, in pipeline order)",
            f"label each group's nodes {GROUP_LABEL}=<group name>",
            *inner.notes,
        ],
    )


def _engine_docs(
    ctx: ExportContext,
    framework: str,
    inst: ServingInstance,
    cluster: ResolvedCluster,
    name: str,
    model_ref: str,
    env: dict[str, str],
    group: str | None = None,
) -> tuple[list[str], list[dict[str, Any]]]:
    """(the instance's serve command, its documents: TensorRT-LLM's options ConfigMap, the
    Deployment or LeaderWorkerSet of its `count` replicas on `cluster`'s GPUs, and a
    Service in front). `group`: the Deployment's pods run on that node group's nodes
    (`nodeSelector` on `GROUP_LABEL`, the label the pods carry too); a plan across groups
    has only single-node instances (`group_launches`), so no LeaderWorkerSet takes one."""
    plan, workload = ctx.serving_plan(FORMAT, across_groups=True)
    gpu = gpu_resource_name(cluster.accelerator.vendor)
    image = ctx.options.get("image", DEFAULT_IMAGES[framework])
    shm_volume, shm_mount = _shm()
    docs: list[dict[str, Any]] = []
    placement = {GROUP_LABEL: group} if group is not None else {}
    shape = instance_shape(FORMAT, cluster, inst)
    port = ENGINE_PORTS[framework]
    args = serve_args(
        framework,
        ctx.model,
        model_ref,
        inst,
        workload,
        cluster,
        port,
        plan.engine,
        plan.engine_options,
        options_path=f"/config/{trtllm.OPTIONS_FILE}",
    )
    if framework != "vllm":
        args = [
            a.replace("${NODE_RANK}", "$(NODE_RANK)").replace(
                "${LEADER_ADDR}", "$(LWS_LEADER_ADDRESS)"
            )
            for a in args
        ]
    volumes = [shm_volume]
    container: dict[str, Any] = {
        "name": framework,
        "image": image,
        "resources": {"limits": {gpu: shape.gpus_per_node}},
        "ports": [{"containerPort": port}],
        "volumeMounts": [shm_mount],
    }
    engine_env = {"VLLM_USE_V1": "0"} if framework == "vllm" and plan.engine == "vllm_v0" else {}
    if env or engine_env:
        container["env"] = _env_list({**env, **engine_env})
    if framework == "trtllm":
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{name}-config"},
                "data": {
                    trtllm.OPTIONS_FILE: trtllm.options_yaml(inst, workload, plan.engine_options)
                },
            }
        )
        volumes.append({"name": "config", "configMap": {"name": f"{name}-config"}})
        container["volumeMounts"] = [shm_mount, {"name": "config", "mountPath": "/config"}]
    labels = {"app": name}
    if shape.nodes == 1:
        container["command"] = args
        pod: dict[str, Any] = {"containers": [container], "volumes": volumes}
        if placement:
            pod["nodeSelector"] = placement
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {
                    "replicas": inst.count,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": {**labels, **placement}}, "spec": pod},
                },
            }
        )
    else:
        leader = dict(container)
        worker = dict(container)
        if framework == "vllm":
            serve = " ".join(shlex.quote(a) for a in args)
            leader["command"] = ["sh", "-c", f"ray start --head --port=6379 && {serve}"]
            worker["command"] = [
                "sh",
                "-c",
                "ray start --address=$(LWS_LEADER_ADDRESS):6379 --block",
            ]
            worker.pop("ports")
        else:
            rank_env = [
                {
                    "name": "NODE_RANK",
                    "valueFrom": {
                        "fieldRef": {
                            "fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"
                        }
                    },
                }
            ]
            leader["env"] = rank_env + container.get("env", [])
            worker["env"] = rank_env + container.get("env", [])
            leader["command"] = args
            worker["command"] = args
            worker.pop("ports")
        docs.append(
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "metadata": {"name": name},
                "spec": {
                    "replicas": inst.count,
                    "leaderWorkerTemplate": {
                        "size": shape.nodes,
                        "restartPolicy": "RecreateGroupOnPodRestart",
                        "leaderTemplate": {
                            "metadata": {"labels": {"role": "leader"}},
                            "spec": {
                                "containers": [leader],
                                "volumes": [shm_volume],
                                **({"nodeSelector": placement} if placement else {}),
                            },
                        },
                        "workerTemplate": {
                            "spec": {
                                "containers": [worker],
                                "volumes": [shm_volume],
                                **({"nodeSelector": placement} if placement else {}),
                            }
                        },
                    },
                },
            }
        )
        labels = {"leaderworkerset.sigs.k8s.io/name": name, "role": "leader"}
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {"selector": labels, "ports": [{"port": port, "targetPort": port}]},
        }
    )
    return args, docs


def _serving(ctx: ExportContext, framework: str) -> ExportResult:
    if across_groups(ctx):
        return _serving_across_groups(ctx, framework)
    plan, workload = ctx.serving_plan(FORMAT)
    refuse_stages_across_groups(
        FORMAT,
        plan,
        "a Kubernetes launch of one engine instance over pods on node groups of different hardware (a Ray cluster across them) is not generated; export it as vllm and start its Ray cluster on both groups",
    )
    if framework == "trtllm":
        trtllm.check_plan(FORMAT, plan, ctx.cluster)
    env: dict[str, str] = {}
    model_ref = model_reference(ctx.model, env)
    docs: list[dict[str, Any]] = []
    role_args: dict[str, list[str]] = {}
    instances = sorted(plan.instances, key=lambda i: ROLE_ORDER.index(i.role))
    for inst in instances:
        name = _name(ctx, inst.role)
        args, more = _engine_docs(
            ctx, framework, inst, ctx.cluster, name, model_ref, env, ctx.node_group
        )
        role_args[inst.role] = args
        docs += more
    first = instances[0].role
    return ExportResult(
        format=FORMAT,
        filename=f"{_name(ctx)}.yaml",
        content=dump_yaml(docs),
        args=role_args[first],
        env=env,
        roles=role_args if plan.mode == "disaggregated" else None,
        notes=[f"framework: {framework}"],
    )


def _serving_across_groups(ctx: ExportContext, framework: str) -> ExportResult:
    """A serving plan across node groups: per group a Deployment of its replicas on nodes
    labelled `GROUP_LABEL`=<group> with that group's GPUs, and a Service; in front the
    router (`app.exports.router`): its nginx.conf in a ConfigMap, an nginx Deployment and a
    Service. The router sees each group through its Service, one upstream server weighing
    the group's replicas together (count × a replica's weight): least connections per unit
    of weight across groups, kube-proxy spreading a group's share over its identical pods."""
    launches = group_launches(ctx, FORMAT)
    env: dict[str, str] = {}
    model_ref = model_reference(ctx.model, env)
    docs: list[dict[str, Any]] = []
    group_args: dict[str, list[str]] = {}
    backends = []
    for launch in launches:
        name = _name(ctx, f"g{launch.index}")
        args, more = _engine_docs(
            ctx, framework, launch.instance, launch.cluster, name, model_ref, env, launch.group
        )
        group_args[launch.group] = args
        docs += more
        backends.append(
            router.Backend(
                f"{name}:{ENGINE_PORTS[framework]}",
                launch.instance.count * launch.weight,
                f"group {launch.group}: {launch.instance.count} replica(s) × weight "
                f"{launch.weight}",
            )
        )
    name = _name(ctx, "router")
    labels = {"app": name}
    container = {
        "name": "nginx",
        "image": ctx.options.get("router_image", router.ROUTER_IMAGE),
        "ports": [{"containerPort": router.ROUTER_PORT}],
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/nginx/nginx.conf", "subPath": "nginx.conf"}
        ],
    }
    docs += [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-config"},
            "data": {"nginx.conf": router.nginx_conf(backends)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [container],
                        "volumes": [{"name": "config", "configMap": {"name": f"{name}-config"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {
                "selector": labels,
                "ports": [{"port": router.ROUTER_PORT, "targetPort": router.ROUTER_PORT}],
            },
        },
    ]
    return ExportResult(
        format=FORMAT,
        filename=f"{_name(ctx)}.yaml",
        content=dump_yaml(docs),
        args=group_args[launches[0].group],
        env=env,
        groups=group_args,
        notes=[
            f"framework: {framework}",
            f"label each group's nodes {GROUP_LABEL}=<group name>",
            f"clients reach the router at Service {name}, port {router.ROUTER_PORT}",
            *weight_notes(launches),
            "the router weighs each group's Service by its replica count times a replica's weight",
        ],
    )


def export(ctx: ExportContext) -> ExportResult:
    if ctx.is_training:
        framework = ctx.options.get("framework", "megatron")
        kind = ctx.options.get("kind", "pytorchjob").lower()
        if framework not in TRAINING_FRAMEWORKS:
            raise UnexpressiblePlan(
                FORMAT,
                "kubernetes.framework",
                f"framework must be one of {', '.join(TRAINING_FRAMEWORKS)} "
                f"for a training plan (got {framework!r})",
            )
        require(
            kind in ("pytorchjob", "jobset"),
            FORMAT,
            "kubernetes.kind",
            f"kind must be pytorchjob or jobset for a training plan (got {kind!r})",
        )
        return _training(ctx, framework, kind)
    framework = ctx.options.get("framework", "vllm")
    if framework not in SERVING_FRAMEWORKS:
        raise UnexpressiblePlan(
            FORMAT,
            "kubernetes.framework",
            f"framework must be one of {', '.join(SERVING_FRAMEWORKS)} for "
            f"a serving plan (got {framework!r})",
        )
    return _serving(ctx, framework)
