"""Speed-ups of the serving search that must not change its answers. The lazy disaggregated units (`search.LAZY_UNITS`: units kept as table
rows until the heap yields them, one-instance prefill pools bounded in closed form and
simulated only when a unit of theirs is taken) answer exactly what building every unit up
front with those pools simulated answers: the same ranked plans with the same metrics,
details and explanations, on small cases of each goodput objective, with no more
simulations. (`bench/serving_search_latency.py --compare` checks the bench cases.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cost_models.serving.analytical import AnalyticalServingCostModel
from hardware_catalog import resolve_cluster
from solver.serving import search as S
from solver.serving.evaluate import InstanceCosts, ServingProblem, request_stream
from solver.serving.goodput import SimulationMemo, scale_stream
from solver.serving.simulate import Request, simulate_colocated
from specs import presets
from specs.cluster import ClusterSpec
from specs.serving import ServingWorkload

COST_MODEL = AnalyticalServingCostModel()


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
