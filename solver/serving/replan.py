"""Re-planning a serving deployment after its cluster changed (issue 16, point 4, serving):
which engine instances keep running, which restart and load their weights, how long that
takes, the goodput lost meanwhile, and the plan that keeps today's instance layouts with
their counts re-fitted to the GPUs that remain (`keep_plan`).

**Placement.** GPU g of the old cluster is numbered as `solver.replan` numbers it (node
groups in order, nodes in order, GPUs in order). The old plan's replicas sit in plan order
(instances as listed, the replicas of one instance one after the other) on consecutive GPUs
of the cluster, or of their pool's groups when an instance names a `group`; a replica that
fits in a node never straddles two (it starts on the next node: tensor parallelism stays on
a node's scale-up fabric). A replica survives when all its GPUs survive. An instance whose
pipeline stages span groups (`stage_groups`) survives only when its groups lost no GPU.

**Kept and restarted replicas.** An engine instance keeps running only with its layout
unchanged: role, degrees, weight format, max batch, prefill chunk, engine and engine options
(each is a launch argument of `vllm serve` / `sglang.launch_server`). An instance of a new
plan keeps min(count, surviving old replicas of the same layout) replicas; the others start
on free GPUs. Surviving replicas beyond the new count stop, at no cost. Free GPUs are counted,
not placed: the search's tensor degrees divide the node size, so replicas that fit in a node
pack whole nodes.

**Weights a restarted replica loads.** Its parameters at its weight format
(`cost_models.serving.analytical.BYTES_PER_WEIGHT`), split over its tensor × pipeline GPUs;
with attention data parallelism (expert e > 1) the routed experts are split over all
tensor × expert × pipeline GPUs and every other weight over tensor × pipeline, held by each
of the e attention replicas (`specs.serving.ServingParallelism`). Per GPU: the replica's bytes
over its GPUs.

**Restart time** `solver.replan.restart_seconds`, the training re-plan's: relaunch overhead +
the weights read from storage (its `reload_bytes`; engines load a checkpoint from storage,
nothing comes from peers) at the read rate of the nodes loading. Per node: the request's
`weights_read_gb_s`, else the catalog's local NVMe read rate of the node
(`HostLinkSpec.nvme_bandwidth_gb_s`: engines load weights cached on local disk), else the
request's `storage_read_gb_s`; capped, where the catalog gives the system's host link, by
the GPUs loading × its rate per GPU (`HostLinkSpec.effective_bandwidth_gb_s`: storage →
host → GPU crosses it); over ceil(restarted GPUs / GPUs per node) nodes, as the training
re-plan counts nodes. A plan that restarts nothing takes 0 s (dropping replicas only
changes the router's list).

**Goodput during the restart**: that of the plan of its kept replicas alone, priced like any
plan (0 when nothing is kept, or a disaggregated plan keeps no replica of one role).
The requests lost are (goodput − goodput during the restart) × restart time.

**Break-even** against the keep plan: a plan of goodput G that lost L requests to its restart
has served G·t − L requests by time t, so it is ahead of keep (G₀, L₀) from
t* = (L − L₀) / (G − G₀) on when G > G₀, and never otherwise: `solver.replan.break_even_s`
with restart times L / G and L₀ / G₀ (the outage that loses as many requests).

**Keep.** The old plan's instance layouts on the new cluster with their counts re-fitted:
colocated, as many replicas as the GPUs hold (goodput grows with replicas), or for
`min_gpus` / `min_cost` with an arrival rate the fewest that carry it; disaggregated,
every maximal pair of a prefill and b decode replicas the GPUs hold (neither one more prefill
nor one more decode replica fits), priced best capacity bound first
(`solver.serving.queueing.capacity_upper_bound_disaggregated_rps` bounds any goodput of the
pair from above) until the next bound is not above the best goodput found: the pair of most
goodput, the fewest restarted GPUs on a tie; for `min_gpus` / `min_cost` with an arrival
rate, the pair of fewest GPUs whose goodput carries the rate (every pair, fewest GPUs first;
a pair whose capacity bound is below the rate is not priced). Priced on a cluster of one
kind of node, for plans whose instances name no group.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cost_models.serving.analytical import BYTES_PER_WEIGHT
from cost_models.serving.base import ServingCostModel
from cost_models.serving.engines import build_engine
from hardware_catalog.schema import ResolvedCluster
from solver.replan import Reshard, break_even_s, restart_seconds
from solver.serving.evaluate import (
    InstanceCosts,
    ServingEstimate,
    ServingProblem,
    evaluate_plan,
    kv_transfer_tier,
    plan_hardware,
    request_stream,
)
from solver.serving.goodput import mean_lengths
from solver.serving.queueing import capacity_upper_bound_disaggregated_rps
from solver.serving.search import (
    RankedServingPlan,
    ServingSearchResult,
    _rank_key,
    explain_serving,
)
from solver.serving.simulate import Request
from specs.errors import InfeasiblePlan
from specs.model import ModelSpec
from specs.serving import ServingInstance, ServingMetrics, ServingPlan

MAX_KEEP_PAIRS = 64
"""Most disaggregated count pairs the keep plan prices (best bound first); the rest are
counted in `stats.replan.keep_pairs_not_priced`."""

LayoutKey = tuple[Any, ...]


def layout_key(
    inst: ServingInstance, plan: ServingPlan, precision: str, group: str | None
) -> LayoutKey:
    """What must not change for a replica to keep running (module docstring), on the new
    cluster's pool `group` (None on a cluster of one kind of node)."""
    p = inst.parallelism
    return (
        inst.role,
        p.tensor,
        p.pipeline,
        p.expert,
        inst.precision or precision,
        inst.max_batch_size,
        inst.chunk_size,
        *_engine_settings(plan),
        group,
        tuple(inst.stage_groups or ()),
    )


