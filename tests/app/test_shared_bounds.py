"""The shared bound across processes (`app.services.shared_bounds`): a multiprocessing array
for local shard processes, an actor for Ray shards; both answer what `KBestTimes` answers
and make the shards evaluate less, with the single search's top-k."""

from __future__ import annotations

import math
import multiprocessing
import random
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from app.services.shared_bounds import BoundBoard, ProcessBound, plan_digest
from solver.search.shards import merge
from solver.search.shared_bound import KBestTimes
from specs.plan import PlanKey

_BOUND: Any = None


def _install(bound: ProcessBound) -> None:
    global _BOUND
    _BOUND = bound


def _offer_and_read(entries: list[tuple[float, PlanKey]]) -> float:
    _BOUND.offer(entries)
    return float(_BOUND.get())


def _random_entries(seed: int, n: int) -> list[tuple[float, PlanKey]]:
    rng = random.Random(seed)
    # few distinct times and keys: ties and re-offered plans are common
    return [
        (rng.choice([1.0, 1.5, 2.0, 2.5, 3.0]), PlanKey(data=rng.randint(1, 12))) for _ in range(n)
    ]


def test_plan_digest_is_stable_and_tells_keys_apart() -> None:
    a, b = PlanKey(data=2, recompute="full"), PlanKey(data=2, recompute="selective")
    assert plan_digest(a) == plan_digest(PlanKey(data=2, recompute="full"))
    assert plan_digest(a) != plan_digest(b)
    # fixed value: the same in every process (blake2b of the key's repr, not hash())
    import hashlib

    raw = hashlib.blake2b(repr(tuple(a)).encode(), digest_size=8).digest()
    assert plan_digest(a) == int.from_bytes(raw, "little", signed=True)


@pytest.mark.parametrize("seed", range(6))
def test_the_process_bound_answers_what_k_best_times_answers(seed: int) -> None:
    k = 1 + seed % 4
    expected, shared = KBestTimes(k), ProcessBound(k)
    for batch in range(5):
        entries = _random_entries(seed * 10 + batch, 6)
        expected.offer(entries)
        shared.offer(entries)
        assert shared.get() == expected.get()
    # the k-th smallest time over the distinct plans offered, computed directly
    offered: dict[PlanKey, float] = {}
    for batch in range(5):
        for step, key in _random_entries(seed * 10 + batch, 6):
            offered[key] = min(offered.get(key, math.inf), step)
    times = sorted(offered.values())
    assert shared.get() == (times[k - 1] if len(times) >= k else math.inf)


def test_the_process_bound_is_shared_by_spawned_processes() -> None:
    bound = ProcessBound(3)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx, initializer=_install, initargs=(bound,)) as pool:
        first = pool.submit(_offer_and_read, [(5.0, PlanKey(data=1)), (4.0, PlanKey(data=2))])
        assert first.result() == math.inf
        second = pool.submit(_offer_and_read, [(4.0, PlanKey(data=2)), (6.0, PlanKey(data=3))])
        assert second.result() == 6.0  # plan data=2 counted once: 4, 5, 6
    assert bound.get() == 6.0


def test_the_board_keeps_searches_apart_and_forgets_closed_ones() -> None:
    board = BoundBoard()
    assert board.exchange("a", 1, [(2.0, PlanKey(data=1))]) == 2.0
    assert board.exchange("b", 2, [(1.0, PlanKey(data=1))]) == math.inf
    assert board.exchange("a", 1, []) == 2.0 and board.open_count() == 2
    board.close("a")
    assert board.exchange("a", 1, [(1.0, PlanKey(data=5))]) == math.inf  # a late shard
    assert board.open_count() == 1


@pytest.mark.usefixtures("local_ray")
def test_ray_shards_share_their_bound_and_evaluate_less() -> None:
    import solver
    from app.core.config import Settings
    from app.schemas import SearchCreate
    from app.services import executors, planning

    body = {  # bench/sharded_search.py's first problem: each shard alone evaluates ~120
        "model": {"preset": "llama3-70b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8}]},
        "workload": {"kind": "training", "global_batch_size": 1024, "sequence_length": 4096},
        "top_k": 100,
    }
    problem = planning.prepare_search(SearchCreate.model_validate(body), Settings()).problem
    import ray

    from app.services.shared_bounds import board

    # the board's worker process starts now, as the `ray` executor starts it with itself
    assert ray.get(board().exchange.remote("warm-up", 1, [])) == math.inf
    runs = {}
    for share in (True, False):  # shards in parallel: exact either way
        training, cost_model, constraints = planning.training_inputs(problem)
        runs[share] = executors._sharded(
            training,
            cost_model,
            constraints,
            top_k=100,
            progress=lambda *_: None,
            should_stop=lambda: False,
            stored=problem,
            shards=2,
            shard_min_candidates=1,
            share_bound=share,
        )
    training, cost_model, constraints = planning.training_inputs(problem)
    one = solver.search(training, cost_model, constraints, top_k=100)
    plans = [p.estimate.plan for p in one.plans]
    assert [p.estimate.plan for p in runs[True].plans] == plans
    assert [p.estimate.plan for p in runs[False].plans] == plans
    # how much parallel shards prune depends on their timing; one after another it does not:
    # a shard started after the other one starts from its plans and evaluates fewer, at
    # least the shard that holds fewer of the top-100 (which one that is depends on the
    # space, so both orders run, each under its own search id on the board)
    task = ray.remote(num_cpus=1)(executors.run_shard_task)
    kth = one.plans[-1].estimate.metrics.step_time_s
    fewer = []
    for a, b in ((1, 0), (0, 1)):
        tag = f"after-{a}{b}"
        first = ray.get(task.remote(problem, a, 2, [], board(), tag))
        second = ray.get(task.remote(problem, b, 2, [], board(), tag))
        alone = ray.get(task.remote(problem, b, 2, [], None, ""))
        assert second.stats.evaluated <= alone.stats.evaluated
        fewer.append(second.stats.evaluated < alone.stats.evaluated)
        # the shared bound only drops what cannot enter the top-k
        assert [e[1] for e in second.entries if e[0] <= kth] == [
            e[1] for e in alone.entries if e[0] <= kth
        ]
        merged = merge([first, second] if a > b else [second, first], training, top_k=100)
        assert [p.estimate.plan for p in merged.plans] == plans
    assert any(fewer), "neither shard pruned with the other's plans"
