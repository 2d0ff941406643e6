"""Price one serving plan: build its instances' costs, find its goodput by simulation, and
measure its latencies at the workload's arrival rate (or at the goodput).

Replicas. A plan runs `count` identical instances (colocated) or `count_p` prefill and
`count_d` decode instances (disaggregated) behind a router. Its goodput is that of its
smallest repeating unit times the number of units: a node's worth of instances for a
colocated plan (`node_replicas`; fewer when the count is not a multiple of it);
`(count_p / g, count_d / g)` instances with g = gcd(count_p, count_d) for a disaggregated one
(DistServe, Zhong et al., OSDI'24 §4: a unit is replicated to reach the rate). Units behind a
least-loaded router do at least as well as independent units each taking its share of a
Poisson stream (the split of a Poisson stream is Poisson), so the scaled figure is a
conservative one. The latencies at a given rate are simulated on the whole plan.

The request stream is fixed by the workload's seed (`request_stream`): sampled lengths with
unit-rate Poisson arrivals, or a trace rescaled to a unit rate; the goodput search scales the
arrival times, so every candidate sees the same requests.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from cost_models.mixed import pool_names
from cost_models.serving.analytical import stage_layer_counts
from cost_models.serving.base import InstanceCost, IterationBatch, ServingCostModel
from cost_models.serving.engines import (
    DEFAULT_ENGINE,
    EngineInstanceCost,
    EngineProfile,
    build_engine,
)
from cost_models.serving.pipeline import PipelineInstanceCost, cross_pool_hand_off
from hardware_catalog.schema import ResolvedCluster
from solver.serving.goodput import (
    GoodputResult,
    SLOTarget,
    goodput_colocated,
    goodput_colocated_mix,
    goodput_disaggregated,
    mean_lengths,
    poisson_unit_stream,
    scale_stream,
    stream_rate_rps,
    trace_stream,
    unit_rate_stream,
)
from solver.serving.queueing import (
    isolated_latency_colocated,
    isolated_latency_disaggregated,
    kv_tokens_per_seq,
)
from solver.serving.simulate import (
    ColocatedPart,
    Request,
    SimResult,
    instance_speed,
    routing_weight,
    simulate_colocated,
    simulate_colocated_mix,
    simulate_disaggregated,
)
from solver.serving.stages import check_stage_groups, split_batch, split_layers
from solver.warnings import serving_warnings
from specs.cluster import ClusterSpec
from specs.errors import InfeasiblePlan
from specs.model import ModelSpec
from specs.plan import Violation
from specs.serving import ServingInstance, ServingMetrics, ServingPlan, ServingWorkload
from specs.warnings import PlanWarning

GOODPUT_REL_TOL = 0.02
"""Relative width of the goodput bisection's final bracket."""
CAPPED_RATE_SERVED = 0.9
"""Under a client concurrency cap, a plan that serves less than this share of the offered
rate is flagged: the backlog grows at the client, where the latencies do not see it."""
LOW_LOAD_FRACTION = 0.05
"""Share of the capacity bound at which a plan with no goodput is measured (near-idle)."""


@dataclass(frozen=True)
class ServingProblem:
    """A resolved serving problem: model, homogeneous cluster, workload, and the serving
    engine the plans run on."""

    model: ModelSpec
    cluster: ResolvedCluster
    workload: ServingWorkload
    memory_utilization: float = 0.9
    """Share of device memory the engine may use (vLLM's `gpu_memory_utilization`)."""
    engine: str = DEFAULT_ENGINE
    """The engine profile (`cost_models.serving.engines`) plans are priced for."""
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    """Its settings (validated by the profile's options)."""

    @cached_property
    def engine_profile(self) -> EngineProfile:
        """The built profile (raises PluginNotFound / SpecError on a bad name or option)."""
        return build_engine(self.engine, dict(self.engine_options))

    def with_engine(self, name: str | None, options: Mapping[str, Any] | None) -> ServingProblem:
        """The same problem for another engine (None: the default one)."""
        return replace(self, engine=name or DEFAULT_ENGINE, engine_options=dict(options or {}))

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    def pool(self, group: str | None) -> ResolvedCluster:
        """The cluster an instance of `group` runs on: the pool that name (a pool's or one
        of its groups') belongs to; the whole cluster for None."""
        if group is None:
            return self.cluster
        pools = self.cluster.pools()
        if group in pools:
            return pools[group]
        for pool in pools.values():
            if any(g.name == group for g in pool.groups):
                return pool
        raise InfeasiblePlan(
            "topology",
            f"instance group {group!r} names no node group of the cluster "
            f"(groups: {', '.join(g.name or '' for g in self.cluster.groups)})",
        )

    @property
    def slo(self) -> SLOTarget:
        s = self.workload.slo
        return SLOTarget(
            ttft_s=None if s.ttft_ms is None else s.ttft_ms / 1e3,
            tpot_s=None if s.tpot_ms is None else s.tpot_ms / 1e3,
            percentile=s.percentile,
        )

    @property
    def target_rate_rps(self) -> float | None:
        """The arrival rate to measure at: `arrival_rate_rps`, or a trace's own rate."""
        if self.workload.arrival_rate_rps is not None:
            return self.workload.arrival_rate_rps
        if self.workload.trace is not None and len(self.workload.trace) >= 2:
            rows = trace_stream(self.workload.trace)
            if rows[-1].arrival_s > rows[0].arrival_s:
                return stream_rate_rps(rows)
        return None  # no rate given, or a trace whose requests all arrive at once