def _engine_settings(plan: ServingPlan) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The plan's engine and every one of its settings, defaults filled in (a stored plan
    names them all; a plan given by hand may name none)."""
    profile = build_engine(plan.engine, dict(plan.engine_options or {}))
    options = profile.options.model_dump(mode="json")
    return profile.name, tuple(sorted((k, repr(v)) for k, v in options.items()))


def _group_offsets(cluster: ResolvedCluster) -> list[tuple[int, int]]:
    """(first GPU, GPUs) of every node group in order."""
    out, at = [], 0
    for g in cluster.groups:
        out.append((at, g.num_nodes * g.gpus_per_node))
        at += g.num_nodes * g.gpus_per_node
    return out


def _pool_members(cluster: ResolvedCluster, name: str) -> list[Any]:
    pools = cluster.pools()
    if name in pools:
        return list(pools[name].groups)
    for pool in pools.values():
        if any(g.name == name for g in pool.groups):
            return list(pool.groups)
    return []


def _pool_gpus(cluster: ResolvedCluster, name: str | None) -> tuple[list[int], int]:
    """(GPU indices in order, GPUs per node) of the groups an instance of `name` runs on."""
    if name is None or cluster.is_homogeneous:
        return list(range(cluster.num_gpus)), cluster.groups[0].gpus_per_node
    members = _pool_members(cluster, name)
    names = {g.name for g in members}
    gpus = [
        i
        for g, (start, n) in zip(cluster.groups, _group_offsets(cluster), strict=True)
        if g.name in names
        for i in range(start, start + n)
    ]
    gpn = members[0].gpus_per_node if members else cluster.groups[0].gpus_per_node
    return gpus, gpn


def new_pools(new_cluster: ResolvedCluster, survivors: Sequence[int]) -> dict[int, str | None]:
    """The new cluster's pool (None on one kind of node) of every surviving old GPU: the
    survivors, in order, are the new cluster's first GPUs (`solver.replan`)."""
    if new_cluster.is_homogeneous:
        homogeneous: dict[int, str | None] = dict.fromkeys(survivors)
        return homogeneous
    by_index: list[str] = [""] * new_cluster.num_gpus
    names = {g.name: name for name, pool in new_cluster.pools().items() for g in pool.groups}
    for g, (start, n) in zip(new_cluster.groups, _group_offsets(new_cluster), strict=True):
        for i in range(start, start + n):
            by_index[i] = names[g.name]
    return {g: by_index[i] for i, g in enumerate(survivors) if i < len(by_index)}


