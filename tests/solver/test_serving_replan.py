"""Re-planning a serving plan (`solver.serving.replan`, issue 16 point 4): where the old
plan's replicas ran and which survive, the keep plan's re-fitted counts (colocated: half the
GPUs serve exactly half the goodput; disaggregated: the best pair of counts, against brute
force over every pair), the weights a restarted replica loads against published parameter
counts, the restart time from the catalog's rates, and the requests lost and break-even.

Llama-3-8B (preset) on H100 nodes of 4 GPUs, fixed lengths 512/128, 100 simulated requests.
"""

from __future__ import annotations

from typing import Any

import pytest

from cost_models.serving.analytical import AnalyticalServingCostModel
from hardware_catalog import resolve_cluster
from solver.serving import replan as R
from solver.serving.evaluate import (
    GOODPUT_REL_TOL,
    InstanceCosts,
    ServingProblem,
    evaluate_plan,
    request_stream,
)
from solver.serving.goodput import goodput_colocated
from specs import presets
from specs.cluster import ClusterSpec
from specs.serving import ServingInstance, ServingParallelism, ServingPlan, ServingWorkload

COST_MODEL = AnalyticalServingCostModel()
LLAMA3_8B_PARAMETERS = 8_030_261_248
"""Meta-Llama-3-8B's parameters (the Hugging Face safetensors index, 16,060,522,496 bytes
in bf16)."""
MIXTRAL_PARAMETERS = 46_702_792_704
"""Mixtral-8x7B's parameters (the Hugging Face safetensors index)."""
MIXTRAL_EXPERT_PARAMETERS = 32 * 8 * 3 * 4096 * 14336
"""Its routed experts: 32 layers × 8 experts × (gate, up, down) × hidden 4096 × FFN 14336."""
DGX_H100_NVME_GB_S = 52.0
"""The catalog's local NVMe read rate of a DGX H100 (`hardware_catalog`, dgx-h100)."""
DGX_H100_HOST_LINK_GB_S = 52.8
"""Its measured pinned host → device copy rate per GPU (PCIe Gen5 x16)."""
INFO = {"storage_read_gb_s": 10.0, "restart_overhead_s": 120.0}


def _cluster(nodes: int, unavailable: int = 0) -> Any:
    group = {"accelerator": "h100-sxm", "num_nodes": nodes, "gpus_per_node": 4}
    if unavailable:
        group["unavailable_gpus"] = unavailable
    return resolve_cluster(ClusterSpec.model_validate({"node_groups": [group]}))


def _problem(cluster: Any, **extra: Any) -> ServingProblem:
    workload = ServingWorkload.model_validate(
        {
            "kind": "serving",
            "prompt_tokens": 512,
            "output_tokens": 128,
            "slo": {"ttft_ms": 300, "tpot_ms": 30},
            "num_requests": 100,
            **extra,
        }
    )
    return ServingProblem(model=presets.get_preset("llama3-8b"), cluster=cluster, workload=workload)


def _inst(role: str, count: int, tensor: int = 1, **kw: Any) -> ServingInstance:
    return ServingInstance(
        role=role,  # type: ignore[arg-type]
        count=count,
        parallelism=ServingParallelism(tensor=tensor),
        **kw,
    )


def _plan(*instances: ServingInstance) -> ServingPlan:
    mode = "colocated" if instances[0].role == "both" else "disaggregated"
    return ServingPlan(mode=mode, instances=list(instances), engine="vllm")


COLOCATED = _plan(_inst("both", 8, max_batch_size=256, chunk_size=2048))
DISAGGREGATED = _plan(
    _inst("prefill", 4, max_batch_size=1024), _inst("decode", 3, max_batch_size=256)
)


def _evaluated(problem: ServingProblem, plan: ServingPlan) -> Any:
    problem = problem.with_engine(plan.engine, plan.engine_options)
    return evaluate_plan(problem, plan, InstanceCosts(problem, COST_MODEL))