def request_stream(workload: ServingWorkload) -> list[Request]:
    """The unit-rate request stream of a workload (deterministic given `seed`), each request
    carrying the workload's shared prompt prefix."""
    prefix = workload.shared_prefix_tokens
    if workload.trace is not None:
        rows = trace_stream(workload.trace)
        if len(rows) < 2 or rows[-1].arrival_s <= rows[0].arrival_s:
            # No rate to rescale: spread the trace's requests one second apart.
            rows = [replace(r, arrival_s=float(i)) for i, r in enumerate(rows)]
        else:
            rows = unit_rate_stream(rows)
    else:
        assert workload.prompt_tokens is not None and workload.output_tokens is not None
        rng = random.Random(f"meshplan-serving-lengths:{workload.seed}")
        prompts = workload.prompt_tokens.sample(rng, workload.num_requests)
        outputs = workload.output_tokens.sample(rng, workload.num_requests)
        rows = poisson_unit_stream(prompts, outputs, workload.seed)
    return [replace(r, shared_prefix_tokens=prefix) for r in rows] if prefix else rows


def kv_format(workload: ServingWorkload, weight_format: str) -> str:
    """The KV-cache format of an instance: the workload's `kv_cache_precision` when given,
    else fp8 with fp8 weights and bf16 otherwise (per instance, so that an fp8 option of
    `precision_options` gets the fp8 KV cache fp8 engines default to)."""
    if workload.kv_cache_precision is not None:
        return workload.kv_cache_precision
    return "fp8" if weight_format == "fp8" else "bf16"