def placement(plan: ServingPlan, cluster: ResolvedCluster) -> list[list[list[int]]]:
    """The old cluster's GPUs of every replica of every instance (module docstring), in plan
    order; an instance across groups (`stage_groups`) gets every GPU of its groups."""
    cursors: dict[str | None, int] = {}
    out: list[list[list[int]]] = []
    for inst in plan.instances:
        if inst.stage_groups is not None:
            every = sorted({g for name in inst.stage_groups for g in _pool_gpus(cluster, name)[0]})
            out.append([every] * inst.count)
            continue
        key = None if cluster.is_homogeneous else inst.group
        gpus, gpn = _pool_gpus(cluster, key)
        at = cursors.get(key, 0)
        size = inst.parallelism.num_gpus
        replicas = []
        for _ in range(inst.count):
            if size <= gpn and at % gpn + size > gpn:
                at += gpn - at % gpn  # a replica that fits in a node stays in one
            replicas.append(gpus[at : at + size])
            at += size
        cursors[key] = at
        out.append(replicas)
    return out


def surviving_replicas(
    plan: ServingPlan,
    cluster: ResolvedCluster,
    survivors: Sequence[int],
    new_cluster: ResolvedCluster,
    precision: str,
) -> dict[LayoutKey, int]:
    """Replicas of the old plan all of whose GPUs survive, by layout and new pool."""
    pools = new_pools(new_cluster, survivors)
    out: dict[LayoutKey, int] = {}
    for inst, replicas in zip(plan.instances, placement(plan, cluster), strict=True):
        for gpus in replicas:
            if inst.stage_groups is None and len(gpus) != inst.parallelism.num_gpus:
                continue  # the old plan's GPUs ran out (it did not fit its own cluster)
            if not all(g in pools for g in gpus):
                continue
            held = {pools[g] for g in gpus}
            if inst.stage_groups is not None:
                group = None
            elif len(held) == 1:
                group = next(iter(held))
            else:  # a replica now across two pools: not the instance it was
                continue
            key = layout_key(inst, plan, precision, group)
            out[key] = out.get(key, 0) + 1
    return out


def instance_weight_bytes(model: ModelSpec, inst: ServingInstance, precision: str) -> float:
    """Weight bytes one replica of `inst` loads, all its GPUs together (module docstring)."""
    per = BYTES_PER_WEIGHT[inst.precision or precision]
    total = float(model.num_parameters())
    e = inst.parallelism.expert
    if model.moe is None or e == 1:
        return total * per
    experts = float(model.num_moe_layers * model.moe.num_experts * model.expert_parameters())
    return ((total - experts) * e + experts) * per