# ---- placement -------------------------------------------------------------------------
def test_replicas_sit_in_plan_order_and_a_replica_stays_in_a_node() -> None:
    old = _cluster(2)
    assert R.placement(DISAGGREGATED, old) == [[[0], [1], [2], [3]], [[4], [5], [6]]]
    # one TP1 prefill on GPU 0; the TP4 decode replica does not fit GPUs 1-3 of node 0
    plan = _plan(_inst("prefill", 1), _inst("decode", 1, tensor=4))
    assert R.placement(plan, old) == [[[0]], [[4, 5, 6, 7]]]
    three = _plan(_inst("both", 3, tensor=2))
    assert R.placement(three, old) == [[[0, 1], [2, 3], [4, 5]]]


def test_a_replica_survives_when_all_its_gpus_do() -> None:
    old, new = _cluster(2), _cluster(2, unavailable=4)
    three = _plan(_inst("both", 3, tensor=2))
    (count,) = R.surviving_replicas(three, old, [0, 1, 2, 3], new, "bf16").values()
    assert count == 2  # GPUs 4-5 were lost
    surviving = R.surviving_replicas(DISAGGREGATED, old, [4, 5, 6, 7], new, "bf16")
    by_role = {key[0]: n for key, n in surviving.items()}
    assert by_role == {"decode": 3}  # node 0 ran every prefill replica


# ---- weights -----------------------------------------------------------------------------
def test_weight_bytes_of_a_replica_and_of_each_of_its_gpus() -> None:
    llama = presets.get_preset("llama3-8b")
    assert llama.num_parameters() == LLAMA3_8B_PARAMETERS
    tp2pp2 = ServingInstance(parallelism=ServingParallelism(tensor=2, pipeline=2))
    assert R.instance_weight_bytes(llama, tp2pp2, "bf16") == 2 * LLAMA3_8B_PARAMETERS
    fp8 = tp2pp2.model_copy(update={"precision": "fp8"})
    assert R.instance_weight_bytes(llama, fp8, "bf16") == LLAMA3_8B_PARAMETERS
    rates = R.RestartRates.of(_cluster(1), INFO)
    restart = R.restart_of(
        llama, _plan(tp2pp2.model_copy(update={"role": "both"})), {}, "bf16", rates
    )
    (role,) = restart.roles
    assert role.weight_bytes_per_gpu == pytest.approx(2 * LLAMA3_8B_PARAMETERS / 4)
    # Mixtral with two attention replicas (expert 2, tensor 2): the experts split over the
    # 4 GPUs, the other weights over each replica's 2 GPUs, held twice
    mixtral = presets.get_preset("mixtral-8x7b")
    assert mixtral.num_parameters() == MIXTRAL_PARAMETERS
    ep = ServingInstance(parallelism=ServingParallelism(tensor=2, expert=2))
    other = MIXTRAL_PARAMETERS - MIXTRAL_EXPERT_PARAMETERS
    assert R.instance_weight_bytes(mixtral, ep, "bf16") == pytest.approx(
        2 * (2 * other + MIXTRAL_EXPERT_PARAMETERS)
    )
    per_gpu = 2 * (other / 2 + MIXTRAL_EXPERT_PARAMETERS / 4)
    assert R.instance_weight_bytes(mixtral, ep, "bf16") / 4 == pytest.approx(per_gpu)


