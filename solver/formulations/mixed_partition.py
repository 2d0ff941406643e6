r"""Pipeline layer split when stages run on different hardware (one chunk per stage).

Data: layers l = 0..L-1; p stages; stage j has its own profile (the `LayerProfile` of its
device pool: per-layer time τ^j_l, state bytes σ^j_l and activation bytes α^j_l per
in-flight micro-batch, extras, fixed bytes φ^j, usable memory U^j, in-flight micro-batches
ι^j) and a constant c_j: its embedding (stage 0) or LM head (stage p-1) time, its 2π^j
send / receives, and any extra time of a hand-off to another pool (`extra_s[j]`).

Program (the homogeneous one of `stage_partition` with per-stage data):

    min  T
    s.t. stage j holds the contiguous layers [b_j, b_{j+1}), 0 = b_0 < b_1 < … < b_p = L
         W_j = Σ_{l∈[b_j,b_{j+1})} τ^j_l + c_j ≤ T
         M_j = Σ_{l∈[b_j,b_{j+1})} (σ^j_l + ι^j·α^j_l) + extras_j + φ^j ≤ U^j

Identical layers (dense models, `_solve_uniform`): the number of layers a stage can hold
under T is a closed form, so each test of T costs O(p).

Algorithm (exact, any layers): for a given T the set of layer boundaries reachable after stage j is a
union of intervals: from a reachable start a, stage j can end anywhere in (a, e_j(a)], where
e_j(a) is the largest end whose time and memory fit (both grow with the end, every number
being ≥ 0; found by bisection on prefix sums). T is feasible iff L is reachable after stage
p-1. Feasibility is monotone in T, so bisection on T brackets the optimum; the split found at
the upper end has a bottleneck within the bracket, whose relative width is driven below
1e-12 (the answer is the optimum to that precision). O(p·L·log L) per feasibility check.
Tests compare it with brute force over every split.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from cost_models.base import LayerProfile

REL_TOL = 1e-12
MAX_ITERATIONS = 200


@dataclass(frozen=True)
class MixedSplit:
    stage_layers: list[int]
    stage_time_s: list[float]
    """W_j of every stage under the split (per micro-batch)."""

    @property
    def bottleneck_s(self) -> float:
        return max(self.stage_time_s)


@dataclass(frozen=True)
class SplitStage:
    """One stage's data for the split (`split_stage` builds it): prefix sums over the
    layers of its per-layer time and bytes, its constant time and bytes, its usable bytes."""

    time: list[float]  # prefix sums of τ
    mem: list[float]  # prefix sums of σ + ι·α
    const_time: float
    const_mem: float
    usable: float


def split_stage(
    layer_time_s: Sequence[float],
    layer_bytes: Sequence[float],
    const_time_s: float,
    const_bytes: float,
    usable_bytes: float,
) -> SplitStage:
    """One stage's data for `solve_split`: per layer l its time τ_l and bytes μ_l on this
    stage's hardware, the stage's constant time c_j and bytes m_j, its usable bytes U_j."""
    return SplitStage(
        time=list(accumulate(layer_time_s, initial=0.0)),
        mem=list(accumulate(layer_bytes, initial=0.0)),
        const_time=const_time_s,
        const_mem=const_bytes,
        usable=usable_bytes,
    )


def _stages(profiles: Sequence[LayerProfile], extra_s: Sequence[float]) -> list[SplitStage]:
    p = len(profiles)
    out = []
    for j, prof in enumerate(profiles):
        inflight = prof.inflight_microbatches[j][0]
        c = 2 * prof.p2p_time_s if p > 1 else 0.0
        m = prof.fixed_bytes
        if j == 0:
            c += prof.first_extra_time_s
            m += prof.first_extra_state_bytes + inflight * prof.first_extra_activation_bytes
        if j == p - 1:
            c += prof.last_extra_time_s
            m += prof.last_extra_state_bytes + prof.last_extra_activation_bytes
        per_layer_mem = [
            s + inflight * a
            for s, a in zip(prof.layer_state_bytes, prof.layer_activation_bytes, strict=True)
        ]
        out.append(
            split_stage(prof.layer_time_s, per_layer_mem, c + extra_s[j], m, prof.usable_bytes)
        )
    return out


def _max_end(stage: SplitStage, a: int, limit_t: float, hi: int) -> int:
    """Largest b in [a, hi] with the stage's time and memory over [a, b) within limits
    (a when not even one layer fits)."""
    t_cap = stage.time[a] + limit_t - stage.const_time
    m_cap = stage.mem[a] + stage.usable - stage.const_mem
    b_t = bisect_right(stage.time, t_cap * (1 + 1e-15), a, hi + 1) - 1
    b_m = bisect_right(stage.mem, m_cap, a, hi + 1) - 1
    return max(a, min(b_t, b_m, hi))


def _reach(
    stages: list[SplitStage], num_layers: int, limit_t: float
) -> list[list[tuple[int, int]]] | None:
    """Per stage, the intervals [lo, hi] of boundaries reachable before it; None when L is
    not reachable after the last stage."""
    p = len(stages)
    reach: list[tuple[int, int]] = [(0, 0)]
    history = []
    for j, stage in enumerate(stages):
        history.append(reach)
        hi_cap = num_layers - (p - 1 - j)  # leave a layer for every later stage
        ends: list[tuple[int, int]] = []
        for lo, hi in reach:
            for a in range(lo, hi + 1):
                e = _max_end(stage, a, limit_t, hi_cap)
                if e > a:
                    ends.append((a + 1, e))
        if not ends:
            return None
        ends.sort()
        merged = [ends[0]]
        for lo, hi in ends[1:]:
            if lo <= merged[-1][1] + 1:
                if hi > merged[-1][1]:
                    merged[-1] = (merged[-1][0], hi)
            else:
                merged.append((lo, hi))
        reach = merged
    if not any(lo <= num_layers <= hi for lo, hi in reach):
        return None
    return history


def _stage_time(stage: SplitStage, a: int, b: int) -> float:
    return stage.time[b] - stage.time[a] + stage.const_time


def _backtrack(
    stages: list[SplitStage], history: list[list[tuple[int, int]]], num_layers: int, limit_t: float
) -> list[int]:
    bounds = [num_layers]
    b = num_layers
    p = len(stages)
    for j in range(p - 1, -1, -1):
        stage = stages[j]
        hi_cap = num_layers - (p - 1 - j)
        for lo, hi in reversed(history[j]):
            found = None
            for a in range(min(hi, b - 1), lo - 1, -1):
                # the forward pass's own test, so both agree to the last bit
                if _max_end(stage, a, limit_t, hi_cap) >= b:
                    found = a
                    break
            if found is not None:
                b = found
                bounds.append(b)
                break
        else:  # pragma: no cover - the forward pass proved a path exists
            raise AssertionError("no predecessor on a reachable path")
    bounds.reverse()
    return [bounds[i + 1] - bounds[i] for i in range(len(stages))]


def _uniform(profiles: Sequence[LayerProfile]) -> bool:
    """Every stage's layers are identical (dense models)."""
    return all(
        len(set(prof.layer_time_s)) == 1
        and len(set(prof.layer_state_bytes)) == 1
        and len(set(prof.layer_activation_bytes)) == 1
        for prof in profiles
    )


