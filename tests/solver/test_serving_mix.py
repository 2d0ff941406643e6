"""The cheapest mix of GPU types for a rate (Mélange-style program) and the mixed serving
search."""

from __future__ import annotations

import itertools
import random

import pytest

from cost_models.serving.registry import build_serving_cost_model
from hardware_catalog import resolve_cluster
from solver.serving.evaluate import ServingProblem
from solver.serving.mix import _cheapest_counts, mixed_serving_search
from specs.cluster import ClusterSpec
from specs.presets import get_preset
from specs.serving import ServingWorkload


@pytest.mark.parametrize("seed", range(25))
def test_cheapest_counts_equal_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    layouts = [
        (rng.uniform(1.0, 50.0), rng.uniform(1.0, 40.0), rng.randint(0, 6))
        for _ in range(rng.randint(1, 3))
    ]
    rate = rng.uniform(5.0, 150.0)
    best = None
    for counts in itertools.product(*(range(most + 1) for _, _, most in layouts)):
        served = sum(n * r for n, (r, _, _) in zip(counts, layouts, strict=True))
        if served + 1e-9 < rate:
            continue
        cost = sum(n * p for n, (_, p, _) in zip(counts, layouts, strict=True))
        best = cost if best is None else min(best, cost)
    got = _cheapest_counts(rate, layouts, 0.0)
    if best is None:
        assert got is None
        return
    assert got is not None
    assert sum(n * r for n, (r, _, _) in zip(got, layouts, strict=True)) >= rate - 1e-6
    cost = sum(n * p for n, (_, p, _) in zip(got, layouts, strict=True))
    assert cost == pytest.approx(best, rel=1e-6)


def test_the_cheapest_mix_for_a_rate_uses_cheap_groups_beside_a_fast_one() -> None:
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {"accelerator": "h100-sxm", "num_nodes": 1, "name": "h100",
                     "price_per_gpu_hour": 4.0},
                    {"accelerator": "a100-80gb", "num_nodes": 1, "name": "a100",
                     "price_per_gpu_hour": 1.5},
                    {"accelerator": "l40s", "num_nodes": 1, "name": "l40s",
                     "price_per_gpu_hour": 1.0},
                ]
            }
        )
    )  # fmt: skip
    model = build_serving_cost_model("analytical", None)

    def best(objective: str, rate: float | None) -> tuple[ServingProblem, object]:
        wl = ServingWorkload.model_validate(
            {"kind": "serving", "prompt_tokens": 1024, "output_tokens": 256,
             "slo": {"ttft_ms": 1000, "tpot_ms": 50}, "objective": objective,
             **({"arrival_rate_rps": rate} if rate else {})}
        )  # fmt: skip
        problem = ServingProblem(model=get_preset("llama3-8b"), cluster=cluster, workload=wl)
        result = mixed_serving_search(problem, model, top_k=3)
        assert result.plans
        return problem, result.plans[0].estimate

    # in steady state the H100 node alone carries ~180 requests/s, the A100 node ~66 and the
    # L40S node ~53: 190 needs more than the H100s, and the cheapest way is a few cheap
    # instances beside them, not every GPU
    problem, mix = best("min_cost", 190.0)
    # the groups it uses: an instance's own, or those its pipeline stages span
    groups = {
        g
        for i in mix.plan.instances  # type: ignore[attr-defined]
        for g in ([i.group] if i.group is not None else i.stage_groups or [])
    }
    assert "h100" in groups and len(groups) >= 2
    assert mix.metrics.gpus_used < 24  # type: ignore[attr-defined]
    assert mix.feasible  # type: ignore[attr-defined]
    prices = {"h100": 4.0, "a100": 1.5, "l40s": 1.0}

    def price(i: object) -> float:
        """One replica's GPUs at their groups' prices (a stage: tensor × expert GPUs)."""
        if i.group is not None:  # type: ignore[attr-defined]
            return float(i.parallelism.num_gpus * prices[i.group])  # type: ignore[attr-defined]
        stage = i.parallelism.tensor * i.parallelism.expert  # type: ignore[attr-defined]
        return float(sum(stage * prices[g] for g in i.stage_groups))  # type: ignore[attr-defined]

    expected = sum(i.count * price(i) for i in mix.plan.instances)  # type: ignore[attr-defined]
    assert mix.metrics.price_per_hour == pytest.approx(expected)  # type: ignore[attr-defined]
    # per GPU, one group alone is best: a mix never wins max_goodput_per_gpu
    _, per_gpu = best("max_goodput_per_gpu", None)
    assert len({i.group for i in per_gpu.plan.instances}) == 1  # type: ignore[attr-defined]


def test_an_instance_across_two_groups_wins_where_neither_group_holds_the_model_well() -> None:
    """Llama-3-70B (≈ 131 GiB of bf16 weights) on two H100s and two A100-80GBs: two GPUs of
    either kind hold the weights (65.7 GiB each) with ≈ 21k tokens of KV cache, so a TP2
    instance on one group runs at most 18 requests at once. TP2 PP2 with one stage per
    group holds the same weights on four GPUs, ≈ 296k tokens of cache: batches of 128
    fit, and its goodput per GPU is well above either group's (the H100 group alone:
    0.81 requests/s per GPU)."""
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2,
                     "name": "h100"},
                    {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 2,
                     "name": "a100"},
                ]
            }
        )
    )  # fmt: skip
    wl = ServingWorkload.model_validate(
        {"kind": "serving", "prompt_tokens": 1024, "output_tokens": 256,
         "slo": {"ttft_ms": 2000, "tpot_ms": 100}}
    )  # fmt: skip
    problem = ServingProblem(model=get_preset("llama3-70b"), cluster=cluster, workload=wl)
    result = mixed_serving_search(problem, build_serving_cost_model("analytical", None), top_k=3)
    best = result.plans[0].estimate
    (inst,) = best.plan.instances
    assert inst.stage_groups == ["h100", "a100"]
    assert inst.stage_layers is not None and inst.stage_layers[0] > inst.stage_layers[1]
    alone = next(
        r.estimate for r in result.plans[1:] if r.estimate.plan.instances[0].group == "h100"
    )
    assert best.metrics is not None and alone.metrics is not None
    assert best.metrics.goodput_rps_per_gpu > 1.5 * alone.metrics.goodput_rps_per_gpu
    assert "h100 runs stage 0" in result.plans[0].explanation
    assert "a100 runs stage 1" in result.plans[0].explanation