def test_restart_time_reads_the_weights_at_the_catalogs_rates() -> None:
    llama = presets.get_preset("llama3-8b")
    four = _plan(_inst("both", 4))
    rates = R.RestartRates.of(_cluster(1), INFO)
    restart = R.restart_of(llama, four, {}, "bf16", rates)
    bytes_ = 4 * 2 * LLAMA3_8B_PARAMETERS
    assert (restart.instances, restart.gpus, restart.reload_bytes) == (4, 4, bytes_)
    # the node's NVMe (52 GB/s) is below 4 host links of 52.8 GB/s
    assert restart.seconds == pytest.approx(120 + bytes_ / (DGX_H100_NVME_GB_S * 1e9))
    fast = R.RestartRates.of(_cluster(1), {**INFO, "weights_read_gb_s": 1000.0})
    capped = R.restart_of(llama, four, {}, "bf16", fast)
    assert capped.seconds == pytest.approx(120 + bytes_ / (4 * DGX_H100_HOST_LINK_GB_S * 1e9))
    # eight restarted GPUs fill two nodes, reading in parallel
    eight = R.restart_of(llama, _plan(_inst("both", 8)), {}, "bf16", rates)
    assert eight.seconds == pytest.approx(120 + 2 * bytes_ / (2 * DGX_H100_NVME_GB_S * 1e9))
    # replicas of the same layout that survive keep running; nothing restarted takes 0 s
    key = R.layout_key(four.instances[0], four, "bf16", None)
    kept = R.restart_of(llama, four, {key: 4}, "bf16", rates)
    assert (kept.instances, kept.kept, kept.seconds, kept.reload_bytes) == (0, 4, 0.0, 0.0)
    other_batch = _plan(_inst("both", 4, max_batch_size=128))
    assert R.restart_of(llama, other_batch, {key: 4}, "bf16", rates).instances == 4


# ---- keep ----------------------------------------------------------------------------------
@pytest.mark.parametrize("survivors", [[0, 1, 2, 3], [4, 5, 6, 7]])
def test_colocated_keep_on_half_the_gpus_serves_half_the_goodput(survivors: list[int]) -> None:
    old_problem, new_problem = _problem(_cluster(2)), _problem(_cluster(2, unavailable=4))
    before = _evaluated(old_problem, COLOCATED).metrics.goodput_rps
    surviving = R.surviving_replicas(COLOCATED, _cluster(2), survivors, new_problem.cluster, "bf16")
    rates = R.RestartRates.of(new_problem.cluster, INFO)
    keep, reason, _ = R.keep_plan(new_problem, COST_MODEL, COLOCATED, surviving, rates)
    assert reason is None and keep is not None and keep.metrics is not None
    assert keep.plan.instances[0].count == 4
    # independently: 8 replicas on nodes of 4 are 2 router units of 4 TP1 replicas; the keep
    # plan is one such unit, whose goodput the bisection gives directly
    problem = new_problem.with_engine("vllm", None)
    cost = InstanceCosts(problem, COST_MODEL).of(COLOCATED.instances[0])
    unit = goodput_colocated(
        request_stream(problem.workload), cost, 4, 256, 2048, problem.slo, rel_tol=GOODPUT_REL_TOL
    ).goodput_rps
    assert keep.metrics.goodput_rps == pytest.approx(unit, rel=1e-12)
    assert before == pytest.approx(2 * unit, rel=1e-12)
    fig = R.figures(new_problem, COST_MODEL, keep, surviving, rates)
    assert (fig.restart.instances, fig.restart.kept, fig.restart.seconds) == (0, 4, 0.0)