def _least_bottleneck(
    stages: Sequence[SplitStage], taus: list[float], mem_caps: list[int], num_layers: int
) -> float | None:
    """The least T at which identical layers fit (Σ_j min(cap_j(T), mem_cap_j) ≥ L, each
    stage at least one layer): every stage starts with one layer, then the L − p layers
    left go one at a time to the stage whose time after taking it is least (a heap). The
    time of each stage grows with its layers, so this is the classic greedy for the
    smallest maximum of increasing costs: after it the bottleneck is the least possible.
    O(L log p), where bisection on T costs O(p) per probe. None when the memory caps hold
    fewer than L layers."""
    p = len(stages)
    if p > num_layers or min(mem_caps) < 1:
        return None
    held = [1] * p
    queue = [
        (st.const_time + 2 * tau, j)
        for j, (st, tau) in enumerate(zip(stages, taus, strict=True))
        if mem_caps[j] >= 2
    ]
    heapq.heapify(queue)
    for _ in range(num_layers - p):
        if not queue:
            return None
        _, j = heapq.heappop(queue)
        held[j] += 1
        if held[j] < mem_caps[j]:
            heapq.heappush(queue, (stages[j].const_time + (held[j] + 1) * taus[j], j))
    return max(st.const_time + n * tau for st, n, tau in zip(stages, held, taus, strict=True))


