"""Options of the analytical training cost model and the per-accelerator values they
resolve to (GEMM k-overhead, flash-attention efficiency)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cost_models.frameworks import build_framework, list_frameworks
from hardware_catalog.schema import AcceleratorSpec
from specs.errors import PlannerError

LEGACY_OPTIONS: dict[str, str] = {
    "optimizer_bytes_per_param": "renamed adam_step_bytes_per_param",
    "tp_comm_overlap": "now every framework's tp_comm_overlap",
    "grad_reduce_bytes": "now every framework's grad_reduce_bytes",
    "zero3_overlap": "now every framework's zero3_prefetch (on when > 0)",
    "zero3_grad_reduce_bytes": "dropped: ZeRO-3 reduces in the framework's grad_reduce_bytes",
    "dp_overlap_efficiency": "dropped: frameworks say what they overlap",
    "dp_non_overlapped_fraction": "dropped: frameworks say what they overlap",
    "alpha_intra_s": "dropped: latencies come from the fabric's measured curves",
    "alpha_inter_s": "dropped: latencies come from the fabric's measured curves",
}
"""Options of earlier versions of this model and what became of them."""


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
    runtime_context_gib: float = Field(default=1.0, ge=0, le=64)
    """CUDA context, NCCL and framework buffers per GPU."""
    fragmentation_fraction: float = Field(default=0.05, ge=0, le=1)
    """Allocator fragmentation as a fraction of activation memory."""
    adam_step_bytes_per_param: float = Field(default=30.0, gt=0, le=100)
    """HBM bytes moved per parameter by the Adam step: read master, m, v, grad (4 each),
    write master, m, v (4 each) and the bf16 parameter (2)."""
    step_overhead_s: float = Field(default=0.0, ge=0, le=3600)
    """Fixed per-step overhead (data loading, logging, synchronisation)."""
    nccl_channels: int = Field(default=16, ge=0, le=64)
    """CUDA blocks NCCL runs a collective with, one per channel, each on its own SM (NCCL
    `NCCL_MIN_NCHANNELS` / `NCCL_MAX_NCHANNELS`; 16 is NCCL's usual ring channel count on
    an 8-GPU NVSwitch node). Compute overlapping a collective loses those SMs: an
    overlapped collective of duration T costs the compute it hides behind about
    T × channels / SMs (Pati et al., "T3", ASPLOS 2024: overlapped GEMMs slow down 10–30 %
    under concurrent NCCL kernels)."""
    straggler_sigma: float = Field(default=0.015, ge=0, le=0.2)
    """Relative spread (standard deviation) of per-GPU step speed. A synchronous step waits
    for its slowest GPU: the expected maximum of N normal variates exceeds the mean by about
    σ·sqrt(2·ln N) (Gumbel limit; David & Nagaraja, "Order Statistics" §10.5), so a step on
    N GPUs takes 1 + σ·sqrt(2·ln N) times a typical GPU's. Same-SKU GPUs vary in speed by
    several percent (Sinha et al. 2022, arXiv 2208.11035: 8 % mean variation across clusters;
    Llama 3, arXiv 2407.21783 §3.3.4: 1–2 % diurnal throughput swings from DVFS; MegaScale,
    arXiv 2402.15627 §4: a few % of slow hosts gate the step). It is the one parameter fitted
    to published runs: 0.015 is the in-sample fit on `bench/data/calibration/published_runs.jsonl`
    (0.0135–0.020 with any one source held out; `python bench/accuracy.py`)."""
    frameworks: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Behaviour overrides per framework profile (`cost_models.frameworks`), e.g.
    `{"megatron_core": {"overlap_grad_reduce": false}}`; each is validated by the profile's
    own `Config`."""

    @model_validator(mode="before")
    @classmethod
    def _legacy_options(cls, data: Any) -> Any:
        """Options of earlier versions, still accepted so that stored searches and existing
        clients keep working (`LEGACY_OPTIONS`): renamed ones move to their new name, the
        global overlap options become every framework's own, and the ones the measured
        fabric curves replaced are dropped."""
        if not isinstance(data, dict) or not LEGACY_OPTIONS.keys() & data.keys():
            return data
        data = dict(data)
        if "optimizer_bytes_per_param" in data:
            data.setdefault("adam_step_bytes_per_param", data.pop("optimizer_bytes_per_param"))
        per_framework = {
            option: data.pop(old)
            for old, option in (
                ("tp_comm_overlap", "tp_comm_overlap"),
                ("grad_reduce_bytes", "grad_reduce_bytes"),
            )
            if old in data
        }
        if "zero3_overlap" in data:
            per_framework["zero3_prefetch"] = bool(data.pop("zero3_overlap"))
        if per_framework:
            frameworks = {name: dict(v) for name, v in (data.get("frameworks") or {}).items()}
            for name in list_frameworks():
                frameworks[name] = {**per_framework, **frameworks.get(name, {})}
            data["frameworks"] = frameworks
        for old in LEGACY_OPTIONS:
            data.pop(old, None)
        return data

    @field_validator("frameworks")
    @classmethod
    def _known_frameworks(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, overrides in value.items():
            try:
                build_framework(name, overrides)
            except PlannerError as exc:
                raise ValueError(f"frameworks.{name}: {exc}") from exc
        return value


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


FP8_K_OVERHEAD_RATIO = 0.5
"""FP8 GEMMs lose about half as many elements of k to their tile pipeline fill and epilogue
as BF16 ones (their k-tiles are twice as deep, 128 FP8 elements per stage): fitted to the
published H100 FP8 GEMM shapes in `bench/data/gemm_microbenchmarks.json` (DeepGEMM and
torch._scaled_mm measurements, k from 512 to 16384; `python bench/gemm_shapes.py`)."""


DEFAULT_ATTENTION_EFFICIENCY = 0.6
"""FlashAttention-2 forward+backward on A100: 50–73 % of the dense peak forward, ~60 %
overall (Dao 2023, arXiv 2307.08691, §4.1), used when the catalog has no figure."""


def attention_efficiency(config: AnalyticalConfig, accelerator: AcceleratorSpec) -> float:
    """The flash-attention efficiency in force: the config's override, else the catalog's
    per-accelerator value, else the default."""
    if config.attention_efficiency is not None:
        return config.attention_efficiency
    return accelerator.attention_efficiency or DEFAULT_ATTENTION_EFFICIENCY
