"""Options of the analytical training cost model and the per-accelerator values they
resolve to (GEMM k-overhead, flash-attention efficiency)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from hardware_catalog.schema import AcceleratorSpec


class AnalyticalConfig(BaseModel):
    """Options of the analytical cost model (few, physical, calibratable)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    attention_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Flash-attention achieved fraction of the dense bf16 peak; null takes the accelerator's
    catalog value, else DEFAULT_ATTENTION_EFFICIENCY."""
    attention_backward_ratio: float = Field(default=2.5, gt=0, le=10)
    """Flash backward time / forward time (5 vs 2 matmuls, Dao 2023 §3.1.2)."""
    kernel_launch_s: float = Field(default=5e-6, ge=0, le=1e-3)
    """Per-kernel launch and tail latency added to every GEMM and attention kernel."""
    gemm_k_overhead: float = Field(default=384.0, ge=0, le=65536)
    """GEMM tile pipeline fill + epilogue in elements of k on an A100-class SM (gemm.py:
    efficiency × k/(k+K0)); scaled per accelerator by gemm_k_overhead_for()."""
    alpha_intra_s: float = Field(default=10e-6, ge=0, le=1e-2)
    """Latency per collective step on the scale-up fabric."""
    alpha_inter_s: float = Field(default=30e-6, ge=0, le=1e-2)
    """Latency per collective step across nodes."""
    tp_comm_overlap: float = Field(default=0.0, ge=0, le=1)
    """Fraction of tensor-parallel communication hidden behind GEMMs (TE comm overlap)."""
    grad_reduce_bytes: float = Field(default=4.0, gt=0, le=8)
    """Bytes per gradient element reduced over data parallelism (fp32 default; 2 = bf16)."""
    dp_overlap_efficiency: float = Field(default=0.8, ge=0, le=1)
    """Fraction of the overlapping compute that can hide data-parallel communication."""
    zero3_grad_reduce_bytes: float = Field(default=2.0, gt=0, le=8)
    """Bytes per gradient element reduce-scattered under ZeRO-3: DeepSpeed and FSDP reduce in
    the parameter dtype (bf16/fp16) by default, unlike Megatron's fp32 gradient reduce."""
    zero3_overlap: float = Field(default=0.0, ge=0, le=1)
    """Fraction of the overlapping compute that hides ZeRO-3 parameter gathers and gradient
    reduce-scatters. 0 by default: DeepSpeed ZeRO-3's measured step times (Narayanan et al.
    2021, Table 2: GPT-3 175B at 384–1536 and 530B at 640–2240 A100s) equal the compute plus
    the full flat-ring gather and reduce-scatter times, with nothing hidden."""
    zero3_flat_ring: bool = True
    """ZeRO-3 gathers and reduce-scatters priced as one flat ring over NICs (each GPU's own
    NIC carries (n−1)/n of the full buffer, whatever the group's members per node):
    DeepSpeed ZeRO-3 as measured by Narayanan et al. 2021, Table 2. False: the same
    hierarchical placement as every other collective (NCCL builds one ring per NIC, so a
    group with g members per node crosses the network with g NICs in parallel)."""
    dp_non_overlapped_fraction: float = Field(default=0.05, ge=0, le=1)
    """Share of each data-parallel collective that is always exposed (the last bucket)."""
    runtime_context_gib: float = Field(default=1.0, ge=0, le=64)
    """CUDA context, NCCL and framework buffers per GPU."""
    fragmentation_fraction: float = Field(default=0.05, ge=0, le=1)
    """Allocator fragmentation as a fraction of activation memory."""
    optimizer_bytes_per_param: float = Field(default=30.0, gt=0, le=100)
    """HBM bytes moved per parameter by the Adam step: read master, m, v, grad (4 each),
    write master, m, v (4 each) and the bf16 parameter (2)."""
    step_overhead_s: float = Field(default=0.0, ge=0, le=3600)
    """Fixed per-step overhead (data loading, logging, synchronisation)."""


A100_BF16_FLOPS_PER_SM = 312e12 / 108
"""The reference compute unit gemm_k_overhead is stated for (A100: 312 TFLOP/s over 108 SMs)."""


def gemm_k_overhead_for(config: AnalyticalConfig, accelerator: AcceleratorSpec) -> float:
    """K0 for an accelerator. The pipeline fill and epilogue of a tile take a roughly fixed
    time (loading the first k-slices from HBM, writing the output tile), while a k-slice of the
    main loop takes less time the faster one compute unit's tensor cores are; in elements of k
    the overhead therefore grows with the dense bf16 rate per SM/CU (H100 SXM: 7.5 TFLOP/s per
    SM, 2.6× an A100 SM, so K0 ≈ 1000). Without a unit count the reference value applies."""
    if accelerator.num_compute_units is None:
        return config.gemm_k_overhead
    per_unit = accelerator.peak_flops("bf16") / accelerator.num_compute_units
    return config.gemm_k_overhead * per_unit / A100_BF16_FLOPS_PER_SM


DEFAULT_ATTENTION_EFFICIENCY = 0.6
"""FlashAttention-2 forward+backward on A100: 50–73 % of the dense peak forward, ~60 %
overall (Dao 2023, arXiv 2307.08691, §4.1), used when the catalog has no figure."""


def attention_efficiency(config: AnalyticalConfig, accelerator: AcceleratorSpec) -> float:
    """The flash-attention efficiency in force: the config's override, else the catalog's
    per-accelerator value, else the default."""
    if config.attention_efficiency is not None:
        return config.attention_efficiency
    return accelerator.attention_efficiency or DEFAULT_ATTENTION_EFFICIENCY