class InstanceCosts:
    """Builds and caches the `InstanceCost` of each instance layout of one problem."""

    def __init__(self, problem: ServingProblem, cost_model: ServingCostModel) -> None:
        self.problem = problem
        self.cost_model = cost_model
        self._cache: dict[tuple[Any, ...], InstanceCost | InfeasiblePlan] = {}
        self._raw: dict[tuple[Any, ...], InstanceCost | InfeasiblePlan] = {}
        self._splits: dict[tuple[Any, ...], list[int] | None] = {}

    def stage(
        self,
        tensor: int,
        expert: int,
        precision: str,
        tier: str,
        pool: str,
        layers: tuple[int, int],
    ) -> InstanceCost:
        """The cost model's cost of one pipeline stage holding `layers` on `pool` (without
        the engine's host cost: `staged` adds it once for the instance); raises
        InfeasiblePlan (cached)."""
        return self._raw_cost(tensor, 1, expert, precision, tier, pool, layers)

    def _raw_cost(
        self,
        tensor: int,
        pipeline: int,
        expert: int,
        precision: str,
        tier: str,
        group: str | None,
        layers: tuple[int, int] | None = None,
    ) -> InstanceCost:
        """The cost model's instance cost on the pool `group` names (the whole cluster for
        None), all layers or `layers` only, without the engine's host cost; raises
        InfeasiblePlan (cached)."""
        key = (tensor, pipeline, expert, precision, tier, group, layers)
        hit = self._raw.get(key)
        if hit is None:
            wl = self.problem.workload
            extra = {} if layers is None else {"layers": layers}
            try:
                hit = self.cost_model.instance_cost(
                    self.problem.model,
                    self.problem.pool(group),
                    tensor,
                    pipeline,
                    expert,
                    precision,  # type: ignore[arg-type]
                    kv_format(wl, precision),  # type: ignore[arg-type]
                    memory_utilization=self.problem.memory_utilization,
                    kv_transfer_tier=tier,  # type: ignore[arg-type]
                    **extra,
                )
            except InfeasiblePlan as exc:
                hit = exc
            self._raw[key] = hit
        if isinstance(hit, InfeasiblePlan):
            raise hit
        return hit

    @cached_property
    def _stream_figures(self) -> tuple[float, int]:
        """(mean decode context, longest request's tokens) of the workload's stream: what
        a stage split is balanced at and must hold (`solver.serving.stages`)."""
        stream = request_stream(self.problem.workload)
        prompt, output = mean_lengths(stream)
        return prompt + output / 2, max(r.prompt_tokens + r.output_tokens for r in stream)

    def stage_split(self, inst: ServingInstance) -> list[int]:
        """`inst.stage_layers`, or the planner's split of the layers over its stages
        (`solver.serving.stages.split_layers`, cached; on one pool the homogeneous one);
        raises InfeasiblePlan ("memory") when no split fits every stage's GPUs."""
        if inst.stage_layers is not None:
            return list(inst.stage_layers)
        assert inst.stage_groups is not None
        p = inst.parallelism
        precision = inst.precision or self.problem.workload.precision
        pools = pool_names(self.problem.cluster, inst.stage_groups)
        if len(set(pools)) == 1:  # one pool: the homogeneous instance and its split
            return stage_layer_counts(self.problem.model.num_layers, p.pipeline)
        context, longest = self._stream_figures
        batch = split_batch(inst.max_batch_size, context)
        key = (p.tensor, p.expert, precision, tuple(pools), batch)
        if key not in self._splits:
            self._splits[key] = split_layers(
                lambda pool, span: self.stage(p.tensor, p.expert, precision, "inter", pool, span),
                self.problem.model,
                pools,
                batch,
                longest,
            )
        split = self._splits[key]
        if split is None:
            raise InfeasiblePlan(
                "memory",
                f"no split of {self.problem.model.name}'s {self.problem.model.num_layers} "
                f"layers over stages on {', '.join(pools)} fits every stage's GPUs with the "
                f"KV cache of the longest request ({longest} tokens)",
            )
        return list(split)

    def staged(self, inst: ServingInstance, tier: str = "inter") -> InstanceCost:
        """The cost of an instance whose stages run on the pools its `stage_groups` name
        (`cost_models.serving.pipeline.PipelineInstanceCost`; module `solver.serving.stages`):
        on one pool without a split or with the homogeneous one, the homogeneous instance's
        own cost (as a training plan on one pool takes the homogeneous estimate).
        Raises InfeasiblePlan ("memory") naming the stage that does not fit."""
        assert inst.stage_groups is not None
        p = inst.parallelism
        precision = inst.precision or self.problem.workload.precision
        model = self.problem.model
        pools = pool_names(self.problem.cluster, inst.stage_groups)
        even = stage_layer_counts(model.num_layers, p.pipeline)
        if len(set(pools)) == 1 and inst.stage_layers in (None, even):
            return self.get(p.tensor, p.pipeline, p.expert, precision, tier, pools[0])
        layers = self.stage_split(inst)
        key = ("staged", p.tensor, p.expert, precision, tier, tuple(pools), tuple(layers))
        hit = self._cache.get(key)
        if hit is None:
            try:
                hit = self._compose(inst, precision, tier, pools, layers)
            except InfeasiblePlan as exc:
                hit = exc
            self._cache[key] = hit
        if isinstance(hit, InfeasiblePlan):
            raise hit
        return hit

    def _compose(
        self, inst: ServingInstance, precision: str, tier: str, pools: list[str], layers: list[int]
    ) -> InstanceCost:
        p = inst.parallelism
        cluster = self.problem.cluster
        bounds = [0, *itertools.accumulate(layers)]
        stages: list[InstanceCost] = []
        for j, pool in enumerate(pools):
            span = (bounds[j], bounds[j + 1])
            try:
                stages.append(self.stage(p.tensor, p.expert, precision, tier, pool, span))
            except InfeasiblePlan as exc:
                if exc.kind != "memory":
                    raise
                raise InfeasiblePlan(
                    "memory",
                    f"pipeline stage {j} on {pool} (layers {span[0]}-{span[1] - 1}): {exc}",
                    stage=j,
                    group=pool,
                ) from exc
        hand_offs: list[Callable[[int], float]] = []
        stride = p.tensor * p.expert
        for j in range(len(pools) - 1):
            a, b = pools[j], pools[j + 1]
            if a == b:  # the homogeneous rank layout inside the pool: NVLink within a node
                k = pools[: j + 1].count(a)  # stage j + 1 is the pool's k-th stage from 0
                node = self.problem.pool(a).gpus_per_node
                local = "intra" if (k * stride) // node == ((k - 1) * stride) // node else "inter"
                hand_offs.append(functools.partial(_stage_hand_off, stages[j], local))
            else:
                rate = cluster.inter_pool_bytes_per_s(self.problem.pool(a), self.problem.pool(b))
                hand_offs.append(
                    cross_pool_hand_off(self.problem.model.hidden_size, p.expert, rate)
                )
        engine = self.problem.engine_profile
        composed = PipelineInstanceCost(stages, hand_offs, tuple(layers), tuple(pools))
        return EngineInstanceCost(composed, engine.host(), engine.scheduler())

    def get(
        self,
        tensor: int,
        pipeline: int,
        expert: int,
        precision: str,
        tier: str = "inter",
        group: str | None = None,
    ) -> InstanceCost:
        """The instance's costs on the cluster, or on the pool `group` names (a mixed
        cluster); raises InfeasiblePlan (cached) when it cannot run."""
        key = (tensor, pipeline, expert, precision, tier, group)
        hit = self._cache.get(key)
        if hit is None:
            try:
                raw = self._raw_cost(tensor, pipeline, expert, precision, tier, group)
            except InfeasiblePlan as exc:
                hit = exc
            else:
                engine = self.problem.engine_profile
                hit = EngineInstanceCost(raw, engine.host(), engine.scheduler())
            self._cache[key] = hit
        if isinstance(hit, InfeasiblePlan):
            raise hit
        return hit

    def of(self, inst: ServingInstance, tier: str = "inter") -> InstanceCost:
        if inst.stage_groups is not None:
            return self.staged(inst, tier)
        p = inst.parallelism
        precision = inst.precision or self.problem.workload.precision
        return self.get(p.tensor, p.pipeline, p.expert, precision, tier, inst.group)


