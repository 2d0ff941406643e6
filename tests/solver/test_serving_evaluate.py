"""Pricing one serving plan (`solver.serving.evaluate`): replicas and units, topology and
memory violations, the SLO at a given rate, and the request stream.

Goodput of a replicated plan = units × the unit's goodput (module docstring of evaluate.py;
DistServe, Zhong et al., OSDI'24 §4), checked against the bisection run directly on one
unit. Llama-3-8B (preset) on H100s, fixed lengths 512/128, 100 simulated requests.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from cost_models.serving.analytical import AnalyticalServingCostModel
from hardware_catalog import resolve_cluster
from solver.serving.evaluate import (
    GOODPUT_REL_TOL,
    InstanceCosts,
    ServingProblem,
    evaluate_plan,
    request_stream,
)
from solver.serving.goodput import goodput_colocated, goodput_disaggregated
from specs import presets
from specs.cluster import ClusterSpec
from specs.serving import ServingPlan, ServingWorkload

COST_MODEL = AnalyticalServingCostModel()
SLO = {"ttft_ms": 100, "tpot_ms": 15}


def make_problem(
    gpus: int = 4, nodes: int = 1, model: str = "llama3-8b", **workload: Any
) -> ServingProblem:
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
        "slo": SLO,
        "num_requests": 100,
    }
    body.update(workload)
    return ServingProblem(presets.get_preset(model), cluster, ServingWorkload.model_validate(body))


def colocated(
    count: int, tensor: int = 1, pipeline: int = 1, max_batch: int = 128, chunk: int | None = 2048
) -> ServingPlan:
    return ServingPlan.model_validate(
        {
            "mode": "colocated",
            "instances": [
                {
                    "role": "both",
                    "count": count,
                    "parallelism": {"tensor": tensor, "pipeline": pipeline},
                    "max_batch_size": max_batch,
                    "chunk_size": chunk,
                }
            ],
        }
    )


def disaggregated(
    prefill: int, decode: int, prefill_tp: int = 1, decode_tp: int = 1, decode_first: bool = False
) -> ServingPlan:
    insts = [
        {
            "role": "prefill",
            "count": prefill,
            "parallelism": {"tensor": prefill_tp},
            "chunk_size": None,
        },
        {
            "role": "decode",
            "count": decode,
            "parallelism": {"tensor": decode_tp},
            "max_batch_size": 256,
        },
    ]
    if decode_first:
        insts.reverse()
    return ServingPlan.model_validate({"mode": "disaggregated", "instances": insts})


def evaluate(problem: ServingProblem, plan: ServingPlan) -> Any:
    return evaluate_plan(problem, plan, InstanceCosts(problem, COST_MODEL))


# ---- replicas and units --------------------------------------------------------------------
def test_colocated_goodput_is_a_node_of_instances_times_the_units() -> None:
    """A colocated unit is a node's worth of instances behind one router (4 TP1 instances on
    a 4-GPU node): 8 instances are 2 units, each priced as 4 pooled instances; 2 instances
    are one unit of 2."""
    problem = make_problem()
    one, two, eight_plan = (
        evaluate(problem, colocated(1)),
        evaluate(problem, colocated(2)),
        colocated(8),
    )
    assert one.metrics is not None and two.metrics is not None
    assert one.metrics.goodput_rps > 0
    stream = request_stream(problem.workload)
    # the instance as the plan's engine (vLLM by default) runs it
    cost = InstanceCosts(problem, COST_MODEL).get(1, 1, 1, "bf16")
    # independently run bisections on 1, 2 and 4 pooled instances
    direct = {
        n: goodput_colocated(stream, cost, n, 128, 2048, problem.slo).goodput_rps for n in (1, 2, 4)
    }
    assert one.metrics.goodput_rps == pytest.approx(direct[1], rel=1e-12)
    assert two.metrics.goodput_rps == pytest.approx(direct[2], rel=1e-12)
    assert one.details["units"] == 1 and two.details["units"] == 1
    # pooling two instances behind one router carries at least twice one (up to the
    # bisection's tolerance)
    assert two.metrics.goodput_rps >= 2 * one.metrics.goodput_rps * (1 - GOODPUT_REL_TOL)
    big = ServingProblem(
        problem.model,
        resolve_cluster(
            ClusterSpec.model_validate(
                {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 2, "gpus_per_node": 4}]}
            )
        ),
        problem.workload,
    )
    eight = evaluate(big, eight_plan)
    assert eight.metrics is not None and eight.details["units"] == 2
    assert eight.metrics.goodput_rps == pytest.approx(2 * direct[4], rel=1e-12)
    assert eight.metrics.gpus_used == 8
    # with no rate, the latencies are those at the goodput: the SLO holds there
    assert two.metrics.arrival_rate_rps == pytest.approx(two.metrics.goodput_rps)
    assert two.metrics.slo_attainment >= 0.9
    assert two.metrics.ttft_ms_p90 <= 100 and two.metrics.tpot_ms_p90 <= 15


@pytest.mark.parametrize(("prefill", "decode", "units"), [(2, 4, 2), (2, 3, 1), (3, 3, 3)])
def test_disaggregated_units_come_from_the_gcd(prefill: int, decode: int, units: int) -> None:
    """(count_p, count_d) = g × (count_p/g, count_d/g): goodput = g × the unit's goodput,
    with the KV moved inside the node when a whole unit fits in one (8-GPU node here)."""
    problem = make_problem(gpus=8)
    plan = disaggregated(prefill, decode)
    est = evaluate(problem, plan)
    assert est.metrics is not None
    per_p, per_d = prefill // units, decode // units
    tier = "intra" if per_p + per_d <= 8 else "inter"
    stream = request_stream(problem.workload)
    cost = InstanceCosts(problem, COST_MODEL).get(1, 1, 1, "bf16", tier)
    unit = goodput_disaggregated(stream, cost, per_p, None, cost, per_d, 256, problem.slo)
    assert est.details["units"] == units
    assert est.details["kv_transfer_tier"] == tier
    assert est.metrics.goodput_rps == pytest.approx(units * unit.goodput_rps, rel=1e-12)
    assert est.metrics.gpus_used == prefill + decode
    assert est.metrics.goodput_rps_per_gpu == pytest.approx(
        est.metrics.goodput_rps / (prefill + decode), rel=1e-12
    )


def test_the_decode_instance_reports_the_kv_capacity_whatever_the_order() -> None:
    """kv_capacity_tokens is the decode instance's even when the plan lists it first."""
    problem = make_problem()
    decode = COST_MODEL.instance_cost(problem.model, problem.cluster, 2, 1, 1, "bf16", "bf16")
    prefill = COST_MODEL.instance_cost(problem.model, problem.cluster, 1, 1, 1, "bf16", "bf16")
    assert decode.kv_capacity_tokens != prefill.kv_capacity_tokens
    for first in (False, True):
        est = evaluate(problem, disaggregated(1, 1, prefill_tp=1, decode_tp=2, decode_first=first))
        assert est.metrics is not None
        assert est.metrics.kv_capacity_tokens == decode.kv_capacity_tokens
        assert est.metrics.gpus_used == 3


