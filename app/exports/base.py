"""Shared pieces of the plan exports: the context every exporter reads, the result it
returns, the refusal it raises, and helpers (model ids, node layout, flag parsing).

An exporter turns one stored plan (a `TrainingPlan` or `ServingPlan` row) plus its search's
resolved problem (model, cluster, workload) into what a framework or scheduler runs. Each
exporter checks the framework's own consistency rules on what it produced; a plan the
framework cannot express raises `UnexpressiblePlan`, an RFC 9457 422 problem naming the rule.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cost_models.mixed import node_shapes, pool_names, stage_gpus
from hardware_catalog.schema import ResolvedCluster
from specs.errors import PlannerError
from specs.model import ModelSpec
from specs.plan import TrainingPlan
from specs.serving import ServingPlan, ServingWorkload
from specs.workload import TrainingWorkload


class UnexpressiblePlan(PlannerError):
    """A plan the chosen format cannot express (422). `rule` names the framework rule that
    refuses it, e.g. `megatron.heads-divisible-by-tp` or `deepspeed.zero-with-pipeline`."""

    problem_type = "unexpressible-plan"
    title = "Plan not expressible in this format"
    status = 422

    def __init__(self, fmt: str, rule: str, detail: str, **extensions: Any) -> None:
        super().__init__(f"{fmt}: {detail} (rule {rule})", format=fmt, rule=rule, **extensions)
        self.format = fmt
        self.rule = rule


class UnknownFormat(PlannerError):
    """An export format that does not exist (422, lists the formats)."""

    problem_type = "unknown-export-format"
    title = "Unknown export format"
    status = 422


def require(condition: bool, fmt: str, rule: str, detail: str) -> None:
    """Raise `UnexpressiblePlan(fmt, rule, detail)` unless `condition` holds."""
    if not condition:
        raise UnexpressiblePlan(fmt, rule, detail)


@dataclass(frozen=True)
class ExportResult:
    """What `GET /v1/plans/{id}/export/{format}` answers (API.md "Exports").

    `args` is the whole argument list of the launched command for command-line formats
    (megatron, vllm, sglang); for file formats it is the command that consumes `content`.
    `roles` (disaggregated serving) gives each role's argument list, `groups` (a serving
    plan across node groups) each group's; `notes` states the mappings and assumptions the
    export made."""

    format: str
    filename: str
    content: str
    args: list[str]
    env: dict[str, str]
    roles: dict[str, list[str]] | None = None
    notes: list[str] = field(default_factory=list)
    groups: dict[str, list[str]] | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "format": self.format,
            "filename": self.filename,
            "content": self.content,
            "args": list(self.args),
            "env": dict(self.env),
            "notes": list(self.notes),
        }
        if self.roles is not None:
            body["roles"] = {k: list(v) for k, v in self.roles.items()}
        if self.groups is not None:
            body["groups"] = {k: list(v) for k, v in self.groups.items()}
        return body


@dataclass(frozen=True)
class ExportContext:
    """One plan and the problem it was searched for, validated into the domain specs."""

    model: ModelSpec
    cluster: ResolvedCluster
    training: TrainingPlan | None
    serving: ServingPlan | None
    training_workload: TrainingWorkload | None
    serving_workload: ServingWorkload | None
    options: Mapping[str, str] = field(default_factory=dict)
    plan_id: str | None = None
    cost_model: Mapping[str, Any] | None = None
    """The search's serving cost model (`{"name", "config"}`; None: the default one): what
    the router weights of a plan across node groups are priced with."""
    node_group: str | None = None
    """A plan on one node group of a mixed cluster (exported as on that group alone): the
    group, whose nodes the launch must take (Kubernetes: `meshplan.dev/node-group`)."""

    @property
    def is_training(self) -> bool:
        return self.training is not None

    def training_plan(self, fmt: str) -> tuple[TrainingPlan, TrainingWorkload]:
        """The training plan and workload, or a 422 when this is a serving plan."""
        if self.training is None or self.training_workload is None:
            raise UnexpressiblePlan(
                fmt,
                "training-format-needs-training-plan",
                f"{fmt} launches training; this is a serving plan (use vllm, sglang, trtllm, "
                "slurm or kubernetes)",
            )
        return self.training, self.training_workload

    @property
    def serving_groups(self) -> list[str]:
        """The node groups a serving plan's instances name, in plan order (none: [])."""
        if self.serving is None:
            return []
        return list(dict.fromkeys(i.group for i in self.serving.instances if i.group))

    def serving_plan(
        self, fmt: str, *, across_groups: bool = False
    ) -> tuple[ServingPlan, ServingWorkload]:
        """The serving plan and workload, or a 422 when this is a training plan, or one across
        node groups unless `across_groups` (the caller launches each group's instances:
        `app.exports.serving_groups`)."""
        if self.serving is None or self.serving_workload is None:
            raise UnexpressiblePlan(
                fmt,
                "serving-format-needs-serving-plan",
                f"{fmt} serves a model; this is a training plan (use megatron, torchtitan, "
                "deepspeed, slurm or kubernetes)",
            )
        require(
            across_groups or len(self.serving_groups) <= 1,
            fmt,
            "serving-across-groups",
            f"the plan serves from several node groups ({', '.join(self.serving_groups)}); "
            "this launcher runs one group's instances (the vllm, sglang, trtllm, slurm and "
            "kubernetes exports launch every group's behind one router)",
        )
        return self.serving, self.serving_workload


