"""The partition program (ILP and the exact counting path) against brute force over every
composition of L layers into p·v chunks."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from cost_models.base import LayerProfile
from solver.base import SolveStatus
from solver.formulations.stage_partition import (
    PartitionSolver,
    balanced_lower_bound,
    memory_lower_bound_bytes,
    rank_memory_bytes,
    rank_times_s,
)
from specs.errors import SpecError


def _compositions(total: int, parts: int):
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield [bounds[i + 1] - bounds[i] for i in range(parts)]


def _brute(prof: LayerProfile, p: int, v: int, ignore_memory: bool = False):
    """Independent evaluation of constraints (c) and (d) for every composition."""
    best = math.inf
    for comp in _compositions(len(prof.layer_time_s), p * v):
        times = [2 * prof.p2p_time_s if p > 1 else 0.0] * p
        mem = [prof.fixed_bytes] * p
        layer = 0
        for c, n in enumerate(comp):
            j, k = c % p, c // p
            for lyr in range(layer, layer + n):
                times[j] += prof.layer_time_s[lyr]
                mem[j] += prof.layer_state_bytes[lyr]
                mem[j] += prof.inflight_microbatches[j][k] * prof.layer_activation_bytes[lyr]
            layer += n
        times[0] += prof.first_extra_time_s
        mem[0] += prof.first_extra_state_bytes
        mem[0] += prof.inflight_microbatches[0][0] * prof.first_extra_activation_bytes
        last = (p * v - 1) % p
        times[last] += prof.last_extra_time_s
        mem[last] += prof.last_extra_state_bytes + prof.last_extra_activation_bytes
        if ignore_memory or max(mem) <= prof.usable_bytes:
            best = min(best, max(times))
    return best


def _profile(rng: random.Random, num_layers: int, p: int, v: int, uniform: bool) -> LayerProfile:
    if uniform:
        times = (rng.uniform(1, 3),) * num_layers
        states = (rng.uniform(1, 3),) * num_layers
        acts = (rng.uniform(0.1, 1),) * num_layers
    else:
        times = tuple(rng.uniform(0.5, 3) for _ in range(num_layers))
        states = tuple(rng.uniform(0.5, 3) for _ in range(num_layers))
        acts = tuple(rng.uniform(0.1, 1) for _ in range(num_layers))
    inflight = tuple(tuple(rng.randint(1, p + 1) for _ in range(v)) for _ in range(p))
    prof = LayerProfile(
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
        usable_bytes=1e9,
    )
    # memory limit between the loosest and a tight value so some cases are infeasible
    total = sum(states) + max(max(r) for r in inflight) * sum(acts) + 10
    limit = rng.uniform(0.25, 0.9) * total if rng.random() < 0.8 else 1e9
    return LayerProfile(**{**prof.__dict__, "usable_bytes": limit})


CASES = [
    (seed, num_layers, p, v, uniform)
    for seed, (num_layers, p, v, uniform) in enumerate(
        [
            (lyr, p, v, u)
            for lyr in (4, 7, 10)
            for p in (1, 2, 3, 4)
            for v in (1, 2)
            for u in (True, False)
            if p * v <= lyr
        ]
    )
]


@pytest.mark.parametrize(("seed", "num_layers", "p", "v", "uniform"), CASES)
def test_partition_matches_brute_force(
    seed: int, num_layers: int, p: int, v: int, uniform: bool
) -> None:
    rng = random.Random(1000 + seed)
    prof = _profile(rng, num_layers, p, v, uniform)
    expected = _brute(prof, p, v)
    for method in ("auto", "ilp"):
        res = PartitionSolver().solve(prof, p, v, method=method)
        if math.isinf(expected):
            assert res.status == SolveStatus.INFEASIBLE, (method, res)
            continue
        assert res.status == SolveStatus.OPTIMAL, (method, res)
        assert res.stage_layers is not None and sum(res.stage_layers) == num_layers
        assert len(res.stage_layers) == p * v and min(res.stage_layers) >= 1
        assert res.max_rank_time_s == pytest.approx(expected, rel=1e-6), method
        # the returned split really satisfies (c) and (d)
        assert max(rank_times_s(prof, p, res.stage_layers)) == pytest.approx(expected, rel=1e-6)
        assert max(rank_memory_bytes(prof, p, res.stage_layers)) <= prof.usable_bytes * (1 + 1e-6)
        # the bounds never exceed the optimum
        assert balanced_lower_bound(prof, p, v) <= expected * (1 + 1e-9)
        assert memory_lower_bound_bytes(prof, p, v) <= max(
            rank_memory_bytes(prof, p, res.stage_layers)
        ) * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_ignore_memory_is_time_optimal(seed: int) -> None:
    rng = random.Random(seed)
    prof = _profile(rng, 8, 2, 2, uniform=seed % 2 == 0)
    res = PartitionSolver().solve(prof, 2, 2, ignore_memory=True)
    assert res.status == SolveStatus.OPTIMAL
    assert res.max_rank_time_s == pytest.approx(_brute(prof, 2, 2, ignore_memory=True), rel=1e-6)


def test_memory_infeasible_when_states_exceed_limit() -> None:
    # 4 identical layers of 10 bytes state on 2 ranks, fixed 1: every split has a rank with
    # at least 2 layers = 21 bytes > 15, so no split fits.
    prof = LayerProfile(
        layer_time_s=(1.0,) * 4,
        layer_forward_time_s=(1.0,) * 4,
        layer_state_bytes=(10.0,) * 4,
        layer_activation_bytes=(0.0,) * 4,
        first_extra_time_s=0,
        last_extra_time_s=0,
        first_extra_state_bytes=0,
        last_extra_state_bytes=0,
        first_extra_activation_bytes=0,
        last_extra_activation_bytes=0,
        p2p_time_s=0,
        fixed_bytes=1.0,
        inflight_microbatches=((2,), (1,)),
        num_microbatches=4,
        usable_bytes=15.0,
    )
    for method in ("auto", "ilp"):
        assert PartitionSolver().solve(prof, 2, 1, method=method).status == SolveStatus.INFEASIBLE
    # memory lower bound: (40 + 0)/2 + 1 = 21 bytes > 15
    assert memory_lower_bound_bytes(prof, 2, 1) == pytest.approx(21.0)


def test_dense_split_moves_layers_off_the_embedding_rank() -> None:
    # 8 identical layers (1 s), embedding 0 s, LM head 2 s on the last rank, p = 2:
    # rank 0 gets 5 layers (5 s), rank 1 gets 3 layers + head (5 s); optimum T = 5 s.
    prof = LayerProfile(
        layer_time_s=(1.0,) * 8,
        layer_forward_time_s=(0.3,) * 8,
        layer_state_bytes=(1.0,) * 8,
        layer_activation_bytes=(0.0,) * 8,
        first_extra_time_s=0.0,
        last_extra_time_s=2.0,
        first_extra_state_bytes=0,
        last_extra_state_bytes=0,
        first_extra_activation_bytes=0,
        last_extra_activation_bytes=0,
        p2p_time_s=0.0,
        fixed_bytes=0.0,
        inflight_microbatches=((2,), (1,)),
        num_microbatches=4,
        usable_bytes=100.0,
    )
    for method in ("auto", "ilp"):
        res = PartitionSolver().solve(prof, 2, 1, method=method)
        assert res.stage_layers == [5, 3]
        assert res.max_rank_time_s == pytest.approx(5.0)


def test_cache_counts_hits_and_calls() -> None:
    rng = random.Random(7)
    prof = _profile(rng, 6, 2, 1, uniform=False)
    solver = PartitionSolver()
    first = solver.solve(prof, 2, 1)
    # a copy perturbed far below the rounding (1e-12 relative) hits the cache
    nudged = LayerProfile(
        **{**prof.__dict__, "layer_time_s": tuple(t * (1 + 1e-12) for t in prof.layer_time_s)}
    )
    second = solver.solve(nudged, 2, 1)
    # non-identical layers with v = 1 go to the dynamic program, not the ILP
    assert (solver.calls, solver.cache_hits, solver.ilp_calls) == (1, 1, 0)
    assert first.method == second.method == "dp_exact"
    assert second.stage_layers == first.stage_layers
    # the method is part of the key: the ILP is a separate entry and counted
    assert solver.solve(prof, 2, 1, method="ilp").max_rank_time_s == pytest.approx(
        first.max_rank_time_s, rel=1e-9
    )
    assert (solver.calls, solver.cache_hits, solver.ilp_calls) == (2, 1, 1)
    solver.solve(
        LayerProfile(**{**prof.__dict__, "inflight_microbatches": ((3,), (2,), (1,))}), 3, 1
    )
    assert (solver.calls, solver.cache_hits) == (3, 1)
    with pytest.raises(SpecError, match="inflight_microbatches"):
        solver.solve(prof, 3, 1)


@pytest.mark.parametrize("uniform", [True, False])
def test_fast_cache_key_equals_the_rounded_profile_key(uniform: bool) -> None:
    # The solver keys its cache without building the rounded profile; key and rebuilt
    # profile must equal the reference construction (round every number, then key it),
    # including for tuples seen before (remembered by identity) and a different shape.
    from solver.formulations.stage_partition import (
        _cache_key,
        _profile_of_key,
        _rounded_key,
        _rounded_profile,
    )

    rng = random.Random(11 if uniform else 12)
    for p, v in ((2, 1), (3, 2), (2, 1)):
        prof = _profile(rng, 8, p, v, uniform)
        for ignore_memory in (False, True):
            for _ in range(2):  # second time from the memo
                key, seqs = _rounded_key(prof, p, v, ignore_memory)
                ref = _rounded_profile(prof, ignore_memory)
                assert key == _cache_key(ref, p, v)
                assert _profile_of_key(key, seqs, prof.inflight_microbatches) == ref


@pytest.mark.parametrize("seed", range(8))
def test_counting_algorithm_equals_ilp_on_many_ranks(seed: int) -> None:
    # Identical layers on 5-8 ranks (the counting path groups ranks with equal extras):
    # same optimum as the integer program, with and without a binding memory limit.
    rng = random.Random(500 + seed)
    p, v = rng.choice([(5, 1), (6, 2), (8, 1), (8, 2)])
    prof = _profile(rng, 24, p, v, uniform=True)
    if seed % 2:  # a limit near one rank's share of the memory: the caps bind
        share = (
            sum(prof.layer_state_bytes)
            + max(max(r) for r in prof.inflight_microbatches) * sum(prof.layer_activation_bytes)
        ) / p
        prof = LayerProfile(**{**prof.__dict__, "usable_bytes": rng.uniform(0.9, 1.5) * share})
    auto = PartitionSolver().solve(prof, p, v, method="auto")
    ilp = PartitionSolver().solve(prof, p, v, method="ilp")
    assert auto.status == ilp.status
    if auto.status == SolveStatus.OPTIMAL:
        assert auto.method == "uniform_exact" and auto.stage_layers is not None
        assert auto.max_rank_time_s == pytest.approx(ilp.max_rank_time_s, rel=1e-6)
        assert max(rank_memory_bytes(prof, p, auto.stage_layers)) <= prof.usable_bytes * (1 + 1e-6)
