"""Simulations shared (the searches run fewer, with the same results): across token budgets
(`SimResult.budget_slack`, `simulate.budget_reusable`), a budget the reuse rule accepts
gives the very same result as simulating it, on random streams, budgets and scheduler
policies, and the searches that reuse them (the goodput memo, min_latency's runs) answer
as they do without the reuse; a confirmation's longer stream resumed where the short
stream's run left off (`simulate.ResumePoint`) gives what simulating it afresh gives; a
min_latency simulation cut short once its P90 is certain to exceed the k-th best
(`StopRule.e2e_s`) is right to be, and the search ranks what it ranks without the cut."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_models.serving.base import SchedulerPolicy
from solver.serving import goodput as G
from solver.serving import search as S
from solver.serving import simulate as SIM
from solver.serving.goodput import poisson_unit_stream, scale_stream
from solver.serving.search import serving_search
from solver.serving.simulate import (
    Request,
    SimResult,
    budget_reusable,
    simulate_colocated,
    simulate_disaggregated,
)
from tests.solver.serving_fakes import AffineCost
from tests.solver.test_serving_search import COST_MODEL, make_problem


@dataclass
class PolicyCost(AffineCost):
    """An affine cost run under a given scheduler policy."""

    scheduler: SchedulerPolicy = SchedulerPolicy()


POLICIES = [
    SchedulerPolicy(),
    SchedulerPolicy(prefill="separate"),
    SchedulerPolicy(prefill="separate_unless_chunked"),
    SchedulerPolicy(decode_steps=4),
    SchedulerPolicy(split_prompts=False),
    SchedulerPolicy(kv_allocation="paged"),
    SchedulerPolicy(prefix_caching=True),
]
BUDGETS: list[int | None] = [None, 64, 200, 512, 700, 1024, 1500, 2048, 4096, 8192]


def _cost(policy: SchedulerPolicy, kv_tokens: int) -> PolicyCost:
    return PolicyCost(
        base=0.01,
        per_prefill_token=5e-5,
        per_pair=1e-9,
        per_decode_seq=2e-4,
        per_context_token=1e-7,
        kv_tokens=kv_tokens,
        transfer_s=2e-3,
        transfer_per_token_s=1e-6,
        scheduler=policy,
    )


def _stream(n: int, rate: float, seed: int, prefix: int) -> list[Request]:
    rng = random.Random(seed)
    prompts = [rng.choice([16, 100, 300, 700, 1400]) for _ in range(n)]
    outputs = [rng.choice([1, 2, 20, 80, 200]) for _ in range(n)]
    unit = poisson_unit_stream(prompts, outputs, seed)
    return [
        Request(r.arrival_s / rate, r.prompt_tokens, r.output_tokens, min(prefix, 15)) for r in unit
    ]


def _same(a: SimResult, b: SimResult) -> bool:
    for f in fields(SimResult):
        if f.name in ("budget_slack", "resume_point"):  # not the schedule
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            if not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


def _simulate(kind: str, reqs: list[Request], cost: PolicyCost, chunk: int | None) -> SimResult:
    if kind == "colocated":
        return simulate_colocated(reqs, cost, 2, 24, chunk)
    return simulate_disaggregated(reqs, cost, 2, chunk, cost, 2, 24)


def _separates(kind: str, policy: SchedulerPolicy, chunk: int | None) -> bool:
    # a prefill instance runs no decodes: its policy does not depend on the budget
    return kind == "colocated" and policy.separates(chunk is not None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["colocated", "disaggregated"]),
    policy=st.sampled_from(POLICIES),
    chunk=st.sampled_from(BUDGETS),
    rate=st.sampled_from([0.5, 3.0, 12.0, 40.0]),
    seed=st.integers(0, 10_000),
    kv=st.sampled_from([6_000, 40_000]),
    prefix=st.sampled_from([0, 15]),
)
def test_an_accepted_budget_gives_the_same_result(
    kind: str,
    policy: SchedulerPolicy,
    chunk: int | None,
    rate: float,
    seed: int,
    kv: int,
    prefix: int,
) -> None:
    cost = _cost(policy, kv)
    reqs = _stream(60, rate, seed, prefix)
    base = _simulate(kind, reqs, cost, chunk)
    assert base.budget_slack >= -1
    for other in BUDGETS:
        if other == chunk or _separates(kind, policy, other) != _separates(kind, policy, chunk):
            continue
        if budget_reusable(base.budget_slack, chunk, other):
            assert _same(_simulate(kind, reqs, cost, other), base), (chunk, other)


def test_the_reuse_rule_is_exercised_both_ways() -> None:
    """The property above is not vacuous: over a fixed set of cases the rule accepts some
    other budgets and refuses others, and it refuses every budget that changes the result."""
    accepted = refused = 0
    for seed, rate in ((1, 0.5), (2, 12.0), (3, 40.0)):
        reqs = _stream(60, rate, seed, 0)
        cost = _cost(SchedulerPolicy(), 40_000)
        results = {c: _simulate("colocated", reqs, cost, c) for c in BUDGETS}
        for chunk, res in results.items():
            for other in BUDGETS:
                if other == chunk:
                    continue
                if budget_reusable(res.budget_slack, chunk, other):
                    accepted += 1
                    assert _same(results[other], res)
                else:
                    refused += 1
    assert accepted > 0 and refused > 0


def test_a_budget_that_cuts_a_prompt_has_no_slack() -> None:
    """Hand-worked: one prompt of 300 tokens under a budget of 128 is cut (128, 128, 44):
    the budget bound, so no other budget may share the run; under 512 it runs whole, 212
    tokens to spare, so any budget of 301 and more gives the same schedule, 300 does not
    (its last comparison, 300 < 300, would come out the other way only for a budget the
    prompt fills exactly: the rule stays on the safe side)."""
    cost = _cost(SchedulerPolicy(), 40_000)
    reqs = [Request(0.0, 300, 5)]
    assert simulate_colocated(reqs, cost, 1, 8, 128).budget_slack == -1
    whole = simulate_colocated(reqs, cost, 1, 8, 512)
    assert whole.budget_slack == 212
    assert budget_reusable(212, 512, 301)
    assert not budget_reusable(212, 512, 300)
    assert budget_reusable(212, 512, None)
    assert _same(simulate_colocated(reqs, cost, 1, 8, 301), whole)
    assert _same(simulate_colocated(reqs, cost, 1, 8, None), whole)


def test_the_memo_returns_only_what_a_simulation_gives() -> None:
    """`SimulationMemo` across budgets and max batches: every hit equals a fresh run."""
    memo = G.SimulationMemo()
    cost = _cost(SchedulerPolicy(), 40_000)
    unit = _stream(80, 1.0, 7, 0)
    hits = 0
    for rate in (1.0, 6.0):
        reqs = scale_stream(unit, rate)
        for chunk in BUDGETS:
            for batch in (8, 32, 256):
                before = memo.hits
                got = memo.run(
                    ("colocated", 2),
                    reqs,
                    batch,
                    lambda r=reqs, c=chunk, b=batch: simulate_colocated(r, cost, 2, b, c),
                    chunk,
                )
                hits += memo.hits - before
                assert _same(got, simulate_colocated(reqs, cost, 2, batch, chunk))
    assert hits > 0


def _answers(result: Any) -> list[Any]:
    return [
        (r.estimate.plan.model_dump(mode="json"), r.estimate.metrics, r.estimate.details)
        for r in result.plans
    ]


@pytest.mark.parametrize(
    "workload, fixed",
    [
        ({"objective": "min_latency", "arrival_rate_rps": 40.0}, {"tensor": 1}),
        ({"objective": "min_latency", "arrival_rate_rps": 40.0}, {"mode": "colocated"}),
        ({}, {"tensor": 1}),
        ({"objective": "min_gpus", "arrival_rate_rps": 30.0}, {"tensor": 1}),
    ],
)
def test_searches_answer_as_without_the_reuse(
    workload: dict[str, Any], fixed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole search, with simulations shared across budgets and without (every budget
    simulated on its own): the same ranked plans, metrics and details."""
    problem = make_problem(4, nodes=2, **workload)
    shared = serving_search(problem, COST_MODEL, fixed=fixed, top_k=3)
    assert shared.plans

    def same_budget_only(slack: int, chunk: int | None, other: int | None) -> bool:
        return chunk == other

    monkeypatch.setattr(S, "budget_reusable", same_budget_only)
    monkeypatch.setattr(G, "budget_reusable", same_budget_only)
    monkeypatch.setattr(SIM, "budget_reusable", same_budget_only)
    alone = serving_search(problem, COST_MODEL, fixed=fixed, top_k=3)
    assert _answers(shared) == _answers(alone)
    assert shared.stats.solver_calls <= alone.stats.solver_calls


