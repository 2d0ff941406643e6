"""A training batch drawn from a document-length distribution (`workload.sequence_lengths`):
what one priced sequence of S = sequence_length tokens holds, on average.

Let the documents have lengths sᵢ with document fractions fᵢ (Σ fᵢ = 1), μ = E[s] = Σ fᵢ·sᵢ,
E[s²] = Σ fᵢ·sᵢ² and E[s³] = Σ fᵢ·sᵢ³. A token lies in a document of length s with
probability f_s·s / μ (length-biased sampling). The linear parts of a layer (GEMMs,
elementwise kernels, tensor / expert / pipeline / data-parallel traffic) scale with the
tokens of a sequence; the attention core scales with Σ over the attention blocks of
(block length)² — S² for one document of S tokens. Per packing:

- `pack` (whole documents concatenated up to S, never split: SFT-style packing, FlexSP,
  Megatron-Core THD / `cu_seqlens`, torchtitan `block_causal`): every token is a real token
  (a large pool packs with negligible residue; the residue is not priced) and the expected
  Σ sᵢ² of the documents of one sequence is S·Σ_s (f_s·s/μ)·s = S·E[s²]/μ (each token
  contributes its own document's length). Attention work relative to one S-token document:
  ρ = E[s²] / (μ·S).
- `concat` (the stream of documents cut every S tokens, documents split at the boundary:
  Megatron-Core's GPTDataset with `--reset-attention-mask`): the sequence is a window of S
  tokens at a uniformly random offset of a stationary renewal process of document lengths.
  Σ (piece length)² = ∫∫ 1[x, y in one document] dx dy over the window, and two points u
  apart lie in one document with probability (1/μ)·Σ f_s·(s − u)₊ (no boundary within u),
  so E[Σ pieces²] = 2∫₀ˢ (S − u)·(1/μ)·Σ f_s (s − u)₊ du = (S·E[s²] − E[s³]/3) / μ for
  s ≤ S (per bucket ∫₀ˢ (S − u)(s − u) du = S·s²/2 − s³/6). ρ = that / S². One document of
  S tokens at a random offset gives 2/3: a split document does less attention work.
- `pad` (one document per sequence, padded to S, no varlen kernel): the GPUs do the full
  S-token work of every sequence (ρ = 1), but only μ of its S tokens are real: padding
  waste 1 − μ/S, and the useful attention work is E[s²]/S².

Memory peak: a micro-batch holds b·S tokens and, in every mode, may hold one document of S
tokens (the longest sequence it can hold), so activations are priced as today (flash
attention keeps them linear in tokens; the unfused kernel materialises S² scores whatever
the mask). Only the flash kernel skips the masked blocks: the unfused path is priced at
ρ = 1 in every mode (`priced_attention_factor`).

Per-bucket context parallelism (Megatron-Core `hybrid_context_parallel`,
`pipeline_parallel/hybrid_cp_schedule.py` `BalancedCPScheduler.gpus_needed`; ByteScale's
Hybrid Data Parallelism, Ge et al., arXiv 2502.21231 §4, data-aware sharding; FlexSP, Wang
et al., ASPLOS'25): each document gets its own degree
k(s) = max(1, 2^⌈log₂(s / C)⌉), C = `max_seqlen_per_dp_cp_rank` (the b·S/c tokens a rank
holds under the plan), instead of the plan's one degree c. A ring moves, per rank, the K/V
of its tokens k − 1 times (Liu et al. 2023), so the context-parallel volume relative to
the uniform degree is Σ_s w_s·(k(s) − 1) / (c − 1) with w_s = f_s·s/μ the token fraction
(`per_bucket_context_parallel`). The search space has one context degree per plan, so this
is reported, not searched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from specs.workload import TrainingWorkload


@dataclass(frozen=True, slots=True)
class LengthMix:
    """The statistics of a document-length distribution for one sequence length."""

    sequence_length: int
    packing: str
    buckets: tuple[tuple[int, float], ...]
    """(length, document fraction), ascending."""
    mean: float
    """μ = E[s], tokens."""
    mean_square: float
    """E[s²], tokens²."""
    mean_cube: float
    """E[s³], tokens³."""

    @classmethod
    def of(cls, workload: TrainingWorkload) -> LengthMix | None:
        """The mix of `workload` (None without `sequence_lengths`)."""
        spec = workload.sequence_lengths
        if spec is None:
            return None
        buckets = spec.buckets()
        return cls(
            workload.sequence_length,
            spec.packing,
            buckets,
            math.fsum(f * s for s, f in buckets),
            math.fsum(f * s * s for s, f in buckets),
            math.fsum(f * s**3 for s, f in buckets),
        )

    @property
    def attention_factor(self) -> float:
        """ρ: the attention-core work of one priced sequence relative to one document of
        S tokens (module docstring), for a kernel that skips masked blocks."""
        S = self.sequence_length
        if self.packing == "pack":
            return min(1.0, self.mean_square / (self.mean * S))
        if self.packing == "concat":
            return min(1.0, (S * self.mean_square - self.mean_cube / 3.0) / (self.mean * S * S))
        return 1.0

    def priced_attention_factor(self, flash: bool) -> float:
        """The factor the attention core's time is priced with: ρ with flash attention (the
        varlen / block-masked kernel skips other documents' blocks), 1 without."""
        return self.attention_factor if flash else 1.0

    @property
    def real_token_fraction(self) -> float:
        """Fraction of the S tokens of a sequence that are documents' tokens (not padding)."""
        return self.mean / self.sequence_length if self.packing == "pad" else 1.0

    @property
    def useful_attention_factor(self) -> float:
        """The attention work of the real tokens relative to one S-token document (the MFU
        numerator): ρ when packed, E[s²]/S² when padded."""
        if self.packing == "pad":
            return self.mean_square / self.sequence_length**2
        return self.attention_factor

    @property
    def documents_per_sequence(self) -> float:
        """Documents (or, for concat, document pieces' documents) per sequence: S/μ packed,
        1 padded."""
        return 1.0 if self.packing == "pad" else self.sequence_length / self.mean

    def token_fractions(self) -> list[float]:
        """Per bucket, the fraction of the tokens in documents of that length (f·s/μ)."""
        return [f * s / self.mean for s, f in self.buckets]

    def report(self, global_batch: int) -> dict[str, Any]:
        """The figures an estimate quotes (`details.sequence_lengths`)."""
        return {
            "packing": self.packing,
            "mean_length": self.mean,
            "longest_length": self.buckets[-1][0],
            "buckets": len(self.buckets),
            "attention_factor": self.attention_factor,
            "useful_attention_factor": self.useful_attention_factor,
            "real_tokens_per_step": global_batch * self.sequence_length * self.real_token_fraction,
            "documents_per_step": global_batch * self.documents_per_sequence,
            "padding_waste_fraction": 1.0 - self.real_token_fraction,
        }

    def per_bucket_context_parallel(
        self, context: int, tokens_per_rank: float, exposed_cp_s: float, step_s: float
    ) -> dict[str, Any] | None:
        """What per-document context-parallel degrees would give (module docstring): each
        bucket's degree, the context-parallel volume relative to the plan's uniform degree
        `context`, and the plan's exposed context-parallel seconds and step time scaled by
        it (an estimate: exposure taken proportional to volume). None for a padded batch
        (one document per sequence) or without context parallelism."""
        if context <= 1 or self.packing == "pad":
            return None
        rows = []
        volume = 0.0
        for (s, _f), w in zip(self.buckets, self.token_fractions(), strict=True):
            k = min(context, max(1, 2 ** math.ceil(math.log2(s / tokens_per_rank))))
            rows.append({"length": s, "token_fraction": w, "context_parallel": k})
            volume += w * (k - 1)
        fraction = volume / (context - 1)
        cp_s = exposed_cp_s * fraction
        return {
            "max_seqlen_per_dp_cp_rank": tokens_per_rank,
            "degrees": rows,
            "volume_fraction": fraction,
            "context_parallel_comm_s": cp_s,
            "step_time_s": step_s - (exposed_cp_s - cp_s),
            "framework": "megatron_core hybrid_context_parallel (not searched: a plan has one "
            "context degree)",
        }