@dataclass(frozen=True)
class ServingEstimate:
    """A priced serving plan."""

    plan: ServingPlan
    feasible: bool
    violations: list[Violation]
    metrics: ServingMetrics | None
    details: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[PlanWarning, ...] = ()
    """Advisory warnings (`solver.warnings.serving_warnings`); they never change the
    plan's feasibility or ranking."""

    @property
    def goodput_rps_per_gpu(self) -> float:
        return 0.0 if self.metrics is None else self.metrics.goodput_rps_per_gpu


def _stage_hand_off(stage: InstanceCost, tier: str, tokens: int) -> float:
    """A hand-off between two stages on one pool: the stage cost's own send / receive."""
    return float(stage.hand_off_s(tokens, tier))  # type: ignore[attr-defined]


def unit_kv_transfer_tier(mode: str, unit_gpus: int, gpus_per_node: int) -> str:
    """Where a disaggregated unit's KV moves: `intra` (scale-up fabric) when the whole unit,
    its prefill and decode instances, fits in one node, else `inter` (over the NICs; the
    conservative choice once a unit spans nodes, since some of its prefill → decode pairs
    must then cross). Colocated plans move no KV (`inter`, unused)."""
    if mode != "disaggregated":
        return "inter"
    return "intra" if unit_gpus <= gpus_per_node else "inter"


