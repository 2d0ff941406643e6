"""Offloading (`plan.offload`): what it takes off the GPU and what it costs per step.

Memory (per GPU):

* optimizer offload (ZeRO-Offload, Ren et al. 2021, USENIX ATC §3-4; Megatron-Core's
  `HybridDeviceOptimizer`): the fp32 master weights and Adam moments (the plan's optimizer
  states) leave the GPU, and the Adam step runs on the CPU;
* parameter offload (ZeRO-Infinity, Rajbhandari et al. 2021, SC §5; needs ZeRO-3): the
  GPU's sharded parameters leave it, only the gathered working copy of the units being
  computed stays;
* activation offload (PipeOffload, Wan et al. 2025, arXiv 2503.01328; Megatron-Core
  `--cpu-offloading`): a fraction of the activations saved for the backward pass waits in
  host memory.

Gradients stay on the GPU (Megatron-Core keeps its main-grad buffer there; DeepSpeed's
ZeRO-Offload also moves the gradient partition, so the GPU memory of DeepSpeed plans is
overestimated by the gradient shard).

Time, per pipeline rank j (its layers' forward F_j and backward B_j per micro-batch, its
activation bytes A_j per micro-batch, its parameter bytes W_j and its optimizer shard of
S_j parameters), over the host bandwidth b of one GPU (`host_bandwidth_bytes_per_s`):

* per micro-batch, the offloaded activations go out during the forward and come back
  during the backward, and offloaded parameters come in before each pass; the copies run
  on their own DMA engines behind the next layers' compute (PipeOffload §3; Megatron-Core's
  offload context copies layer i while layer i + 1 computes), so only what exceeds the pass
  is exposed: max(0, max(f·A_j, W_j)/b − F_j) + max(0, (f·A_j + W_j)/b − B_j);
* per step with optimizer offload: the gradients go down (2 bytes per parameter, bf16,
  ZeRO-Offload Fig. 2) behind the last micro-batch's backward (ZeRO-Offload §4.2 overlaps
  the transfer with the backward): max(0, 2·S_j/b − B_j); the CPU Adam step streams
  `CPU_ADAM_BYTES_PER_PARAM` per parameter through host memory (ZeRO-Offload §4.1: the
  SIMD CPU-Adam is memory-bound), with the node's GPUs sharing its DRAM bandwidth; the
  updated bf16 parameters come back up (2·S_j/b), unless the parameters are offloaded
  too (they stay in host memory). The step is not overlapped with the next forward
  (DeepSpeed's one-step delayed update is off by default); the GPU runs no Adam step.
* NVMe: the optimizer states are read and written once per step (24 bytes per parameter,
  ZeRO-Infinity §5.1), overlapped with the CPU step (ZeRO-Infinity's offload engine), and
  parameters on NVMe come through the node's drives shared by its GPUs.

The offload seconds of the step are the largest over the ranks; they add to the step
(never hidden in the schedule), so a plan with offload is never faster than the same plan
without it except for the GPU Adam step it no longer runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.analytical.training.context import ProblemContext
from cost_models.analytical.training.model_states import LayerState
from specs.plan import PlanKey

GB = 1e9

CPU_ADAM_BYTES_PER_PARAM = 30.0
"""Host-memory bytes per parameter of one CPU Adam step: read the fp32 parameter and both
moments (12) and the fp32 gradient (4), write the parameter and moments back (12) and the
bf16 copy sent to the GPU (2) (ZeRO-Offload §4.1, the states the CPU-Adam kernel touches)."""
GRAD_TRANSFER_BYTES = 2.0
"""Bytes per parameter of the gradients sent to the host (bf16 / fp16; ZeRO-Offload Fig. 2,
"2M" on the GPU-to-CPU edge)."""
PARAM_TRANSFER_BYTES = 2.0
"""Bytes per parameter of the updated parameters sent back (bf16; ZeRO-Offload Fig. 2)."""
NVME_STATE_BYTES_PER_PARAM = 24.0
"""NVMe bytes per parameter per step with the optimizer states on NVMe: the fp32
parameter and both moments read and written (ZeRO-Infinity §5.1)."""
HOST_DRAM_EFFICIENCY = 0.7
"""Achieved fraction of the host DRAM peak by streaming kernels (STREAM triad on two-socket
Xeon / EPYC servers reaches 65-80 % of the channel peak; McCalpin's STREAM results)."""
HOST_MEMORY_USABLE = 0.8
"""Fraction of a node's host DRAM offloaded states may take (the rest: OS, page cache,
pinned staging buffers, data loaders)."""


@dataclass(frozen=True, slots=True)
class HostRates:
    """Per-GPU rates of offloading on the cluster's nodes, bytes per second."""

    link: float
    """Host link (PCIe / NVLink-C2C) per direction, capped by the GPU's share of the DRAM."""
    dram: float
    """The GPU's share of the node's host DRAM bandwidth (all its GPUs offload at once)."""
    nvme: float | None
    """The GPU's share of the node's NVMe bandwidth (capped by `link`); None: no NVMe."""
    host_memory_bytes: float
    """Host memory offloaded states may take per node."""
    gpus_per_node: int


def host_rates(ctx: ProblemContext) -> HostRates | None:
    """The cluster's offload rates, or None when its system has no host-link record."""
    cluster = ctx.problem.cluster
    link = cluster.system.host_link
    if link is None:
        return None
    n = cluster.gpus_per_node
    dram = link.host_memory_bandwidth_gb_s * GB * HOST_DRAM_EFFICIENCY / n
    rate = min(link.effective_bandwidth_gb_s * GB, dram)
    nvme = (
        None if link.nvme_bandwidth_gb_s is None else min(rate, link.nvme_bandwidth_gb_s * GB / n)
    )
    return HostRates(
        link=rate,
        dram=dram,
        nvme=nvme,
        host_memory_bytes=link.host_memory_gib * 1024**3 * HOST_MEMORY_USABLE,
        gpus_per_node=n,
    )


def gpu_state_bytes(state: LayerState, key: PlanKey) -> float:
    """The state bytes of a layer (or extra) left on the GPU under the key's offload."""
    total = state.weights_bytes + state.grads_bytes + state.optimizer_bytes
    if key.offload_optimizer != "none":
        total -= state.optimizer_bytes
    if key.offload_parameters != "none":
        total -= state.weights_bytes
    return total


def optimizer_step_s(rates: HostRates, key: PlanKey, shard_params: float) -> float:
    """The CPU (and NVMe) optimizer step and the parameters sent back, for a shard of
    `shard_params` parameters (linear in it), seconds; 0 without optimizer offload."""
    if key.offload_optimizer == "none":
        return 0.0
    cpu = shard_params * CPU_ADAM_BYTES_PER_PARAM / rates.dram
    if key.offload_optimizer == "nvme":
        assert rates.nvme is not None
        cpu = max(cpu, shard_params * NVME_STATE_BYTES_PER_PARAM / rates.nvme)
    up = (
        0.0
        if key.offload_parameters != "none"
        else shard_params * PARAM_TRANSFER_BYTES / rates.link
    )
    return cpu + up


@dataclass(frozen=True, slots=True)
class RankOffload:
    """One pipeline rank's offload work per step."""

    per_microbatch_s: float
    """Exposed activation / parameter copies per micro-batch, seconds."""
    optimizer_s: float
    """Exposed gradient copy, CPU step and parameter copy, once per step, seconds."""
    host_bytes: float
    """Host memory the rank's offloaded states and activations take per GPU, bytes."""


def rank_offload(
    rates: HostRates,
    key: PlanKey,
    *,
    forward_s: float,
    backward_s: float,
    activation_bytes: float,
    held_activation_bytes: float,
    weights_bytes: float,
    optimizer_bytes: float,
    shard_params: float,
) -> RankOffload:
    """A rank's offload (module docstring). `activation_bytes`: its layers' activations of
    one micro-batch; `held_activation_bytes`: those held at the memory peak (all in-flight
    micro-batches); `weights_bytes` / `optimizer_bytes`: its parameters' and optimizer
    states' bytes on the GPU without offload."""
    f = key.offload_activations
    link = rates.link
    out_s = f * activation_bytes / link
    param_s = 0.0
    if key.offload_parameters != "none":
        param_rate = rates.nvme if key.offload_parameters == "nvme" else link
        assert param_rate is not None
        param_s = weights_bytes / param_rate
    per_mb = max(0.0, max(out_s, param_s) - forward_s) + max(0.0, out_s + param_s - backward_s)
    optimizer = 0.0
    host = f * held_activation_bytes
    if key.offload_optimizer != "none":
        grads_s = shard_params * GRAD_TRANSFER_BYTES / link
        optimizer = max(0.0, grads_s - backward_s) + optimizer_step_s(rates, key, shard_params)
        if key.offload_optimizer == "cpu":
            host += optimizer_bytes
    if key.offload_parameters == "cpu":
        host += weights_bytes
    return RankOffload(per_mb, optimizer, host)


def offload_rule(ctx: ProblemContext, key: PlanKey) -> str:
    """Why the cluster cannot offload as `key` asks ("" when it can)."""
    rates = host_rates(ctx)
    if rates is None:
        return (
            f"the cluster's system ({ctx.problem.cluster.system.id}) has no host-link record "
            "(hardware_catalog systems: host_link), so offloading cannot be priced"
        )
    if rates.nvme is None and "nvme" in (key.offload_optimizer, key.offload_parameters):
        return f"the cluster's system ({ctx.problem.cluster.system.id}) has no local NVMe"
    if key.offload_parameters != "none" and key.zero_stage != 3:
        return (
            f"offload.parameters {key.offload_parameters} needs zero_stage 3 (got {key.zero_stage})"
        )
    return ""