# ---- violations ----------------------------------------------------------------------------
def test_more_gpus_than_the_cluster_is_a_topology_violation() -> None:
    est = evaluate(make_problem(gpus=4), colocated(3, tensor=2))
    assert not est.feasible and est.metrics is None
    assert [v.kind for v in est.violations] == ["topology"]
    assert "6 GPUs" in est.violations[0].detail and "4" in est.violations[0].detail


def test_tensor_parallelism_across_nodes_is_a_topology_violation() -> None:
    est = evaluate(make_problem(gpus=2, nodes=2), colocated(1, tensor=4))
    assert not est.feasible and est.metrics is None
    kinds = [v.kind for v in est.violations]
    assert kinds == ["topology"]
    assert "node" in est.violations[0].detail


def test_pipeline_deeper_than_the_layers_is_a_divisibility_violation() -> None:
    problem = make_problem(gpus=8, nodes=8)  # 64 GPUs, Llama-3-8B has 32 layers
    est = evaluate(problem, colocated(1, pipeline=64))
    assert not est.feasible and est.metrics is None
    assert "divisibility" in [v.kind for v in est.violations]


def test_weights_that_do_not_fit_are_a_memory_violation() -> None:
    # Llama-3-70B in bf16 (~131 GiB of weights) on one 80 GB H100
    est = evaluate(make_problem(model="llama3-70b"), colocated(1))
    assert not est.feasible
    assert est.metrics is None
    assert [v.kind for v in est.violations] == ["memory"]


