"""Workload specs, a union discriminated on `kind`: training here, serving in
`specs.serving`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

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


class TrainingWorkload(Spec):
    """Pre-training or fine-tuning with mixed-precision Adam."""

    kind: Literal["training"] = "training"
    """Workload kind: `training` (the default when a request leaves `kind` out)."""
    global_batch_size: int = Field(ge=1, le=16_777_216)
    """Sequences per optimizer step."""
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
            ):
                if data.get(name, 0) is None:
                    del data[name]
        return data

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.sequence_length

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