# ---- models -------------------------------------------------------------------------------
HF_MODEL_IDS: dict[str, str] = {
    "llama2-7b": "meta-llama/Llama-2-7b-hf",
    "llama2-13b": "meta-llama/Llama-2-13b-hf",
    "llama2-70b": "meta-llama/Llama-2-70b-hf",
    "llama3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama3-70b": "meta-llama/Meta-Llama-3-70B",
    "llama3.1-8b": "meta-llama/Llama-3.1-8B",
    "llama3.1-70b": "meta-llama/Llama-3.1-70B",
    "llama3-405b": "meta-llama/Llama-3.1-405B",
    "mistral-7b": "mistralai/Mistral-7B-v0.1",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "mixtral-8x22b": "mistralai/Mixtral-8x22B-v0.1",
    "qwen2-57b-a14b": "Qwen/Qwen2-57B-A14B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "nemotron4-340b": "nvidia/Nemotron-4-340B-Base",
}
"""Hugging Face repository of each built-in preset that has public weights (the GPT-3-style
presets have none)."""

MODEL_PATH_PLACEHOLDER = "${MODEL_PATH}"


def hf_model_id(model: ModelSpec) -> str | None:
    """The Hugging Face id of a preset model, or None."""
    return HF_MODEL_IDS.get(model.name.lower())


def model_reference(model: ModelSpec, env: dict[str, str]) -> str:
    """What a serving command loads: the HF id when known, else `${MODEL_PATH}` (and the
    variable is documented in `env` with an empty value to fill in)."""
    known = hf_model_id(model)
    if known is not None:
        return known
    env.setdefault("MODEL_PATH", "")
    return MODEL_PATH_PLACEHOLDER


# ---- cluster layout ----------------------------------------------------------------------
@dataclass(frozen=True)
class NodeBlock:
    """The nodes of one node group (pool) in a plan across groups: node ranks
    `first_node … first_node + nodes − 1` run its pipeline stages."""

    group: str
    accelerator: str
    first_node: int
    nodes: int
    stages: tuple[int, ...]


@dataclass(frozen=True)
class NodeLayout:
    """How `world_size` processes (one per GPU) spread over nodes."""

    num_nodes: int
    gpus_per_node: int
    """Processes (GPUs) used on each node."""
    node_gpus: int
    """GPUs a node of the cluster has."""
    accelerator: str
    vendor: str
    blocks: tuple[NodeBlock, ...] = ()
    """A plan across node groups: which node ranks each group's nodes take (empty on one
    group). Its launch needs fixed node ranks (`torchrun --node-rank`)."""


