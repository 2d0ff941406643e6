"""Pieces the serving exports (vLLM, SGLang) share: the context length a workload needs, the
weight / KV-cache formats of an instance and its node span, and the model's architecture
against the checkpoint the engine loads (overrides, the context the engine derives)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from app.exports.base import hf_model_id, require
from hardware_catalog.schema import ResolvedCluster
from solver.serving.evaluate import kv_format as priced_kv_format
from specs.errors import CatalogLookupError
from specs.model import ModelSpec
from specs.presets import get_preset
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


# ---- the checkpoint's architecture ---------------------------------------------------------
def hf_rope_scaling(model: ModelSpec) -> dict[str, Any] | None:
    """The model's `rope_scaling` as a Hugging Face config spells it (`rope_type` plus the
    type's keys; transformers `modeling_rope_utils.py`)."""
    rs = model.rope_scaling
    if rs is None:
        return None
    out: dict[str, Any] = {"rope_type": rs.type}
    out |= rs.model_dump(exclude={"type"}, exclude_none=True)
    return out


def checkpoint_overrides(model: ModelSpec) -> dict[str, Any]:
    """The Hugging Face config keys to override when the model is served from the public
    checkpoint its name loads (`base.hf_model_id`) but differs from that checkpoint's
    config.json (the built-in preset of that name, which mirrors it) in an architecture
    field without parameters: rope_theta, rope_scaling, max_position_embeddings,
    sliding_window, rms_norm_eps. Empty for presets themselves and for models served from
    `${MODEL_PATH}` (whose config.json is the user's)."""
    if hf_model_id(model) is None:
        return {}
    try:
        checkpoint = get_preset(model.name)
    except CatalogLookupError:
        return {}
    out: dict[str, Any] = {}
    if model.rope_base != checkpoint.rope_base:
        out["rope_theta"] = model.rope_base
    if model.rope_scaling != checkpoint.rope_scaling:
        out["rope_scaling"] = hf_rope_scaling(model)
    for field, key in (
        ("max_position_embeddings", "max_position_embeddings"),
        ("sliding_window", "sliding_window"),
        ("norm_epsilon", "rms_norm_eps"),
    ):
        value = getattr(model, field)
        if value is not None and value != getattr(checkpoint, field):
            out[key] = value
    if model.sliding_window is None and checkpoint.sliding_window is not None:
        out["sliding_window"] = None
    return out


def vllm_max_model_len(model: ModelSpec) -> int | None:
    """The context vLLM derives from the model's config (None: the config does not say):
    `max_position_embeddings`, times the rope-scaling factor for scaling types other than
    llama3/longrope, with yarn from its `original_max_position_embeddings` (vllm-project/vllm
    `ModelConfig._get_and_verify_max_len`)."""
    n = model.max_position_embeddings
    if n is None:
        return None
    rs = model.rope_scaling
    if rs is None or rs.type == "llama3":
        return n
    if rs.type == "yarn" and rs.original_max_position_embeddings is not None:
        n = rs.original_max_position_embeddings
    return int(n * rs.factor)


def sglang_context_length(model: ModelSpec) -> int | None:
    """The context SGLang derives (`get_context_length` of sgl-project/sglang
    `srt/hf_transformers_utils.py`): `max_position_embeddings` times the rope-scaling factor,
    except for llama3 scaling or a scaling that names its original context."""
    n = model.max_position_embeddings
    if n is None:
        return None
    rs = model.rope_scaling
    if rs is None or rs.type == "llama3" or rs.original_max_position_embeddings is not None:
        return n
    return int(n * rs.factor)


def check_context_length(fmt: str, rule: str, asked: int, derived: int | None, env: str) -> None:
    """The engine refuses a context longer than the model's (unless `env` is set to allow
    it, which risks wrong outputs): so does the export."""
    if derived is None:
        return
    require(
        asked <= derived,
        fmt,
        rule,
        f"the workload needs a context of {asked} tokens; the model's config allows "
        f"{derived} (max_position_embeddings and rope scaling), which {fmt} enforces unless "
        f"{env}=1",
    )