def test_disaggregated_keep_after_losing_the_decode_node_refits_the_counts() -> None:
    """Prefill 4 on node 0, decode 3 on node 1; node 1 fails: every maximal pair of counts
    on the 4 GPUs left ((1, 3), (2, 2), (3, 1)) priced by brute force; keep is the best, and
    it keeps its prefill replicas and starts its decode ones."""
    new_problem = _problem(_cluster(2, unavailable=4))
    surviving = R.surviving_replicas(
        DISAGGREGATED, _cluster(2), [0, 1, 2, 3], new_problem.cluster, "bf16"
    )
    rates = R.RestartRates.of(new_problem.cluster, INFO)
    keep, reason, unpriced = R.keep_plan(new_problem, COST_MODEL, DISAGGREGATED, surviving, rates)
    assert reason is None and keep is not None and keep.metrics is not None and unpriced == 0
    pre, dec = DISAGGREGATED.instances
    brute = {}
    for a, b in [(1, 3), (2, 2), (3, 1)]:
        plan = DISAGGREGATED.model_copy(
            update={
                "instances": [
                    pre.model_copy(update={"count": a}),
                    dec.model_copy(update={"count": b}),
                ]
            }
        )
        brute[(a, b)] = _evaluated(new_problem, plan).metrics.goodput_rps
    best = max(brute, key=lambda pair: brute[pair])
    counts = (keep.plan.instance("prefill").count, keep.plan.instance("decode").count)
    assert brute[counts] == pytest.approx(brute[best], rel=1e-12)
    assert keep.metrics.goodput_rps == pytest.approx(brute[best], rel=1e-12)
    fig = R.figures(new_problem, COST_MODEL, keep, surviving, rates)
    assert fig.restart.kept == counts[0] and fig.restart.instances == counts[1]
    assert fig.restart.reload_bytes == counts[1] * 2 * LLAMA3_8B_PARAMETERS
    assert fig.goodput_during_rps == 0.0  # no decode replica runs while they load
    assert fig.lost_requests == pytest.approx(fig.goodput_rps * fig.restart.seconds)


def test_keep_on_added_nodes_restarts_the_new_replicas_only() -> None:
    """Node 1 lost and a node of the same kind added: 8 replicas again, the 4 on node 0
    keep running and serve (one unit's goodput) while the other 4 load."""
    old = _cluster(2)
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {
                        "accelerator": "h100-sxm",
                        "num_nodes": 2,
                        "gpus_per_node": 4,
                        "unavailable_gpus": 4,
                    },
                    {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4},
                ]
            }
        )
    )
    problem = _problem(cluster)
    assert cluster.is_homogeneous
    surviving = R.surviving_replicas(COLOCATED, old, [0, 1, 2, 3], cluster, "bf16")
    rates = R.RestartRates.of(cluster, INFO)
    keep, _, _ = R.keep_plan(problem, COST_MODEL, COLOCATED, surviving, rates)
    assert keep is not None and keep.metrics is not None
    assert keep.plan.instances[0].count == 8
    fig = R.figures(problem, COST_MODEL, keep, surviving, rates)
    assert (fig.restart.kept, fig.restart.instances) == (4, 4)
    half = _evaluated(
        _problem(_cluster(1)), _plan(_inst("both", 4, max_batch_size=256, chunk_size=2048))
    )
    assert fig.goodput_during_rps == pytest.approx(half.metrics.goodput_rps, rel=1e-12)
    assert fig.goodput_rps == pytest.approx(2 * fig.goodput_during_rps, rel=1e-12)
    bytes_ = 4 * 2 * LLAMA3_8B_PARAMETERS
    assert fig.restart.seconds == pytest.approx(120 + bytes_ / (DGX_H100_NVME_GB_S * 1e9))
    assert fig.lost_requests == pytest.approx(fig.goodput_during_rps * fig.restart.seconds)


