"""Speed-ups of the serving search that must not change its answers. The lazy disaggregated units (`search.LAZY_UNITS`: units kept as table
rows until the heap yields them, one-instance prefill pools bounded in closed form and
simulated only when a unit of theirs is taken) answer exactly what building every unit up
front with those pools simulated answers: the same ranked plans with the same metrics,
details and explanations, on small cases of each goodput objective, with no more
simulations. The goodput bisections interleaved a probe at a time (`search.BISECT_LAZILY`)
rank what bisecting each unit to its end ranks, all but the simulations spent per plan;
their grid search ends, from any first probe, at the rate `goodput_rps` finds for the same
verdicts (attainment monotone in the rate). (`bench/serving_search_latency.py --compare`
checks the bench cases.)"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.serving.analytical import AnalyticalServingCostModel
from hardware_catalog import resolve_cluster
from solver.serving import search as S
from solver.serving.evaluate import GOODPUT_REL_TOL, InstanceCosts, ServingProblem, request_stream
from solver.serving.goodput import (
    SimulationMemo,
    SLOTarget,
    SteadyProbe,
    goodput_rps,
    scale_stream,
)
from solver.serving.simulate import Request, simulate_colocated
from specs import presets
from specs.cluster import ClusterSpec
from specs.serving import ServingWorkload
from tests.solver.serving_fakes import AffineCost

COST_MODEL = AnalyticalServingCostModel()
_FAST = AffineCost(base=1e-3)


def _problem(gpus: int, **workload: Any) -> ServingProblem:
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": gpus}]}
        )
    )
    body: dict[str, Any] = {
        "kind": "serving",
        "prompt_tokens": 512,
        "output_tokens": 128,
        "slo": {"ttft_ms": 300, "tpot_ms": 30},
        "num_requests": 100,
        **workload,
    }
    return ServingProblem(
        presets.get_preset("llama3-8b"), cluster, ServingWorkload.model_validate(body)
    )


def _answers(result: S.ServingSearchResult) -> list[dict[str, Any]]:
    out = []
    for r in result.plans:
        est = r.estimate
        assert est.metrics is not None
        out.append(
            {
                "rank": r.rank,
                "plan": est.plan.model_dump(mode="json"),
                "metrics": est.metrics.model_dump(mode="json"),
                "details": est.details,
                "explanation": r.explanation,
            }
        )
    return out


CASES = [
    pytest.param(2, {}, id="2 GPUs, max goodput per GPU"),
    pytest.param(4, {"slo": {"ttft_ms": 100, "tpot_ms": 15}}, id="4 GPUs, tight SLO"),
    pytest.param(
        4,
        {"slo": {"ttft_ms": 100, "tpot_ms": 15}, "objective": "min_gpus", "arrival_rate_rps": 60},
        id="4 GPUs, min_gpus",
    ),
    pytest.param(4, {"fixed_mode": "disaggregated"}, id="4 GPUs, disaggregated only"),
]


@pytest.mark.parametrize(("gpus", "workload"), CASES)
def test_lazy_units_answer_what_eager_units_answer(
    gpus: int, workload: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = dict(workload)
    mode = workload.pop("fixed_mode", None)
    fixed = {"mode": mode} if mode else None
    problem = _problem(gpus, **workload)
    lazy = S.serving_search(problem, COST_MODEL, fixed=fixed, top_k=4)
    monkeypatch.setattr(S, "LAZY_UNITS", False)
    eager = S.serving_search(problem, COST_MODEL, fixed=fixed, top_k=4)
    assert lazy.stats.status == eager.stats.status == "complete"
    assert lazy.plans and _answers(lazy) == _answers(eager)
    assert any(r.estimate.plan.mode == "disaggregated" for r in lazy.plans) or mode is None
    assert lazy.stats.enumerated == eager.stats.enumerated
    assert lazy.stats.solver_calls <= eager.stats.solver_calls


def test_a_simulation_that_never_reached_its_max_batch_is_that_of_any_larger_one() -> None:
    """`SimulationMemo`: a run whose instances peaked at P sequences, below its max batch,
    is the run of every max batch above P (checked against fresh simulations), and is not
    offered to a max batch at or below P (there the limit would bind)."""
    problem = _problem(2, arrival_rate_rps=20.0)
    costs = InstanceCosts(problem, COST_MODEL)
    cost = costs.get(1, 1, 1, "bf16")
    requests = scale_stream(request_stream(problem.workload), 40.0)
    wide = simulate_colocated(requests, cost, 2, 1024, 2048)
    peak = wide.max_running_per_instance
    assert 1 < peak < 1024
    memo = SimulationMemo()
    setting = ("colocated", id(cost), 2, 2048, None, None)
    first = memo.run(setting, requests, 1024, lambda: wide)
    assert first is wide and memo.hits == 0
    for batch in (peak + 1, 2 * peak, 512):
        fresh = simulate_colocated(requests, cost, 2, batch, 2048)
        reused = memo.run(setting, requests, batch, lambda: pytest.fail("not reused"))
        assert reused is wide
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            assert np.array_equal(getattr(fresh, name), getattr(reused, name))
        assert fresh.max_running_per_instance == peak and fresh.iterations == wide.iterations
    assert memo.hits == 3
    tight = simulate_colocated(requests, cost, 2, peak, 2048)
    assert memo.run(setting, requests, peak, lambda: tight) is tight  # not offered
    assert memo.hits == 3
    # another request stream (lengths, not only arrivals) is another key
    other = [Request(r.arrival_s, r.prompt_tokens, 1) for r in requests]
    assert memo.get(memo.key(setting, other), 1024) is None


# ---- goodput bisections interleaved (`search.BISECT_LAZILY`) --------------------------------
def _without_bookkeeping(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answers without `details.goodput_simulations`, the simulations the search spent on
    a plan (which depend on the order it bisects in, not on the plan)."""
    out = []
    for a in answers:
        details = {k: v for k, v in a["details"].items() if k != "goodput_simulations"}
        out.append({**a, "details": details})
    return out