def test_a_rate_above_the_goodput_is_an_slo_violation() -> None:
    plan = colocated(1)
    goodput = evaluate(make_problem(), plan).metrics.goodput_rps
    over = evaluate(make_problem(arrival_rate_rps=1.5 * goodput), plan)
    assert not over.feasible
    assert [v.kind for v in over.violations] == ["slo"]
    assert over.metrics is not None  # measured at the rate, not withheld
    assert over.metrics.arrival_rate_rps == pytest.approx(1.5 * goodput)
    assert over.metrics.slo_attainment < 0.9
    assert over.metrics.goodput_rps == pytest.approx(goodput, rel=1e-12)
    under = evaluate(make_problem(arrival_rate_rps=0.5 * goodput), plan)
    assert under.feasible and under.violations == []
    assert under.metrics is not None and under.metrics.slo_attainment >= 0.9
    # latencies grow with the load on the same request stream
    assert over.metrics.ttft_ms_p90 > under.metrics.ttft_ms_p90


def test_an_unattainable_slo_is_reported_with_the_isolated_latencies() -> None:
    # a 1 ms TTFT target: not even a request alone gets its 512-token prefill done
    est = evaluate(make_problem(slo={"ttft_ms": 1, "tpot_ms": 15}), colocated(1))
    assert not est.feasible
    assert est.metrics is not None and est.metrics.goodput_rps == 0
    assert [v.kind for v in est.violations] == ["slo"]
    assert "alone" in est.violations[0].detail


# ---- request stream ------------------------------------------------------------------------
def test_request_stream_is_deterministic_per_seed() -> None:
    lengths = {
        "prompt_tokens": {"mean": 600, "p50": 500},
        "output_tokens": {"mean": 200, "p90": 400},
    }
    a = request_stream(make_problem(seed=7, **lengths).workload)
    b = request_stream(make_problem(seed=7, **lengths).workload)
    c = request_stream(make_problem(seed=8, **lengths).workload)
    assert a == b
    assert a != c
    assert [r.prompt_tokens for r in a] != [r.prompt_tokens for r in c]
    assert len(a) == 100
    # unit rate: the mean gap is exactly one second, so the 100th arrival is at t = 100
    assert a[-1].arrival_s == pytest.approx(100.0, rel=1e-12)
    assert all(x.arrival_s < y.arrival_s for x, y in zip(a, a[1:], strict=False))


def test_request_stream_follows_a_trace() -> None:
    trace = [(0.0, 100, 10), (0.5, 200, 20), (2.0, 300, 30), (4.0, 400, 40)]
    problem = make_problem(prompt_tokens=None, output_tokens=None, trace=trace)
    stream = request_stream(problem.workload)
    assert [(r.prompt_tokens, r.output_tokens) for r in stream] == [(p, o) for _, p, o in trace]
    # rescaled to a unit rate: (n − 1) / span = 3 / 4 requests/s
    rate = 3 / 4
    assert [r.arrival_s for r in stream] == pytest.approx([a * rate for a, _, _ in trace])
    assert problem.target_rate_rps == pytest.approx(rate)


def test_a_trace_arriving_all_at_once_has_no_rate() -> None:
    trace = [(1.0, 100, 10), (1.0, 200, 20), (1.0, 300, 30)]
    problem = make_problem(prompt_tokens=None, output_tokens=None, trace=trace)
    assert problem.target_rate_rps is None
    stream = request_stream(problem.workload)
    assert [r.arrival_s for r in stream] == [0.0, 1.0, 2.0]
    est = evaluate(problem, colocated(1))
    assert est.metrics is not None


def test_metrics_are_consistent() -> None:
    est = evaluate(make_problem(arrival_rate_rps=20.0), colocated(2, tensor=2))
    m = est.metrics
    assert m is not None
    assert m.gpus_used == 4
    assert m.goodput_rps_per_gpu == pytest.approx(m.goodput_rps / 4, rel=1e-12)
    assert m.ttft_ms_p50 <= m.ttft_ms_p90 <= m.ttft_ms_p99
    assert m.tpot_ms_p50 <= m.tpot_ms_p90 <= m.tpot_ms_p99
    assert m.e2e_latency_s_p50 <= m.e2e_latency_s_p90
    # a request's end-to-end latency is its TTFT plus 127 TPOTs; at P50 with one request
    # shape this holds within the spread of the two distributions
    assert m.e2e_latency_s_p50 == pytest.approx(
        m.ttft_ms_p50 / 1e3 + 127 * m.tpot_ms_p50 / 1e3, rel=0.2
    )
    # throughput: 100 requests × 128 output tokens over the makespan ≈ 128 × 20 tokens/s
    assert m.throughput_tokens_per_s == pytest.approx(128 * 20, rel=0.25)
    assert m.kv_cache_gib > 0 and m.max_concurrent_sequences >= 1
    assert m.requests_simulated == 100
    assert math.isfinite(m.ttft_ms_p99)
    instances = est.details["instances"]
    assert instances[0]["kv_cache_gib"] == pytest.approx(m.kv_cache_gib)
