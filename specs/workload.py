"""Workload specs, a union discriminated on `kind`: training here, serving in
`specs.serving`."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from specs._base import Spec
from specs.serving import ServingWorkload

Precision = Literal["bf16", "fp16", "fp8", "fp32"]
Fp8Recipe = Literal["delayed", "tensorwise", "blockwise", "mxfp8"]
FP8_RECIPE_ALIASES = {"current": "tensorwise", "current_scaling": "tensorwise"}
"""Other names of a recipe (Transformer Engine calls tensorwise scaling "current scaling")."""


class MoERoutingSpec(Spec):
    """How routed tokens spread over the experts of an MoE layer (every field optional;
    the default is a perfectly balanced router without token dropping)."""

    capacity_factor: float | None = Field(default=None, gt=0, le=64)
    """Token dropping (GShard, Lepikhin et al. 2020 §2.2; Switch, Fedus et al. 2021 §2.2):
    each expert processes at most capacity_factor · tokens · top_k / num_experts tokens;
    null means dropless (the busiest expert sets the pace)."""
    imbalance: float | None = Field(default=None, ge=0, le=8)
    """Zipf exponent of the per-expert load (share of expert i ∝ 1/(i+1)^imbalance); 0 or
    null is balanced. Exclusive with expert_loads."""
    expert_loads: list[float] | None = Field(default=None, min_length=2, max_length=4096)
    """A measured per-expert load histogram (any non-negative scale, one entry per routed
    expert, in expert order). Exclusive with imbalance."""
    max_nodes_per_token: int | None = Field(default=None, ge=1, le=4096)
    """Node-limited routing (DeepSeek-V3, arXiv 2412.19437 §2.1.2 / §3.2.2): every token is
    sent to at most this many nodes, once per node over the scale-out network and forwarded
    inside the node; null means unrestricted routing."""

    optimize_placement: bool = False
    """Place the experts of `expert_loads` on each candidate expert-parallel group with the
    expert-placement solver (`POST /v1/expert-placements`, no redundant copies) instead of
    contiguously in expert order; the search then prices each expert degree at the busiest
    rank of that placement."""
    rank_load_factors: dict[int, float] | None = None
    """Busiest-rank load factor λ (max rank load / mean rank load) per expert-parallel degree,
    filled in by the service from the placement when optimize_placement is set; a given
    degree's entry replaces the contiguous-placement computation."""

    @model_validator(mode="after")
    def _check(self) -> MoERoutingSpec:
        if self.optimize_placement and self.expert_loads is None:
            raise ValueError(
                "moe_routing.optimize_placement needs moe_routing.expert_loads "
                "(a measured per-expert histogram to place)"
            )
        if self.rank_load_factors is not None and any(
            k < 1 or not 0 < v <= 4096 for k, v in self.rank_load_factors.items()
        ):
            raise ValueError(
                "moe_routing.rank_load_factors maps expert degrees >= 1 to "
                f"factors in (0, 4096] (got {self.rank_load_factors})"
            )
        if self.imbalance is not None and self.expert_loads is not None:
            raise ValueError(
                "moe_routing.imbalance and moe_routing.expert_loads are exclusive "
                "(give one of them)"
            )
        if self.expert_loads is not None:
            if any(x < 0 for x in self.expert_loads):
                raise ValueError(
                    f"moe_routing.expert_loads must be non-negative (got {self.expert_loads})"
                )
            if sum(self.expert_loads) <= 0:
                raise ValueError("moe_routing.expert_loads must not be all zero")
        return self


Packing = Literal["pack", "concat", "pad"]
MAX_LENGTH_BUCKETS = 4096
"""Most buckets a `sequence_lengths.histogram` may have."""
MAX_LENGTH_SAMPLES = 65_536
"""Most lengths a `sequence_lengths.samples` list may have."""


class LengthBucket(Spec):
    """One bucket of a document-length histogram."""

    length: int = Field(ge=1, le=4_194_304)
    """Document length, tokens (at most the workload's `sequence_length`)."""
    count: float = Field(ge=0, le=1e15)
    """Documents of this length: a count or a fraction of the documents (any non-negative
    scale; the buckets are normalised to sum to 1)."""


