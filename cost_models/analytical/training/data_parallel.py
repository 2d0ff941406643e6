"""Data-parallel communication of one step on the busiest pipeline rank: gradient
reduction and, under ZeRO, parameter gathers, with what the overlapping compute hides."""

from __future__ import annotations

from cost_models.analytical.placement import flat_group
from cost_models.analytical.training.context import ProblemContext
from cost_models.analytical.training.placements import expert_groups
from cost_models.analytical.training.profile import Profiled
from specs.plan import PlanKey


def data_parallel_s(
    ctx: ProblemContext,
    prof: Profiled,
    key: PlanKey,
    params: list[float],
    fwd_rank: list[float],
    bwd_rank: list[float],
    m: int,
    expert_params: list[float] | None = None,
) -> tuple[float, float]:
    """(exposed, raw) data-parallel communication per step, worst pipeline rank.

    ZeRO 0: all-reduce of the gradients (grad_reduce_bytes per parameter); ZeRO 1
    (Megatron distributed optimizer): reduce-scatter of the gradients + all-gather of the
    bf16 parameters once per step; ZeRO 2: the gradient reduce-scatter every micro-batch
    (only a gradient shard is kept); ZeRO 3: reduce-scatter + parameter all-gathers in the
    forward and again in the backward, every micro-batch (Rajbhandari et al. 2020 §5).
    Gradient reduction overlaps the rank's backward of the last micro-batch, parameter
    gathers its forward; a `dp_non_overlapped_fraction` stays exposed.

    ZeRO-3 collectives run on one flat ring over NICs (`zero3_flat_ring`, the default)
    or on the group's hierarchical placement like every other collective.

    MoE: routed-expert parameters are reduced (and, under ZeRO, sharded and gathered)
    over the expert-data-parallel group, d·c·t / (e·etp) ranks of stride e·etp
    (Megatron-Core folding, Liu et al. 2025 §3), the rest over data × context; the two
    run one after the other and are exposed together.
    """
    cfg = ctx.config
    group = prof.groups.data_context
    moe_states = expert_params is not None and any(expert_params)
    egroup = None
    if moe_states:
        egroup = expert_groups(
            ctx, key.expert, key.expert_tensor, key.data * key.context * key.tensor
        ).expert_data
        if egroup.size <= 1:
            egroup = None
    if group.size <= 1 and egroup is None:
        return 0.0, 0.0
    eff, frac = cfg.dp_overlap_efficiency, cfg.dp_non_overlapped_fraction

    def exposed(t: float, hide: float) -> float:
        return max(frac * t, t - eff * hide)

    comm = ctx.comm
    worst_exp = worst_raw = 0.0
    zero = key.zero_stage
    for j, n_all in enumerate(params):
        n_exp = expert_params[j] if egroup is not None and expert_params is not None else 0.0
        n_params = n_all - n_exp
        if zero < 3:
            grad = n_params * cfg.grad_reduce_bytes
            if zero == 0:
                ar = comm.all_reduce(grad, group)
            else:
                rs, ag = (
                    comm.reduce_scatter(grad, group),
                    comm.all_gather(2.0 * n_params, group),
                )
            if egroup is not None:
                e_grad = n_exp * cfg.grad_reduce_bytes
                if zero == 0:
                    ar += comm.all_reduce(e_grad, egroup)
                else:
                    rs += comm.reduce_scatter(e_grad, egroup)
                    ag += comm.all_gather(2.0 * n_exp, egroup)
        if zero == 0:
            raw = ar
            exp = exposed(raw, bwd_rank[j])
        elif zero == 1:
            raw, exp = rs + ag, exposed(rs, bwd_rank[j]) + exposed(ag, fwd_rank[j])
        elif zero == 2:
            raw = m * rs + ag
            exp = m * exposed(rs, bwd_rank[j]) + exposed(ag, fwd_rank[j])
        else:
            # ZeRO-3 gathers and reduces every layer's shards over the whole data-parallel
            # group in a flat ring: across nodes each GPU's own NIC carries the (n−1)/n
            # share of the full buffer, the cross-node bottleneck ZeRO++ (Wang et al.
            # 2023, §3, hierarchical partitioning hpZ) was built to remove. Without
            # `zero3_flat_ring` (NCCL rings, one per NIC, as in 2025 FSDP stacks) a group
            # with g members per node crosses the network on g NICs at once.
            flat = flat_group(group) if cfg.zero3_flat_ring else group
            rs = comm.reduce_scatter(n_params * cfg.zero3_grad_reduce_bytes, flat)
            ag = comm.all_gather(2.0 * n_params, flat)
            if egroup is not None:
                e_flat = flat_group(egroup) if cfg.zero3_flat_ring else egroup
                rs += comm.reduce_scatter(n_exp * cfg.zero3_grad_reduce_bytes, e_flat)
                ag += comm.all_gather(2.0 * n_exp, e_flat)
            raw = m * (rs + 2 * ag)
            hide = cfg.zero3_overlap
            exp = m * (
                max(0.0, ag - hide * fwd_rank[j])
                + max(0.0, ag - hide * bwd_rank[j])
                + max(0.0, rs - hide * bwd_rank[j])
            )
        worst_exp, worst_raw = max(worst_exp, exp), max(worst_raw, raw)
    return worst_exp, worst_raw
