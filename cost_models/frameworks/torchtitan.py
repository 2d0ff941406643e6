"""torchtitan: FSDP2 composed with tensor, pipeline, context and expert parallelism, as
meshplan's torchtitan export configures it (`app/exports/torchtitan.py`: ZeRO-3 →
`fsdp_reshard_after_forward = "always"`, ZeRO-2 → `"never"`).

Sources (docs/research/frameworks.md §5–6, torchtitan b5bcd76): bf16 parameters with fp32
gradient reduction (`mixed_precision_reduce`); one FSDP unit per transformer block;
implicit forward and backward prefetch; without pipelining the reduce-scatter runs on every
micro-batch, with pipelining once per step after the last micro-batch
(`torch.distributed.pipelining` sets no grad sync until the last backward); DTensor tensor
parallelism without async TP unless compiled; pipeline schedules issue send/recv
asynchronously; fused AdamW on the shards.
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


class TorchtitanConfig(FrameworkConfig):
    """torchtitan's behaviour (defaults: as exported)."""

    bucket_per_layer: bool = True
    """One reduce-scatter per FSDP unit (a transformer block)."""
    grad_reduce_every_microbatch: bool = True
    """Without pipelining FSDP2 reduces on every micro-batch."""
    tp_backward_overlap: bool = False
    """DTensor tensor parallelism issues its collectives synchronously (async TP needs
    torch.compile)."""
    elementwise_traffic: float = Field(default=EAGER_ELEMENTWISE_TRAFFIC, ge=1.0, le=8.0)
    """Eager by default (`compile.enable` false): unfused elementwise kernels."""
    p2p_overlap: P2POverlap = "always"
    """`torch.distributed.pipelining` sends and receives asynchronously."""
    grad_reduce_bytes: float = Field(default=4.0, gt=0, le=8)
    """fp32 reduction (`training.mixed_precision_reduce`)."""


@register_framework("torchtitan")
class Torchtitan(FrameworkProfile):
    """torchtitan (PyTorch-native: FSDP2 + TP + PP + CP + EP)."""

    name = "torchtitan"
    label = "torchtitan"
    zero_stages = frozenset({0, 2, 3})
    context_parallel_algorithms: ClassVar[frozenset[str]] = frozenset({"ring", "all_gather"})
    """torchtitan's CP is PyTorch's `context_parallel`: K/V shards rotated all-to-all (a ring,
    `context_parallel_rotate_method = "alltoall"`) or all-gathered (`"allgather"`)."""
    rules: ClassVar[tuple[str, ...]] = (
        "context parallelism as ring (rotate method alltoall) or all_gather (allgather)",
    )
    Config = TorchtitanConfig
    offload_optimizer_devices = frozenset({"cpu"})
    """`training.enable_cpu_offload` (FSDP2 `CPUOffloadPolicy`: parameters, gradients and
    optimizer states on the CPU; torchtitan/config/job_config.py)."""
    offload_parameter_devices = frozenset({"cpu"})
    offload_states_together = True
