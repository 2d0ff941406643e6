"""The mixed-cluster search against exhaustive evaluation of the same space."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from cost_models.base import TrainingProblem
from cost_models.mixed import evaluate_mixed, pool_problem
from cost_models.registry import build_cost_model
from hardware_catalog import resolve_cluster
from solver.search.exhaustive import exhaustive_search
from solver.search.mixed import _candidates, mixed_search
from specs.cluster import ClusterSpec
from specs.constraints import SearchConstraints
from specs.model import ModelSpec
from specs.plan import TrainingPlan
from specs.workload import TrainingWorkload
from tests.support import TINY_MODEL

SMALL: dict[str, Any] = {**TINY_MODEL, "num_layers": 6}


def _problem(groups: list[dict[str, Any]]) -> TrainingProblem:
    return TrainingProblem(
        model=ModelSpec.model_validate(SMALL),
        cluster=resolve_cluster(ClusterSpec.model_validate({"node_groups": groups})),
        workload=TrainingWorkload.model_validate(
            {"kind": "training", "global_batch_size": 16, "sequence_length": 512}
        ),
    )


def _exhaustive_best(problem: TrainingProblem, constraints: SearchConstraints) -> float:
    """Every plan of the declared space priced: each pool alone (exhaustive homogeneous
    search) and every cross-pool candidate with every split of the layers."""
    model = build_cost_model("analytical")
    best = float("inf")
    for pool in problem.cluster.pools().values():
        alone = exhaustive_search(
            pool_problem(problem, pool, pool.num_gpus), model, constraints, top_k=1
        )
        if alone.plans:
            best = min(best, alone.plans[0].estimate.metrics.step_time_s)
    layers = problem.model.num_layers
    for stage_pools, plan in _candidates(problem, constraints, list(problem.cluster.pools())):
        pp = len(stage_pools)
        for cuts in itertools.combinations(range(1, layers), pp - 1):
            bounds = (0, *cuts, layers)
            split = [bounds[i + 1] - bounds[i] for i in range(pp)]
            full = plan.model_copy(update={"stage_layers": split, "stage_groups": stage_pools})
            if model.check(pool_problem(problem, problem.cluster.pools()[stage_pools[0]],
                                        plan.parallelism.world_size), plan):  # fmt: skip
                break
            est = evaluate_mixed(model, problem, full)
            if est.feasible:
                best = min(best, est.metrics.step_time_s)
    return best


@pytest.mark.parametrize(
    "groups",
    [
        [
            {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2},
            {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 2},
        ],
        [
            {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4},
            {"accelerator": "l40s", "num_nodes": 1, "gpus_per_node": 2},
            {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 2},
        ],
    ],
)
def test_mixed_search_equals_exhaustive_evaluation(groups: list[dict[str, Any]]) -> None:
    problem = _problem(groups)
    constraints = SearchConstraints(micro_batch_sizes=[1, 2], time_limit_s=120)
    model = build_cost_model("analytical")
    exact = mixed_search(problem, model, constraints, top_k=3, share_data=False)
    assert exact.stats.complete
    assert exact.plans[0].estimate.metrics.step_time_s == pytest.approx(
        _exhaustive_best(problem, constraints), rel=1e-9
    )
    # sharing data over groups only adds candidates: never slower
    shared = mixed_search(problem, model, constraints, top_k=3)
    best = shared.plans[0].estimate.metrics.step_time_s
    assert best <= exact.plans[0].estimate.metrics.step_time_s * (1 + 1e-12)


def test_mixed_search_is_never_worse_than_any_single_pool() -> None:
    problem = _problem(
        [
            {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4},
            {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 4},
        ]
    )
    constraints = SearchConstraints(micro_batch_sizes=[1, 2], time_limit_s=120)
    model = build_cost_model("analytical")
    result = mixed_search(problem, model, constraints, top_k=5)
    best = result.plans[0].estimate.metrics.step_time_s
    for pool in problem.cluster.pools().values():
        alone = exhaustive_search(pool_problem(problem, pool, pool.num_gpus), model, constraints)
        assert best <= alone.plans[0].estimate.metrics.step_time_s * (1 + 1e-12)
    # every plan names a pool per stage and says what each group does
    for ranked in result.plans:
        plan = ranked.estimate.plan
        if plan.data_shares is None:
            assert len(plan.stage_groups or []) == plan.parallelism.pipeline
        assert "Groups: " in ranked.explanation


def _every_per_stage_plan(problem: TrainingProblem, sizes: list[int]) -> float:
    """The best plan with its own tensor degree per pool, by brute force written apart from
    the search: every ordering of two or more pools, every degree per pool that divides its
    node and the model's heads, KV heads and FFN width, every data degree dividing the
    batch, whole stages of degree × data GPUs per pool, every micro-batch size, recompute
    mode and split of the layers."""
    model = build_cost_model("analytical")
    pools = problem.cluster.pools()
    m = problem.model
    layers, batch = m.num_layers, problem.workload.global_batch_size
    best = float("inf")

    def degrees(pool: Any) -> list[int]:
        node = pool.gpus_per_node
        return [
            t
            for t in range(1, node + 1)
            if node % t == 0
            and m.num_attention_heads % t == 0
            and m.kv_heads % t == 0
            and m.ffn_hidden_size % t == 0
        ]

    for count in range(2, len(pools) + 1):
        for order in itertools.permutations(pools, count):
            for ts in itertools.product(*(degrees(pools[n]) for n in order)):
                for d in [x for x in range(1, batch + 1) if batch % x == 0]:
                    counts = [pools[n].num_gpus // (t * d) for n, t in zip(order, ts, strict=True)]
                    node_ok = all(
                        (t * d) % pools[n].gpus_per_node == 0
                        or pools[n].gpus_per_node % (t * d) == 0
                        for n, t in zip(order, ts, strict=True)
                    )
                    pp = sum(counts)
                    if min(counts) < 1 or not node_ok or pp > layers:
                        continue
                    names = [n for n, k in zip(order, counts, strict=True) for _ in range(k)]
                    stage_tensor = [t for t, k in zip(ts, counts, strict=True) for _ in range(k)]
                    for mb, rc in itertools.product(sizes, ("none", "selective", "full")):
                        if (batch // d) % mb:
                            continue
                        for cuts in itertools.combinations(range(1, layers), pp - 1):
                            bounds = (0, *cuts, layers)
                            plan = TrainingPlan.model_validate(
                                {
                                    "parallelism": {
                                        "data": d,
                                        "tensor": max(ts),
                                        "pipeline": pp,
                                        "sequence_parallel": max(ts) > 1,
                                    },
                                    "micro_batch_size": mb,
                                    "recompute": rc,
                                    "stage_groups": names,
                                    "stage_tensor": stage_tensor if len(set(ts)) > 1 else None,
                                    "stage_layers": [bounds[i + 1] - bounds[i] for i in range(pp)],
                                }
                            )
                            est = evaluate_mixed(model, problem, plan)
                            if est.feasible:
                                best = min(best, est.metrics.step_time_s)
    return best


def test_per_stage_tensor_degrees_equal_brute_force_and_beat_one_degree() -> None:
    """An H100 node of 4 beside a PCIe L40S node of 2: with one degree for all, the degree
    must fit both pools (at most 2); with one per pool the H100 stages may run tensor 4.
    The search over per-pool degrees equals the brute force above over the same space, and
    never loses to the search with one degree (its space is a subset)."""
    problem = _problem(
        [
            {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4, "name": "h100"},
            {"accelerator": "l40s", "num_nodes": 1, "gpus_per_node": 2, "name": "l40s"},
        ]
    )
    model = build_cost_model("analytical")
    uniform = SearchConstraints(micro_batch_sizes=[1, 2], time_limit_s=120)
    per_stage = uniform.model_copy(update={"per_stage_tensor": True})
    one = mixed_search(problem, model, uniform, top_k=40, share_data=False)
    own = mixed_search(problem, model, per_stage, top_k=40, share_data=False)
    assert own.stats.complete and one.stats.complete
    # exact over the cross-pool space: the best cross-pool plan equals the brute force
    cross = [
        r.estimate
        for r in own.plans
        if r.estimate.plan.stage_groups and len(set(r.estimate.plan.stage_groups)) > 1
    ]
    assert cross, "no plan across both pools"
    assert cross[0].metrics.step_time_s == pytest.approx(
        _every_per_stage_plan(problem, [1, 2]), rel=1e-9
    )
    assert own.plans[0].estimate.metrics.step_time_s <= one.plans[0].estimate.metrics.step_time_s
    # some plan of the list uses tensor 4 on the H100s beside a narrower L40S stage (which
    # the one-degree space cannot express), and its explanation says so
    mixed_degrees = [r for r in own.plans if r.estimate.plan.stage_tensor is not None]
    assert mixed_degrees
    assert all(
        max(r.estimate.plan.stage_tensor or []) == r.estimate.plan.parallelism.tensor
        for r in mixed_degrees
    )
    assert any("at tensor" in r.explanation for r in mixed_degrees)
    assert all(r.estimate.plan.stage_tensor is None for r in one.plans)


def test_a_mixed_search_stops_when_cancelled_and_keeps_what_it_found() -> None:
    """Cancellation is checked while the cross-pool candidates are generated (a space of
    many pools is far too large to list first): a search cancelled after the pools alone
    were searched stops at once, says so, and answers the single-pool plans it had; its
    explanation does not claim the idle pools' plans are slower."""
    problem = _problem(
        [
            {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4},
            {"accelerator": "l40s", "num_nodes": 1, "gpus_per_node": 2},
            {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 2},
        ]
    )
    model = build_cost_model("analytical")
    constraints = SearchConstraints(micro_batch_sizes=[1, 2], per_stage_tensor=True)
    polls = 0

    def stop() -> bool:
        nonlocal polls
        polls += 1
        return polls > 4  # the three pools alone and the data shares, then cancelled

    result = mixed_search(problem, model, constraints, top_k=3, should_stop=stop)
    assert result.stats.status == "cancelled"
    assert result.plans
    assert all(len(set(r.estimate.plan.stage_groups or [])) <= 1 for r in result.plans)
    assert any("the search stopped" in r.explanation for r in result.plans)


