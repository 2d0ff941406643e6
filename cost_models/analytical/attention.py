"""Attention-core (QKᵀ, softmax, AV) time per micro-batch on one GPU.

Flash attention (Dao et al. 2022; Dao 2023, FlashAttention-2): fused, O(s) memory. Its
forward does 2·b·s_q·s_k·heads·(d_qk + d_v) FLOPs; a causal mask lets the kernel skip about
half of the blocks. It reaches roughly 50–73 % of the dense bf16 peak on A100 (FA-2 paper,
§4.1) and 60–75 % on H100 (FlashAttention-3, Shah et al. 2024), so the default efficiency is
0.6 of the dense bf16 peak (fp8 training keeps the attention core in bf16). The backward does
5 matmuls against the forward's 2 (FA-2 §3.1.2): backward time = 2.5 × forward by default.

Without flash attention the two batched GEMMs compute the full s² (no causal saving) at GEMM
efficiency and the s×s scores/probabilities round-trip through HBM (about 6 passes of
2-byte elements forward: write scores, softmax read/write, dropout read/write, read for AV).

Context parallelism (ring attention, Liu et al. 2023; Megatron-Core CP with load-balanced
causal chunks) gives each of c ranks s/c queries against all s keys: work / c.

Documents packed into a sequence and masked per document (`sequence_lengths.py`): the
variable-length flash kernel (cu_seqlens; FlashAttention-2 `flash_attn_varlen_func`, Transformer
Engine THD) computes only each document's own blocks, so its FLOPs are `work` = Σ sᵢ² / s² of
the single-document figure; the unfused path computes the masked s² scores anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.analytical.gemm import MEMORY_EFFICIENCY

UNFUSED_SCORE_PASSES = 6
"""HBM passes over the s×s score matrix in the unfused forward (see module docstring)."""


@dataclass(frozen=True, slots=True)
class AttentionCoreModel:
    """Times of the attention core on one GPU."""

    peak_flops: float
    """Dense bf16 peak FLOP/s."""
    flash_efficiency: float
    """Achieved fraction of the peak in the flash kernel (Config.attention_efficiency)."""
    gemm_efficiency: float
    """Fraction reached by the unfused batched GEMMs."""
    memory_bytes_per_s: float
    backward_ratio: float = 2.5
    launch_s: float = 5e-6

    def forward_time_s(
        self,
        b: int,
        s: int,
        heads: float,
        qk_dim: int,
        v_dim: int,
        context: int,
        flash: bool,
        launches: int | None = None,
        work: float = 1.0,
    ) -> float:
        """Forward seconds per micro-batch of b sequences of s tokens, `heads` query heads
        on this GPU (a / t), causal, split over `context` ranks (whatever the algorithm:
        each rank does 1/c of the work). `launches`: flash kernels the forward runs (None:
        a ring's 2c, `context_parallel.attention_launches` for the others). `work`: the
        flash kernel's share of the s² blocks under per-document masks (module docstring;
        ignored unfused)."""
        full_flops = 2.0 * b * s * s * heads * (qk_dim + v_dim) / context
        if flash:
            full_flops *= work
            # A context-parallel ring runs one kernel per ring step and, with load-balanced
            # causal chunks, two per step (Megatron-Core / Transformer Engine CP): 2c launches.
            if launches is None:
                launches = 2 * context if context > 1 else 1
            return (
                0.5 * full_flops / (self.peak_flops * self.flash_efficiency)
                + launches * self.launch_s
            )
        compute = full_flops / (self.peak_flops * self.gemm_efficiency)
        score_bytes = UNFUSED_SCORE_PASSES * 2.0 * b * heads * s * s / context
        memory = score_bytes / (self.memory_bytes_per_s * MEMORY_EFFICIENCY)
        return compute + memory + 4 * self.launch_s

    def backward_time_s(
        self,
        b: int,
        s: int,
        heads: float,
        qk_dim: int,
        v_dim: int,
        context: int,
        flash: bool,
        launches: int | None = None,
        work: float = 1.0,
    ) -> float:
        """Backward seconds: `backward_ratio` × forward (flash) or 2 × forward (unfused)."""
        fwd = self.forward_time_s(b, s, heads, qk_dim, v_dim, context, flash, launches, work)
        return (self.backward_ratio if flash else 2.0) * fwd
