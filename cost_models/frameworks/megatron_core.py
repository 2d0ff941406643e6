"""Megatron-Core as meshplan's Megatron export launches it (`app/exports/megatron.py`):
distributed optimizer with `--overlap-grad-reduce --overlap-param-gather`, ZeRO-2/3 through
`--use-torch-fsdp2`, no `--tp-comm-overlap`.

Sources (docs/research/frameworks.md §1, Megatron-LM d98e8a6): gradients reduced in fp32
with `--bf16` (the training script turns `accumulate_allreduce_grads_in_fp32` on); buckets of
max(40M, 1M × dp) parameters, only on pipeline rank 0 and its first virtual chunk; bucket
reduction starts during the last micro-batch's backward; the parameter all-gather is waited
on in the next forward's pre-hooks; column-parallel linears overlap their backward
collectives with the dgrad / wgrad GEMMs; the interleaved schedule overlaps its p2p
(`overlap_p2p_comm`, forced off without virtual stages); ZeRO-2/3 run through Megatron's FSDP
(`--use-torch-fsdp2` asserts pipeline = 1 and expert parallelism = 1; Megatron-FSDP
`--use-megatron-fsdp` adds expert parallelism; neither is shown with pipelining).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from cost_models.frameworks.base import FrameworkConfig, FrameworkProfile
from cost_models.frameworks.registry import register_framework
from specs.model import ModelSpec
from specs.plan import PlanKey


class MegatronCoreConfig(FrameworkConfig):
    """Megatron-Core's behaviour (defaults: as exported)."""

    grad_bucket_elements_per_dp_rank: float = Field(default=1e6, ge=0)
    """Megatron-Core's bucket grows by 1M parameters per data-parallel rank."""
    buckets_on_first_stage_only: bool = True
    """Only pipeline rank 0 (first virtual chunk) splits its gradients into buckets."""
    grad_reduce_every_microbatch: bool = True
    """ZeRO-2/3 run through torch FSDP2, which reduce-scatters on every micro-batch."""


@register_framework("megatron_core")
class MegatronCore(FrameworkProfile):
    """Megatron-Core (NVIDIA Megatron-LM `megatron/core`, 2024–2026)."""

    name = "megatron_core"
    label = "Megatron-Core"
    rule_fields = frozenset(
        {
            "zero_stage",
            "pipeline",
            "pipeline_schedule",
            "context",
            "context_parallel_algorithm",
            "vocab_parallel",
        }
    )
    runs_vocab_parallel = True
    rules: ClassVar[tuple[str, ...]] = (
        "ZeRO-2/3 (its FSDP) only without pipeline parallelism",
        "context parallelism as ring (--cp-comm-type p2p), ulysses (a2a), all_gather "
        "(allgather) or hybrid (a2a+p2p with --hierarchical-context-parallel-sizes)",
        "vocab_parallel through the sail-sg/VocabularyParallelism fork of Megatron-LM "
        "(--enable-vocab-parallel)",
    )
    Config = MegatronCoreConfig
    offload_optimizer_devices = frozenset({"cpu"})
    """`--optimizer-cpu-offload --optimizer-offload-fraction 1.0` (HybridDeviceOptimizer,
    megatron/core/optimizer/cpu_offloading)."""
    offload_activations = "layers"
    """`--cpu-offloading --cpu-offloading-num-layers N` (TransformerConfig asserts N <
    num_layers, pipeline 1 and no recompute)."""

    def offload_violations(self, model: ModelSpec, key: PlanKey) -> list[str]:
        """Also: the CPU optimizer is the distributed optimizer's (`HybridDeviceOptimizer`
        in `distrib_optimizer.py`): zero_stage 1."""
        out = super().offload_violations(model, key)
        if key.offload_optimizer != "none" and key.zero_stage != 1:
            out.append(
                "megatron_core offloads the optimizer through its distributed optimizer "
                f"(--use-distributed-optimizer, zero_stage 1; got {key.zero_stage})"
            )
        return out

    def _rules(self, key: PlanKey) -> list[str]:
        out = []
        if key.zero_stage >= 2 and key.pipeline > 1:
            out.append(
                f"megatron_core runs zero_stage {key.zero_stage} through its FSDP, "
                f"which requires pipeline = 1 (got {key.pipeline})"
            )
        return out