class SequenceLengthsSpec(Spec):
    """The distribution of document (sample) lengths of a training corpus and how a batch is
    formed from them: a `histogram` or `samples` (exactly one), and `packing`.

    `packing` (`cost_models/analytical/sequence_lengths.py` prices each):
    - `pack`: whole documents are concatenated up to `sequence_length` tokens (never split;
      SFT-style packing, FlexSP's packed sequences) and attend only within their document:
      variable-length attention (Transformer Engine THD format with `cu_seqlens`, Megatron
      `--reset-attention-mask --reset-position-ids`; torchtitan `attn_mask_type =
      "block_causal"` with `attn_type = "varlen"` or `"flex"`). `global_batch_size` counts
      packed sequences, every token is a document's token, and the attention core's work
      follows Σ sᵢ² over the documents rather than sequence_length².
    - `concat`: the document stream is cut every `sequence_length` tokens (documents split
      at the boundary, Megatron-Core's GPTDataset) with the same per-document masking.
    - `pad`: each document is one sample, padded to `sequence_length` (a fixed-shape batch,
      no document masking): `global_batch_size` counts documents, every sample costs a full
      sequence and the padding is wasted work.
    """

    histogram: list[LengthBucket] | None = Field(
        default=None, min_length=1, max_length=MAX_LENGTH_BUCKETS
    )
    """Document lengths as buckets `{length, count}` (at most 4096 buckets); exclusive with
    `samples`."""
    samples: list[Annotated[int, Field(ge=1, le=4_194_304)]] | None = Field(
        default=None, min_length=1, max_length=MAX_LENGTH_SAMPLES
    )
    """Observed document lengths, tokens, one per document (at most 65,536 entries; each at
    least 1); exclusive with `histogram`."""
    packing: Packing = "pack"
    """How documents form the batch: `pack` (whole documents concatenated up to
    sequence_length tokens, per-document attention masks / cu_seqlens), `concat` (the
    document stream cut every sequence_length tokens, documents split at the boundary, same
    masking) or `pad` (one document per sequence, padded to sequence_length)."""

    @model_validator(mode="after")
    def _one_form(self) -> SequenceLengthsSpec:
        if (self.histogram is None) == (self.samples is None):
            raise PydanticCustomError(
                "sequence_lengths_form",
                "give exactly one of sequence_lengths.histogram and sequence_lengths.samples",
            )
        if self.histogram is not None and not sum(b.count for b in self.histogram) > 0:
            raise PydanticCustomError(
                "sequence_lengths_empty", "sequence_lengths.histogram counts are all zero"
            )
        return self

    def buckets(self) -> tuple[tuple[int, float], ...]:
        """(length, fraction of the documents) per distinct length, ascending, fractions
        summing to 1 (zero-count buckets dropped)."""
        counts: dict[int, float] = {}
        if self.samples is not None:
            for x in self.samples:
                counts[x] = counts.get(x, 0.0) + 1.0
        for b in self.histogram or ():
            if b.count > 0:
                counts[b.length] = counts.get(b.length, 0.0) + b.count
        total = sum(counts.values())
        return tuple((n, counts[n] / total) for n in sorted(counts))

    def longest(self) -> int:
        """The longest document, tokens."""
        return self.buckets()[-1][0]


