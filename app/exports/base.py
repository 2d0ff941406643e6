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
    `roles` (disaggregated serving) gives each role's argument list; `notes` states the
    mappings and assumptions the export made."""

    format: str
    filename: str
    content: str
    args: list[str]
    env: dict[str, str]
    roles: dict[str, list[str]] | None = None
    notes: list[str] = field(default_factory=list)

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

    def serving_plan(self, fmt: str) -> tuple[ServingPlan, ServingWorkload]:
        """The serving plan and workload, or a 422 when this is a training plan."""
        if self.serving is None or self.serving_workload is None:
            raise UnexpressiblePlan(
                fmt,
                "serving-format-needs-serving-plan",
                f"{fmt} serves a model; this is a training plan (use megatron, torchtitan, "
                "deepspeed, slurm or kubernetes)",
            )
        return self.serving, self.serving_workload


# ---- models -------------------------------------------------------------------------------
HF_MODEL_IDS: dict[str, str] = {
    "llama2-7b": "meta-llama/Llama-2-7b-hf",
    "llama2-13b": "meta-llama/Llama-2-13b-hf",
    "llama2-70b": "meta-llama/Llama-2-70b-hf",
    "llama3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama3-70b": "meta-llama/Meta-Llama-3-70B",
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
class NodeLayout:
    """How `world_size` processes (one per GPU) spread over nodes."""

    num_nodes: int
    gpus_per_node: int
    """Processes (GPUs) used on each node."""
    node_gpus: int
    """GPUs a node of the cluster has."""
    accelerator: str
    vendor: str


def node_layout(fmt: str, cluster: ResolvedCluster, world_size: int) -> NodeLayout:
    """Nodes and GPUs per node for a job of `world_size` GPUs on `cluster`: whole nodes
    when the job spans more than one node, else one node with `world_size` GPUs."""
    require(
        cluster.is_homogeneous,
        fmt,
        "homogeneous-nodes",
        f"the cluster mixes kinds of node ({', '.join(cluster.pools())}); {fmt} launches one "
        "kind: a plan across node groups (stage_groups) cannot be exported yet (per-group "
        "hosts with Megatron-Core's --pipeline-model-parallel-layout, heterogeneous Slurm "
        "jobs); export a plan of one group, searched on that group's cluster",
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


def torchrun_args(layout: NodeLayout, job_id: str | None = "${JOB_ID}") -> list[str]:
    """`torchrun` over the layout's nodes with a c10d rendezvous at MASTER_ADDR:MASTER_PORT
    (and `--rdzv-id job_id` when given) — what every multi-node training launch starts with."""
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