def node_layout(fmt: str, cluster: ResolvedCluster, world_size: int) -> NodeLayout:
    """Nodes and GPUs per node for a job of `world_size` GPUs on `cluster`: whole nodes
    when the job spans more than one node, else one node with `world_size` GPUs."""
    require(
        cluster.is_homogeneous,
        fmt,
        "homogeneous-nodes",
        f"the cluster mixes kinds of node ({', '.join(cluster.pools())}); {fmt} launches one "
        "kind of node: a plan across node groups (stage_groups) exports with megatron or "
        "slurm (Megatron-LM), a plan of one group from a search on that group's cluster",
    )
    gpn = cluster.gpus_per_node
    require(
        world_size <= cluster.num_gpus,
        fmt,
        "world-size",
        f"the plan needs {world_size} GPUs; the cluster has {cluster.num_gpus}",
    )
    if world_size <= gpn:
        nodes, per_node = 1, world_size
    else:
        require(
            world_size % gpn == 0,
            fmt,
            "whole-nodes",
            f"{world_size} GPUs do not fill whole nodes of {gpn} GPUs",
        )
        nodes, per_node = world_size // gpn, gpn
    acc = cluster.accelerator
    return NodeLayout(
        num_nodes=nodes,
        gpus_per_node=per_node,
        node_gpus=gpn,
        accelerator=acc.id,
        vendor=acc.vendor,
    )


