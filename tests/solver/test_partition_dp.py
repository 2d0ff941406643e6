"""The exact partition algorithms for non-identical layers against brute force and the ILP.

- `dp_exact` (v = 1, any non-negative per-layer numbers): binary search on T with a
  reachability check per (stage, end layer).
- `head_exact` (any v, a short head of distinct layers followed by identical layers, e.g.
  DeepSeek-V3's 3 dense + 58 MoE layers): enumeration of the head's boundaries + counting.

Brute force enumerates every composition of L layers into p·v chunks and evaluates (c) and
(d) with its own loops (`_brute` in test_stage_partition.py).
"""

from __future__ import annotations

import math
import random
import time

import pytest
from test_stage_partition import _brute, _compositions

from cost_models.base import LayerProfile
from solver.base import SolveStatus
from solver.formulations.stage_partition import (
    MAX_HEAD_LAYERS,
    PartitionSolver,
    balanced_lower_bound,
    rank_memory_bytes,
    rank_times_s,
)

TIGHTNESS = (0.8, 1.0, 1.2, 1.5, 100.0)
"""Memory limits in units of a rank's share: infeasible, binding and loose cases."""


def _random_profile(
    rng: random.Random, num_layers: int, p: int, v: int, head: int | None, tight: float
) -> LayerProfile:
    """Random non-negative costs; `head` None: every layer differs; else `head` distinct
    layers then identical ones. Memory limit `tight` × (all states + max ι × all acts) / p,
    about `tight` times a rank's share."""

    def layer() -> tuple[float, float, float]:
        return rng.uniform(0.2, 3), rng.uniform(0.5, 3), rng.uniform(0.0, 1)

    if head is None:
        layers = [layer() for _ in range(num_layers)]
    else:
        body = layer()
        layers = [layer() for _ in range(head)] + [body] * (num_layers - head)
    times, states, acts = (tuple(x[i] for x in layers) for i in range(3))
    inflight = tuple(tuple(rng.randint(1, p + 2) for _ in range(v)) for _ in range(p))
    total = sum(states) + max(max(r) for r in inflight) * sum(acts) + 5
    return LayerProfile(
        layer_time_s=times,
        layer_forward_time_s=times,
        layer_state_bytes=states,
        layer_activation_bytes=acts,
        first_extra_time_s=rng.uniform(0, 2),
        last_extra_time_s=rng.uniform(0, 4),
        first_extra_state_bytes=rng.uniform(0, 2),
        last_extra_state_bytes=rng.uniform(0, 3),
        first_extra_activation_bytes=rng.uniform(0, 1),
        last_extra_activation_bytes=rng.uniform(0, 2),
        p2p_time_s=rng.uniform(0, 0.2),
        fixed_bytes=1.0,
        inflight_microbatches=inflight,
        num_microbatches=8,
        usable_bytes=tight * total / p,
    )


def _near_memory_optimum(prof: LayerProfile, p: int, v: int, factor: float) -> LayerProfile:
    """`prof` with U = factor × the least busiest-rank bytes over every split (brute force):
    factor < 1 is infeasible, slightly above 1 leaves few splits (memory binds)."""
    least = min(
        max(rank_memory_bytes(prof, p, comp))
        for comp in _compositions(len(prof.layer_time_s), p * v)
    )
    return LayerProfile(**{**prof.__dict__, "usable_bytes": factor * least})


NEAR = (0.99, 1.00001, 1.02, 1.1, 1.3, 100.0)
"""Limits in units of the least feasible limit (1.00001: just above it, beyond the
solver's 7-digit rounding)."""


