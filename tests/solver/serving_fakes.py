"""Fake `InstanceCost`s for the serving simulator tests: affine iteration times, so schedules
and latencies can be derived by hand. Not physics."""

from __future__ import annotations

from dataclasses import dataclass, field

from cost_models.serving.base import IterationBatch


@dataclass
class AffineCost:
    """iteration time = base + per_prefill_token·prefill_tokens + per_pair·attention pairs
    + per_decode_seq·decode_seqs + per_context_token·decode_context_tokens
    (+ per_context_sq·decode_context_tokens², to make it non-affine);
    KV transfer = transfer_s + transfer_per_token_s·tokens. Optionally records every batch."""

    base: float = 1.0
    per_prefill_token: float = 0.0
    per_pair: float = 0.0
    per_decode_seq: float = 0.0
    per_context_token: float = 0.0
    per_context_sq: float = 0.0
    kv_tokens: int = 1 << 40
    transfer_s: float = 0.0
    transfer_per_token_s: float = 0.0
    num_gpus: int = 1
    kv_cache_gib: float = 1.0
    weights_gib: float = 1.0
    record: bool = False
    batches: list[IterationBatch] = field(default_factory=list)

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv_tokens

    def iteration_time_s(self, batch: IterationBatch) -> float:
        if self.record:
            self.batches.append(batch)
        ctx = batch.decode_context_tokens
        return (
            self.base
            + self.per_prefill_token * batch.prefill_tokens
            + self.per_pair * batch.prefill_attention_pairs
            + self.per_decode_seq * batch.decode_seqs
            + self.per_context_token * ctx
            + self.per_context_sq * ctx * ctx
        )

    def kv_transfer_time_s(self, tokens: int) -> float:
        return self.transfer_s + self.transfer_per_token_s * tokens


def realistic() -> AffineCost:
    """Roughly an 8B model on one GPU: 10 ms per pass, 50 µs per prompt token, 0.2 ms per
    decode sequence, KV read 0.1 µs per context token; 100k tokens of KV."""
    return AffineCost(
        base=0.01,
        per_prefill_token=5e-5,
        per_decode_seq=2e-4,
        per_context_token=1e-7,
        kv_tokens=100_000,
        transfer_s=2e-3,
        transfer_per_token_s=1e-6,
    )