def test_a_cost_model_without_keyed_methods_searches_mixed_clusters() -> None:
    """A plug-in offering only the base protocol (`check`, `profile`, `evaluate`) gets the
    same mixed-cluster top plans as the analytical model it wraps (the stage profiles fall
    back to `check` / `profile` of the plan; they called `check_key` and failed)."""
    from tests.solver.test_lazy_search import PlainOnly

    problem = _problem(
        [
            {"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2},
            {"accelerator": "a100-80gb", "num_nodes": 1, "gpus_per_node": 2},
        ]
    )
    constraints = SearchConstraints(micro_batch_sizes=[1], time_limit_s=120)
    model = build_cost_model("analytical")
    plain = PlainOnly(model)
    keyed = mixed_search(problem, model, constraints, top_k=3, share_data=False)
    unkeyed = mixed_search(problem, plain, constraints, top_k=3, share_data=False)
    assert unkeyed.stats.complete and plain.profiles > 0
    assert [p.estimate.plan for p in unkeyed.plans] == [p.estimate.plan for p in keyed.plans]
    assert [p.estimate.metrics.step_time_s for p in unkeyed.plans] == pytest.approx(
        [p.estimate.metrics.step_time_s for p in keyed.plans], rel=1e-12
    )


def test_vocabulary_parallel_pool_plans_are_not_shared_out_as_data_shares() -> None:
    """Llama-3-70B (untied embeddings) on 8 H100 + 8 A100 nodes: the H100 pool's best plans
    are vocabulary-parallel, which is not priced with data shares. The search used to raise
    building such a data-share plan; now those layouts are not shared out. Every plan it
    returns is a valid plan, and none pairs vocabulary parallelism with shares or groups."""
    from specs.presets import get_preset

    problem = _problem(
        [
            {"accelerator": "h100-sxm", "num_nodes": 8, "name": "h100"},
            {"accelerator": "a100-80gb", "num_nodes": 8, "name": "a100"},
        ]
    )
    problem = TrainingProblem(
        model=get_preset("llama3-70b"),
        cluster=problem.cluster,
        workload=TrainingWorkload(global_batch_size=512, sequence_length=4096),
    )
    forks = SearchConstraints(research_forks=True)
    result = mixed_search(problem, build_cost_model("analytical"), forks, top_k=10)
    assert result.stats.complete and result.plans
    pools_alone = mixed_search(
        problem,
        build_cost_model("analytical"),
        SearchConstraints(fixed={"vocab_parallel": True}),
        top_k=3,
    )
    assert pools_alone.plans  # vocabulary-parallel plans exist on a pool alone
    for ranked in result.ranked(include_dominated=True) + pools_alone.plans:
        plan = TrainingPlan.model_validate(ranked.estimate.plan.model_dump())
        if plan.vocab_parallel:
            assert plan.data_shares is None and len(set(plan.stage_groups or [])) <= 1
