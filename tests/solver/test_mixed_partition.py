"""The mixed-hardware layer split against brute force over every split."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import pytest

from cost_models.analytical.schedule import one_f_one_b
from cost_models.base import LayerProfile
from solver.formulations.mixed_partition import (
    WorkBounds,
    solve_mixed_partition,
    time_lower_bounds,
    work_lower_bounds,
)
from solver.formulations.stage_partition import rank_memory_bytes, rank_times_s


def _profile(
    rng: random.Random, layers: int, p: int, speed: float, usable: float, uniform: bool = False
) -> LayerProfile:
    def values(lo: float, hi: float) -> tuple[float, ...]:
        if uniform:  # identical layers (dense models): the closed-form path
            return (rng.uniform(lo, hi),) * layers
        return tuple(rng.uniform(lo, hi) for _ in range(layers))

    return LayerProfile(
        layer_time_s=tuple(speed * x for x in values(0.5, 2.0)),
        layer_forward_time_s=tuple(0.0 for _ in range(layers)),
        layer_state_bytes=values(1.0, 3.0),
        layer_activation_bytes=values(0.1, 1.0),
        first_extra_time_s=rng.uniform(0.0, 2.0) * speed,
        last_extra_time_s=rng.uniform(0.0, 3.0) * speed,
        first_extra_state_bytes=1.0,
        last_extra_state_bytes=2.0,
        first_extra_activation_bytes=0.5,
        last_extra_activation_bytes=0.5,
        p2p_time_s=0.05,
        fixed_bytes=1.0,
        inflight_microbatches=tuple((p - j,) for j in range(p)),
        num_microbatches=8,
        usable_bytes=usable,
    )


def _brute(profiles: list[LayerProfile], extra: list[float]) -> float | None:
    """The least bottleneck over every split that fits (None: none fits)."""
    return _brute_both(profiles, extra)[0]


def _brute_both(
    profiles: list[LayerProfile], extra: list[float]
) -> tuple[float | None, float | None]:
    """The least bottleneck and the least 1F1B schedule (8 micro-batches) over every split
    that fits, each minimised on its own."""
    layers, p = len(profiles[0].layer_time_s), len(profiles)
    best = None
    best_schedule = None
    for cuts in itertools.combinations(range(1, layers), p - 1):
        bounds = (0, *cuts, layers)
        split = [bounds[i + 1] - bounds[i] for i in range(p)]
        worst = 0.0
        fits = True
        times: list[float] = []
        for j, prof in enumerate(profiles):
            # stage j's own profile prices its rank j
            time = rank_times_s(prof, p, split)[j] + extra[j]
            mem = rank_memory_bytes(prof, p, split)[j]
            if mem > prof.usable_bytes:
                fits = False
                break
            worst = max(worst, time)
            times.append(time)
        if not fits:
            continue
        if best is None or worst < best:
            best = worst
        schedule = one_f_one_b(times, 8).step_s
        if best_schedule is None or schedule < best_schedule:
            best_schedule = schedule
    return best, best_schedule


def _random_case(seed: int, uniform: bool) -> tuple[list[LayerProfile], list[float]]:
    """Up to 4 stages of up to 11 layers on hardware of different speeds and memory, some
    with a hand-off to another pool; `uniform`: identical layers (the closed-form path)."""
    rng = random.Random(seed)
    layers = rng.randint(3, 11)
    p = rng.randint(1, min(4, layers))
    speeds = [rng.choice([1.0, 1.0, 2.5, 0.6]) for _ in range(p)]
    usable = [rng.uniform(8.0, 30.0) for _ in range(p)]
    profiles = [
        _profile(random.Random(seed * 100 + j), layers, p, speeds[j], usable[j], uniform)
        for j in range(p)
    ]
    return profiles, [rng.choice([0.0, 0.0, 0.3]) for _ in range(p)]


@pytest.mark.parametrize("uniform", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_mixed_split_equals_brute_force(seed: int, uniform: bool) -> None:
    profiles, extra = _random_case(seed, uniform)
    layers, p = len(profiles[0].layer_time_s), len(profiles)
    want = _brute(profiles, extra)
    got = solve_mixed_partition(profiles, extra)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert sum(got.stage_layers) == layers and min(got.stage_layers) >= 1
    assert got.bottleneck_s == pytest.approx(want, rel=1e-9)
    # the split it returns is the one it prices, and it fits
    bounds = [0]
    for n in got.stage_layers:
        bounds.append(bounds[-1] + n)
    for j, prof in enumerate(profiles):
        assert rank_times_s(prof, p, got.stage_layers)[j] + extra[j] == pytest.approx(
            got.stage_time_s[j], rel=1e-12
        )
        assert rank_memory_bytes(prof, p, got.stage_layers)[j] <= prof.usable_bytes


def test_a_faster_stage_takes_more_layers() -> None:
    rng = random.Random(1)
    slow = _profile(rng, 12, 2, 3.0, 1e9)
    fast = _profile(random.Random(1), 12, 2, 1.0, 1e9)  # same layers, 3x faster
    got = solve_mixed_partition([fast, slow])
    assert got is not None
    assert got.stage_layers[0] > got.stage_layers[1]


@pytest.mark.parametrize("uniform", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_work_bounds_never_exceed_the_best_split(seed: int, uniform: bool) -> None:
    """Both bounds the search prunes with hold against brute force: on the least bottleneck
    and on the least 1F1B schedule of any split that fits; the memory bound is inf exactly
    when no split fits... or weaker (it may miss infeasibility, never invent it)."""
    profiles, extra = _random_case(seed, uniform)
    bottleneck, schedule = _brute_both(profiles, extra)
    full, timed = work_lower_bounds(profiles, extra), time_lower_bounds(profiles, extra)
    if bottleneck is None:
        return  # nothing fits: any bound is valid
    assert schedule is not None
    assert not math.isinf(full.bottleneck_s)  # a split fits: memory never rules it out
    for bound in (full, timed):
        assert bound.bottleneck_s <= bottleneck * (1 + 1e-12)
        assert bound.one_f_one_b_s(8) <= schedule * (1 + 1e-12)
    assert timed.bottleneck_s <= full.bottleneck_s * (1 + 1e-12)  # memory only tightens


def test_work_bounds_by_hand() -> None:
    """Two stages of identical layers, 1 s and 2 s each, no constants, 6 layers: 4 and 2
    layers give 4 s on both, and the relaxed bound (6 + 0)/(1/1 + 1/2) = 4 s is exact; the
    sum of the stages is at least 6 × 1 s, so 1F1B over 3 micro-batches is at least
    2 × 4 + 6 s. When the fast stage's memory holds only 3 layers, the slow one must take
    the other 3: 6 s. When no split can fit the bound is inf and so is its schedule, even
    at one micro-batch (where (m − 1) · inf would be nan)."""
    rng = random.Random(0)
    fast = _profile(rng, 6, 2, 1.0, math.inf, uniform=True)
    fast = dataclasses.replace(
        fast,
        layer_time_s=(1.0,) * 6,
        first_extra_time_s=0.0,
        last_extra_time_s=0.0,
        p2p_time_s=0.0,
    )
    slow = dataclasses.replace(fast, layer_time_s=(2.0,) * 6)
    bounds = work_lower_bounds([fast, slow], [0.0, 0.0])
    assert bounds.bottleneck_s == pytest.approx(4.0)
    assert bounds.total_s == pytest.approx(6.0)
    assert bounds.one_f_one_b_s(3) == pytest.approx(2 * 4.0 + 6.0)
    got = solve_mixed_partition([fast, slow])
    assert got is not None and got.stage_layers == [4, 2] and got.bottleneck_s == 4.0
    # room for 3.5 layers on the fast stage beside its fixed 1 and first extras 1 + 2 × 0.5
    per_layer = fast.layer_state_bytes[0] + 2 * fast.layer_activation_bytes[0]
    room = 1.0 + 1.0 + 2 * 0.5 + 3 * per_layer + per_layer / 2
    capped = dataclasses.replace(fast, usable_bytes=room)
    assert work_lower_bounds([capped, slow], [0.0, 0.0]).bottleneck_s == pytest.approx(6.0)
    none = dataclasses.replace(fast, usable_bytes=0.5)
    nothing = work_lower_bounds([none, slow], [0.0, 0.0])
    assert math.isinf(nothing.bottleneck_s) and math.isinf(nothing.one_f_one_b_s(1))
    assert WorkBounds(math.inf, math.inf).one_f_one_b_s(1) == math.inf
