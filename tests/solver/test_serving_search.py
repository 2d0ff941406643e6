"""Serving plan search (`solver.serving.search`): the branch and bound against brute force
over the same declared space, the three objectives, `constraints.fixed`, the time limit,
explanations and statistics.

Brute force: every candidate of the space (the module's own `layouts`, `batch_options`,
`CHUNKS`, `PREFILL_CHUNKS`, `MAX_RATIO`) has its unit goodput computed by the goodput
bisection (`goodput_colocated` / `goodput_disaggregated`, the same `rel_tol`) with no
bound and no pruning; the search must return the best of them.

The cases are small: Llama-3-8B (preset) on one node of 2 or 4 H100s, fixed lengths
512/128, 100 simulated requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from types import SimpleNamespace
from typing import Any

import pytest

from cost_models.serving.analytical import AnalyticalServingCostModel
from hardware_catalog import resolve_cluster
from solver.serving import search as S
from solver.serving.evaluate import (
    GOODPUT_REL_TOL,
    InstanceCosts,
    ServingProblem,
    evaluate_plan,
    request_stream,
    simulate_plan,
)
from solver.serving.goodput import (
    goodput_colocated,
    goodput_disaggregated,
    mean_lengths,
    scale_stream,
)
from solver.serving.queueing import capacity_upper_bound_rps, isolated_latency_colocated
from solver.serving.search import serving_search
from specs import presets
from specs.cluster import ClusterSpec
from specs.errors import InfeasiblePlan, SpecError
from specs.serving import ServingPlan, ServingWorkload

COST_MODEL = AnalyticalServingCostModel()
LOOSE = {"ttft_ms": 300, "tpot_ms": 30}
TIGHT_2 = {"ttft_ms": 60, "tpot_ms": 12}
TIGHT_4 = {"ttft_ms": 100, "tpot_ms": 15}


def make_problem(gpus: int, nodes: int = 1, **workload: Any) -> ServingProblem:
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {"accelerator": "h100-sxm", "num_nodes": nodes, "gpus_per_node": gpus}
                ]
            }
        )
    )
    body: dict[str, Any] = {
        "kind": "serving",
        "prompt_tokens": 512,
        "output_tokens": 128,
        "slo": LOOSE,
        "num_requests": 100,
    }
    body.update(workload)
    # The search's machinery is checked on the GPU costs alone (an engine without host
    # time): its decode-phase bound is exact for step times affine in the batch at the
    # mean context, and a host cost per sequence moves optima onto the edge where the
    # percentile makes it a near-bound (see test_engines_are_searched_and_compared).
    return ServingProblem(
        presets.get_preset("llama3-8b"),
        cluster,
        ServingWorkload.model_validate(body),
        engine_options={"host_cost_scale": 0.0},
    )


@dataclass(frozen=True)
class Unit:
    """One candidate of the space with its unit goodput (brute force)."""

    mode: str
    gpus: int
    goodput_rps: float
    layout: S.Layout
    max_batch: int
    chunk: int | None
    prefill: S.Layout | None = None
    prefill_count: int = 0
    decode_count: int = 1
    replicas: int = 1

    @property
    def per_gpu(self) -> float:
        return self.goodput_rps / self.gpus

    def candidate(self) -> S.Candidate:
        if self.mode == "colocated":
            return S.Candidate(
                "colocated", self.layout, self.max_batch, self.chunk, replicas=self.replicas
            )
        return S.Candidate(
            "disaggregated",
            self.layout,
            self.max_batch,
            None,
            self.prefill,
            self.chunk,
            self.prefill_count,
            self.decode_count,
        )


def brute_force(problem: ServingProblem) -> list[Unit]:
    """Every candidate of the declared space, priced by bisection without any bound."""
    stream = request_stream(problem.workload)
    mean_prompt, mean_output = mean_lengths(stream)
    costs = InstanceCosts(problem, COST_MODEL)
    slo = problem.slo
    node = problem.cluster.gpus_per_node
    space = S.layouts(problem, {})

    def cost(layout: S.Layout, tier: str) -> Any:
        try:
            return costs.get(layout.tensor, layout.pipeline, layout.expert, layout.precision, tier)
        except InfeasiblePlan:
            return None

    out = []
    for layout in space:
        c = cost(layout, "inter")
        if c is None:
            continue
        # a colocated unit is a node's worth of instances behind one router (one instance
        # for min_gpus, so that any multiple of its GPUs can be chosen)
        replicas = (
            1
            if problem.workload.objective == "min_gpus"
            else max(1, min(node, problem.num_gpus) // layout.gpus)
        )
        # the colocated options (KV held as the engine pages it), as the search takes them
        for batch in S.batch_options(c, mean_prompt, mean_output, {}, True):
            for chunk in S.CHUNKS:
                res = goodput_colocated(
                    stream, c, replicas, batch, chunk, slo, rel_tol=GOODPUT_REL_TOL
                )
                out.append(
                    Unit(
                        "colocated",
                        replicas * layout.gpus,
                        res.goodput_rps,
                        layout,
                        batch,
                        chunk,
                        replicas=replicas,
                    )
                )
    for pre in space:
        for chunk in S.PREFILL_CHUNKS:
            for dec in space:
                if cost(pre, "inter") is None or cost(dec, "inter") is None:
                    continue
                for batch in S.batch_options(cost(dec, "inter"), mean_prompt, mean_output, {}):
                    for a in range(1, S.MAX_RATIO + 1):
                        for b in range(1, S.MAX_RATIO + 1):
                            gpus = a * pre.gpus + b * dec.gpus
                            if math.gcd(a, b) != 1 or gpus > problem.num_gpus:
                                continue
                            # the KV moves inside a node when the whole unit fits one
                            tier = "intra" if gpus <= node else "inter"
                            res = goodput_disaggregated(
                                stream,
                                cost(pre, tier),
                                a,
                                chunk,
                                cost(dec, tier),
                                b,
                                batch,
                                slo,
                                rel_tol=GOODPUT_REL_TOL,
                            )
                            out.append(
                                Unit(
                                    "disaggregated",
                                    gpus,
                                    res.goodput_rps,
                                    dec,
                                    batch,
                                    chunk,
                                    pre,
                                    a,
                                    b,
                                )
                            )
    return out


@cache
def space_of(case: str) -> tuple[ServingProblem, tuple[Unit, ...]]:
    problem = {"2gpu": make_problem(2, slo=TIGHT_2), "4gpu": make_problem(4, slo=TIGHT_4)}[case]
    return problem, tuple(brute_force(problem))


def best_per_gpu(units: tuple[Unit, ...], mode: str | None) -> float:
    return max(u.per_gpu for u in units if mode is None or u.mode == mode)


# ---- exactness -----------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["2gpu", "4gpu"])
@pytest.mark.parametrize("mode", [None, "colocated", "disaggregated"])
def test_best_goodput_per_gpu_equals_brute_force(case: str, mode: str | None) -> None:
    problem, units = space_of(case)
    fixed = {} if mode is None else {"mode": mode}
    result = serving_search(problem, COST_MODEL, fixed=fixed, top_k=3)
    assert result.stats.status == "complete"
    best = result.plans[0].estimate.metrics
    assert best is not None
    expected = best_per_gpu(units, mode)
    assert expected > 0
    # the search's figure is one of the space's (never above the best), and it is the best
    # up to the bisection's relative tolerance
    assert best.goodput_rps_per_gpu <= expected * (1 + 1e-9)
    assert best.goodput_rps_per_gpu >= expected * (1 - GOODPUT_REL_TOL)
    # ranks are best first and the search pruned most of the space
    per_gpu = [p.estimate.goodput_rps_per_gpu for p in result.plans]
    assert per_gpu == sorted(per_gpu, reverse=True)
    assert [p.rank for p in result.plans] == list(range(1, len(result.plans) + 1))
    if mode is not None:
        assert all(p.estimate.plan.mode == mode for p in result.plans)
    assert result.stats.evaluated < result.stats.enumerated


def test_the_two_modes_are_both_searched() -> None:
    """On 4 GPUs with the tight SLO the best disaggregated unit (a pool of 2 prefill
    instances feeding a TP2 decode instance) is within 40 % of the best colocated one; a
    pooled prefill side carries more than twice one instance's TTFT-bound rate, which a
    bound scaling one instance's figure would miss."""
    problem, units = space_of("4gpu")
    best_dis = max((u for u in units if u.mode == "disaggregated"), key=lambda u: u.per_gpu)
    assert best_dis.prefill_count == 2
    result = serving_search(problem, COST_MODEL, fixed={"mode": "disaggregated"}, top_k=1)
    plan = result.plans[0].estimate.plan
    assert plan.instance("prefill").count == 2 * plan.instance("decode").count


