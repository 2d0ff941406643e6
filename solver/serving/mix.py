"""Serving searches on a cluster of mixed hardware: each group alone, and mixes of groups
behind one router (Mélange, Griggs et al. 2024: the cheapest mix of GPU types that serves
a rate under an SLO).

1. **Each group alone**: the serving search (`serving_search`) on each pool's own GPUs,
   its plans carried over with their instances naming the pool.
2. **Every group at once**: each pool's best colocated layout (from 1) replicated on all of
   its GPUs, one instance set per pool behind one router (`simulate_colocated_mix`).
3. **The cheapest mix for the rate** (objectives `min_gpus`, `min_cost`; the workload's
   arrival rate): with r_g the goodput one instance of pool g's layout carries under the
   SLO (its plan's goodput over its instance count), s_g its GPUs, p_g its price per
   GPU-hour (`min_cost`; 1 for `min_gpus`) and M_g the instances the pool holds, the
   integer program

       min  Σ_g p_g · s_g · n_g
       s.t. Σ_g r_g · n_g ≥ (1 + δ) · rate,   0 ≤ n_g ≤ M_g integer

   (PuLP / HiGHS) gives the counts; the mix is then priced, and unless it meets the SLO at
   the rate and its own goodput carries the rate (routing and batching across kinds are
   not additive) the margin δ grows (0, 10, 25, 50, 100 %) until it does.
4. **One instance across two groups** (Helix, Mei et al., ASPLOS'25; Parallax, Tong et al.
   2025): for each pair of pools (at most `MAX_SPAN_PAIRS`, the faster pool by memory
   bandwidth first), pipeline 2 with one stage per pool. Of the tensor degrees t dividing
   both node sizes whose split fits both stages' memory (layers split by
   `solver.serving.stages`) and two max batches (the better pool's best colocated plan's,
   and the most the instance's own KV cache holds, `batch_options`), with that plan's
   chunk, the one with the highest closed-form bound per GPU (the search's
   `capacity_upper_bound_rps` and `decode_phase_bound_rps`) is priced: as many instances
   as the two pools hold (`max_goodput_per_gpu`, `min_latency`), or for `min_gpus` /
   `min_cost` one instance, then as many as the rate needs with the margins of 3, kept
   only when its goodput carries the rate. It wins where neither pool alone holds the
   model well (its weights fill a pool's GPUs, leaving little KV cache) or where the pair
   carries more per GPU than either alone; the ranking decides.

Plans are ranked by the workload's objective (`_rank_key`); explanations say what each
group runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pulp

from cost_models.serving.base import ServingCostModel
from solver.base import SearchStats
from solver.formulations.stage_partition import _make_solver
from solver.serving.evaluate import (
    GOODPUT_REL_TOL,
    InstanceCosts,
    ServingEstimate,
    ServingProblem,
    evaluate_plan,
    request_stream,
)
from solver.serving.goodput import mean_lengths
from solver.serving.queueing import capacity_upper_bound_rps
from solver.serving.search import (
    MAX_BATCH,
    RankedServingPlan,
    ServingSearchResult,
    _rank_key,
    batch_options,
    decode_phase_bound_rps,
    explain_serving,
    plan_price_per_hour,
    serving_search,
)
from specs.errors import InfeasiblePlan
from specs.serving import ServingInstance, ServingParallelism, ServingPlan

MIX_TIME_LIMIT_S = 5.0
"""Time limit of one mix program (a few integer variables: it solves in milliseconds)."""
MARGINS = (0.0, 0.1, 0.25, 0.5, 1.0)
"""Capacity margins over the rate tried in turn until the simulated mix meets the SLO."""
MAX_SPAN_PAIRS = 3
"""Pairs of pools tried for instances whose two stages sit on different pools (each pair
costs two to a few goodput searches)."""
SPAN_TENSORS = (1, 2, 4, 8)
"""Tensor degrees tried for a spanning instance (those dividing both pools' node sizes)."""


def _with_group(plan: ServingPlan, group: str) -> ServingPlan:
    return plan.model_copy(
        update={"instances": [i.model_copy(update={"group": group}) for i in plan.instances]}
    )


def _cheapest_counts(
    rate: float, layouts: Sequence[tuple[float, float, int]], margin: float
) -> list[int] | None:
    """Instance counts of the program in the module docstring; `layouts` holds per pool
    (goodput per instance, price per instance-hour, most instances). None: infeasible."""
    prob = pulp.LpProblem("cheapest_mix", pulp.LpMinimize)
    n = [
        pulp.LpVariable(f"n{g}", lowBound=0, upBound=most, cat="Integer")
        for g, (_, _, most) in enumerate(layouts)
    ]
    prob += pulp.lpSum(price * x for x, (_, price, _) in zip(n, layouts, strict=True))
    prob += pulp.lpSum(r * x for x, (r, _, _) in zip(n, layouts, strict=True)) >= (
        (1 + margin) * rate
    )
    prob.solve(_make_solver(MIX_TIME_LIMIT_S))
    if pulp.LpStatus[prob.status] != "Optimal":
        return None
    return [round(x.value() or 0) for x in n]


def mixed_serving_search(
    problem: ServingProblem,
    cost_model: ServingCostModel,
    *,
    fixed: dict[str, Any] | None = None,
    engines: Sequence[str] | None = None,
    engine_options: Mapping[str, Mapping[str, Any]] | None = None,
    time_limit_s: float = 60.0,
    top_k: int = 10,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> ServingSearchResult:
    """The `top_k` serving plans over the groups alone and their mixes (module docstring)."""
    started = time.perf_counter()
    pools = problem.cluster.pools()
    stats = SearchStats()
    candidates: list[ServingEstimate] = []
    layouts: dict[str, tuple[ServingInstance, float]] = {}
    costs = InstanceCosts(problem, cost_model)
    per_rate = problem.workload.objective in ("min_gpus", "min_cost")
    searches = 2 * len(pools) if per_rate else len(pools)

    def search(sub: ServingProblem, colocated: bool = False) -> ServingSearchResult:
        res = serving_search(
            sub,
            cost_model,
            fixed={**(fixed or {}), "mode": "colocated"} if colocated else fixed,
            engines=engines,
            engine_options=engine_options,
            time_limit_s=time_limit_s / (searches + 1),
            top_k=top_k,
            progress=progress,
            should_stop=should_stop,
        )
        stats.merge(res.stats)
        return res

    for name, pool in pools.items():
        sub = replace(problem, cluster=pool)
        # the group alone, for the workload's objective
        for found in search(sub).plans:
            est = found.estimate
            candidates.append(replace(est, plan=_with_group(est.plan, name)))
        # its most efficient colocated layout, whatever the rate (a mix's building block;
        # searched among colocated plans, which disaggregated ones may outrank)
        efficient = (
            search(
                replace(
                    sub,
                    workload=sub.workload.model_copy(update={"objective": "max_goodput_per_gpu"}),
                ),
                colocated=True,
            )
            if per_rate
            else None
        )
        source = (
            efficient.plans
            if efficient is not None
            else [
                RankedServingPlan(0, c, "") for c in candidates if c.plan.instances[0].group == name
            ]
        )
        for found in source:
            est, metrics = found.estimate, found.estimate.metrics
            if est.plan.mode == "colocated" and metrics is not None:
                inst = est.plan.instances[0].model_copy(update={"group": name})
                layouts[name] = (inst, metrics.goodput_rps / inst.count)
                break
    if len(layouts) > 1:
        every = ServingPlan(
            mode="colocated",
            instances=[
                inst.model_copy(update={"count": pools[g].num_gpus // inst.parallelism.num_gpus})
                for g, (inst, _) in layouts.items()
            ],
        )
        candidates.append(evaluate_plan(problem, every, costs))
        stats.evaluated += 1
    rate = problem.target_rate_rps
    if (
        rate is not None
        and len(layouts) > 1
        and problem.workload.objective
        in (
            "min_gpus",
            "min_cost",
        )
    ):
        names = list(layouts)
        per = []
        for g in names:
            inst, goodput = layouts[g]
            price = (
                pools[g].groups[0].price_per_gpu_hour or 0.0
                if problem.workload.objective == "min_cost"
                else 1.0
            )
            most = pools[g].num_gpus // inst.parallelism.num_gpus
            per.append((goodput, price * inst.parallelism.num_gpus, most))
        for margin in MARGINS:
            counts = _cheapest_counts(rate, per, margin)
            if counts is None:
                break
            instances = [
                layouts[g][0].model_copy(update={"count": n})
                for g, n in zip(names, counts, strict=True)
                if n > 0
            ]
            mix = ServingPlan(mode="colocated", instances=instances)
            est = evaluate_plan(problem, mix, costs)
            stats.evaluated += 1
            # it must carry the rate in its goodput (steady state), not only meet the SLO
            # over the simulated window at the rate
            carries = est.metrics is not None and est.metrics.goodput_rps >= rate * (
                1 - GOODPUT_REL_TOL
            )
            if est.feasible and carries:
                candidates.append(est)
                break
    best_by_pool: dict[str, ServingInstance] = {}
    for c in candidates:
        inst = c.plan.instances[0]
        if (
            c.feasible
            and c.plan.mode == "colocated"
            and len(c.plan.instances) == 1
            and inst.group is not None
        ):
            best_by_pool.setdefault(inst.group, inst)
    for est in _spanning_plans(problem, costs, best_by_pool, rate):
        candidates.append(est)
        stats.evaluated += 1
    feasible = [c for c in candidates if c.feasible]
    feasible.sort(key=lambda est: _rank_key(problem, est), reverse=True)
    unique: list[ServingEstimate] = []
    seen: set[str] = set()
    for est in feasible:
        key = est.plan.model_dump_json()
        if key not in seen:
            seen.add(key)
            unique.append(est)
    top = unique[:top_k]
    ranked = [RankedServingPlan(i + 1, est, "") for i, est in enumerate(top)]
    plans = [
        replace(
            r,
            explanation=f"{explain_serving(problem, r.estimate, r.rank, ranked)} "
            f"{_groups_sentence(problem, r.estimate)}",
        )
        for r in ranked
    ]
    stats.feasible = len(feasible)
    stats.wall_time_s = time.perf_counter() - started
    return ServingSearchResult(plans, stats)


def _spanning_plans(
    problem: ServingProblem,
    costs: InstanceCosts,
    best_by_pool: Mapping[str, ServingInstance],
    rate: float | None,
) -> list[ServingEstimate]:
    """Plans of one instance kind whose two pipeline stages sit on two pools (module
    docstring, 4), priced."""
    pools = problem.cluster.pools()
    ranked = sorted(
        pools,
        key=lambda n: -pools[n].groups[0].accelerator.memory_bandwidth_bytes_per_s,
    )
    pairs = [(a, b) for i, a in enumerate(ranked) for b in ranked[i + 1 :]][:MAX_SPAN_PAIRS]
    model = problem.model
    mean_prompt, mean_output = mean_lengths(request_stream(problem.workload))
    per_rate = rate is not None and problem.workload.objective in ("min_gpus", "min_cost")
    out: list[ServingEstimate] = []
    tpot = problem.slo.tpot_s
    for a, b in pairs:
        template = best_by_pool.get(a) or best_by_pool.get(b)
        chunk = template.chunk_size if template else 2048
        node = min(pools[a].gpus_per_node, pools[b].gpus_per_node)
        best: tuple[float, ServingInstance] | None = None
        for t in SPAN_TENSORS:
            if node % t or model.num_attention_heads % t:
                continue
            inst = ServingInstance(
                role="both",
                count=1,
                parallelism=ServingParallelism(tensor=t, pipeline=2),
                max_batch_size=template.max_batch_size if template else MAX_BATCH,
                chunk_size=chunk,
                precision=template.precision if template else None,
                stage_groups=[a, b],
            )
            try:
                cost = costs.of(inst)
            except InfeasiblePlan:
                continue  # no split of this tensor degree fits
            # the template's max batch, and the most the spanning instance's KV cache holds
            # (room the single pools may not have had)
            top = batch_options(cost, mean_prompt, mean_output, {}, colocated=True)[-1]
            for batch in dict.fromkeys([inst.max_batch_size, top]):
                sized = inst.model_copy(update={"max_batch_size": batch})
                try:
                    sized = sized.model_copy(update={"stage_layers": costs.stage_split(sized)})
                    cost = costs.of(sized)
                except InfeasiblePlan:
                    continue
                # the search's closed-form bound per GPU picks the one candidate priced
                bound = min(
                    capacity_upper_bound_rps(cost, 1, batch, chunk, mean_prompt, mean_output),
                    decode_phase_bound_rps(cost, batch, mean_prompt, mean_output, tpot, True),
                ) / (2 * t)
                if best is None or bound > best[0]:
                    best = (bound, sized)
        if best is None or best[0] <= 0:
            continue
        sized = best[1]
        t = sized.parallelism.tensor
        most = min(pools[a].num_gpus, pools[b].num_gpus) // t
        if not per_rate:  # every instance the two pools hold
            whole = ServingPlan(
                mode="colocated", instances=[sized.model_copy(update={"count": most})]
            )
            out.append(evaluate_plan(problem, whole, costs))
            continue
        assert rate is not None
        one = evaluate_plan(problem, ServingPlan(mode="colocated", instances=[sized]), costs)
        if one.metrics is None or one.metrics.goodput_rps <= 0:
            continue
        per = one.metrics.goodput_rps
        for n in dict.fromkeys(min(most, math.ceil(rate * (1 + m) / per)) for m in MARGINS):
            plan = ServingPlan(mode="colocated", instances=[sized.model_copy(update={"count": n})])
            est = one if n == 1 else evaluate_plan(problem, plan, costs)
            # like a mix, it must carry the rate in its goodput, not only meet the SLO
            if (
                est.feasible
                and est.metrics is not None
                and (est.metrics.goodput_rps >= rate * (1 - GOODPUT_REL_TOL))
            ):
                out.append(est)
                break
    return out


def _groups_sentence(problem: ServingProblem, est: ServingEstimate) -> str:
    """What each group serves in the plan, and its price when known."""
    parts = []
    for name, pool in problem.cluster.pools().items():
        acc = pool.groups[0].accelerator.id
        staged = [
            (i, j)
            for i in est.plan.instances
            for j, g in enumerate(i.stage_groups or [])
            if g == name
        ]
        if staged:
            parts.append(
                f"{name} runs "
                + ", ".join(
                    f"stage {j} ({(i.stage_layers or [0] * (j + 1))[j]} layers) of "
                    f"{i.count} instance(s) of TP{i.parallelism.tensor} "
                    f"PP{i.parallelism.pipeline}"
                    for i, j in staged
                )
                + f" ({sum(i.count * i.parallelism.tensor * i.parallelism.expert for i, _ in staged)}"
                f" of {pool.num_gpus} {acc})"
            )
            continue
        mine = [i for i in est.plan.instances if i.group == name]
        if not mine:
            parts.append(f"{name} ({pool.num_gpus} {acc}) idles")
            continue
        runs = ", ".join(
            f"{i.count} {'' if i.role == 'both' else i.role + ' '}instance(s) of "
            f"TP{i.parallelism.tensor}"
            + (f" PP{i.parallelism.pipeline}" if i.parallelism.pipeline > 1 else "")
            for i in mine
        )
        used = sum(i.num_gpus for i in mine)
        parts.append(f"{name} runs {runs} ({used} of {pool.num_gpus} {acc})")
    price = plan_price_per_hour(problem, est.plan)
    tail = f"; {price:.4g} per hour" if price > 0 else ""
    return "Groups: " + "; ".join(parts) + tail + "."
