"""PyTorch FSDP (FSDP1 `FullyShardedDataParallel` / FSDP2 `fully_shard`) with PyTorch's
own composable parallelisms: FSDP2 shards DTensor parameters, so it runs under tensor
parallelism (`torch.distributed.tensor.parallel`), pipelining (`torch.distributed.pipelining`)
and context parallelism (`torch.distributed.tensor.experimental.context_parallel`), as Llama 3
trained (FSDP-style sharding with pipelining, arXiv 2407.21783 §3.3.1). Expert parallelism is
not part of PyTorch itself (torchtitan adds it). Defaults are those of a plain training loop:
bf16 reduction, blocking pipeline transfers; torchtitan's profile has its own.

Sources (docs/research/frameworks.md §4–5): ZeRO-3 = `FULL_SHARD` / `reshard_after_forward=
True`, ZeRO-2 = `SHARD_GRAD_OP` / `False`, ZeRO-0 = `NO_SHARD`; gradients reduce-scattered per
FSDP unit (one transformer block) in its post-backward hook, overlapping the backward of the
earlier units, on every micro-batch unless `no_sync` is used; the next unit's all-gather is
prefetched in forward and backward; with `MixedPrecision(param_dtype=bf16)` and no
`reduce_dtype` the reduction runs in bf16; sharded parameters are the fp32 masters.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from cost_models.frameworks.base import (
    EAGER_ELEMENTWISE_TRAFFIC,
    FrameworkConfig,
    FrameworkProfile,
    P2POverlap,
)
from cost_models.frameworks.registry import register_framework
from specs.plan import PlanKey


class FSDPConfig(FrameworkConfig):
    """FSDP's behaviour (PyTorch defaults with bf16 mixed precision)."""

    grad_reduce_bytes: float = Field(default=2.0, gt=0, le=8)
    """bf16 reduction (reduce_dtype unset follows param_dtype)."""
    bucket_per_layer: bool = True
    """One reduce-scatter per FSDP unit (a transformer block)."""
    grad_reduce_every_microbatch: bool = True
    """FSDP reduces on every backward unless `no_sync` is used."""
    tp_backward_overlap: bool = False
    """DTensor tensor parallelism issues its collectives synchronously."""
    p2p_overlap: P2POverlap = "none"
    """Blocking pipeline sends and receives in a plain training loop."""
    elementwise_traffic: float = Field(default=EAGER_ELEMENTWISE_TRAFFIC, ge=1.0, le=8.0)
    """Eager PyTorch modules (Hugging Face style): unfused elementwise kernels."""


@register_framework("fsdp")
class FSDP(FrameworkProfile):
    """PyTorch FSDP / FSDP2 data parallelism."""

    name = "fsdp"
    label = "PyTorch FSDP"
    zero_stages = frozenset({0, 2, 3})
    rule_fields = frozenset(
        {
            "zero_stage",
            "expert",
            "pipeline_schedule",
            "pipeline",
            "context",
            "context_parallel_algorithm",
            "vocab_parallel",
        }
    )
    context_parallel_algorithms: ClassVar[frozenset[str]] = frozenset({"ring", "all_gather"})
    """PyTorch's `context_parallel` rotates K/V shards between SDPA steps: all-to-all
    (a ring) or one all-gather (`_RotateMethod`); no head split."""
    rules: ClassVar[tuple[str, ...]] = (
        "no expert parallelism (not part of PyTorch; torchtitan adds it)",
        "context parallelism as ring or all_gather (torch context_parallel's rotate methods)",
    )
    Config = FSDPConfig
    offload_optimizer_devices = frozenset({"cpu"})
    """FSDP `CPUOffload(offload_params=True)` / FSDP2 `CPUOffloadPolicy`: parameters,
    gradients and the optimizer step on the CPU."""
    offload_parameter_devices = frozenset({"cpu"})
    offload_states_together = True

    def _rules(self, key: PlanKey) -> list[str]:
        if key.expert > 1:
            return [f"fsdp has no expert parallelism (expert = {key.expert}; torchtitan adds it)"]
        return []
