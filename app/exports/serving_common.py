"""Pieces the serving exports (vLLM, SGLang) share: the context length a workload needs, the
weight / KV-cache formats of an instance and its node span."""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.exports.base import require
from hardware_catalog.schema import ResolvedCluster
from solver.serving.evaluate import kv_format as priced_kv_format
from specs.serving import MAX_TOKENS, ServingInstance, ServingPlan, ServingWorkload

ROLE_ORDER = ("both", "prefill", "decode")
"""Instances are exported in this order (prefill before decode)."""


def max_model_len(workload: ServingWorkload) -> int:
    """The context length to reserve: the longest prompt + output of a trace, else the
    99.9th percentile prompt plus the 99.9th percentile output (exact for fixed lengths),
    rounded up to a multiple of 256 and capped at `MAX_TOKENS`."""
    if workload.trace is not None:
        need = max(p + o for _, p, o in workload.trace)
    else:
        assert workload.prompt_tokens is not None and workload.output_tokens is not None
        need = math.ceil(workload.prompt_tokens.quantile(0.999)) + math.ceil(
            workload.output_tokens.quantile(0.999)
        )
    return min(MAX_TOKENS, 256 * math.ceil(need / 256))


@dataclass(frozen=True)
class InstanceShape:
    """One engine instance: its GPUs and how they sit on nodes."""

    gpus: int
    nodes: int
    gpus_per_node: int


def instance_shape(fmt: str, cluster: ResolvedCluster, inst: ServingInstance) -> InstanceShape:
    gpn = cluster.gpus_per_node
    gpus = inst.parallelism.num_gpus
    require(
        cluster.is_homogeneous,
        fmt,
        "homogeneous-nodes",
        "the cluster mixes node shapes; an engine instance asks for one shape of node",
    )
    if gpus <= gpn:
        return InstanceShape(gpus=gpus, nodes=1, gpus_per_node=gpus)
    require(
        gpus % gpn == 0,
        fmt,
        "whole-nodes",
        f"an instance of {gpus} GPUs does not fill whole nodes of {gpn} GPUs",
    )
    return InstanceShape(gpus=gpus, nodes=gpus // gpn, gpus_per_node=gpn)


def refuse_stages_across_groups(fmt: str, plan: ServingPlan, lacks: str) -> None:
    """Refuse an instance whose pipeline stages run on different node groups
    (`ServingInstance.stage_groups`) by rule `serving-stages-across-groups`, naming the
    stages' groups and layers and what `fmt` lacks to launch one."""
    for i, inst in enumerate(plan.instances):
        if inst.stage_groups is None:
            continue
        layers = inst.stage_layers or []
        stages = ", ".join(
            f"stage {j} on {g}" + (f" ({layers[j]} layers)" if j < len(layers) else "")
            for j, g in enumerate(inst.stage_groups)
        )
        require(
            False,
            fmt,
            "serving-stages-across-groups",
            f"instance {i} runs its pipeline stages on different node groups ({stages}); {lacks}",
        )


def weight_format(inst: ServingInstance, workload: ServingWorkload) -> str:
    return inst.precision or workload.precision


def kv_format(inst: ServingInstance, workload: ServingWorkload) -> str:
    """The KV-cache format the instance was priced with (`solver.serving.evaluate.kv_format`)."""
    return priced_kv_format(workload, weight_format(inst, workload))


def check_kv_heads(fmt: str, rule: str, kv_heads: int, tp: int) -> None:
    """Grouped-query attention under tensor parallelism: KV heads are split when there are
    at least as many as ranks, else replicated; either way one count divides the other
    (vLLM / SGLang `QKVParallelLinear`)."""
    if tp >= kv_heads:
        require(
            tp % kv_heads == 0,
            fmt,
            rule,
            f"tensor parallel size {tp} must be a multiple of the {kv_heads} KV heads",
        )
    else:
        require(
            kv_heads % tp == 0,
            fmt,
            rule,
            f"the {kv_heads} KV heads must be divisible by tensor parallel size {tp}",
        )