# ---- estimates reproduce the search ------------------------------------------------------
def test_estimates_of_ranked_plans_reproduce_their_goodput() -> None:
    """Re-pricing each returned plan from scratch gives the goodput the search ranked it by,
    including disaggregated units that span two nodes (the KV then crosses the NIC; a unit
    of 2 prefill + 1 decode TP1 instances needs 3 GPUs of 2-GPU nodes)."""
    problem = make_problem(2, nodes=2, slo=TIGHT_4)
    result = serving_search(
        problem, COST_MODEL, fixed={"mode": "disaggregated", "tensor": 1}, top_k=6
    )
    spanning = 0
    for ranked in result.plans:
        plan = ranked.estimate.plan
        fresh = evaluate_plan(problem, plan, InstanceCosts(problem, COST_MODEL))
        assert fresh.metrics is not None and ranked.estimate.metrics is not None
        assert fresh.metrics.goodput_rps == pytest.approx(
            ranked.estimate.metrics.goodput_rps, rel=1e-12
        )
        pre, dec = plan.instance("prefill"), plan.instance("decode")
        g = math.gcd(pre.count, dec.count)
        unit = (pre.count * pre.parallelism.num_gpus + dec.count * dec.parallelism.num_gpus) // g
        assert fresh.details["kv_transfer_tier"] == ("intra" if unit <= 2 else "inter")
        spanning += unit > 2
    assert spanning >= 1


