"""What a priced training plan costs in GPUs, energy and money per token: the figures the
`min_cost`, `min_energy`, `min_time_to_train` and `min_gpus` objectives rank by (issue 16),
for the estimate of any cost model on the cluster it runs on.

**Power per GPU.** A GPU draws between what it takes while its tensor cores wait (on
memory, on the network, on other pipeline stages) and what it takes while they run flat out:

    P = TDP × (IDLE + (BUSY − IDLE) × u),   u = hardware FLOPs utilisation (0..1)

with `u` the FLOPs the GPU executes per second, recomputation included
(`hardware_tflops_per_gpu`), over its dense peak at the workload precision: power follows
the tensor-core activity, so a plan that recomputes pays for the extra FLOPs and a plan
that waits pays the waiting power for longer. Both fractions are of the board TDP
(`AcceleratorSpec.tdp_w`) and come from measurements on H100 SXM (700 W):

- `IDLE_POWER_FRACTION` = 300 / 700: the ML.ENERGY Leaderboard v3.0 H100 SXM anchor at
  batch 1 (decode, memory-bound: tensor cores mostly waiting) draws about 300 W;
- `BUSY_POWER_FRACTION` = 600 / 700: the same benchmark's compute-bound anchor (batch 128)
  draws about 600 W. Newkirk et al. 2025 ("Empirically-Calibrated H100 Node Power Models",
  arXiv 2506.14551) measure 8 × H100 training nodes at no more than 76 % of the 10.2 kW
  node rating: 7.75 kW per node, of which 8 × 600 W = 4.8 kW on the GPU boards leaves the
  rest to CPUs, memory, NICs and fans, consistent with this fraction.

Energy per step is then GPUs × TDP × (IDLE × T + (BUSY − IDLE) × H / peak), H the FLOPs
each GPU executes per step: increasing in the step time T and in the recomputed FLOPs, and
at least GPUs × TDP × (IDLE × T + (BUSY − IDLE) × F / peak) for F the model FLOPs per GPU,
which no plan of the same GPUs avoids (`energy_floor_j`, what `solver.objectives` bounds
unpriced plans with).

They are applied to every accelerator's TDP (the same shape of power curve; no other
accelerator has published anchors here). The energy counted is GPU board energy only: host,
network, storage and cooling (PUE) are not, so a facility meter reads more.

**Energy per token** = GPUs used × P × step time / tokens per step, joules per token.

**Price.** A node group's `price_per_gpu_hour` from the request, else the accelerator's
catalog default (`AcceleratorSpec.price_per_gpu_hour`, with its source and date); cost per
million tokens = Σ over the GPUs used of their price per hour / 3600 × step time / tokens
per step × 10⁶. No price on a group a plan uses: no cost figure (null).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from cost_models.base import TrainingEstimate, TrainingProblem
from hardware_catalog.schema import ResolvedCluster, ResolvedNodeGroup
from specs.plan import TrainingMetrics, TrainingPlan

IDLE_POWER_FRACTION = 300.0 / 700.0
"""Board power of a GPU whose tensor cores wait, fraction of TDP (module docstring)."""
BUSY_POWER_FRACTION = 600.0 / 700.0
"""Board power of a GPU computing flat out in training kernels, fraction of TDP."""
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86_400.0


def gpu_power_w(tdp_w: float, utilisation: float) -> float:
    """Average board power of one GPU at hardware FLOPs utilisation `utilisation`, watts."""
    u = min(max(utilisation, 0.0), 1.0)
    return tdp_w * (IDLE_POWER_FRACTION + (BUSY_POWER_FRACTION - IDLE_POWER_FRACTION) * u)


def group_price(group: ResolvedNodeGroup) -> float | None:
    """Price of one GPU-hour of the group: the request's, else the catalog default."""
    if group.price_per_gpu_hour is not None:
        return group.price_per_gpu_hour
    return group.accelerator.price_per_gpu_hour