def _check(prof: LayerProfile, p: int, v: int, expected: float, method: str) -> None:
    res = PartitionSolver().solve(prof, p, v)
    assert res.method == method
    if math.isinf(expected):
        assert res.status == SolveStatus.INFEASIBLE, res
        return
    assert res.status == SolveStatus.OPTIMAL and res.gap == 0.0, res
    assert res.stage_layers is not None and len(res.stage_layers) == p * v
    assert sum(res.stage_layers) == len(prof.layer_time_s) and min(res.stage_layers) >= 1
    assert res.max_rank_time_s == pytest.approx(expected, rel=1e-9)
    assert max(rank_times_s(prof, p, res.stage_layers)) == pytest.approx(expected, rel=1e-9)
    assert max(rank_memory_bytes(prof, p, res.stage_layers)) <= prof.usable_bytes * (1 + 1e-9)


DP_CASES = [
    (seed, lyr, p)
    for seed, (lyr, p) in enumerate(
        [(lyr, p) for lyr in (2, 5, 8, 11) for p in (2, 3, 4, 6) if p <= lyr] * 3
    )
]


@pytest.mark.parametrize(("seed", "num_layers", "p"), DP_CASES)
def test_dp_matches_brute_force(seed: int, num_layers: int, p: int) -> None:
    rng = random.Random(2000 + seed)
    prof = _random_profile(rng, num_layers, p, 1, None, 100.0)
    prof = _near_memory_optimum(prof, p, 1, rng.choice(NEAR))
    _check(prof, p, 1, _brute(prof, p, 1), "dp_exact")


def test_dp_cases_include_infeasible_and_binding_memory() -> None:
    # guard on the random cases above: some are infeasible, some have memory binding
    # (optimum above the time-only optimum), so both branches of the check are exercised
    infeasible = binding = 0
    for seed, num_layers, p in DP_CASES:
        rng = random.Random(2000 + seed)
        prof = _random_profile(rng, num_layers, p, 1, None, 100.0)
        prof = _near_memory_optimum(prof, p, 1, rng.choice(NEAR))
        best = _brute(prof, p, 1)
        infeasible += math.isinf(best)
        binding += math.isfinite(best) and best > _brute(prof, p, 1, ignore_memory=True) + 1e-9
    assert infeasible >= 5 and binding >= 5, (infeasible, binding)


def test_dp_beats_the_greedy_fill_when_stage_memory_differs() -> None:
    # 4 layers of time 1, state 0, activations (0, 0, 2, 0); ι = (1, 3, 1); U = 5; no
    # extras. Greedy "fill each stage as far as it fits" gives stage 0 layers {0, 1} (it
    # must leave one layer per later stage), then stage 1 must take layer 2: 3·2 = 6 > 5,
    # so greedy finds nothing. Split [1, 1, 2]: stage 1 holds layer 1 (0 bytes), stage 2
    # layers 2-3 (1·2 = 2 bytes); times (1, 1, 2), T* = 2. Split [1, 2, 1] puts layer 2 on
    # stage 1 (6 bytes), [2, 1, 1] too; so [1, 1, 2] is the only split and T* = 2.
    prof = LayerProfile(
        layer_time_s=(1.0,) * 4,
        layer_forward_time_s=(1.0,) * 4,
        layer_state_bytes=(0.0,) * 4,
        layer_activation_bytes=(0.0, 0.0, 2.0, 0.0),
        first_extra_time_s=0.0,
        last_extra_time_s=0.0,
        first_extra_state_bytes=0.0,
        last_extra_state_bytes=0.0,
        first_extra_activation_bytes=0.0,
        last_extra_activation_bytes=0.0,
        p2p_time_s=0.0,
        fixed_bytes=0.0,
        inflight_microbatches=((1,), (3,), (1,)),
        num_microbatches=4,
        usable_bytes=5.0,
    )
    res = PartitionSolver().solve(prof, 3, 1)
    assert (res.status, res.method, res.stage_layers) == (
        SolveStatus.OPTIMAL,
        "dp_exact",
        [1, 1, 2],
    )
    assert res.max_rank_time_s == pytest.approx(2.0)
    assert PartitionSolver().solve(prof, 3, 1, method="ilp").stage_layers == [1, 1, 2]