# ---- min_gpus ------------------------------------------------------------------------------
def test_min_gpus_returns_the_fewest_gpus_that_carry_the_rate() -> None:
    rate = 100.0  # one GPU carries about 47 requests/s in steady state, three about 140
    problem = make_problem(4, slo=TIGHT_4, objective="min_gpus", arrival_rate_rps=rate)
    units = tuple(brute_force(problem))
    # brute force: GPUs a candidate needs = its units to carry the rate × its GPUs
    needs = []
    for u in units:
        if u.goodput_rps > 0:
            gpus = math.ceil(rate / u.goodput_rps * (1 - 1e-9)) * u.gpus
            if gpus <= 4:
                needs.append((gpus, u.per_gpu))
    fewest = min(g for g, _ in needs)
    assert fewest < 4  # the rate needs more than one GPU's worth but not the whole cluster
    result = serving_search(problem, COST_MODEL, top_k=3)
    first = result.plans[0].estimate
    assert first.metrics is not None
    assert first.metrics.gpus_used == fewest
    best_at_fewest = max(pg for g, pg in needs if g == fewest)
    assert first.metrics.goodput_rps_per_gpu >= best_at_fewest * (1 - GOODPUT_REL_TOL)
    # the plan is measured at the rate and carries it
    assert first.metrics.arrival_rate_rps == rate
    assert first.metrics.goodput_rps >= rate
    assert first.feasible and first.metrics.slo_attainment >= 0.9
    used = [p.estimate.metrics.gpus_used for p in result.plans if p.estimate.metrics]
    assert used == sorted(used)


def _l40s_problem(objective: str) -> ServingProblem:
    """Llama-3.1-8B at 20 requests/s on one node of 8 L40S (priced), 1024/256 tokens."""
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {
                        "accelerator": "l40s",
                        "num_nodes": 1,
                        "gpus_per_node": 8,
                        "price_per_gpu_hour": 1.5,
                    }
                ]
            }
        )
    )
    workload = {
        "kind": "serving",
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "slo": {"ttft_ms": 1000, "tpot_ms": 50},
        "num_requests": 100,
        "objective": objective,
        "arrival_rate_rps": 20.0,
    }
    return ServingProblem(
        presets.get_preset("llama3.1-8b"), cluster, ServingWorkload.model_validate(workload)
    )