def plan_node_layout(fmt: str, cluster: ResolvedCluster, plan: TrainingPlan) -> NodeLayout:
    """`node_layout` of a training plan; a plan across node groups (`stage_groups`) becomes
    one job whose node ranks follow the pipeline: Megatron orders ranks tensor, context,
    data, then pipeline outermost, so stage j is ranks [j·s, (j+1)·s) of s = tensor ×
    context × data GPUs, and each group's block of stages takes whole nodes in that order.

    Raises:
        UnexpressiblePlan: (`<fmt>.stage-blocks`) a group's stages are not one contiguous
            block; (`<fmt>.node-size`) the groups' nodes differ in GPU count (one torchrun
            runs the same process count on every node) or vendor; (`whole-nodes`) a group's
            block does not fill whole nodes.
    """
    require(
        plan.data_shares is None,
        fmt,
        f"{fmt}.data-shares",
        "the plan gives data-parallel replicas on different node groups uneven shares of "
        "the batch (data_shares); no launcher exported here feeds each replica its own batch "
        "size",
    )
    if plan.stage_groups is None:
        return node_layout(fmt, cluster, plan.parallelism.world_size)
    try:
        names = pool_names(cluster, plan.stage_groups)
    except PlannerError as exc:
        raise UnexpressiblePlan(fmt, f"{fmt}.stage-groups", exc.detail) from exc
    pools = cluster.pools()
    order = list(dict.fromkeys(names))
    blocks_ok = all(
        names[j] == names[j + 1] or names[j + 1] not in names[: j + 1]
        for j in range(len(names) - 1)
    )
    require(
        blocks_ok,
        fmt,
        f"{fmt}.stage-blocks",
        f"stage_groups {plan.stage_groups} visits a node group twice; a launch gives each "
        "group one block of node ranks",
    )
    require(
        len(node_shapes(cluster, order)) == 1,
        fmt,
        f"{fmt}.node-size",
        "the plan's node groups differ in GPUs per node or vendor ("
        + ", ".join(
            f"{n}: {pools[n].gpus_per_node} × {pools[n].groups[0].accelerator.id}" for n in order
        )
        + "); one torchrun job runs the same number of processes on every node of one vendor",
    )
    gpn = pools[order[0]].gpus_per_node
    per_stage = stage_gpus(plan)
    blocks = []
    first = 0
    for name in order:
        stages = tuple(j for j, n in enumerate(names) if n == name)
        gpus = len(stages) * per_stage
        require(
            gpus % gpn == 0,
            fmt,
            "whole-nodes",
            f"the {len(stages)} stages on {name} take {gpus} GPUs, not whole nodes of {gpn}",
        )
        acc = pools[name].groups[0].accelerator.id
        blocks.append(NodeBlock(name, acc, first, gpus // gpn, stages))
        first += gpus // gpn
    lead = pools[order[0]].groups[0].accelerator
    return NodeLayout(
        num_nodes=first,
        gpus_per_node=gpn,
        node_gpus=gpn,
        accelerator="+".join(b.accelerator for b in blocks),
        vendor=lead.vendor,
        blocks=tuple(blocks),
    )


def block_notes(layout: NodeLayout) -> list[str]:
    """The node ranks of every group of a plan across groups (empty on one group)."""
    return [
        f"node ranks {b.first_node}-{b.first_node + b.nodes - 1}: group {b.group} "
        f"({b.nodes} × {b.accelerator}), pipeline stages {b.stages[0]}-{b.stages[-1]}"
        for b in layout.blocks
    ]


def static_torchrun_args(layout: NodeLayout, node_rank: str, master: str, port: str) -> list[str]:
    """`torchrun` with fixed node ranks (static rendezvous at `master`:`port`)."""
    return [
        "torchrun",
        "--nnodes",
        str(layout.num_nodes),
        "--nproc-per-node",
        str(layout.gpus_per_node),
        "--node-rank",
        node_rank,
        "--master-addr",
        master,
        "--master-port",
        port,
    ]


def torchrun_args(
    layout: NodeLayout, job_id: str | None = "${JOB_ID}", node_rank: str = "${NODE_RANK}"
) -> list[str]:
    """`torchrun` over the layout's nodes with a c10d rendezvous at MASTER_ADDR:MASTER_PORT
    (and `--rdzv-id job_id` when given) — what every multi-node training launch starts with.
    A plan across node groups needs each node at its own rank: a static rendezvous with
    `--node-rank node_rank` instead."""
    if layout.blocks:
        return static_torchrun_args(layout, node_rank, "${MASTER_ADDR}", "${MASTER_PORT}")
    words = [
        "torchrun",
        "--nnodes",
        str(layout.num_nodes),
        "--nproc-per-node",
        str(layout.gpus_per_node),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "${MASTER_ADDR}:${MASTER_PORT}",
    ]
    if job_id is not None:
        words += ["--rdzv-id", job_id]
    return words


def gpu_resource_name(vendor: str) -> str:
    """The Kubernetes extended resource of a vendor's GPUs (device plugins' names)."""
    v = vendor.lower()
    if v == "amd":
        return "amd.com/gpu"
    if v == "intel":
        return "habana.ai/gaudi"
    return "nvidia.com/gpu"


# ---- flags -------------------------------------------------------------------------------
def parse_flags(args: Sequence[str], switches: Iterable[str]) -> dict[str, str | bool]:
    """`--flag value` / `--flag` pairs of an argument list as a dict (`True` for the
    switches named in `switches`); positional arguments are ignored and a repeated flag
    keeps its last value (argparse's behaviour)."""
    switch_set = set(switches)
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if token.startswith("--"):
            name, eq, inline = token.partition("=")
            if eq:
                out[name] = inline
            elif name in switch_set:
                out[name] = True
            else:
                if i + 1 >= len(args):
                    raise ValueError(f"flag {name} has no value")
                out[name] = args[i + 1]
                i += 1
        i += 1
    return out


def int_flag(flags: Mapping[str, str | bool], name: str, default: int) -> int:
    value = flags.get(name)
    if value is None or isinstance(value, bool):
        return default
    return int(value)


def shell_command(words: Sequence[str], *, indent: str = "  ") -> str:
    """A command as shell text, one `--flag value` pair per continued line. Words that are
    `${VAR}` / `$VAR` references stay unquoted (the script expands them)."""

    def quote(word: str) -> str:
        if word.startswith("$") and all(c.isalnum() or c in "${}_:-" for c in word):
            return f'"{word}"'
        return shlex.quote(word)

    lines: list[str] = []
    current: list[str] = []
    for word in words:
        if word.startswith("--") and current:
            lines.append(" ".join(current))
            current = []
        current.append(quote(word))
    if current:
        lines.append(" ".join(current))
    return (" \\\n" + indent).join(lines)