HEAD_CASES = [
    (seed, lyr, p, v, head)
    for seed, (lyr, p, v, head) in enumerate(
        [
            (lyr, p, v, h)
            for lyr in (6, 9, 11)
            for p, v in ((1, 2), (2, 2), (3, 2), (2, 3), (2, 4))
            for h in (1, 2, 3, 5)
            if p * v <= lyr and h < lyr
        ]
    )
]


@pytest.mark.parametrize(("seed", "num_layers", "p", "v", "head"), HEAD_CASES)
def test_head_exact_matches_brute_force(
    seed: int, num_layers: int, p: int, v: int, head: int
) -> None:
    rng = random.Random(3000 + seed)
    prof = _random_profile(rng, num_layers, p, v, head, 100.0)
    prof = _near_memory_optimum(prof, p, v, rng.choice(NEAR))
    _check(prof, p, v, _brute(prof, p, v), "head_exact")


def test_head_exact_cases_include_infeasible_and_binding_memory() -> None:
    infeasible = binding = 0
    for seed, num_layers, p, v, head in HEAD_CASES:
        rng = random.Random(3000 + seed)
        prof = _random_profile(rng, num_layers, p, v, head, 100.0)
        prof = _near_memory_optimum(prof, p, v, rng.choice(NEAR))
        best = _brute(prof, p, v)
        infeasible += math.isinf(best)
        binding += math.isfinite(best) and best > _brute(prof, p, v, ignore_memory=True) + 1e-9
    assert infeasible >= 5 and binding >= 5, (infeasible, binding)


def test_head_exact_with_free_body_layers() -> None:
    # Body layers take no time (τ = 0): any memory-feasible split has T = the largest
    # constant. 2 head layers of time 1, 4 body layers of time 0, p = 2, v = 2, no extras,
    # no memory limit: chunks 0 and 2 on rank 0, 1 and 3 on rank 1; the head layers can go
    # to different ranks (chunks [1, 1, 2, 2]) so T* = 1.
    prof = LayerProfile(
        layer_time_s=(1.0, 1.0, 0.0, 0.0, 0.0, 0.0),
        layer_forward_time_s=(0.5,) * 6,
        layer_state_bytes=(1.0,) * 6,
        layer_activation_bytes=(0.0,) * 6,
        first_extra_time_s=0.0,
        last_extra_time_s=0.0,
        first_extra_state_bytes=0.0,
        last_extra_state_bytes=0.0,
        first_extra_activation_bytes=0.0,
        last_extra_activation_bytes=0.0,
        p2p_time_s=0.0,
        fixed_bytes=0.0,
        inflight_microbatches=((1, 1), (1, 1)),
        num_microbatches=4,
        usable_bytes=math.inf,
    )
    res = PartitionSolver().solve(prof, 2, 2)
    assert res.method == "head_exact" and res.max_rank_time_s == pytest.approx(1.0)
    assert _brute(prof, 2, 2) == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(10))
def test_exact_algorithms_equal_the_ilp_on_larger_instances(seed: int) -> None:
    # Sizes beyond brute force: the DP (v = 1, all layers distinct) and the head algorithm
    # (v > 1, 3 distinct + identical layers) against the integer program.
    rng = random.Random(4000 + seed)
    if seed % 2 == 0:
        num_layers, p, v, head = rng.choice([(24, 4, 1, None), (30, 6, 1, None), (20, 8, 1, None)])
    else:
        num_layers, p, v, head = rng.choice([(22, 4, 2, 3), (25, 3, 3, 3), (18, 4, 2, 1)])
    prof = _random_profile(rng, num_layers, p, v, head, rng.choice(TIGHTNESS))
    auto = PartitionSolver().solve(prof, p, v)
    ilp = PartitionSolver().solve(prof, p, v, method="ilp", time_limit_s=60)
    assert auto.method == ("dp_exact" if v == 1 else "head_exact")
    assert auto.status == ilp.status
    if auto.status == SolveStatus.OPTIMAL:
        assert auto.max_rank_time_s == pytest.approx(ilp.max_rank_time_s, rel=1e-6)
        assert balanced_lower_bound(prof, p, v) <= auto.max_rank_time_s * (1 + 1e-9)


