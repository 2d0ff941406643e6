"""Achieved time of one GEMM on one accelerator: a roofline with a tile-utilisation factor.

t(m, k, n) = max(2·m·k·n / (peak · eff(m, k, n)), bytes / (HBM bandwidth · 0.8)) + launch,
bytes = (m·k + k·n + m·n) elements. eff = the accelerator's best-shape GEMM efficiency
(MAMF-style measurement, `docs/reference/hardware_catalog.md` §4) × the tile utilisation
m·n·k / (⌈m/128⌉·128 · ⌈n/128⌉·128 · ⌈k/64⌉·64): a kernel computes whole 128×128 output
tiles over 64-deep k slices (the CUTLASS/cuBLAS tile shape on A100/H100), so thin or ragged
shapes waste the padded part. Williams et al. 2009 (roofline model) for the max().

Wave quantisation (the last partial wave of output tiles, NVIDIA "Matrix Multiplication
Background User's Guide") is not modelled: cuBLAS's split-K and stream-K / persistent
kernels spread the last wave (published Hopper GEMMs with 1.03 waves of 128×128 tiles reach
63–72 % of peak, docs/research/compute.md §1.1 rows 20–21, where a naive wave count
predicts half that).

The launch latency (5 µs by default) covers kernel launch and the tail of a kernel that
does not overlap the next one; it matters only for small GEMMs.

A tile's main loop streams k in 64-deep slices through a multi-stage shared-memory pipeline;
filling that pipeline and writing the tile's output (the epilogue) cost about as much as
`k_overhead` more elements of k, whatever k is. The useful fraction of a tile's time is then
k / (k + k_overhead): short reductions (small h, or h / t under tensor parallelism) run
further below the best-shape efficiency than long ones. The default, 384, is 4 pipeline
stages × 64 plus an epilogue of about two more slices (CUTLASS 3 warp-specialised Hopper
kernels use 4–7 stages, Thakkar et al., CUTLASS documentation "Efficient GEMM").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TILE_M = 128
TILE_N = 128
TILE_K = 64
MEMORY_EFFICIENCY = 0.8
"""Achieved fraction of HBM bandwidth for streaming kernels (STREAM-like copy on H100/A100)."""


def tile_utilisation(m: float, k: float, n: float) -> float:
    """Useful fraction of the padded tile work: m·k·n / (padded m · padded n · padded k)."""
    if m <= 0 or k <= 0 or n <= 0:
        return 1.0
    pm = math.ceil(m / TILE_M) * TILE_M
    pn = math.ceil(n / TILE_N) * TILE_N
    pk = math.ceil(k / TILE_K) * TILE_K
    return (m * k * n) / (pm * pn * pk)


@dataclass(frozen=True, slots=True)
class RooflineGemm:
    """GEMM timing on one accelerator at one precision."""

    peak_flops: float
    """Dense peak FLOP/s at the GEMM precision."""
    efficiency: float
    """Best-shape achieved fraction of the peak (accelerator.gemm_efficiency[_fp8])."""
    memory_bytes_per_s: float
    """HBM bandwidth, bytes/s (line rate; MEMORY_EFFICIENCY is applied here)."""
    bytes_per_element: float = 2.0
    launch_s: float = 5e-6
    k_overhead: float = 384.0
    """Pipeline fill and epilogue per output tile, in elements of k (see module docstring)."""

    def time_s(self, m: float, k: float, n: float) -> float:
        """Seconds for one (m×k)·(k×n) product; 0 for an empty one."""
        if m <= 0 or k <= 0 or n <= 0:
            return 0.0
        flops = 2.0 * m * k * n
        useful = tile_utilisation(m, k, n) * k / (k + self.k_overhead)
        compute = flops / (self.peak_flops * self.efficiency * useful)
        memory = (
            (m * k + k * n + m * n)
            * self.bytes_per_element
            / (self.memory_bytes_per_s * MEMORY_EFFICIENCY)
        )
        return max(compute, memory) + self.launch_s

    def forward_backward_s(self, m: float, k: float, n: float) -> tuple[float, float]:
        """(forward, backward) seconds of a linear layer y = x·W with x (m×k), W (k×n): the
        backward runs the data gradient (m×n)·(n×k) and the weight gradient (k×m)·(m×n),
        2× the forward FLOPs (Narayanan et al. 2021 §5.1)."""
        dgrad, wgrad = self.backward_parts_s(m, k, n)
        return self.time_s(m, k, n), dgrad + wgrad

    def backward_parts_s(self, m: float, k: float, n: float) -> tuple[float, float]:
        """(data-gradient, weight-gradient) seconds of the backward of y = x·W."""
        return self.time_s(m, n, k), self.time_s(k, m, n)