def _solve_uniform(stages: Sequence[SplitStage], num_layers: int) -> list[int] | None:
    """Identical layers: stage j holds at most cap_j(T) = min(⌊(T − c_j)/τ_j⌋,
    ⌊(U_j − m_j)/μ_j⌋) layers, so T is feasible iff Σ_j min(cap_j(T), L) ≥ L with every
    cap_j ≥ 1; the least such T comes from `_least_bottleneck`, then the layers above L at
    that T are taken back from the stages whose time is largest (which keeps the
    bottleneck at its least)."""
    taus = [st.time[1] for st in stages]  # prefix sums start at 0: the first layer's
    mus = [st.mem[1] for st in stages]
    mem_caps = []
    for st, mu in zip(stages, mus, strict=True):
        room = st.usable - st.const_mem
        if room < mu:
            return None
        fits = num_layers if mu <= 0 or math.isinf(room) else int(room // mu)
        mem_caps.append(min(num_layers, fits))

    def caps(limit: float) -> list[int] | None:
        out = []
        for st, tau, mem_cap in zip(stages, taus, mem_caps, strict=True):
            slack = limit - st.const_time
            n = num_layers if tau <= 0 else int(slack // tau) if slack >= 0 else 0
            n = min(n, mem_cap)
            if n < 1:
                return None
            out.append(n)
        return out if sum(out) >= num_layers else None

    best = _least_bottleneck(stages, taus, mem_caps, num_layers)
    if best is None:
        return None
    counts = caps(best * (1 + REL_TOL))
    assert counts is not None
    excess = sum(counts) - num_layers
    while excess > 0:
        j = max(
            (i for i in range(len(counts)) if counts[i] > 1),
            key=lambda i: stages[i].const_time + taus[i] * counts[i],
        )
        counts[j] -= 1
        excess -= 1
    return counts


@dataclass(frozen=True)
class WorkBounds:
    """Lower bounds on the stage times of any split that fits (inf when none fits)."""

    bottleneck_s: float
    """On the slowest stage's time per micro-batch."""
    total_s: float
    """On the sum of the stages' times per micro-batch: Σ c_j + L·min_j τ_j."""

    def one_f_one_b_s(self, microbatches: int) -> float:
        """On the 1F1B schedule of the stages, (m − 1)·max W + Σ W
        (`cost_models.analytical.schedule.one_f_one_b`): Σ W is at least the total and at
        least max W."""
        if math.isinf(self.bottleneck_s):
            return math.inf  # no split fits (and 0 · inf would be nan at one micro-batch)
        return (microbatches - 1) * self.bottleneck_s + max(self.bottleneck_s, self.total_s)


def time_lower_bounds(
    profiles: Sequence[LayerProfile], extra_s: Sequence[float] | None = None, *, ends: bool = True
) -> WorkBounds:
    """`work_lower_bounds` without the memory caps (so never inf), in one lean pass over
    the stages: T ≥ max_j (c_j + τ_j) and T ≥ (L + Σ c_j/τ_j) / Σ 1/τ_j. The search
    orders every cross-pool candidate by it and bounds the survivors again with memory.
    `ends=False` leaves out the embedding and LM-head times of the first and last stage
    (and `extra_s`): every term is ≥ 0, so this bounds every ordering of the same stages."""
    p = len(profiles)
    num_layers = len(profiles[0].layer_time_s)
    extra = extra_s if extra_s is not None else [0.0] * p
    prev: LayerProfile | None = None
    tau = p2p = 0.0
    each = rates = weighted = consts = 0.0
    fastest = math.inf
    for j, prof in enumerate(profiles):
        if prof is not prev:
            prev, tau = prof, min(prof.layer_time_s)
            p2p = 2 * prof.p2p_time_s if p > 1 else 0.0
            fastest = min(fastest, tau)
        c = p2p + extra[j] if ends else p2p
        if ends and j == 0:
            c += prof.first_extra_time_s
        if ends and j == p - 1:
            c += prof.last_extra_time_s
        each = max(each, c + tau)
        consts += c
        if tau > 0.0:
            rates += 1.0 / tau
            weighted += c / tau
        else:
            rates = math.inf
    spread = (num_layers + weighted) / rates if not math.isinf(rates) else 0.0
    return WorkBounds(max(each, spread), consts + num_layers * fastest)


def work_lower_bounds(
    profiles: Sequence[LayerProfile], extra_s: Sequence[float] | None = None
) -> WorkBounds:
    """Lower bounds on `solve_mixed_partition(profiles, extra_s)`'s stage times (inf when
    no split can fit), in O(p log p) after one pass over each distinct profile.

    Stage j (constant time c_j and memory m_j as `_stages` counts them, fastest layer τ_j,
    smallest state σ_j and activation α_j per layer, ι_j micro-batches in flight) holds
    n_j ≥ 1 layers with n_j·τ_j ≤ T − c_j and n_j·(σ_j + ι_j·α_j) ≤ U_j − m_j. So T is at
    least c_j + τ_j on every stage, and at least the smallest T at which
    Σ_j min(cap_j, (T − c_j)⁺/τ_j) reaches L (cap_j the memory bound on n_j): a
    piecewise-linear sum, found by sweeping its breakpoints. The search sorts its
    cross-pool candidates by this bound and splits only those that can still enter the top
    list."""
    p = len(profiles)
    num_layers = len(profiles[0].layer_time_s)
    extra = list(extra_s) if extra_s is not None else [0.0] * p
    mins: dict[int, tuple[float, float, float]] = {}
    events: list[tuple[float, float]] = []
    each = 0.0
    none = WorkBounds(math.inf, math.inf)
    consts = 0.0
    for j, prof in enumerate(profiles):
        least = mins.get(id(prof))
        if least is None:
            least = mins[id(prof)] = (
                min(prof.layer_time_s),
                min(prof.layer_state_bytes),
                min(prof.layer_activation_bytes),
            )
        tau, sigma, alpha = least
        inflight = prof.inflight_microbatches[j][0]
        c = (2 * prof.p2p_time_s if p > 1 else 0.0) + extra[j]
        room = prof.usable_bytes - prof.fixed_bytes
        if j == 0:
            c += prof.first_extra_time_s
            room -= prof.first_extra_state_bytes + inflight * prof.first_extra_activation_bytes
        if j == p - 1:
            c += prof.last_extra_time_s
            room -= prof.last_extra_state_bytes + prof.last_extra_activation_bytes
        per_layer = sigma + inflight * alpha
        cap = (
            math.inf
            if per_layer <= 0 or math.isinf(room)
            else math.floor(room / per_layer * (1 + 1e-12))
        )
        if cap < 1:
            return none  # not one layer fits on this stage
        each = max(each, c + tau)
        consts += c
        if tau <= 0.0:
            events.clear()  # a stage of free layers takes any count: no bound from the sum
            break
        events.append((c, 1.0 / tau))
        if not math.isinf(cap):
            events.append((c + cap * tau, -1.0 / tau))
    if not events:
        return WorkBounds(each, 0.0)
    total = consts + num_layers * min(least[0] for least in mins.values())
    events.sort()
    held, slope, at = 0.0, 0.0, events[0][0]
    short = num_layers * (1 - 1e-12)  # layers are whole: a sum within rounding reaches L
    for t, change in events:
        reach = held + slope * (t - at)
        if reach >= short and slope > 0:
            return WorkBounds(max(each, at + max(0.0, num_layers - held) / slope), total)
        held, at = reach, t
        slope += change
    if held >= short:  # the caps reach L exactly where the last stage fills up
        return WorkBounds(max(each, at), total)
    if slope > 1e-300:
        return WorkBounds(max(each, at + (num_layers - held) / slope), total)
    return none  # the memory caps add up to fewer than L layers


def solve_mixed_partition(
    profiles: Sequence[LayerProfile], extra_s: Sequence[float] | None = None
) -> MixedSplit | None:
    """The split of the layers over the stages (stage j priced by `profiles[j]`) that
    minimises the slowest stage's time per micro-batch within every stage's memory; None
    when no split fits (module docstring)."""
    p = len(profiles)
    num_layers = len(profiles[0].layer_time_s)
    if p < 1 or p > num_layers or any(len(x.layer_time_s) != num_layers for x in profiles):
        return None
    extra = list(extra_s) if extra_s is not None else [0.0] * p
    return solve_split(_stages(profiles, extra), uniform=_uniform(profiles))


def solve_split(stages: Sequence[SplitStage], *, uniform: bool) -> MixedSplit | None:
    """The split of the layers over `stages` (each from `split_stage`, every one with the
    same number of layers) that minimises the slowest stage's time within every stage's
    memory; None when no split fits. `uniform`: every layer of a stage has the same time
    and bytes (the closed-form caps of `_solve_uniform`); else the reachability bisection
    (module docstring)."""
    stages = list(stages)
    p = len(stages)
    num_layers = len(stages[0].time) - 1 if stages else 0
    if p < 1 or p > num_layers or any(len(st.time) != num_layers + 1 for st in stages):
        return None
    if uniform:
        counts = _solve_uniform(stages, num_layers)
        if counts is None:
            return None
        bounds = list(accumulate(counts, initial=0))
        times = [_stage_time(stages[j], bounds[j], bounds[j + 1]) for j in range(p)]
        return MixedSplit(stage_layers=counts, stage_time_s=times)
    hi = max(s.time[-1] + s.const_time for s in stages)
    if _reach(stages, num_layers, hi) is None:
        return None  # memory: not even the loosest time limit fits
    lo = 0.0
    for _ in range(MAX_ITERATIONS):
        if hi - lo <= REL_TOL * hi:
            break
        mid = 0.5 * (lo + hi)
        if _reach(stages, num_layers, mid) is None:
            lo = mid
        else:
            hi = mid
    history = _reach(stages, num_layers, hi)
    assert history is not None
    split = _backtrack(stages, history, num_layers, hi)
    bounds = list(accumulate(split, initial=0))
    times = [_stage_time(stages[j], bounds[j], bounds[j + 1]) for j in range(p)]
    return MixedSplit(stage_layers=split, stage_time_s=times)