# ---- a longer stream resumed where its first copy left off (`simulate.ResumePoint`) -------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["colocated", "disaggregated"]),
    policy=st.sampled_from(POLICIES),
    chunk=st.sampled_from(BUDGETS),
    rate=st.sampled_from([0.5, 3.0, 12.0, 40.0]),
    seed=st.integers(0, 10_000),
    kv=st.sampled_from([6_000, 40_000]),
    copies=st.sampled_from([1.02, 2.0, 3.1]),
    stopping=st.booleans(),
)
def test_a_resumed_stream_gives_what_a_fresh_one_gives(
    kind: str,
    policy: SchedulerPolicy,
    chunk: int | None,
    rate: float,
    seed: int,
    kv: int,
    copies: float,
    stopping: bool,
) -> None:
    """The unit stream repeated (`goodput.repeated_stream`, as a confirmation simulates
    it), simulated from the point the short stream's run reached when its second copy
    would arrive, equals simulating it from the start: every latency and figure."""
    n = 60
    cost = _cost(policy, kv)
    unit = _stream(n, 1.0, seed, 15)
    slo = G.SLOTarget(ttft_s=2.0, tpot_s=0.05)

    def run(reqs: list[Request], **kw: Any) -> SimResult:
        stop = slo.stop_rule(len(reqs)) if stopping else None
        if kind == "colocated":
            return simulate_colocated(reqs, cost, 2, 24, chunk, stop=stop, **kw)
        return simulate_disaggregated(reqs, cost, 2, chunk, cost, 2, 24, stop=stop, **kw)

    short = scale_stream(unit, rate)
    longer = scale_stream(G.repeated_stream(unit, int(n * copies)), rate)
    at = (min(r.arrival_s for r in unit) + n) * (1.0 / rate)
    first = run(short, snapshot_at=at)
    point = first.resume_point
    if point is None:  # stopped (or out of events) before every request had arrived
        assert first.stopped_early or first.truncated
        return
    assert _same(run(short), first)  # taking the snapshot changes nothing
    resumed = run(longer, resume=point)
    fresh = run(longer)
    assert _same(resumed, fresh) and resumed.budget_slack == fresh.budget_slack
    with pytest.raises(ValueError):
        run(longer, resume=point)  # a point is resumed once


