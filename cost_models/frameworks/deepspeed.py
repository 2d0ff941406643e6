"""DeepSpeed (ZeRO 0–3 and its PipelineEngine) as meshplan's DeepSpeed export configures
it (`app/exports/deepspeed.py`: `overlap_comm: true`, `contiguous_gradients: true`, default
buckets, AutoTP for tensor parallelism).

Sources (docs/research/frameworks.md §3, DeepSpeed v0.16.5): the PipelineEngine asserts
ZeRO stage < 2 and runs synchronous 1F1B (no virtual stages) with blocking send/recv, the
gradient reduction after all micro-batches; `communication_data_type` is bf16 under bf16
training and gradients accumulate in bf16 with ZeRO; stages 1/2 all-reduce each 5e8-element
bucket and keep their slice (`use_multi_rank_bucket_allreduce`); stages 2/3 reduce on every
micro-batch, stage 1 at the accumulation boundary; the ZeRO-1/2 parameter all-gather after
the step is not overlapped. ZeRO-3 gathers and reduce-scatters: DeepSpeed prefetches
(`stage3_prefetch_bucket_size`), but the step times measured at 384–2240 A100s (Narayanan
et al. 2021, Table 2: GPT-3 175B and 530B) equal the compute plus flat-ring gathers and
reduce-scatters at one NIC per GPU with nothing hidden, the cross-node bottleneck ZeRO++
(Wang et al. 2023, §1 and §3.1) was built to remove; that measured behaviour is priced.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from cost_models.frameworks.base import (
    EAGER_ELEMENTWISE_TRAFFIC,
    FrameworkConfig,
    FrameworkProfile,
    P2POverlap,
    ReduceCollective,
)
from cost_models.frameworks.registry import register_framework
from specs.model import ModelSpec
from specs.plan import PlanKey


class DeepSpeedConfig(FrameworkConfig):
    """DeepSpeed's behaviour (defaults: as exported)."""

    grad_reduce_bytes: float = Field(default=2.0, gt=0, le=8)
    """bf16 on the wire (`communication_data_type` follows the training dtype)."""
    sharded_grad_collective: ReduceCollective = "all_reduce"
    """ZeRO-1/2 all-reduce each bucket and keep a slice."""
    grad_bucket_elements: float | None = Field(default=5e8, gt=0)
    """`reduce_bucket_size`."""
    overlap_param_gather: bool = False
    """The ZeRO-1/2 parameter all-gather runs after the step."""
    zero3_prefetch: bool = False
    """ZeRO-3 gathers measured fully exposed (module docstring)."""
    zero3_unit: Literal["module", "layer"] = "module"
    """Parameters fetched module by module (`stage3_prefetch_bucket_size`)."""
    zero3_flat_ring: bool = True
    """ZeRO-3 collectives measured at one NIC per GPU (module docstring)."""
    grad_reduce_every_microbatch: bool = True
    """ZeRO-2/3 reduce on every micro-batch."""
    tp_backward_overlap: bool = False
    """AutoTP's collectives are synchronous."""
    elementwise_traffic: float = Field(default=EAGER_ELEMENTWISE_TRAFFIC, ge=1.0, le=8.0)
    """AutoTP shards Hugging Face modules, which run their elementwise ops eagerly."""
    p2p_overlap: P2POverlap = "none"
    """Blocking send/recv."""
    grad_bytes_per_param: float = Field(default=2.0, gt=0, le=8)
    """bf16 gradient accumulation with ZeRO (`data_types.grad_accum_dtype`)."""


@register_framework("deepspeed")
class DeepSpeed(FrameworkProfile):
    """DeepSpeed ZeRO and PipelineEngine."""

    name = "deepspeed"
    label = "DeepSpeed"
    rule_fields = frozenset(
        {
            "zero_stage",
            "pipeline",
            "virtual_pipeline",
            "context",
            "pipeline_schedule",
            "context_parallel_algorithm",
            "vocab_parallel",
        }
    )
    context_parallel_algorithms: ClassVar[frozenset[str]] = frozenset({"ulysses"})
    """DeepSpeed's sequence parallelism is DeepSpeed-Ulysses (Jacobs et al. 2023:
    `sequence_parallel_size`, the attention wrapped in its all-to-all `DistributedAttention`
    / `UlyssesSPAttentionHF`)."""
    rules: ClassVar[tuple[str, ...]] = (
        "ZeRO-2/3 only without pipeline parallelism (PipelineEngine)",
        "no interleaved (virtual) pipeline schedule",
        "context parallelism only as ulysses (DeepSpeed-Ulysses), without pipeline parallelism",
    )
    Config = DeepSpeedConfig
    offload_optimizer_devices = frozenset({"cpu", "nvme"})
    """`zero_optimization.offload_optimizer.device` cpu / nvme (ZeRO-Offload, ZeRO-Infinity;
    deepspeed/runtime/zero/offload_config.py)."""
    offload_parameter_devices = frozenset({"cpu", "nvme"})
    """`zero_optimization.offload_param.device` (ZeRO-3 only)."""
    offload_activations = "checkpoints"
    """`activation_checkpointing.cpu_checkpointing` (the checkpoints of full recompute)."""

    def offload_violations(self, model: ModelSpec, key: PlanKey) -> list[str]:
        """Also: the optimizer is offloaded by a ZeRO optimizer (stage >= 1), and to NVMe
        only by ZeRO-3 (ZeRO-Infinity; stages 1-2 keep an `nvme` device's states in host
        memory: `stage_1_and_2.py` sets `cpu_offload` for any device but none)."""
        out = super().offload_violations(model, key)
        if key.offload_optimizer != "none" and key.zero_stage == 0:
            out.append("deepspeed offloads the optimizer of a ZeRO optimizer (zero_stage >= 1)")
        if key.offload_optimizer == "nvme" and key.zero_stage != 3:
            out.append(
                f"deepspeed offloads optimizer states to nvme with zero_stage 3 only "
                f"(ZeRO-Infinity; got zero_stage {key.zero_stage})"
            )
        return out

    def _rules(self, key: PlanKey) -> list[str]:
        out = []
        if key.zero_stage >= 2 and key.pipeline > 1:
            out.append(
                f"deepspeed's PipelineEngine cannot run zero_stage {key.zero_stage} "
                f"(ZeRO-2/3 are incompatible with pipeline parallelism; pipeline = {key.pipeline})"
            )
        if key.virtual_pipeline > 1:
            out.append(
                "deepspeed's PipelineEngine has no interleaved schedule "
                f"(virtual_pipeline = {key.virtual_pipeline})"
            )
        if key.context > 1 and key.pipeline > 1:
            out.append(
                "deepspeed runs DeepSpeed-Ulysses sequence parallelism without its "
                f"PipelineEngine (context = {key.context}, pipeline = {key.pipeline})"
            )
        return out
