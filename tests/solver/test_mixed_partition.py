"""The mixed-hardware layer split against brute force over every split."""

from __future__ import annotations

import itertools
import random

import pytest

from cost_models.base import LayerProfile
from solver.formulations.mixed_partition import solve_mixed_partition
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
    layers, p = len(profiles[0].layer_time_s), len(profiles)
    best = None
    for cuts in itertools.combinations(range(1, layers), p - 1):
        bounds = (0, *cuts, layers)
        split = [bounds[i + 1] - bounds[i] for i in range(p)]
        worst = 0.0
        fits = True
        for j, prof in enumerate(profiles):
            # stage j's own profile prices its rank j
            time = rank_times_s(prof, p, split)[j] + extra[j]
            mem = rank_memory_bytes(prof, p, split)[j]
            if mem > prof.usable_bytes:
                fits = False
                break
            worst = max(worst, time)
        if fits and (best is None or worst < best):
            best = worst
    return best


@pytest.mark.parametrize("uniform", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_mixed_split_equals_brute_force(seed: int, uniform: bool) -> None:
    rng = random.Random(seed)
    layers = rng.randint(3, 11)
    p = rng.randint(1, min(4, layers))
    speeds = [rng.choice([1.0, 1.0, 2.5, 0.6]) for _ in range(p)]
    usable = [rng.uniform(8.0, 30.0) for _ in range(p)]
    profiles = [
        _profile(random.Random(seed * 100 + j), layers, p, speeds[j], usable[j]) for j in range(p)
    ]
    extra = [rng.choice([0.0, 0.0, 0.3]) for _ in range(p)]
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