def node_replicas(
    instance_gpus: int,
    gpus_per_node: int,
    cluster_gpus: int,
    objective: str = "max_goodput_per_gpu",
) -> int:
    """Colocated instances of one unit: as many as fill a node (at least one). Pricing every
    layout on about a node's worth of GPUs behind one router keeps layouts comparable: a
    p-stage instance runs p schedulers behind its own router (`pipeline_engines`), so a unit
    of one TP1 instance would forgo the pooling that a node of them gets. For `min_gpus` a
    unit is one instance, so that the GPU count can be any multiple of the instance's (the
    figure is then conservative: pooled replicas carry at least as much)."""
    if objective in ("min_gpus", "min_cost"):
        return 1
    return max(1, min(gpus_per_node, cluster_gpus) // instance_gpus)


def plan_hardware(problem: ServingProblem, plan: ServingPlan) -> tuple[int, int]:
    """(GPUs per node, GPUs) of the hardware `plan` runs on: the cluster's; on a mixed
    cluster those of the pool its instances name (`group`, or every pool of their
    `stage_groups`: the smallest node and their GPUs together), so that a plan on one
    group is scaled and its KV placed on that group's nodes, not on the first group's."""
    cluster = problem.cluster
    if cluster.is_homogeneous:
        return cluster.gpus_per_node, problem.num_gpus
    names: set[str] = set()
    for inst in plan.instances:
        names |= {inst.group} if inst.group is not None else set(inst.stage_groups or ())
    try:
        pools = {id(p): p for p in (problem.pool(n) for n in names)}
    except InfeasiblePlan:  # an unknown group: the topology rules report it
        pools = {}
    used = list(pools.values()) or list(cluster.pools().values())
    return min(p.gpus_per_node for p in used), sum(p.num_gpus for p in used)


def colocated_unit(
    plan: ServingPlan, gpus_per_node: int, cluster_gpus: int, objective: str = "max_goodput_per_gpu"
) -> tuple[int, int]:
    """(units, instances per unit) of a colocated plan: `node_replicas` per unit when the
    count is a multiple of it, else the largest common divisor of the two. A plan across
    node groups is one unit."""
    if len(plan.instances) > 1:
        return 1, plan.instances[0].count
    inst = plan.instances[0]
    per = math.gcd(
        inst.count, node_replicas(inst.parallelism.num_gpus, gpus_per_node, cluster_gpus, objective)
    )
    return inst.count // per, per


def unit_gpus(plan: ServingPlan, gpus_per_node: int = 8, cluster_gpus: int = 8) -> int:
    """GPUs of the plan's smallest repeating unit (module docstring)."""
    if len(plan.instances) > 1 and plan.mode == "colocated":
        return plan.gpus_used
    if plan.mode == "colocated":
        _, per = colocated_unit(plan, gpus_per_node, cluster_gpus)
        return per * plan.instances[0].parallelism.num_gpus
    _, per_p, per_d = _disaggregated_unit(plan)
    return (
        per_p * plan.instance("prefill").parallelism.num_gpus
        + per_d * plan.instance("decode").parallelism.num_gpus
    )


def kv_transfer_tier(plan: ServingPlan, gpus_per_node: int) -> str:
    """The tier of the plan's KV transfers (`unit_kv_transfer_tier` of its unit): the one the
    search priced the unit with, so that an estimate reproduces a search's goodput."""
    return unit_kv_transfer_tier(plan.mode, unit_gpus(plan), gpus_per_node)


def plan_topology_violations(problem: ServingProblem, plan: ServingPlan) -> list[Violation]:
    """Rules every plan must meet before it is priced: GPUs available, tensor parallelism
    inside a node (the all-reduce of every layer runs on the scale-up fabric)."""
    out = []
    if not problem.cluster.is_homogeneous or any(i.group or i.stage_groups for i in plan.instances):
        return _group_violations(problem, plan)
    if plan.gpus_used > problem.num_gpus:
        out.append(
            Violation(
                kind="topology",
                detail=(f"the plan uses {plan.gpus_used} GPUs; the cluster has {problem.num_gpus}"),
            )
        )
    for inst in plan.instances:
        p = inst.parallelism
        if p.tensor * p.expert > problem.cluster.gpus_per_node:
            out.append(
                Violation(
                    kind="topology",
                    detail=(
                        f"{inst.role} instance: tensor × expert = {p.tensor * p.expert} exceeds the "
                        f"{problem.cluster.gpus_per_node} GPUs of a node"
                    ),
                )
            )
        if p.pipeline > problem.model.num_layers:
            out.append(
                Violation(
                    kind="divisibility",
                    detail=(
                        f"{inst.role} instance: pipeline {p.pipeline} exceeds the model's "
                        f"{problem.model.num_layers} layers"
                    ),
                )
            )
    return out


def _group_violations(problem: ServingProblem, plan: ServingPlan) -> list[Violation]:
    """The rules of a plan on a mixed cluster: colocated, every instance on a named group,
    each group with the GPUs its instances take, tensor parallelism inside its nodes."""
    out = []
    groups = {i.group for i in plan.instances}
    if plan.mode != "colocated" and len(groups) > 1:
        out.append(
            Violation(
                kind="topology",
                detail="across node groups only colocated plans are priced for now (a "
                "disaggregated plan runs on one group)",
                field="plan.mode",
            )
        )
        return out
    used: dict[int, tuple[ResolvedCluster, int]] = {}
    for i, inst in enumerate(plan.instances):
        if inst.stage_groups is not None:  # names checked (`check_stage_groups`)
            p = inst.parallelism
            for j, stage_group in enumerate(inst.stage_groups):
                pool = problem.pool(stage_group)
                prior = used.get(id(pool), (pool, 0))[1]
                used[id(pool)] = (pool, prior + inst.count * p.tensor * p.expert)
                if p.tensor * p.expert > pool.gpus_per_node:
                    out.append(
                        Violation(
                            kind="topology",
                            detail=(
                                f"stage {j} on {stage_group}: tensor × expert = "
                                f"{p.tensor * p.expert} "
                                f"exceeds the {pool.gpus_per_node} GPUs of its nodes"
                            ),
                            field=f"plan.instances.{i}.parallelism",
                        )
                    )
            continue
        if inst.group is None:
            out.append(
                Violation(
                    kind="topology",
                    detail="the cluster mixes kinds of node: every instance names its group",
                    field=f"plan.instances.{i}.group",
                )
            )
            continue
        try:
            pool = problem.pool(inst.group)
        except InfeasiblePlan as exc:
            out.append(
                Violation(kind="topology", detail=str(exc), field=f"plan.instances.{i}.group")
            )
            continue
        prior = used.get(id(pool), (pool, 0))[1]
        used[id(pool)] = (pool, prior + inst.num_gpus)
        p = inst.parallelism
        if p.tensor * p.expert > pool.gpus_per_node:
            out.append(
                Violation(
                    kind="topology",
                    detail=(
                        f"instance on {inst.group}: tensor × expert = {p.tensor * p.expert} "
                        f"exceeds the {pool.gpus_per_node} GPUs of its nodes"
                    ),
                    field=f"plan.instances.{i}.parallelism",
                )
            )
    for pool, gpus in used.values():
        if gpus > pool.num_gpus:
            name = pool.groups[0].name
            out.append(
                Violation(
                    kind="topology",
                    detail=f"the instances on {name} take {gpus} GPUs; it has {pool.num_gpus}",
                    field="plan.instances",
                )
            )
    return out


def _disaggregated_unit(plan: ServingPlan) -> tuple[int, int, int]:
    """(units g, prefill instances per unit, decode instances per unit)."""
    cp, cd = plan.instance("prefill").count, plan.instance("decode").count
    g = math.gcd(cp, cd)
    return g, cp // g, cd // g


def plan_goodput(
    problem: ServingProblem, plan: ServingPlan, costs: InstanceCosts, stream: list[Request]
) -> tuple[float, GoodputResult]:
    """(the plan's goodput in requests/s, the unit's bisection result)."""
    slo = problem.slo
    tier = kv_transfer_tier(plan, plan_hardware(problem, plan)[0])
    if len(plan.instances) > 1 and plan.mode == "colocated":
        res = goodput_colocated_mix(stream, _parts(plan, costs, tier), slo, rel_tol=GOODPUT_REL_TOL)
        return res.goodput_rps, res
    if plan.mode == "colocated":
        inst = plan.instances[0]
        units, per = colocated_unit(plan, *plan_hardware(problem, plan), problem.workload.objective)
        res = goodput_colocated(
            stream,
            costs.of(inst, tier),
            per,
            inst.max_batch_size,
            inst.chunk_size,
            slo,
            rel_tol=GOODPUT_REL_TOL,
        )
        return units * res.goodput_rps, res
    units, per_p, per_d = _disaggregated_unit(plan)
    pre, dec = plan.instance("prefill"), plan.instance("decode")
    res = goodput_disaggregated(
        stream,
        costs.of(pre, tier),
        per_p,
        pre.chunk_size,
        costs.of(dec, tier),
        per_d,
        dec.max_batch_size,
        slo,
        rel_tol=GOODPUT_REL_TOL,
    )
    return units * res.goodput_rps, res


def _parts(plan: ServingPlan, costs: InstanceCosts, tier: str) -> list[ColocatedPart]:
    """The colocated instances of a plan across node groups, fastest first."""
    parts = [
        ColocatedPart(costs.of(inst, tier), inst.count, inst.max_batch_size, inst.chunk_size)
        for inst in plan.instances
    ]
    return sorted(parts, key=lambda part: -routing_weight(part.cost))


def instance_speeds(
    problem: ServingProblem, plan: ServingPlan, costs: InstanceCosts
) -> list[float]:
    """The `instance_speed` of one replica of each of the plan's instances (in plan order),
    each on its group's hardware with the KV tier the plan is priced with: the figures the
    mix simulator routes by, for exports that weight a router the same way."""
    tier = kv_transfer_tier(plan, plan_hardware(problem, plan)[0])
    return [instance_speed(costs.of(inst, tier)) for inst in plan.instances]


def simulate_plan(
    plan: ServingPlan,
    costs: InstanceCosts,
    requests: list[Request],
    gpus_per_node: int,
    concurrency: int | None = None,
) -> SimResult:
    """Simulate the whole plan on `requests` (arrival times already at the rate), at most
    `concurrency` of them in flight."""
    tier = kv_transfer_tier(plan, gpus_per_node)
    if len(plan.instances) > 1 and plan.mode == "colocated":
        return simulate_colocated_mix(requests, _parts(plan, costs, tier), concurrency=concurrency)
    if plan.mode == "colocated":
        inst = plan.instances[0]
        return simulate_colocated(
            requests,
            costs.of(inst, tier),
            inst.count,
            inst.max_batch_size,
            inst.chunk_size,
            concurrency=concurrency,
        )
    pre, dec = plan.instance("prefill"), plan.instance("decode")
    return simulate_disaggregated(
        requests,
        costs.of(pre, tier),
        pre.count,
        pre.chunk_size,
        costs.of(dec, tier),
        dec.count,
        dec.max_batch_size,
        concurrency=concurrency,
    )


def plan_price_or_none(problem: ServingProblem, plan: ServingPlan) -> float | None:
    """The plan's GPUs at their groups' prices per GPU-hour; None when none has a price."""
    total, priced = 0.0, False
    for inst in plan.instances:
        p = inst.parallelism
        for group, gpus in (
            [(g, inst.count * p.tensor * p.expert) for g in inst.stage_groups]
            if inst.stage_groups is not None
            else [(inst.group, inst.num_gpus)]
        ):
            price = problem.pool(group).groups[0].price_per_gpu_hour
            if price is not None:
                total += gpus * price
                priced = True
    return total if priced else None


def _ms(x: float) -> float:
    return x * 1e3 if math.isfinite(x) else 1e12


def _instance_details(
    inst: ServingInstance, cost: InstanceCost, mean_prompt: float, mean_output: float
) -> dict[str, Any]:
    ctx = round(mean_prompt + mean_output / 2)
    p = max(1, round(mean_prompt))
    hold = kv_tokens_per_seq(cost, mean_prompt, mean_output, inst.role == "both")
    kv_batch = int(cost.kv_capacity_tokens // max(1.0, hold))
    batch = min(inst.max_batch_size, max(1, kv_batch))
    staged = _stage_details(cost, IterationBatch(batch, batch * ctx))
    return {
        **staged,
        "role": inst.role,
        "gpus": inst.parallelism.num_gpus,
        "weights_gib": cost.weights_gib,
        "kv_cache_gib": cost.kv_cache_gib,
        "kv_capacity_tokens": cost.kv_capacity_tokens,
        "kv_limited_batch": kv_batch,
        "decode_step_ms_batch_1": cost.iteration_time_s(IterationBatch(1, ctx)) * 1e3,
        f"decode_step_ms_batch_{batch}": cost.iteration_time_s(IterationBatch(batch, batch * ctx))
        * 1e3,
        "prefill_ms_mean_prompt": cost.iteration_time_s(IterationBatch(0, 0, p, p * (p + 1) / 2, 1))
        * 1e3,
    }


def _accelerator_id(cost: InstanceCost) -> str | None:
    acc = getattr(cost, "accelerator", None)
    return None if acc is None else str(acc.id)


def _stage_details(cost: InstanceCost, batch: IterationBatch) -> dict[str, Any]:
    """Which layers run on which group, for an instance whose stages span pools: per stage
    its group, layers (first and last index), decode step time at `batch` and KV capacity,
    and a sentence saying it (nothing for another instance)."""
    composed = getattr(cost, "stage_pools", None)
    if composed is None:
        return {}
    layers: tuple[int, ...] = cost.stage_layers  # type: ignore[attr-defined]
    stage_costs: list[InstanceCost] = list(cost.stages)  # type: ignore[attr-defined]
    bounds = [0, *itertools.accumulate(layers)]
    stages = [
        {
            "group": pool,
            "accelerator": _accelerator_id(stage),
            "layers": [bounds[j], bounds[j + 1] - 1],
            "decode_step_ms": stage.iteration_time_s(batch) * 1e3,
            "kv_capacity_tokens": stage.kv_capacity_tokens,
            "weights_gib": stage.weights_gib,
        }
        for j, (pool, stage) in enumerate(zip(composed, stage_costs, strict=True))
    ]
    parts = [
        f"layers {s['layers'][0]}-{s['layers'][1]} on {s['group']}"
        + (f" ({s['accelerator']})" if s["accelerator"] else "")
        for s in stages
    ]
    return {"stages": stages, "stage_split": "; ".join(parts)}


def _isolated(
    problem: ServingProblem, plan: ServingPlan, costs: InstanceCosts, prompt: int, output: int
) -> tuple[float, float]:
    tier = kv_transfer_tier(plan, plan_hardware(problem, plan)[0])
    if plan.mode == "colocated":
        # alone in the system a request goes to the fastest instance (the router's choice)
        inst = max(plan.instances, key=lambda i: routing_weight(costs.of(i, tier)))
        return isolated_latency_colocated(costs.of(inst, tier), prompt, output, inst.chunk_size)
    pre, dec = plan.instance("prefill"), plan.instance("decode")
    return isolated_latency_disaggregated(
        costs.of(pre, tier), pre.chunk_size, costs.of(dec, tier), prompt, output
    )


def evaluate_plan(
    problem: ServingProblem,
    plan: ServingPlan,
    costs: InstanceCosts,
    stream: list[Request] | None = None,
    unit_goodput: GoodputResult | None = None,
    *,
    cluster: ClusterSpec | None = None,
) -> ServingEstimate:
    """Price `plan`: goodput (bisection on simulated SLO attainment), then the latencies at
    the workload's rate (or at the goodput when none is given), with the plan's warnings.
    `unit_goodput`: the goodput of the plan's unit when already known (the search passes
    it), with the same stream. `cluster`: the request's cluster spec when there is one (its
    explicit bandwidths are the ones `bandwidth_out_of_range` checks)."""
    named = plan.model_copy(
        update={
            "engine": problem.engine,
            "engine_options": problem.engine_profile.options.model_dump(mode="json"),
        }
    )
    check_stage_groups(problem.model, problem.cluster, plan)
    named = _with_stage_layers(named, costs)
    est = _evaluate(problem, named, costs, stream, unit_goodput)
    return replace(est, warnings=tuple(serving_warnings(problem, est, cluster=cluster)))


def _with_stage_layers(plan: ServingPlan, costs: InstanceCosts) -> ServingPlan:
    """The plan with the planner's split filled in for every instance across node groups
    that gives none (left out where no split fits: the estimate then says why)."""
    if all(i.stage_groups is None or i.stage_layers is not None for i in plan.instances):
        return plan
    instances = []
    for inst in plan.instances:
        if inst.stage_groups is not None and inst.stage_layers is None:
            try:
                inst = inst.model_copy(update={"stage_layers": costs.stage_split(inst)})
            except InfeasiblePlan:
                pass
        instances.append(inst)
    return plan.model_copy(update={"instances": instances})


def _evaluate(
    problem: ServingProblem,
    plan: ServingPlan,
    costs: InstanceCosts,
    stream: list[Request] | None,
    unit_goodput: GoodputResult | None,
) -> ServingEstimate:
    """`evaluate_plan` without the warnings."""
    violations = plan_topology_violations(problem, plan)
    if violations:
        return ServingEstimate(plan, False, violations, None)
    tier = kv_transfer_tier(plan, plan_hardware(problem, plan)[0])
    inst_costs = []
    for i, inst in enumerate(plan.instances):
        try:
            inst_costs.append((inst, costs.of(inst, tier)))
        except InfeasiblePlan as exc:
            field = None
            if inst.stage_groups is not None and exc.kind == "memory":
                field = f"plan.instances.{i}.stage_layers"
            violation = Violation(kind=exc.kind, detail=str(exc), field=field)
            return ServingEstimate(plan, False, [violation], None)
    stream = stream if stream is not None else request_stream(problem.workload)
    mean_prompt, mean_output = mean_lengths(stream)
    for inst, cost in inst_costs:
        need = (
            max(r.prompt_tokens for r in stream)
            if inst.role == "prefill"
            else max(r.prompt_tokens + r.output_tokens for r in stream)
        )
        if cost.kv_capacity_tokens < need:
            violations.append(
                Violation(
                    kind="memory",
                    detail=(
                        f"{inst.role} instance: its KV cache holds {cost.kv_capacity_tokens} tokens, "
                        f"less than the longest request ({need} tokens)"
                    ),
                )
            )
    units = (
        colocated_unit(plan, *plan_hardware(problem, plan), problem.workload.objective)[0]
        if plan.mode == "colocated"
        else _disaggregated_unit(plan)[0]
    )
    if unit_goodput is not None:
        goodput, unit = units * unit_goodput.goodput_rps, unit_goodput
    else:
        goodput, unit = plan_goodput(problem, plan, costs, stream)
    rate = problem.target_rate_rps
    concurrency = problem.workload.max_concurrency
    if rate is None and concurrency is not None:  # a closed loop: every request ready at 0
        closed = [replace(r, arrival_s=0.0) for r in stream]
        sim = simulate_plan(plan, costs, closed, plan_hardware(problem, plan)[0], concurrency)
        scale = 1
        measured_at = sim.throughput_rps
        if not problem.slo.met_by(sim):
            attained = sim.attainment(problem.slo.ttft_s, problem.slo.tpot_s)
            violations.append(
                Violation(
                    kind="slo",
                    detail=(
                        f"with {concurrency} requests in flight only {attained:.1%} of requests "
                        f"meet the SLO (P{problem.slo.percentile:g} needed)"
                    ),
                )
            )
    elif rate is not None:
        sim = simulate_plan(
            plan, costs, scale_stream(stream, rate), plan_hardware(problem, plan)[0], concurrency
        )
        scale = 1
        measured_at = rate
        if concurrency is not None and sim.throughput_rps < CAPPED_RATE_SERVED * rate:
            violations.append(
                Violation(
                    kind="capacity",
                    detail=(
                        f"with at most {concurrency} requests in flight the plan serves "
                        f"{sim.throughput_rps:.3g} of the {rate:.3g} requests/s offered: the rest "
                        "wait at the client (their wait is not in the latencies)"
                    ),
                )
            )
        # judged on the whole plan at the rate: the goodput (units × the unit's) is a
        # conservative figure, so a plan may carry a rate somewhat above it
        attained = sim.attainment(problem.slo.ttft_s, problem.slo.tpot_s)
        if not problem.slo.met_by(sim):
            violations.append(
                Violation(
                    kind="slo",
                    detail=(
                        f"at the arrival rate {rate:.3g} requests/s only {attained:.1%} of requests "
                        f"meet the SLO (P{problem.slo.percentile:g} needed); the plan's goodput is "
                        f"{goodput:.3g} requests/s"
                    ),
                )
            )
    elif unit.result is not None:
        sim, scale, measured_at = unit.result, units, goodput
    else:
        low = max(unit.upper_bound_rps, 1e-6) * LOW_LOAD_FRACTION
        sim = simulate_plan(
            plan, costs, scale_stream(stream, low * units), plan_hardware(problem, plan)[0]
        )
        scale, measured_at = 1, low * units
        ttft, tpot = _isolated(problem, plan, costs, round(mean_prompt), round(mean_output))
        violations.append(
            Violation(
                kind="slo",
                detail=(
                    f"no arrival rate meets the SLO at P{problem.slo.percentile:g}: a request of mean "
                    f"length alone sees TTFT {ttft * 1e3:.1f} ms and TPOT {tpot * 1e3:.2f} ms"
                ),
            )
        )
    slo = problem.slo
    gpus = plan.gpus_used
    decode_cost = next(c for inst, c in inst_costs if inst.role != "prefill")
    metrics = ServingMetrics(
        ttft_ms_p50=_ms(sim.ttft_percentile_s(50)),
        ttft_ms_p90=_ms(sim.ttft_percentile_s(90)),
        ttft_ms_p99=_ms(sim.ttft_percentile_s(99)),
        tpot_ms_p50=_ms(sim.tpot_percentile_s(50)),
        tpot_ms_p90=_ms(sim.tpot_percentile_s(90)),
        tpot_ms_p99=_ms(sim.tpot_percentile_s(99)),
        e2e_latency_s_p50=min(sim.e2e_percentile_s(50), 1e9),
        e2e_latency_s_p90=min(sim.e2e_percentile_s(90), 1e9),
        throughput_tokens_per_s=sim.throughput_tokens_per_s * scale,
        goodput_rps=goodput,
        goodput_rps_per_gpu=goodput / gpus,
        gpus_used=gpus,
        kv_cache_gib=max(c.kv_cache_gib for _, c in inst_costs),
        kv_capacity_tokens=decode_cost.kv_capacity_tokens,
        weights_gib=max(c.weights_gib for _, c in inst_costs),
        max_concurrent_sequences=sim.max_concurrent_sequences * scale,
        arrival_rate_rps=measured_at,
        slo_attainment=sim.attainment(slo.ttft_s, slo.tpot_s),
        requests_simulated=sim.num_requests,
        preemptions=sim.preemptions * scale,
        price_per_hour=plan_price_or_none(problem, plan),
    )
    details = {
        "goodput_limited_by": unit.limited_by,
        "capacity_upper_bound_rps": unit.upper_bound_rps * units,
        "goodput_simulations": unit.evaluations,
        "units": units,
        "kv_transfer_tier": tier if plan.mode == "disaggregated" else None,
        "mean_prompt_tokens": mean_prompt,
        "mean_output_tokens": mean_output,
        "instances": [
            _instance_details(inst, cost, mean_prompt, mean_output) for inst, cost in inst_costs
        ],
    }
    return ServingEstimate(plan, not violations, violations, metrics, details)