@pytest.mark.parametrize("objective", ["min_gpus", "min_cost"])
def test_min_gpus_and_min_cost_leave_gpus_idle(objective: str) -> None:
    """Issue 16: at 20 requests/s Llama-3.1-8B needs a few L40S, not the node. Each plan's
    GPUs are worked from its own instances' goodput: a min_gpus unit is one instance
    (colocated) or one prefill:decode unit, so the plan takes ceil(20 / unit goodput) units;
    the ranking puts the fewest first, and a min_cost plan costs its GPUs × the price."""
    problem = _l40s_problem(objective)
    result = serving_search(problem, COST_MODEL, top_k=5)
    assert result.plans and result.stats.status == "complete"
    stream = request_stream(problem.workload)
    costs = InstanceCosts(problem, COST_MODEL)
    slo = problem.slo
    needs = []
    for ranked in result.plans:
        est = ranked.estimate
        assert est.metrics is not None and est.feasible
        plan = est.plan
        if plan.mode == "colocated":
            (inst,) = plan.instances
            unit = goodput_colocated(
                stream, costs.of(inst), 1, inst.max_batch_size, inst.chunk_size, slo,
                rel_tol=GOODPUT_REL_TOL,
            )  # fmt: skip
            unit_gpus = inst.parallelism.num_gpus
        else:
            pre, dec = plan.instance("prefill"), plan.instance("decode")
            g = math.gcd(pre.count, dec.count)
            a, b = pre.count // g, dec.count // g
            unit_gpus = a * pre.parallelism.num_gpus + b * dec.parallelism.num_gpus
            tier = "intra" if unit_gpus <= 8 else "inter"
            unit = goodput_disaggregated(
                stream, costs.of(pre, tier), a, pre.chunk_size, costs.of(dec, tier), b,
                dec.max_batch_size, slo, rel_tol=GOODPUT_REL_TOL,
            )  # fmt: skip
        gpus = math.ceil(20.0 / unit.goodput_rps * (1 - 1e-9)) * unit_gpus
        assert est.metrics.gpus_used == gpus
        assert est.metrics.price_per_hour == pytest.approx(1.5 * gpus)
        needs.append(gpus)
    assert needs == sorted(needs)  # fewest (and so cheapest) first
    assert needs[0] < 8  # the rest of the node stays idle
    first = result.plans[0].estimate.metrics
    assert first is not None and first.arrival_rate_rps == 20.0 and first.slo_attainment >= 0.9


def test_min_gpus_with_a_rate_no_plan_carries_returns_nothing() -> None:
    problem = make_problem(4, slo=TIGHT_4, objective="min_gpus", arrival_rate_rps=1000.0)
    result = serving_search(problem, COST_MODEL, top_k=3)
    assert result.plans == []
    assert result.stats.status == "complete"


# ---- min_latency ---------------------------------------------------------------------------
def _whole_cluster_latencies(problem: ServingProblem, fixed: dict[str, Any]) -> list[float]:
    """P90 end-to-end latency of every colocated candidate replicated over the cluster, at
    the workload's rate, among those meeting the SLO there."""
    stream = request_stream(problem.workload)
    mp, mo = mean_lengths(stream)
    costs = InstanceCosts(problem, COST_MODEL)
    rate = problem.workload.arrival_rate_rps
    assert rate is not None
    node = problem.cluster.gpus_per_node
    out = []
    for layout in S.layouts(problem, fixed):
        try:
            cost = costs.get(layout.tensor, layout.pipeline, layout.expert, layout.precision)
        except InfeasiblePlan:
            continue
        for batch in S.batch_options(cost, mp, mo, fixed):
            for chunk in S.CHUNKS:
                cand = S.Candidate("colocated", layout, batch, chunk)
                units = problem.num_gpus // layout.gpus
                sim = simulate_plan(cand.plan(units), costs, scale_stream(stream, rate), node)
                # sustainable: the rate is within the plan's capacity bound (the cap of the
                # goodput bisection) and the SLO holds there
                capacity = capacity_upper_bound_rps(cost, units, batch, chunk, mp, mo)
                if problem.slo.met_by(sim) and rate <= capacity:
                    out.append(sim.e2e_percentile_s(90))
    return out


