"""The serving search's lazy disaggregated units (`search.LAZY_UNITS`: units kept as table
rows until the heap yields them, one-instance prefill pools bounded in closed form and
simulated only when a unit of theirs is taken) answer exactly what building every unit up
front with those pools simulated answers: the same ranked plans with the same metrics,
details and explanations, on small cases of each goodput objective, with no more
simulations. (`bench/serving_search_latency.py --compare` checks the bench cases.)"""

from __future__ import annotations

from typing import Any

import pytest

from cost_models.serving.analytical import AnalyticalServingCostModel
from hardware_catalog import resolve_cluster
from solver.serving import search as S
from solver.serving.evaluate import ServingProblem
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