# ---- min_latency: simulations cut short once the P90 exceeds the k-th best -----------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["colocated", "disaggregated"]),
    policy=st.sampled_from(POLICIES),
    rate=st.sampled_from([0.5, 3.0, 12.0, 40.0]),
    seed=st.integers(0, 10_000),
    quantile=st.floats(0.05, 0.99),
)
def test_an_end_to_end_stop_is_certain_and_changes_nothing_else(
    kind: str, policy: SchedulerPolicy, rate: float, seed: int, quantile: float
) -> None:
    """`StopRule.e2e_s`: a run that stops on it has more than `max_e2e_over` requests
    longer than the limit end to end in the full run, so its P90 is above the limit; a run
    that does not stop on it is the full run."""
    n = 60
    cost = _cost(policy, 40_000)
    reqs = _stream(n, rate, seed, 0)
    base = SLO_LOOSE.stop_rule(n)

    def run(stop: Any) -> SimResult:
        if kind == "colocated":
            return simulate_colocated(reqs, cost, 2, 24, 512, stop=stop)
        return simulate_disaggregated(reqs, cost, 2, 512, cost, 2, 24, stop=stop)

    full = run(base)
    finite = full.e2e_s[np.isfinite(full.e2e_s)]
    limit = float(np.quantile(finite, quantile)) if finite.size else 1.0
    over = n - math.floor(n * 90.0 / 100.0)
    cut = run(replace(base, e2e_s=limit, max_e2e_over=over))
    longer = int((full.e2e_s > limit).sum())
    if cut.e2e_exceeded:
        assert cut.stopped_early and longer > over
        assert full.e2e_percentile_s(90.0) > limit
    else:
        assert longer <= over or full.stopped_early
        assert _same(cut, full)


SLO_LOOSE = G.SLOTarget(ttft_s=30.0, tpot_s=1.0)


@pytest.mark.parametrize("fixed", [{"tensor": 1}, {"pipeline": 1}])
def test_min_latency_answers_as_without_the_cutoff(
    fixed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """min_latency at a rate with simulations cut short once a plan's P90 is certain to
    exceed the k-th best (`search.LATENCY_CUTOFF`) ranks the same plans as simulating
    every plan to its end, with fewer simulated events."""
    problem = make_problem(4, nodes=2, objective="min_latency", arrival_rate_rps=40.0)
    cut = serving_search(problem, COST_MODEL, fixed=fixed, top_k=3)
    assert cut.stats.pruned.get("latency_at_rate", 0) > 0
    monkeypatch.setattr(S, "LATENCY_CUTOFF", False)
    whole = serving_search(problem, COST_MODEL, fixed=fixed, top_k=3)
    assert "latency_at_rate" not in whole.stats.pruned
    assert _answers(cut) == _answers(whole)