@pytest.mark.parametrize("rate", [20.0, 80.0])
def test_min_latency_at_a_rate_is_the_lowest_p90_end_to_end_latency(rate: float) -> None:
    problem = make_problem(4, objective="min_latency", arrival_rate_rps=rate)
    fixed = {"mode": "colocated"}
    result = serving_search(problem, COST_MODEL, fixed=fixed, top_k=3)
    latencies = [
        p.estimate.metrics.e2e_latency_s_p90 for p in result.plans if p.estimate.metrics is not None
    ]
    assert len(latencies) == 3
    assert latencies == sorted(latencies)
    assert latencies[0] == pytest.approx(min(_whole_cluster_latencies(problem, fixed)), rel=1e-9)
    # the 4-GPU tensor-parallel instance beats four TP1 replicas: the lowest latency is not
    # the most efficient plan (that is TP1, `test_best_goodput_per_gpu_equals_brute_force`)
    first = result.plans[0].estimate.plan
    assert first.instances[0].parallelism.tensor == 4
    assert all(p.estimate.feasible for p in result.plans)
    assert result.plans[0].estimate.details["ranked_at"] == "arrival_rate"


def test_min_latency_dominated_instance_counts_do_not_change_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dropping disaggregated ratios whose plans have no more prefill and decode instances
    than another ratio's (`_pareto_instance_counts`) keeps the best latency: the search with
    and without the filter agrees, and the filter did drop some."""
    problem = make_problem(4, nodes=2, objective="min_latency", arrival_rate_rps=40.0)
    fixed = {"mode": "disaggregated", "tensor": 1}
    filtered = serving_search(problem, COST_MODEL, fixed=fixed, top_k=1)
    assert filtered.stats.pruned.get("dominated", 0) > 0
    monkeypatch.setattr(S, "_pareto_instance_counts", lambda _ctx, gen: gen)
    everything = serving_search(problem, COST_MODEL, fixed=fixed, top_k=1)
    assert "dominated" not in everything.stats.pruned
    best_f = filtered.plans[0].estimate.details["ranked_e2e_latency_s_p90"]
    best_e = everything.plans[0].estimate.details["ranked_e2e_latency_s_p90"]
    assert best_f == pytest.approx(best_e, rel=1e-9)


def test_min_latency_without_a_rate_ranks_by_the_near_idle_latency() -> None:
    problem = make_problem(4, objective="min_latency")
    result = serving_search(problem, COST_MODEL, fixed={"mode": "colocated"}, top_k=3)
    ranked = [p.estimate.details["ranked_e2e_latency_s_p90"] for p in result.plans]
    assert ranked == sorted(ranked)
    # brute force: fixed lengths, so every request alone has the same latency,
    # TTFT + (output − 1) × TPOT of one isolated request
    costs = InstanceCosts(problem, COST_MODEL)
    idle = []
    for layout in S.layouts(problem, {}):
        try:
            cost = costs.get(layout.tensor, layout.pipeline, layout.expert, layout.precision)
        except InfeasiblePlan:
            continue
        for chunk in S.CHUNKS:
            ttft, tpot = isolated_latency_colocated(cost, 512, 128, chunk)
            if ttft <= 0.3 and tpot <= 0.03:
                idle.append(ttft + 127 * tpot)
    assert ranked[0] == pytest.approx(min(idle), rel=1e-9)


# ---- constraints.fixed ---------------------------------------------------------------------
def test_fixed_degrees_batch_chunk_and_precision_are_honoured() -> None:
    problem = make_problem(4)
    fixed = {"tensor": 2, "max_batch_size": 64, "chunk_size": 2048, "precision": "fp8"}
    result = serving_search(problem, COST_MODEL, fixed=fixed, top_k=4)
    assert result.plans
    modes = set()
    for ranked in result.plans:
        plan = ranked.estimate.plan
        modes.add(plan.mode)
        for inst in plan.instances:
            assert inst.parallelism.tensor == 2
            assert inst.precision == "fp8"
            if inst.role != "decode":
                assert inst.chunk_size == 2048
            if inst.role != "prefill":
                assert inst.max_batch_size == 64
    assert modes == {"colocated", "disaggregated"}


def test_fixed_mode_pipeline_one_gives_only_that() -> None:
    problem = make_problem(2)
    result = serving_search(
        problem, COST_MODEL, fixed={"mode": "colocated", "pipeline": 1}, top_k=5
    )
    assert result.plans
    for ranked in result.plans:
        assert ranked.estimate.plan.mode == "colocated"
        assert ranked.estimate.plan.instances[0].parallelism.pipeline == 1


@pytest.mark.parametrize(
    ("fixed", "field"),
    [
        ({"data": 2}, "constraints.fixed.data"),
        ({"mode": "both"}, "constraints.fixed.mode"),
        ({"tensor": 0}, "constraints.fixed.tensor"),
        ({"tensor": True}, "constraints.fixed.tensor"),
        ({"chunk_size": 1.5}, "constraints.fixed.chunk_size"),
        ({"precision": "fp4"}, "constraints.fixed.precision"),
    ],
)
def test_bad_fixed_keys_raise_spec_error(fixed: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as info:
        serving_search(make_problem(2), COST_MODEL, fixed=fixed)
    assert info.value.field == field


def test_top_k_below_one_is_refused() -> None:
    with pytest.raises(SpecError):
        serving_search(make_problem(2), COST_MODEL, top_k=0)


# ---- time limit and cancellation -----------------------------------------------------------
def test_time_limit_returns_what_was_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake clock that jumps past the deadline at the third progress report: the search
    stops with status `time_limit` and ranks the two units evaluated before."""
    from solver.search import steps

    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(steps, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    reports: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        reports.append((done, total))
        if len(reports) == 3:
            clock.now = 100.0

    problem, units = space_of("2gpu")
    result = serving_search(problem, COST_MODEL, time_limit_s=10.0, top_k=5, progress=progress)
    assert result.stats.status == "time_limit"
    assert not result.stats.complete
    assert result.stats.evaluated == 2
    assert 1 <= len(result.plans) <= 2
    for ranked in result.plans:
        assert ranked.estimate.metrics is not None
        assert ranked.estimate.metrics.goodput_rps_per_gpu <= best_per_gpu(units, None) * (1 + 1e-9)


def test_cancel_stops_the_search() -> None:
    problem = make_problem(2)
    result = serving_search(problem, COST_MODEL, should_stop=lambda: True)
    assert result.stats.status == "cancelled"
    assert result.plans == []


# ---- explanations and statistics -----------------------------------------------------------
def test_explanations_name_goodput_and_layout() -> None:
    problem, _ = space_of("4gpu")
    result = serving_search(problem, COST_MODEL, top_k=3)
    first = result.plans[0]
    metrics = first.estimate.metrics
    assert metrics is not None
    inst = first.estimate.plan.instances[0]
    text = first.explanation
    assert "goodput" in text
    assert f"TP{inst.parallelism.tensor}" in text
    assert first.estimate.plan.mode in text
    assert f"{metrics.goodput_rps_per_gpu:.3g} per GPU" in text
    assert "TTFT ≤ 100 ms" in text and "TPOT ≤ 15 ms" in text
    assert "the best other layout" in text
    for ranked in result.plans:
        assert "goodput" in ranked.explanation and "GPUs" in ranked.explanation


def test_stats_account_for_every_candidate() -> None:
    problem, _ = space_of("4gpu")
    stats = serving_search(problem, COST_MODEL, top_k=3).stats
    pruned = stats.pruned
    # every enumerated unit is either evaluated, cut by the SLO probe at the rate it would
    # need, or left behind by the bound
    assert stats.enumerated == (
        stats.evaluated + pruned.get("slo_threshold", 0) + pruned.get("throughput_bound", 0)
    )
    assert pruned["throughput_bound"] > stats.evaluated
    assert stats.feasible + pruned.get("slo_unattainable", 0) == stats.evaluated
    assert stats.solver_calls >= stats.evaluated
    assert stats.to_dict()["pruned"] == dict(sorted(pruned.items()))


def test_plans_are_valid_serving_plans() -> None:
    problem, _ = space_of("2gpu")
    for ranked in serving_search(problem, COST_MODEL, top_k=4).plans:
        plan = ranked.estimate.plan
        assert ServingPlan.model_validate(plan.model_dump()) == plan
        assert plan.gpus_used <= problem.num_gpus


def test_the_api_accepts_exactly_the_serving_fixed_keys() -> None:
    from specs.constraints import FIXABLE_FIELDS, SERVING_FIXABLE_FIELDS

    assert set(S.FIXED_KEYS) == SERVING_FIXABLE_FIELDS
    assert SERVING_FIXABLE_FIELDS <= FIXABLE_FIELDS