def test_long_head_goes_to_the_ilp() -> None:
    rng = random.Random(5)
    prof = _random_profile(rng, MAX_HEAD_LAYERS + 4, 2, 2, MAX_HEAD_LAYERS + 1, 9)
    res = PartitionSolver().solve(prof, 2, 2)
    assert res.method == "ilp" and res.status == SolveStatus.OPTIMAL
    assert res.max_rank_time_s == pytest.approx(_brute(prof, 2, 2), rel=1e-6)


def _deepseek_like(p: int, v: int, usable_bytes: float) -> LayerProfile:
    # DeepSeek-V3 shape: 3 dense + 58 MoE layers (numbers of the order the analytical
    # model gives on H800: ms per layer, GB of states/activations per GPU)
    times = (0.030,) * 3 + (0.0476,) * 58
    states = (3.56e9,) * 3 + (10.9e9,) * 58
    acts = (1.45e9,) * 3 + (1.94e9,) * 58
    inflight = tuple(tuple(max(1, p - j - k) for k in range(v)) for j in range(p))
    return LayerProfile(
        layer_time_s=times,
        layer_forward_time_s=times,
        layer_state_bytes=states,
        layer_activation_bytes=acts,
        first_extra_time_s=0.004,
        last_extra_time_s=0.02,
        first_extra_state_bytes=2.8e9,
        last_extra_state_bytes=2.8e9,
        first_extra_activation_bytes=1e8,
        last_extra_activation_bytes=4e9,
        p2p_time_s=0.001,
        fixed_bytes=1.6e9,
        inflight_microbatches=inflight,
        num_microbatches=64,
        usable_bytes=usable_bytes,
    )


@pytest.mark.parametrize(("p", "v"), [(16, 1), (32, 1), (16, 3), (8, 7)])
def test_deepseek_shape_is_fast_and_consistent(p: int, v: int) -> None:
    # A loose and a tight limit: the exact paths answer each in well under a second
    # (the ILP took 1-5 s per call on these shapes), with a split within the limit whose
    # time is at least the balanced lower bound.
    for usable in (1e15, 80e9):
        prof = _deepseek_like(p, v, usable)
        t0 = time.perf_counter()
        res = PartitionSolver().solve(prof, p, v)
        assert time.perf_counter() - t0 < 1.0
        assert res.method == ("dp_exact" if v == 1 else "head_exact")
        if res.status == SolveStatus.OPTIMAL:
            assert res.stage_layers is not None
            assert max(rank_memory_bytes(prof, p, res.stage_layers)) <= usable * (1 + 1e-9)
            assert res.max_rank_time_s >= balanced_lower_bound(prof, p, v) * (1 - 1e-9)
        else:
            assert usable < 1e15 and res.status == SolveStatus.INFEASIBLE


@pytest.mark.parametrize(("p", "v", "usable"), [(16, 1, 120e9), (8, 2, 140e9)])
def test_deepseek_shape_with_binding_memory_equals_the_ilp(p: int, v: int, usable: float) -> None:
    # Limits at which memory binds (the optimum lies above the time-only optimum, checked
    # below): the exact path and the integer program agree on the optimum.
    prof = _deepseek_like(p, v, usable)
    auto = PartitionSolver().solve(prof, p, v)
    free = PartitionSolver().solve(prof, p, v, ignore_memory=True)
    ilp = PartitionSolver().solve(prof, p, v, method="ilp", time_limit_s=60)
    assert auto.status == ilp.status == SolveStatus.OPTIMAL
    assert auto.max_rank_time_s is not None and free.max_rank_time_s is not None
    assert auto.max_rank_time_s > free.max_rank_time_s * (1 + 1e-6)
    assert auto.max_rank_time_s == pytest.approx(ilp.max_rank_time_s, rel=1e-9)
