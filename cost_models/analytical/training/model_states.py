"""Per-GPU parameters and their model-state bytes (weights, gradients, optimizer states) by
layer, embedding and LM head, under the plan's tensor, expert and ZeRO sharding and its
framework's bytes per parameter (`FrameworkProfile.state_bytes_per_param`), and the ZeRO-3
gathered working copy."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from cost_models.analytical.flops import layer_gemms
from cost_models.analytical.training.context import ProblemContext
from cost_models.analytical.training.layer_sequence import LayerSeq, per_layer
from cost_models.analytical.training.shapes import StateShape
from cost_models.frameworks import FrameworkProfile
from specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class LayerState:
    """Per-GPU parameters of one layer kind (or an embedding / head) and their state bytes."""

    params: float
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    shard_params: float
    """Parameters whose optimizer state this GPU updates (for the Adam step)."""
    expert_params: float = 0.0
    """Of `params`, the routed-expert ones (reduced over the expert-data-parallel group)."""

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes


def state(
    profile: FrameworkProfile,
    dense_params: float,
    expert_params: float,
    shape: StateShape,
    weight_extra_bytes: float = 0.0,
) -> LayerState:
    """State bytes of per-GPU parameters: dense ones sharded over data × context
    (`shape.shards`), expert ones over the expert-data-parallel group
    data·context·tensor / (expert·expert_tensor). `weight_extra_bytes` per parameter are
    held next to unsharded weights (FP8 weight copies, `fp8_weight_extra_bytes`)."""
    zero, shards = shape.zero_stage, shape.shards
    w, g, o = profile.state_bytes_per_param(zero, shards)
    e_shards = max(1, shards * shape.tensor // (shape.expert * shape.expert_tensor))
    we, ge, oe = profile.state_bytes_per_param(zero, e_shards)
    if zero < 3:
        w += weight_extra_bytes
        we += weight_extra_bytes
    if zero == 0:  # every replica runs the full Adam step
        shard_params = dense_params + expert_params
    else:
        shard_params = dense_params / shards + expert_params / e_shards
    return LayerState(
        params=dense_params + expert_params,
        weights_bytes=dense_params * w + expert_params * we,
        grads_bytes=dense_params * g + expert_params * ge,
        optimizer_bytes=dense_params * o + expert_params * oe,
        shard_params=shard_params,
        expert_params=expert_params,
    )


def layer_params(model: ModelSpec, is_moe: bool, shape: StateShape) -> tuple[float, float]:
    """(dense, expert) parameters of one layer on one GPU: matrices / tensor, norms
    replicated, routed experts / (expert × expert_tensor)."""
    t = shape.tensor
    norms = 2 * model.norm_parameters()
    if not is_moe:
        return (model.attention_parameters() + model.dense_mlp_parameters()) / t + norms, 0.0
    assert model.moe is not None
    routed = model.moe.num_experts * model.expert_parameters()
    rest = model.moe_block_parameters() - routed
    dense = (model.attention_parameters() + rest) / t + norms
    return dense, routed / (shape.expert * shape.expert_tensor)


def state_seq(ctx: ProblemContext, shape: StateShape) -> LayerSeq:
    """Per-layer state bytes of every layer (shared by every plan with this state shape)."""
    hit = ctx.state_seqs.get(shape)
    if hit is not None:
        return hit
    profile = ctx.framework(shape.framework)
    extra = fp8_weight_extra_bytes(ctx, profile)
    states = {
        k: state(profile, *layer_params(ctx.model, k, shape), shape, extra) for k in ctx.kinds
    }
    items = per_layer(states, ctx.moe_flags)
    hit = ctx.state_seqs[shape] = LayerSeq(
        items=items,
        public={
            "state": per_layer({k: x.total_bytes for k, x in states.items()}, ctx.moe_flags),
        },
        max_working_bytes=0.0,
        max_params=max(st.params for st in states.values()),
        params_sum=sum(st.params for st in items),
        uniform=len(states) == 1,
    )
    return hit


def fp8_weight_extra_bytes(ctx: ProblemContext, profile: FrameworkProfile) -> float:
    """Bytes per layer parameter FP8 training adds to the weights (`fp8.py`): the resident
    FP8 copies, or, with FP8 primary weights (`fp8_param_gather`), the FP8 weight (1 B, plus
    its transpose where the GEMMs need one) in place of the BF16 one."""
    fp8 = ctx.fp8
    if fp8 is None:
        return 0.0
    if profile.config.fp8_param_gather:
        return 1.0 + (1.0 if fp8.transposes else 0.0) - profile.config.weight_bytes_per_param
    return fp8.weight_copy_bytes_per_param


def extra_states(
    ctx: ProblemContext, shape: StateShape, head_params_on: bool
) -> tuple[LayerState, LayerState]:
    """States of the embedding (first chunk) and of the LM head (when its parameters are on
    the last chunk: untied, or tied but on another rank than the embedding) + final norm."""
    key = (shape, head_params_on)
    hit = ctx.extra_states.get(key)
    if hit is not None:
        return hit
    model, t = ctx.model, shape.tensor
    profile = ctx.framework(shape.framework)
    first = state(profile, model.embedding_parameters() / t, 0.0, shape)
    head_params = model.vocab_size * model.hidden_size if head_params_on else 0
    last = state(profile, head_params / t + model.norm_parameters(), 0.0, shape)
    hit = ctx.extra_states[key] = (first, last)
    return hit


def head_params_on_last(model: ModelSpec, pipeline: int) -> bool:
    """The last chunk holds LM-head parameters: untied, or tied with the embedding on
    another pipeline rank (Megatron keeps a copy and all-reduces its gradient)."""
    return not model.tie_embeddings or pipeline > 1


PARAM_BYTES = 2.0
"""bf16 parameters."""


ZERO3_LIVE_MODULES = 2
"""Gathered units resident at once under ZeRO-3: the one computing and the one prefetched."""


def zero3_working_bytes(ctx: ProblemContext, shape: StateShape) -> float:
    """Bytes ZeRO-3 holds gathered at once on one GPU (0 without ZeRO-3 or sharding).

    FSDP / FSDP2 and Megatron-FSDP gather a whole transformer layer (their wrap unit) before
    its forward and backward, prefetching the next, and the unit's unsharded gradient lives
    until its reduce-scatter: two layers of bf16 parameters plus one layer's gradient in the
    framework's reduce dtype (Zhao et al. 2023, PyTorch FSDP, §3.2-3.3). DeepSpeed gathers
    module by module and frees each after use (Rajbhandari et al. 2020 §5.3;
    `stage3_prefetch_bucket_size`): about two of the largest modules. A layer's parameters
    on the GPU are split over the tensor group (routed experts: the GPU's num_experts /
    expert experts, each split over expert_tensor).
    """
    if shape.zero_stage != 3 or shape.shards <= 1:
        return 0.0
    hit = ctx.zero3_working.get(shape)
    if hit is None:
        cfg = ctx.framework(shape.framework).config
        if cfg.zero3_unit == "layer":
            layer: float = max(item.params for item in state_seq(ctx, shape).items)
            hit = ZERO3_LIVE_MODULES * PARAM_BYTES * layer + cfg.grad_reduce_bytes * layer
        else:
            hit = _largest_modules_bytes(ctx.model, shape.tensor, shape.expert, shape.expert_tensor)
        ctx.zero3_working[shape] = hit
    return hit


@functools.lru_cache(maxsize=4096)
def _largest_modules_bytes(model: ModelSpec, tensor: int, expert: int, expert_tensor: int) -> float:
    """bf16 bytes of the two largest modules (linear layers) of a layer on one GPU."""
    largest = 0.0
    kinds = {model.is_moe_layer(i) for i in range(model.num_layers)}
    for is_moe in kinds:
        for gemm in layer_gemms(model, is_moe, 1.0):
            weights = gemm.k * gemm.n
            if gemm.split in ("col", "row"):
                weights /= tensor
            elif gemm.split.startswith("expert"):
                assert model.moe is not None
                weights *= model.moe.num_experts / expert / expert_tensor
            largest = max(largest, weights)
    return ZERO3_LIVE_MODULES * PARAM_BYTES * largest