def gpus_by_pool(plan: TrainingPlan, cluster: ResolvedCluster) -> dict[str, int]:
    """GPUs the plan uses on each device pool (`ResolvedCluster.pools()`): on one pool the
    plan's GPU count; a mixed plan's stages (`stage_groups`, with `stage_tensor`) or data
    shares on the pools they name."""
    pools = cluster.pools()
    p = plan.parallelism
    if plan.data_shares is not None:
        per_replica = p.tensor * p.pipeline * p.context
        used: dict[str, int] = {}
        for share in plan.data_shares:
            used[share.group] = used.get(share.group, 0) + share.replicas * per_replica
        return used
    if plan.stage_groups is not None:
        tensors = plan.stage_tensor or [p.tensor] * p.pipeline
        used = {}
        for group, tensor in zip(plan.stage_groups, tensors, strict=True):
            used[group] = used.get(group, 0) + tensor * p.context * p.data
        return used
    return {next(iter(pools)): plan.num_gpus}


@dataclasses.dataclass(frozen=True)
class Economics:
    """The GPU, energy and money figures of one priced plan."""

    gpus_used: int
    power_per_gpu_w: float | None
    energy_per_token_j: float | None
    price_per_gpu_hour: float | None
    cost_per_million_tokens: float | None

    def as_metrics(self) -> dict[str, float | int | None]:
        return dataclasses.asdict(self)


def hardware_utilisation(metrics: TrainingMetrics) -> float:
    """FLOPs executed (recomputation included) per second over the dense peak at the
    workload precision: MFU scaled by hardware / model FLOPs."""
    if metrics.hardware_tflops_per_gpu is not None and metrics.model_tflops_per_gpu > 0:
        return metrics.mfu * metrics.hardware_tflops_per_gpu / metrics.model_tflops_per_gpu
    return metrics.mfu


def energy_floor_j(
    gpus: int, tdp_w: float, step_time_s: float, model_flops_share_s: float
) -> float:
    """The least energy per step of a plan on `gpus` GPUs of board power `tdp_w` taking
    at least `step_time_s`, whose GPUs compute at least `model_flops_share_s` seconds at
    peak (model FLOPs per GPU / peak), joules (module docstring)."""
    idle = IDLE_POWER_FRACTION * step_time_s
    busy = (BUSY_POWER_FRACTION - IDLE_POWER_FRACTION) * model_flops_share_s
    return gpus * tdp_w * (idle + busy)


def economics(
    problem: TrainingProblem, plan: TrainingPlan, step_time_s: float, utilisation: float
) -> Economics:
    """GPUs used, average power, energy and cost per token of `plan` taking `step_time_s`
    per step at hardware FLOPs utilisation `utilisation` (module docstring)."""
    pools = problem.cluster.pools()
    used = gpus_by_pool(plan, problem.cluster)
    tokens = problem.workload.real_tokens_per_step  # padding excluded
    share = utilisation
    power_sum = 0.0
    price_sum = 0.0
    have_power = have_price = True
    for name, gpus in used.items():
        pool = pools.get(name)
        if pool is None:
            have_power = have_price = False
            break
        group = pool.groups[0]
        tdp = group.accelerator.tdp_w
        if tdp is None:
            have_power = False
        else:
            power_sum += gpus * gpu_power_w(tdp, share)
        price = group_price(group)
        if price is None:
            have_price = False
        else:
            price_sum += gpus * price
    gpus_used = sum(used.values())
    return Economics(
        gpus_used=gpus_used,
        power_per_gpu_w=power_sum / gpus_used if have_power and gpus_used else None,
        energy_per_token_j=power_sum * step_time_s / tokens if have_power else None,
        price_per_gpu_hour=price_sum / gpus_used if have_price and gpus_used else None,
        cost_per_million_tokens=(
            price_sum / SECONDS_PER_HOUR * step_time_s / tokens * 1e6 if have_price else None
        ),
    )


def with_economics(
    problem: TrainingProblem, est: TrainingEstimate, extra: Mapping[str, object] | None = None
) -> TrainingEstimate:
    """`est` with its metrics' GPU, energy and cost figures filled in (and `extra`)."""
    m = est.metrics
    figures = economics(problem, est.plan, m.step_time_s, hardware_utilisation(m))
    update: dict[str, object] = dict(figures.as_metrics())
    train_tokens = getattr(problem.workload, "train_tokens", None)
    if train_tokens is not None and m.tokens_per_s > 0:
        update["time_to_train_days"] = train_tokens / m.tokens_per_s / SECONDS_PER_DAY
    if extra:
        update.update(extra)
    return dataclasses.replace(est, metrics=m.model_copy(update=update))