class TrainingWorkload(Spec):
    """Pre-training or fine-tuning with mixed-precision Adam."""

    kind: Literal["training"] = "training"
    """Workload kind: `training` (the default when a request leaves `kind` out)."""
    global_batch_size: int = Field(ge=1, le=16_777_216)
    """Sequences per optimizer step (with `sequence_lengths`: packed sequences for `pack` /
    `concat`, documents, each padded to one sequence, for `pad`)."""
    sequence_length: int = Field(ge=1, le=4_194_304)
    """Tokens per sequence."""
    precision: Precision = "bf16"
    """Compute precision of the GEMMs (fp8 keeps bf16 weights, as Transformer Engine does)."""
    fp8_recipe: Fp8Recipe | None = None
    """FP8 scaling recipe (Megatron-Core `--fp8-recipe`): `delayed` (per-tensor scales from
    an amax history), `tensorwise` (alias `current`: per-tensor scales from this step's
    amax), `blockwise` (1×128 / 128×128 blocks, DeepSeek-V3) or `mxfp8` (one scale per 32
    elements, Blackwell). Only with precision fp8; null: mxfp8 on hardware with MX scaling
    (Blackwell), else delayed."""
    moe_routing: MoERoutingSpec | None = None
    """MoE token routing (capacity factor, load skew); null: balanced and dropless. Ignored
    for dense models."""
    train_tokens: float | None = Field(default=None, gt=0, le=1e16)
    """Tokens the whole training run consumes (e.g. 1.5e13 for 15T), tokens; every plan then
    reports `metrics.time_to_train_days`, and the `min_time_to_train` objective needs it."""
    target_tokens_per_s: float | None = Field(default=None, gt=0, le=1e12)
    """Throughput the job must reach, tokens per second: the `min_gpus` objective returns the
    fewest GPUs that reach it."""
    deadline_days: float | None = Field(default=None, gt=0, le=36_500)
    """Days the run may take, days: with `train_tokens`, the `min_gpus` objective's target
    (train_tokens / deadline_days / 86,400 tokens per second) when `target_tokens_per_s` is
    not given."""
    sequence_lengths: SequenceLengthsSpec | None = None
    """Document-length distribution (`histogram` of `{length, count}` or `samples`, lengths
    in tokens, each at most sequence_length) and `packing` (`pack` / `concat`: documents
    packed into sequences of sequence_length tokens with per-document attention; `pad`: one
    document per sequence, padded). Null: every sequence is one document of sequence_length tokens
    (priced exactly as before this field existed)."""

    @field_validator("sequence_lengths")
    @classmethod
    def _lengths_fit(
        cls, value: SequenceLengthsSpec | None, info: ValidationInfo
    ) -> SequenceLengthsSpec | None:
        seq = info.data.get("sequence_length")
        if value is None or seq is None:
            return value
        lengths = value.samples or [b.length for b in value.histogram or ()]
        form = "samples" if value.samples is not None else "histogram"
        for i, length in enumerate(lengths):
            if length > seq:
                entry = f"{form}.{i}" if form == "samples" else f"{form}.{i}.length"
                raise PydanticCustomError(
                    "length_above_sequence_length",
                    "sequence_lengths.{entry} = {length} tokens exceeds sequence_length "
                    "({sequence_length}): every document must fit one sequence",
                    {"entry": entry, "length": length, "sequence_length": seq},
                )
        return value

    @field_validator("fp8_recipe", mode="before")
    @classmethod
    def _recipe_alias(cls, value: Any) -> Any:
        if isinstance(value, str):
            return FP8_RECIPE_ALIASES.get(value.lower(), value.lower())
        return value

    @model_validator(mode="after")
    def _recipe_needs_fp8(self) -> TrainingWorkload:
        if self.fp8_recipe is not None and self.precision != "fp8":
            raise ValueError(
                f"fp8_recipe ({self.fp8_recipe}) needs precision fp8 (got {self.precision})"
            )
        return self

    @model_serializer(mode="wrap")
    def _omit_unset_routing(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Requests without the newer optional fields dump exactly as before they existed
        (request hashes stay)."""
        data = handler(self)
        if isinstance(data, dict):
            for name in (
                "moe_routing",
                "fp8_recipe",
                "train_tokens",
                "target_tokens_per_s",
                "deadline_days",
                "sequence_lengths",
            ):
                if data.get(name, 0) is None:
                    del data[name]
        return data

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.sequence_length

    @property
    def real_tokens_per_step(self) -> float:
        """Documents' tokens per step, padding excluded: tokens_per_step, or with
        `sequence_lengths` packed `pad` global_batch_size × the mean document length."""
        spec = self.sequence_lengths
        if spec is None or spec.packing != "pad":
            return float(self.tokens_per_step)
        mean = math.fsum(length * fraction for length, fraction in spec.buckets())
        return self.global_batch_size * mean

    @property
    def required_tokens_per_s(self) -> float | None:
        """The throughput the run must reach: `target_tokens_per_s`, else `train_tokens` over
        `deadline_days`; null when neither is given."""
        if self.target_tokens_per_s is not None:
            return self.target_tokens_per_s
        if self.train_tokens is not None and self.deadline_days is not None:
            return self.train_tokens / (self.deadline_days * 86_400.0)
        return None


Workload = Annotated[TrainingWorkload | ServingWorkload, Field(discriminator="kind")]
