"""Serving instances whose pipeline stages run on different node groups: the rules such an
instance must meet and the layer split when it gives none.

An instance with `stage_groups` puts stage j on `tensor × expert` GPUs of the pool
`stage_groups[j]` names (Helix, Mei et al., ASPLOS'25; Parallax, Tong et al. 2025: one
replica's layers over GPUs of different kinds, more layers on the faster ones). It is priced
by `cost_models.serving.pipeline.PipelineInstanceCost` over one-stage costs.

The split (`split_layers`), when `stage_layers` is not given: the contiguous layers per stage
that minimise the slowest stage's time for one decode iteration at a representative batch
(`split_batch`: min(max batch, `SPLIT_BATCH`) sequences at the mean context, prompt +
output / 2), subject to each stage's memory holding its weights and the KV cache of
`kv_tokens` tokens (the longest request, which the estimate requires the instance to hold)
for its layers:

    min  max_j W_j,   W_j = Σ_{l ∈ stage j} τ^j_l        (stage j's time on its pool)
    s.t. Σ_{l ∈ stage j} (w^j_l + kv_tokens · k^j_l) ≤ U_j   (its GPUs' weights and KV)

τ^j_l and w^j_l are the time and weight bytes of layer l alone as a middle stage on stage
j's pool (a one-layer stage of the cost model), k^j_l its KV bytes per token per GPU and U_j
the pool's memory budget per GPU (usable memory less the reserve); layer 0 always sits on
stage 0 and takes the one-layer first stage's figures (the embedding with it), layer L − 1
on the last stage the one-layer last stage's (LM head, sampler, per-iteration overhead), so
W_j is exactly the stage's own cost-model time. The program is the training side's
(`solver.formulations.mixed_partition.solve_split`: bisection on the bottleneck over the
reachable layer boundaries), exact; tests compare it with brute force.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cost_models.mixed import field_refusal, pool_names
from cost_models.serving.base import InstanceCost, IterationBatch
from hardware_catalog.schema import ResolvedCluster
from solver.formulations.mixed_partition import solve_split, split_stage
from specs.errors import InfeasiblePlan
from specs.model import ModelSpec
from specs.serving import ServingPlan

GIB = 1024**3
SPLIT_BATCH = 64
"""Largest decode batch the split is balanced at (the instance's max batch when smaller): a
batch in the range where TPOT targets of tens of ms keep decode, between the weight-read
bound of small batches and the compute bound of large ones."""

StageCost = Callable[[str, tuple[int, int]], InstanceCost]
"""(pool, (start, stop)) → the cost of one stage holding layers [start, stop) on that pool;
raises InfeasiblePlan when they do not fit."""


def check_stage_groups(model: ModelSpec, cluster: ResolvedCluster, plan: ServingPlan) -> None:
    """The rules of every instance with `stage_groups` (or `stage_layers`), each a 422 naming
    the field, the rule and the value: colocated (`both`) instances only, one group per
    pipeline stage and at most one stage per layer, groups of the cluster
    (`cost_models.mixed.pool_names`), no `group` beside them, and layers (when given) one
    count per stage, each at least 1, adding to the model's layers.

    Raises:
        InfeasiblePlan: ("topology") with `errors` naming the field.
    """
    for i, inst in enumerate(plan.instances):
        where = f"plan.instances.{i}"
        if inst.stage_groups is None:
            if inst.stage_layers is not None:
                raise field_refusal(
                    f"{where}.stage_layers needs stage_groups (the group of every stage)",
                    f"{where}.stage_layers",
                    "only with stage_groups",
                    inst.stage_layers,
                )
            continue
        p = inst.parallelism.pipeline
        if inst.role != "both" or plan.mode != "colocated":
            raise field_refusal(
                f"{where} is a {inst.role} instance of a {plan.mode} plan: only colocated "
                "instances spread their stages over node groups for now",
                f"{where}.stage_groups",
                "colocated instances only",
                inst.stage_groups,
            )
        if len(inst.stage_groups) != p:
            raise field_refusal(
                f"{where}.stage_groups lists {len(inst.stage_groups)} groups for "
                f"pipeline={p} stages",
                f"{where}.stage_groups",
                f"one group per pipeline stage ({p})",
                inst.stage_groups,
            )
        if p > model.num_layers:
            raise field_refusal(
                f"{where} has pipeline={p} stages for the {model.num_layers} layers of "
                f"{model.name}",
                f"{where}.stage_groups",
                f"at most {model.num_layers} stages (one layer each)",
                inst.stage_groups,
            )
        pool_names(cluster, inst.stage_groups, f"{where}.stage_groups.{{}}")
        if inst.group is not None:
            raise field_refusal(
                f"{where} names group {inst.group!r} and stage_groups: stage_groups says "
                "where every stage runs (drop group)",
                f"{where}.group",
                "not with stage_groups",
                inst.group,
            )
        layers = inst.stage_layers
        if layers is None:
            continue
        field = f"{where}.stage_layers"
        if len(layers) != p:
            raise field_refusal(
                f"{field} lists {len(layers)} counts for pipeline={p} stages",
                field,
                f"one count per pipeline stage ({p})",
                layers,
            )
        if min(layers) < 1:
            raise field_refusal(
                f"{field} gives a stage {min(layers)} layers", field, "at least 1 per stage", layers
            )
        if sum(layers) != model.num_layers:
            raise field_refusal(
                f"{field} adds to {sum(layers)} layers; {model.name} has {model.num_layers}",
                field,
                f"adds to {model.num_layers}",
                layers,
            )


def split_batch(max_batch_size: int, mean_context: float) -> IterationBatch:
    """The decode iteration the split balances (module docstring)."""
    b = max(1, min(max_batch_size, SPLIT_BATCH))
    return IterationBatch(decode_seqs=b, decode_context_tokens=round(b * max(1.0, mean_context)))


def _figures(cost: InstanceCost) -> tuple[float, float, float]:
    """(weight bytes per GPU, KV bytes per token per GPU, memory budget per GPU) of a
    one-stage cost (the analytical model's figures)."""
    kv = getattr(cost, "kv_bytes_per_token_per_gpu", None)
    budget = getattr(cost, "memory_budget_bytes_per_gpu", None)
    if kv is None or budget is None:
        raise InfeasiblePlan(
            "topology",
            "the serving cost model does not report per-stage memory: give stage_layers",
        )
    return cost.weights_gib * GIB, float(kv), float(budget)


def split_layers(
    stage_cost: StageCost,
    model: ModelSpec,
    pools: Sequence[str],
    batch: IterationBatch,
    kv_tokens: int,
) -> list[int] | None:
    """Layers per stage for stages on `pools` (module docstring); None when no split fits
    every stage's memory. One-layer stage costs are built once per pool and layer kind."""
    p, num_layers = len(pools), model.num_layers
    if p == 1:
        return [num_layers]
    if p > num_layers:
        return None
    figures: dict[tuple[Any, ...], tuple[float, float, float, float] | None] = {}

    def one(pool: str, layer: int) -> tuple[float, float, float, float] | None:
        """(time, weight bytes, KV bytes per token, budget) of layer `layer` alone as a
        stage on `pool` (a middle layer by its kind: they all cost the same); None when it
        does not fit there."""
        middle = 0 < layer < num_layers - 1
        key: tuple[Any, ...] = (
            (pool, "middle", model.is_moe_layer(layer)) if middle else (pool, "end", layer)
        )
        if key not in figures:
            try:
                cost = stage_cost(pool, (layer, layer + 1))
            except InfeasiblePlan as exc:
                if exc.kind != "memory":
                    raise
                figures[key] = None
            else:
                w, kv, budget = _figures(cost)
                figures[key] = (cost.iteration_time_s(batch), w, kv, budget)
        return figures[key]

    stages = []
    for j, pool in enumerate(pools):
        # stage j holds layers in [j, L - p + j] only (a layer for every other stage)
        held = range(j, num_layers - p + j + 1)
        figs = {layer: one(pool, layer) for layer in held}
        budget = next((f[3] for f in figs.values() if f is not None), None)
        if budget is None:
            return None  # no layer fits this stage's GPUs
        times, sizes = [0.0] * num_layers, [0.0] * num_layers
        for layer, fig in figs.items():
            if fig is None:  # it cannot hold this layer: more bytes than it has
                sizes[layer] = budget + 1.0
            else:
                times[layer] = fig[0]
                sizes[layer] = fig[1] + kv_tokens * fig[2]
        stages.append(split_stage(times, sizes, 0.0, 0.0, budget))
    found = solve_split(stages, uniform=False)
    return None if found is None else list(found.stage_layers)


__all__ = [
    "SPLIT_BATCH",
    "StageCost",
    "check_stage_groups",
    "split_batch",
    "split_layers",
]