@pytest.mark.parametrize(("gpus", "workload"), CASES)
def test_interleaved_bisections_answer_what_whole_bisections_answer(
    gpus: int, workload: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The goodput bisections taken a probe at a time, best upper bound first, rank the same
    plans with the same metrics, details and explanations as bisecting each unit to its end
    in turn (the previous search), on small cases of each goodput objective; only the
    simulations spent per plan may differ."""
    workload = dict(workload)
    mode = workload.pop("fixed_mode", None)
    fixed = {"mode": mode} if mode else None
    problem = _problem(gpus, **workload)
    lazy = S.serving_search(problem, COST_MODEL, fixed=fixed, top_k=4)
    monkeypatch.setattr(S, "BISECT_LAZILY", False)
    whole = S.serving_search(problem, COST_MODEL, fixed=fixed, top_k=4)
    assert lazy.stats.status == whole.stats.status == "complete"
    assert lazy.plans and _without_bookkeeping(_answers(lazy)) == _without_bookkeeping(
        _answers(whole)
    )


class _Threshold(SteadyProbe):
    """A probe whose verdicts follow rates alone (attainment monotone in the rate): the
    short stream meets the SLO up to `short_up_to`; a pass above `near_from` is not settled
    and holds in steady state only up to `holds_up_to` (its confirmation)."""

    def __init__(self, short_up_to: float, near_from: float, holds_up_to: float) -> None:
        self.a, self.s, self.b = short_up_to, near_from, holds_up_to
        self.evaluations = 0
        self.res = simulate_colocated([Request(0.0, 8, 2)], _FAST, 1, 8, None)
        self.unit_stream = [Request(0.0, 8, 2)]

    def near(self, rate: float) -> bool:
        return rate > self.s

    def short(self, rate: float) -> tuple[bool, Any, bool]:
        self.evaluations += 1
        return rate <= self.a, self.res, not self.near(rate)

    def confirm(self, rate: float, res: Any, settled: bool) -> tuple[bool, Any]:
        if settled:
            return True, res
        self.evaluations += 1
        return rate <= self.b, res


@settings(max_examples=300, deadline=None)
@given(
    short_up_to=st.floats(0.0, 1.2),
    near_from=st.floats(0.0, 1.2),
    holds_frac=st.floats(0.0, 1.0),
    level=st.integers(-1, 500),
)
def test_a_grid_search_finds_the_rate_the_bisection_finds(
    short_up_to: float, near_from: float, holds_frac: float, level: int
) -> None:
    """`search._Grid`, probed first at any grid rate (the level a search probes a unit at)
    then refined step by step, ends at the rate `goodput_rps` returns for the same probe
    verdicts, with the same bound and the same kind of limit."""
    ub = 1.0
    holds_up_to = short_up_to * holds_frac
    slo = SLOTarget(ttft_s=1.0)
    expected = goodput_rps(
        _Threshold(short_up_to, near_from, holds_up_to),
        [Request(0.0, 8, 2)],
        slo,
        ub,
        rel_tol=GOODPUT_REL_TOL,
        max_evaluations=10_000,
    )
    step = math.log1p(GOODPUT_REL_TOL)
    grid = S._Grid(
        _Threshold(short_up_to, near_from, holds_up_to),
        ub,
        step,
        math.ceil(-math.log(S.GOODPUT_MIN_FRACTION) / step),
    )
    if 0 <= level <= grid.k_max:
        grid.run(level)
    for _ in range(2_000):
        if grid.exact or grid.unattainable:
            break
        grid.refine()
    if expected.limited_by == "unattainable":
        assert grid.unattainable and not grid.exact
        return
    assert grid.exact
    got = grid.result(slo)
    assert got.goodput_rps == expected.goodput_rps
    assert got.upper_bound_rps == expected.upper_bound_rps
    assert got.limited_by == expected.limited_by