@dataclasses.dataclass(frozen=True)
class RoleRestart:
    """What one instance of a new plan keeps and restarts."""

    role: str
    kept: int
    """Replicas that keep running (count)."""
    restarted: int
    """Replicas started anew (count)."""
    gpus_per_instance: int
    weight_bytes_per_instance: float
    """Weights one restarted replica loads, bytes."""
    weight_bytes_per_gpu: float
    """Weights one GPU of it loads (the replica's over its GPUs), bytes."""

    def public(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Restart:
    """The restart of one new plan (module docstring)."""

    roles: list[RoleRestart]
    reload_bytes: float
    seconds: float

    @property
    def instances(self) -> int:
        return sum(r.restarted for r in self.roles)

    @property
    def kept(self) -> int:
        return sum(r.kept for r in self.roles)

    @property
    def gpus(self) -> int:
        return sum(r.restarted * r.gpus_per_instance for r in self.roles)


@dataclasses.dataclass(frozen=True)
class RestartRates:
    """The figures a restart's time comes from."""

    storage_bytes_per_s_per_node: float
    host_link_bytes_per_s_per_gpu: float | None
    """Storage → GPU per GPU (catalog host link), bytes/s; None when not in the catalog."""
    gpus_per_node: int
    nic_bytes_per_s: float
    overhead_s: float

    @classmethod
    def of(cls, cluster: ResolvedCluster, info: Mapping[str, Any]) -> RestartRates:
        """The request's weight read rate, else the catalog's local NVMe rate of the first
        group's system, else the request's checkpoint read rate (`storage_read_gb_s`)."""
        group = cluster.groups[0]
        link = group.system.host_link
        rate = info.get("weights_read_gb_s")
        if rate is None and link is not None:
            rate = link.nvme_bandwidth_gb_s
        if rate is None:
            rate = info["storage_read_gb_s"]
        return cls(
            storage_bytes_per_s_per_node=float(rate) * 1e9,
            host_link_bytes_per_s_per_gpu=(
                None if link is None else link.effective_bandwidth_gb_s * 1e9
            ),
            gpus_per_node=group.gpus_per_node,
            nic_bytes_per_s=group.inter_node_bandwidth_gb_s * 1e9,
            overhead_s=float(info["restart_overhead_s"]),
        )

    def read_rate(self, gpus: int) -> float:
        """Storage read rate of the nodes `gpus` restarted GPUs fill, bytes/s."""
        nodes = max(1, -(-gpus // self.gpus_per_node))
        per_node = self.storage_bytes_per_s_per_node
        if self.host_link_bytes_per_s_per_gpu is not None:
            loading = min(gpus, self.gpus_per_node)
            per_node = min(per_node, loading * self.host_link_bytes_per_s_per_gpu)
        return per_node * nodes


def restart_of(
    model: ModelSpec,
    new: ServingPlan,
    surviving: Mapping[LayoutKey, int],
    precision: str,
    rates: RestartRates,
) -> Restart:
    """What `new` keeps of the old plan's surviving replicas and what it restarts."""
    left = dict(surviving)
    roles = []
    for inst in new.instances:
        key = layout_key(inst, new, precision, inst.group)
        kept = min(inst.count, left.get(key, 0))
        left[key] = left.get(key, 0) - kept
        gpus = inst.parallelism.num_gpus
        weights = instance_weight_bytes(model, inst, precision)
        roles.append(RoleRestart(inst.role, kept, inst.count - kept, gpus, weights, weights / gpus))
    reload = sum(r.restarted * r.weight_bytes_per_instance for r in roles)
    restarted_gpus = sum(r.restarted * r.gpus_per_instance for r in roles)
    seconds = 0.0
    if restarted_gpus:
        shard = Reshard(
            peer_bytes=0.0, reload_bytes=reload, max_rank_peer_bytes=0.0, kept_bytes=0.0
        )
        seconds = restart_seconds(
            shard,
            nic_bytes_per_s=rates.nic_bytes_per_s,
            storage_bytes_per_s=rates.read_rate(restarted_gpus),
            overhead_s=rates.overhead_s,
        )
    return Restart(roles, reload, seconds)


def kept_plan(plan: ServingPlan, restart: Restart) -> ServingPlan | None:
    """The plan of the replicas that keep running through the restart; None when that is
    no plan (nothing kept, or a disaggregated plan without one role)."""
    instances = [
        inst.model_copy(update={"count": r.kept})
        for inst, r in zip(plan.instances, restart.roles, strict=True)
        if r.kept > 0
    ]
    if not instances or (plan.mode == "disaggregated" and len(instances) < 2):
        return None
    return plan.model_copy(update={"instances": instances})


# ---- the keep plan ---------------------------------------------------------------------
def _priced(
    problem: ServingProblem, costs: InstanceCosts, plan: ServingPlan, stream: list[Request]
) -> ServingEstimate | None:
    est = evaluate_plan(problem, plan, costs, stream)
    return (
        est
        if est.metrics is not None and not any(v.kind == "topology" for v in est.violations)
        else None
    )


def _with_count(inst: ServingInstance, count: int) -> ServingInstance:
    return inst.model_copy(update={"count": count})


def _fewest_carrying_the_rate(
    problem: ServingProblem, costs: InstanceCosts, full: ServingEstimate, stream: list[Request]
) -> ServingEstimate:
    """For `min_gpus` / `min_cost` with a rate: the fewest replicas of the colocated keep
    plan `full` (as many as fit) whose goodput carries the rate. For these objectives a
    unit is one replica (`evaluate.node_replicas`), so n replicas carry n times one's
    goodput: ceil(rate / one's goodput) replicas, at most those of `full`."""
    rate = problem.target_rate_rps
    if problem.workload.objective not in ("min_gpus", "min_cost") or rate is None:
        return full
    assert full.metrics is not None
    count = full.plan.instances[0].count
    one = full.metrics.goodput_rps / count
    if one <= 0:
        return full
    need = max(1, math.ceil(rate / one * (1 - 1e-12)))
    if need >= count:
        return full
    inst = full.plan.instances[0].model_copy(update={"count": need})
    fewer = _priced(problem, costs, full.plan.model_copy(update={"instances": [inst]}), stream)
    return fewer if fewer is not None else full


def keep_plan(
    problem: ServingProblem,
    cost_model: ServingCostModel,
    old: ServingPlan,
    surviving: Mapping[LayoutKey, int],
    rates: RestartRates,
) -> tuple[ServingEstimate | None, str | None, int]:
    """(the keep plan priced, why there is none, disaggregated pairs not priced): the old
    plan's layouts with counts re-fitted to `problem`'s cluster (module docstring). On a
    cluster of several kinds of node (a node left with some of its GPUs is one), a colocated
    layout runs one instance per pool it fits, a disaggregated one on the largest pool."""
    if any(i.group is not None or i.stage_groups is not None for i in old.instances):
        return None, "the old plan names node groups: its layouts are priced by the search", 0
    problem = problem.with_engine(old.engine, old.engine_options)
    costs = InstanceCosts(problem, cost_model)
    stream = request_stream(problem.workload)
    mixed = not problem.cluster.is_homogeneous
    pools = problem.cluster.pools()
    if old.mode == "colocated":
        inst = old.instances[0]
        size = inst.parallelism.num_gpus
        width = inst.parallelism.tensor * inst.parallelism.expert
        instances = [
            inst.model_copy(
                update={"count": pool.num_gpus // size, "group": name if mixed else None}
            )
            for name, pool in pools.items()
            if pool.num_gpus >= size and width <= pool.gpus_per_node
        ]
        if not instances:
            return None, f"one {inst.role} replica takes {size} GPUs; none of the pools holds it", 0
        plan = old.model_copy(update={"instances": instances})
        est = _priced(problem, costs, plan, stream)
        if est is not None and not mixed:
            est = _fewest_carrying_the_rate(problem, costs, est, stream)
        return est, None if est is not None else "the kept layout does not fit the new cluster", 0
    name, pool = max(pools.items(), key=lambda item: item[1].num_gpus)
    group = name if mixed else None
    pre, dec = (
        old.instance(role).model_copy(update={"group": group}) for role in ("prefill", "decode")
    )
    budget = pool.num_gpus
    gp, gd = pre.parallelism.num_gpus, dec.parallelism.num_gpus
    pairs = []
    for a in range(1, (budget - gd) // gp + 1):
        b = (budget - a * gp) // gd
        if b >= 1 and budget - a * gp - b * gd < gp:  # maximal: no prefill replica fits either
            pairs.append((a, b))
    if not pairs:
        return None, f"a prefill and a decode replica take {gp + gd} GPUs; {budget} remain", 0
    mean_prompt, mean_output = mean_lengths(stream)
    probe = old.model_copy(update={"instances": [pre, dec]})
    tier = kv_transfer_tier(probe, plan_hardware(problem, probe)[0])
    try:
        cp, cd = costs.of(pre, tier), costs.of(dec, tier)
    except InfeasiblePlan as exc:
        return None, f"the kept layouts do not fit the new cluster: {exc}", 0

    def bound(pair: tuple[int, int]) -> float:
        return capacity_upper_bound_disaggregated_rps(
            cp, pair[0], pre.chunk_size, cd, pair[1], dec.max_batch_size, mean_prompt, mean_output
        )

    precision = problem.workload.precision

    def restarted_gpus(plan: ServingPlan) -> int:
        return restart_of(problem.model, plan, surviving, precision, rates).gpus

    rate = problem.target_rate_rps
    if problem.workload.objective in ("min_gpus", "min_cost") and rate is not None:
        fewest = _fewest_pair_carrying(
            problem, costs, old, (pre, dec), budget, bound, rate, stream, restarted_gpus
        )
        if fewest is not None:
            return fewest, None, 0
    pairs.sort(key=bound, reverse=True)
    best: ServingEstimate | None = None
    priced = 0
    for pair in pairs:
        best_rps = -1.0 if best is None or best.metrics is None else best.metrics.goodput_rps
        if bound(pair) <= best_rps or priced >= MAX_KEEP_PAIRS:
            break  # no later pair can carry more (or the pricing budget is spent)
        plan = old.model_copy(
            update={"instances": [_with_count(pre, pair[0]), _with_count(dec, pair[1])]}
        )
        est = _priced(problem, costs, plan, stream)
        priced += 1
        if est is None or est.metrics is None:
            continue
        rps = est.metrics.goodput_rps
        if (
            best is None
            or rps > best_rps
            or (rps == best_rps and restarted_gpus(est.plan) < restarted_gpus(best.plan))
        ):
            best = est
    remaining = len(pairs) - priced if priced >= MAX_KEEP_PAIRS else 0
    if best is None:
        return None, "no pair of the kept layouts' counts serves within the new cluster", remaining
    return best, None, remaining


def _fewest_pair_carrying(
    problem: ServingProblem,
    costs: InstanceCosts,
    old: ServingPlan,
    layouts: tuple[ServingInstance, ServingInstance],
    budget: int,
    bound: Callable[[tuple[int, int]], float],
    rate: float,
    stream: list[Request],
    restarted_gpus: Callable[[ServingPlan], int],
) -> ServingEstimate | None:
    """For `min_gpus` / `min_cost` with a rate: the disaggregated keep plan of the fewest
    GPUs (on one pool: the cheapest too) whose goodput carries `rate`, over every pair of
    counts within `budget` GPUs, fewest GPUs first; a pair whose capacity bound is below
    the rate is not priced. Among pairs of equally many GPUs the most goodput, then the
    fewest restarted GPUs. None when no pair carries the rate within `MAX_KEEP_PAIRS`
    pricings (the caller then keeps as many as fit)."""
    pre, dec = layouts
    gp, gd = pre.parallelism.num_gpus, dec.parallelism.num_gpus
    pairs = [
        (a, b)
        for a in range(1, (budget - gd) // gp + 1)
        for b in range(1, (budget - a * gp) // gd + 1)
    ]
    pairs.sort(key=lambda pair: (pair[0] * gp + pair[1] * gd, -bound(pair)))
    best: ServingEstimate | None = None
    best_gpus = 0
    priced = 0
    for pair in pairs:
        gpus = pair[0] * gp + pair[1] * gd
        if best is not None and gpus > best_gpus:
            break  # every later pair takes more GPUs
        if bound(pair) < rate:
            continue  # cannot carry the rate
        if priced >= MAX_KEEP_PAIRS:
            break
        plan = old.model_copy(
            update={"instances": [_with_count(pre, pair[0]), _with_count(dec, pair[1])]}
        )
        est = _priced(problem, costs, plan, stream)
        priced += 1
        if est is None or est.metrics is None or est.metrics.goodput_rps < rate:
            continue
        if (
            best is None
            or best.metrics is None
            or est.metrics.goodput_rps > best.metrics.goodput_rps
            or (
                est.metrics.goodput_rps == best.metrics.goodput_rps
                and restarted_gpus(est.plan) < restarted_gpus(best.plan)
            )
        ):
            best, best_gpus = est, gpus
    return best


# ---- the figures of every re-planned plan ------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Figures:
    """A re-planned plan's restart figures (`ServingMetrics.restart_*`)."""

    restart: Restart
    goodput_rps: float
    goodput_during_rps: float

    @property
    def lost_requests(self) -> float:
        return max(0.0, self.goodput_rps - self.goodput_during_rps) * self.restart.seconds

    def outage_s(self) -> float:
        """The full outage that loses as many requests (module docstring: break-even)."""
        return self.lost_requests / self.goodput_rps if self.goodput_rps > 0 else math.inf

    def metrics(
        self, before_rps: float | None, keep: Figures | None, is_keep: bool
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "goodput_rps_before": before_rps,
            "restart_instances": self.restart.instances,
            "restart_gpus": self.restart.gpus,
            "restart_kept_instances": self.restart.kept,
            "restart_reload_bytes": self.restart.reload_bytes,
            "restart_peer_bytes": 0.0,
            "restart_s": self.restart.seconds,
            "restart_goodput_rps": self.goodput_during_rps,
            "restart_lost_requests": self.lost_requests,
            "restart_roles": [r.public() for r in self.restart.roles],
            "replan_keep": is_keep,
        }
        if keep is not None:
            out["break_even_s"] = (
                None
                if is_keep
                else break_even_s(
                    self.goodput_rps, self.outage_s(), keep.goodput_rps, keep.outage_s()
                )
            )
        return out


def figures(
    problem: ServingProblem,
    cost_model: ServingCostModel,
    est: ServingEstimate,
    surviving: Mapping[LayoutKey, int],
    rates: RestartRates,
) -> Figures:
    """The restart of `est`'s plan and its goodput while it restarts."""
    assert est.metrics is not None
    precision = problem.workload.precision
    restart = restart_of(problem.model, est.plan, surviving, precision, rates)
    goodput = est.metrics.goodput_rps
    during = 0.0
    if restart.instances == 0:
        during = goodput
    else:
        partial = kept_plan(est.plan, restart)
        if partial is not None:
            sub = problem.with_engine(est.plan.engine, est.plan.engine_options)
            priced = _priced(
                sub, InstanceCosts(sub, cost_model), partial, request_stream(sub.workload)
            )
            during = 0.0 if priced is None or priced.metrics is None else priced.metrics.goodput_rps
    return Figures(restart, goodput, during)


def _restart_text(m: Mapping[str, Any]) -> str:
    if not m["restart_instances"]:
        return f"re-plan: keeps all {m['restart_kept_instances']} instances running, restarts none"
    return (
        f"re-plan: keeps {m['restart_kept_instances']} instances running and restarts "
        f"{m['restart_instances']} ({m['restart_gpus']} GPUs), loading "
        f"{m['restart_reload_bytes'] / 1e9:.3g} GB of weights in {m['restart_s']:.3g} s, "
        f"during which the plan serves {m['restart_goodput_rps']:.3g} requests/s "
        f"({m['restart_lost_requests']:.3g} requests lost)"
    )


def annotate(
    result: ServingSearchResult,
    problem: ServingProblem,
    cost_model: ServingCostModel,
    info: Mapping[str, Any],
) -> ServingSearchResult:
    """The re-planned search's plans with the keep plan ranked among them (when the search
    did not find it), every plan with its restart figures (`ServingMetrics.restart_*`) and
    break-even against keep, and `stats.replan` describing keep."""
    old = ServingPlan.model_validate(info["plan"])
    old_cluster = ResolvedCluster.model_validate(info["cluster"])
    precision = problem.workload.precision
    surviving = surviving_replicas(
        old, old_cluster, list(info["survivors"]), problem.cluster, precision
    )
    rates = RestartRates.of(problem.cluster, info)
    before = info.get("goodput_rps")
    keep, reason, unpriced = keep_plan(problem, cost_model, old, surviving, rates)
    estimates = [r.estimate for r in result.plans]
    keep_index: int | None = None
    if keep is not None:
        dumped = keep.plan.model_dump(mode="json")
        keep_index = next(
            (i for i, e in enumerate(estimates) if e.plan.model_dump(mode="json") == dumped), None
        )
        if keep_index is None:
            estimates.append(keep)
            keep_index = len(estimates) - 1
    keep_est = estimates[keep_index] if keep_index is not None else None
    keep_figures = (
        figures(problem, cost_model, keep_est, surviving, rates)
        if keep_est is not None and keep_est.metrics is not None
        else None
    )
    found: list[Figures | None] = [
        keep_figures
        if i == keep_index
        else (
            figures(problem, cost_model, est, surviving, rates) if est.metrics is not None else None
        )
        for i, est in enumerate(estimates)
    ]

    def order_key(i: int) -> tuple[float, float, float]:
        """The objective's score, then (on a tie) more goodput, then fewer lost requests."""
        fig = found[i]
        if fig is None:
            return (math.inf, 0.0, 0.0)
        return (-_rank_key(problem, estimates[i]), -fig.goodput_rps, fig.lost_requests)

    order = sorted(range(len(estimates)), key=order_key)
    annotated: list[ServingEstimate] = []
    for i in order:
        est, fig = estimates[i], found[i]
        if est.metrics is None or fig is None:
            annotated.append(est)
            continue
        update = fig.metrics(before, keep_figures, i == keep_index)
        metrics = ServingMetrics.model_validate({**est.metrics.model_dump(), **update})
        annotated.append(dataclasses.replace(est, metrics=metrics))
    ranked = [RankedServingPlan(n + 1, est, "") for n, est in enumerate(annotated)]
    plans = []
    for r in ranked:
        text = explain_serving(problem, r.estimate, r.rank, ranked)
        m = r.estimate.metrics
        if m is not None and m.restart_instances is not None:
            lead = (
                "Keeps the old plan's instance layouts with their counts re-fitted: "
                if m.replan_keep
                else ""
            )
            text = f"{lead}{text[:-1]}; {_restart_text(m.model_dump())}."
        plans.append(dataclasses.replace(r, explanation=text))
    stats = dataclasses.replace(result.stats)
    keep_public: dict[str, Any] | None = None
    if keep_est is not None and keep_est.metrics is not None and keep_figures is not None:
        keep_public = {
            "plan": keep_est.plan.model_dump(mode="json"),
            "rank": order.index(keep_index) + 1 if keep_index is not None else None,
            "goodput_rps": keep_figures.goodput_rps,
            "restart_s": keep_figures.restart.seconds,
            "restart_instances": keep_figures.restart.instances,
            "restart_gpus": keep_figures.restart.gpus,
            "restart_reload_bytes": keep_figures.restart.reload_bytes,
            "restart_lost_requests": keep_figures.lost_requests,
        }
    stats.replan = {
        "replan_of": info.get("plan_id"),
        "keep": keep_public,
        "keep_reason": reason,
        "goodput_rps_before": before,
        "surviving_instances": sum(surviving.values()),
        "instances_before": sum(i.count for i in old.instances),
        "keep_pairs_not_priced": unpriced,
    }
    return ServingSearchResult(plans=plans, stats=stats)