def test_min_gpus_keeps_the_fewest_replicas_that_carry_the_rate() -> None:
    """For min_gpus a router unit is one replica: n replicas carry n × one's goodput, so
    100 requests/s need ceil(100 / one replica's goodput) of them."""
    problem = _problem(_cluster(2, unavailable=4), objective="min_gpus", arrival_rate_rps=100.0)
    surviving = R.surviving_replicas(COLOCATED, _cluster(2), [0, 1, 2, 3], problem.cluster, "bf16")
    rates = R.RestartRates.of(problem.cluster, INFO)
    keep, reason, _ = R.keep_plan(problem, COST_MODEL, COLOCATED, surviving, rates)
    assert reason is None and keep is not None and keep.metrics is not None
    engine = problem.with_engine("vllm", None)
    cost = InstanceCosts(engine, COST_MODEL).of(COLOCATED.instances[0])
    one = goodput_colocated(
        request_stream(engine.workload), cost, 1, 256, 2048, engine.slo, rel_tol=GOODPUT_REL_TOL
    ).goodput_rps
    need = -(-100.0 // one)
    assert 1 <= need < 4  # the case tests something: fewer than the 4 that fit
    assert keep.plan.instances[0].count == need
    assert keep.metrics.goodput_rps == pytest.approx(need * one, rel=1e-12)


def test_keep_needs_room_for_one_replica() -> None:
    problem = _problem(_cluster(1, unavailable=2))
    wide = _plan(_inst("both", 2, tensor=4))
    keep, reason, _ = R.keep_plan(
        problem, COST_MODEL, wide, {}, R.RestartRates.of(problem.cluster, INFO)
    )
    assert keep is None and reason is not None and "takes 4 GPUs" in reason


# ---- lost requests and break-even --------------------------------------------------------
def test_lost_requests_and_break_even_against_keep() -> None:
    """A plan of 10 requests/s that serves 4 during its 100 s restart loses 600 requests;
    keep serves 8 and loses none: the plan is ahead from (600 − 0) / (10 − 8) = 300 s on."""
    restart = R.Restart(roles=[], reload_bytes=0.0, seconds=100.0)
    plan = R.Figures(restart, goodput_rps=10.0, goodput_during_rps=4.0)
    keep = R.Figures(R.Restart(roles=[], reload_bytes=0.0, seconds=0.0), 8.0, 8.0)
    assert plan.lost_requests == pytest.approx(600.0)
    assert plan.metrics(12.0, keep, False)["break_even_s"] == pytest.approx(300.0)
    slower = R.Figures(restart, goodput_rps=7.0, goodput_during_rps=0.0)
    assert slower.metrics(12.0, keep, False)["break_even_s"] is None
    assert keep.metrics(12.0, keep, True)["break_even_s"] is None


def test_min_gpus_keeps_the_disaggregated_pair_of_fewest_gpus_that_carries_the_rate() -> None:
    """After the decode node fails, min_gpus at a rate one pair of replicas cannot carry:
    the keep plan is the pair of fewest GPUs (then most goodput) among all pairs on the 4
    GPUs left whose goodput reaches the rate, found here by brute force over every pair."""
    pre, dec = DISAGGREGATED.instances
    plain = _problem(_cluster(2, unavailable=4))

    def goodput(a: int, b: int) -> float:
        plan = DISAGGREGATED.model_copy(
            update={
                "instances": [
                    pre.model_copy(update={"count": a}),
                    dec.model_copy(update={"count": b}),
                ]
            }
        )
        return _evaluated(plain, plan).metrics.goodput_rps

    brute = {(a, b): goodput(a, b) for a in range(1, 4) for b in range(1, 5 - a)}
    # a rate just above what one prefill and one decode replica carry
    rate = brute[(1, 1)] * 1.01
    carrying = {pair: g for pair, g in brute.items() if g >= rate}
    assert carrying, brute
    fewest = min(sum(pair) for pair in carrying)
    expected = max((p for p in carrying if sum(p) == fewest), key=lambda p: carrying[p])
    problem = _problem(_cluster(2, unavailable=4), objective="min_gpus", arrival_rate_rps=rate)
    surviving = R.surviving_replicas(
        DISAGGREGATED, _cluster(2), [0, 1, 2, 3], problem.cluster, "bf16"
    )
    rates = R.RestartRates.of(problem.cluster, INFO)
    keep, reason, _ = R.keep_plan(problem, COST_MODEL, DISAGGREGATED, surviving, rates)
    assert reason is None and keep is not None and keep.metrics is not None
    counts = (keep.plan.instance("prefill").count, keep.plan.instance("decode").count)
    assert sum(counts) == fewest < 4  # fewer GPUs than the maximal pairs take
    assert keep.metrics.goodput_rps == pytest.approx(brute[expected], rel=1e-12)
    assert keep.metrics.goodput_rps >= rate
