r"""Pipeline layer partition: which contiguous layers each pipeline chunk runs.

Data (from a `LayerProfile`): layers l = 0..L-1 with time τ_l, state bytes σ_l and activation
bytes α_l per in-flight micro-batch; p pipeline ranks, v chunks per rank, C = p·v chunks in
pipeline order, chunk c on rank j(c) = c mod p at local index k(c) = c div p (Megatron's
interleaved placement, Narayanan et al. 2021 §2.2). ι[j][k] = in-flight micro-batches of
local chunk k on rank j at its memory peak. Extras: embedding on chunk 0 (time e_F, states
σ_F, activations α_F per in-flight micro-batch), final norm + LM head on chunk C-1 (e_L, σ_L,
α_L held once), one boundary send/recv π per micro-batch, fixed bytes φ per GPU, limit U.

Program (minimise the slowest rank's time per micro-batch; with 1F1B-style schedules the
step time grows with it, Narayanan et al. 2021 §2.2 and eq. for the bubble):

    min  T
    (a)  every layer is in exactly one chunk, chunks are contiguous, in order
    (b)  every chunk has at least one layer
    (c)  W_j = Σ_{c: j(c)=j} Σ_{l∈c} τ_l + e_F·[0 on j] + e_L·[C-1 on j] + 2π·[p>1] ≤ T
    (d)  Σ_{c: j(c)=j} (Σ_{l∈c} σ_l + ι[j][k(c)]·Σ_{l∈c} α_l)
           + (σ_F + ι[0][0]·α_F)·[0 on j] + (σ_L + α_L)·[C-1 on j] + φ ≤ U      ∀ j

Two encodings of (a)-(b):

- Identical layers (dense models): integer counts n_c ≥ 1 with Σ_c n_c = L; contiguity is free
  because any counts define one contiguous split. (a) is `sum_layers`, (b) the bound n_c ≥ 1.
- Otherwise cumulative binaries z[l,c] = 1 iff layer l is in a chunk ≤ c, with z[l,C-1] = 1,
  z[l,c] ≥ z[l,c-1] (a1, monotone in c) and z[l-1,c] ≥ z[l,c] (a2, earlier layers reach chunk
  c first); x[l,c] = z[l,c] - z[l,c-1] is 1 iff layer l is in chunk c; (b) Σ_l x[l,c] ≥ 1.

For identical layers an exact counting algorithm answers without the ILP (`uniform_exact`):
the split only matters through the per-rank layer counts N_j (memory is smallest with the
extra layers on the rank's least-loaded local chunk), both W_j and that least memory grow
with N_j, so the optimum is the smallest T of the form τ·q + e_j for which
Σ_j min(cap_j, ⌊(T − e_j)/τ⌋) ≥ L with every term ≥ v, found by bisection. It returns the
same optimum as the program (tests compare both with brute force).

The counting algorithm groups the ranks by their constant time e_j (at most three distinct
values: the first rank, the last rank, the others) and sums min(cap_j, ⌊(T − e_j)/τ⌋) per
group from sorted caps and their prefix sums, so each bisection step costs O(log p).

Non-identical layers (all numbers ≥ 0), also exact, without the ILP (`method="auto"`):

- v = 1, any layers (`dp_exact`, `_solve_dp_exact`): bisection over the O(L²) candidate
  values of T (segment time + a rank constant) with a reachability check over
  (stage, end layer) that keeps every reachable end, O(p·L) per check (a greedy fill is
  not exact when the memory limits differ per stage). Proof in the function's docstring.
- v > 1 with a short head (`head_exact`, `_solve_head_exact`): when only the first
  H ≤ `MAX_HEAD_LAYERS` layers differ from the rest (MoE models with leading dense layers:
  DeepSeek-V3 has H = 3), enumerate which boundaries fall in the head (≤ 2^H choices) and
  solve each by the counting argument above with per-rank constants, minima and caps.
- Otherwise (v > 1 and a long head or an interleaved dense/MoE pattern) the ILP. It is
  exact but can be slow: a 61-layer profile with alternating layer types on 8-16 ranks
  with v = 2..6 did not prove optimality in 20 s (HiGHS's LP bound is weak; adding the
  balanced lower bound and a heuristic incumbent as bounds on T did not help). A
  time-limited solve returns FEASIBLE with its `gap` when it has a split, TIMEOUT (not
  cached) when not. A split whose memory lower bound exceeds U is answered INFEASIBLE
  (`bound`) before building the ILP.

Measured on the DeepSeek-V3 / 2048 H800 search (`bench/search_latency.py`): its 52 ILP
calls took 0.1-5 s each (56 s in all, the search hit its 60 s limit); the same
sub-problems take 0.1-3 ms each with `dp_exact` / `head_exact`.

Results are cached in a bounded LRU keyed by (L, p, v, the profile's numbers rounded to
7 significant digits); the program is solved on the rounded numbers, so a cached answer never
depends on which request came first. The key is built without building the rounded profile
(roundings of shared per-layer tuples and of repeated scalars are remembered); the rounded
profile is built only on a cache miss.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import os
import sys
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from itertools import accumulate, combinations
from typing import Any, NamedTuple

import pulp

from cost_models.base import LayerProfile
from solver.base import PartitionResult, SolveStatus
from specs.errors import SpecError

MIP_REL_GAP = 1e-9
"""Relative gap at which HiGHS may stop (its default 1e-4 would not prove optimality)."""
DEFAULT_TIME_LIMIT_S = 10.0
MAX_HEAD_LAYERS = 6
"""Longest head of non-identical layers `_solve_head_exact` enumerates (2^H configurations)."""
CACHE_SIZE = 4096
_SIG_DIGITS = 7
_EPS = 1e-9


# ---- evaluation of a given split (used by the algorithms, the search and tests) ---------
def chunk_ranges(stage_layers: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) layer range of every chunk."""
    out: list[tuple[int, int]] = []
    start = 0
    for n in stage_layers:
        out.append((start, start + n))
        start += n
    return out


def rank_times_s(profile: LayerProfile, pipeline: int, stage_layers: Sequence[int]) -> list[float]:
    """W_j of constraint (c) for a split: time per micro-batch of every rank, seconds."""
    chunks = len(stage_layers)
    times = [2.0 * profile.p2p_time_s if pipeline > 1 else 0.0] * pipeline
    for c, (start, end) in enumerate(chunk_ranges(stage_layers)):
        times[c % pipeline] += sum(profile.layer_time_s[start:end])
    times[0] += profile.first_extra_time_s
    times[(chunks - 1) % pipeline] += profile.last_extra_time_s
    return times


def rank_memory_bytes(
    profile: LayerProfile, pipeline: int, stage_layers: Sequence[int]
) -> list[float]:
    """Left side of constraint (d) for a split: bytes per GPU of every rank."""
    chunks = len(stage_layers)
    mem = [profile.fixed_bytes] * pipeline
    for c, (start, end) in enumerate(chunk_ranges(stage_layers)):
        j, k = c % pipeline, c // pipeline
        mem[j] += sum(profile.layer_state_bytes[start:end])
        mem[j] += profile.inflight_microbatches[j][k] * sum(
            profile.layer_activation_bytes[start:end]
        )
    mem[0] += profile.first_extra_state_bytes
    mem[0] += profile.inflight_microbatches[0][0] * profile.first_extra_activation_bytes
    last = (chunks - 1) % pipeline
    mem[last] += profile.last_extra_state_bytes + profile.last_extra_activation_bytes
    return mem


class _SeqStats(NamedTuple):
    total: float
    """sum(values), summed left to right."""
    smallest: float
    largest: float
    ascending: tuple[float, ...]


_MemoTable = dict[int, tuple[Any, Any]]
_SEQ_STATS: _MemoTable = {}
_MIN_INFLIGHT: _MemoTable = {}
_ROUNDED_SEQS: _MemoTable = {}
_INFLIGHT_KEYS: _MemoTable = {}
_MEMO_SIZE = 4096


def _memo_by_identity(table: _MemoTable, values: Any, compute: Any) -> Any:
    """`compute(values)`, remembered in `table` for the very object `values` (profiles of
    one search share their per-layer tuples, so the bounds need not rescan them per
    candidate). The entry keeps `values` alive, so its id cannot be reused while the entry
    exists. One table per kind of result."""
    hit = table.get(id(values))
    if hit is not None and hit[0] is values:
        return hit[1]
    result = compute(values)
    if len(table) >= _MEMO_SIZE:
        table.clear()
    table[id(values)] = (values, result)
    return result


def clear_bound_memo() -> None:
    """Forget the remembered per-sequence statistics and roundings (cold-cache benchmarks)."""
    for table in (_SEQ_STATS, _MIN_INFLIGHT, _ROUNDED_SEQS, _INFLIGHT_KEYS):
        table.clear()
    _ROUNDED.clear()


def _seq_stats(values: Sequence[float]) -> _SeqStats:
    return _memo_by_identity(  # type: ignore[no-any-return]
        _SEQ_STATS,
        values,
        lambda xs: _SeqStats(sum(xs), min(xs), max(xs), tuple(sorted(xs))),
    )


def _min_inflight(rows: tuple[tuple[int, ...], ...]) -> int:
    return _memo_by_identity(  # type: ignore[no-any-return]
        _MIN_INFLIGHT, rows, lambda rs: min(min(row) for row in rs)
    )


def balanced_lower_bound(profile: LayerProfile, pipeline: int, virtual: int) -> float:
    """A lower bound on the program's optimum T (seconds per micro-batch), any memory limit.

    max of: the fractional balance (all work spread evenly over p ranks), the largest single
    layer (layers are not split), and the first/last rank's extras plus v smallest layers
    (every chunk holds ≥ 1 layer), each plus the 2π boundary exchange when p > 1.
    """
    times = _seq_stats(profile.layer_time_s)
    comm = 2.0 * profile.p2p_time_s if pipeline > 1 else 0.0
    total = times.total + profile.first_extra_time_s + profile.last_extra_time_s
    bound = max(total / pipeline, times.largest)
    smallest = sum(times.ascending[:virtual]) if virtual > 1 else times.smallest
    if pipeline > 1:
        bound = max(
            bound,
            profile.first_extra_time_s + smallest,
            profile.last_extra_time_s + smallest,
        )
    else:
        bound = max(bound, total)
    return bound + comm


def memory_lower_bound_bytes(profile: LayerProfile, pipeline: int, virtual: int) -> float:
    """A lower bound on the busiest rank's memory (left side of (d)) over every split.

    The max over ranks is at least the mean: Σ_j M_j counts every layer's states once and its
    activations at least min ι times, the extras once, and φ on each of the p ranks. Rank 0
    also holds the embedding extras and ≥ v layers.
    """
    infl_min = _min_inflight(profile.inflight_microbatches)
    states = _seq_stats(profile.layer_state_bytes)
    acts = _seq_stats(profile.layer_activation_bytes)
    first = profile.first_extra_state_bytes + (
        profile.inflight_microbatches[0][0] * profile.first_extra_activation_bytes
    )
    last = profile.last_extra_state_bytes + profile.last_extra_activation_bytes
    total = states.total + infl_min * acts.total + first + last
    per_layer_min = states.smallest + infl_min * acts.smallest  # ≤ min_l (σ_l + ι_min·α_l)
    mean = total / pipeline
    rank0 = first + virtual * per_layer_min + (last if pipeline == 1 else 0.0)
    return profile.fixed_bytes + max(mean, rank0)


# ---- the solver with its cache ----------------------------------------------------------
def _round(x: float) -> float:
    if x == 0.0 or not math.isfinite(x):
        return x
    return round(x, _SIG_DIGITS - 1 - math.floor(math.log10(abs(x))))


def _rounded_tuple(values: Sequence[float]) -> tuple[float, ...]:
    first = values[0]
    if values.count(first) == len(values):  # fast path: identical layers
        r = _round(first)
        return (r,) * len(values)
    return tuple(_round(x) for x in values)


_ROUNDED: dict[float, float] = {}
_ROUNDED_SIZE = 1 << 16


def _round_memo(x: float) -> float:
    """`_round(x)`, remembered by value (a search rounds the same extras, fixed bytes and
    limits for thousands of profiles); zeros and non-finite values pass through."""
    hit = _ROUNDED.get(x)
    if hit is not None and x != 0.0:
        return hit
    r = _round(x)
    if len(_ROUNDED) >= _ROUNDED_SIZE:
        _ROUNDED.clear()
    _ROUNDED[x] = r
    return r


def _rounded_seq(values: tuple[float, ...]) -> tuple[tuple[float, ...], bool]:
    """(the rounded per-layer tuple, whether its entries are all equal), remembered for the
    very tuple object (profiles of one search share them)."""
    return _memo_by_identity(  # type: ignore[no-any-return]
        _ROUNDED_SEQS, values, lambda xs: _with_uniform(_rounded_tuple(xs))
    )


def _with_uniform(rounded: tuple[float, ...]) -> tuple[tuple[float, ...], bool]:
    return rounded, rounded.count(rounded[0]) == len(rounded)


def _inflight_key(
    rows: tuple[tuple[int, ...], ...], pipeline: int, virtual: int
) -> tuple[tuple[int, ...], ...]:
    """The in-flight counts the program reads (first `virtual` of the first `pipeline`
    rows), remembered per rows object once their shape is checked.

    Raises:
        SpecError: fewer than `pipeline` rows or a row shorter than `virtual`.
    """
    by_shape = _memo_by_identity(_INFLIGHT_KEYS, rows, lambda _: {})
    key = by_shape.get((pipeline, virtual))
    if key is None:
        if len(rows) < pipeline or any(len(r) < virtual for r in rows[:pipeline]):
            raise SpecError(
                "profile.inflight_microbatches",
                f"must have {pipeline} rows of {virtual} entries for pipeline {pipeline} × "
                f"virtual {virtual}",
                [len(r) for r in rows],
            )
        key = by_shape[(pipeline, virtual)] = tuple(tuple(row[:virtual]) for row in rows[:pipeline])
    return key  # type: ignore[no-any-return]


def _rounded_key(
    profile: LayerProfile, pipeline: int, virtual: int, ignore_memory: bool
) -> tuple[tuple[Any, ...], tuple[tuple[float, ...], ...]]:
    """(the cache key of the rounded sub-problem, the rounded per-layer tuples): the same
    numbers `_rounded_profile` and `_cache_key` give, without building the profile."""
    times, u_times = _rounded_seq(profile.layer_time_s)
    states, u_states = _rounded_seq(profile.layer_state_bytes)
    acts, u_acts = _rounded_seq(profile.layer_activation_bytes)
    if u_times and u_states and u_acts:
        layers: tuple[Any, ...] = (times[0], states[0], acts[0])
    else:
        layers = (times, states, acts)
    rnd = _round_memo
    key = (
        len(times),
        pipeline,
        virtual,
        layers,
        rnd(profile.first_extra_time_s),
        rnd(profile.last_extra_time_s),
        rnd(profile.first_extra_state_bytes),
        rnd(profile.last_extra_state_bytes),
        rnd(profile.first_extra_activation_bytes),
        rnd(profile.last_extra_activation_bytes),
        rnd(profile.p2p_time_s),
        rnd(profile.fixed_bytes),
        math.inf if ignore_memory else rnd(profile.usable_bytes),
        _inflight_key(profile.inflight_microbatches, pipeline, virtual),
    )
    return key, (times, states, acts)


def _profile_of_key(
    key: tuple[Any, ...],
    seqs: tuple[tuple[float, ...], ...],
    inflight: tuple[tuple[int, ...], ...],
) -> LayerProfile:
    """The rounded profile of a `_rounded_key` (equal to `_rounded_profile`'s)."""
    (_, _, _, _, first_t, last_t, first_s, last_s, first_a, last_a, p2p, fixed, usable, _) = key
    times, states, acts = seqs
    return LayerProfile(
        layer_time_s=times,
        layer_forward_time_s=(),
        layer_state_bytes=states,
        layer_activation_bytes=acts,
        first_extra_time_s=first_t,
        last_extra_time_s=last_t,
        first_extra_state_bytes=first_s,
        last_extra_state_bytes=last_s,
        first_extra_activation_bytes=first_a,
        last_extra_activation_bytes=last_a,
        p2p_time_s=p2p,
        fixed_bytes=fixed,
        inflight_microbatches=inflight,
        num_microbatches=0,
        usable_bytes=usable,
    )


def _rounded_profile(profile: LayerProfile, ignore_memory: bool) -> LayerProfile:
    return dataclasses.replace(
        profile,
        layer_time_s=_rounded_tuple(profile.layer_time_s),
        layer_forward_time_s=(),
        layer_state_bytes=_rounded_tuple(profile.layer_state_bytes),
        layer_activation_bytes=_rounded_tuple(profile.layer_activation_bytes),
        first_extra_time_s=_round(profile.first_extra_time_s),
        last_extra_time_s=_round(profile.last_extra_time_s),
        first_extra_state_bytes=_round(profile.first_extra_state_bytes),
        last_extra_state_bytes=_round(profile.last_extra_state_bytes),
        first_extra_activation_bytes=_round(profile.first_extra_activation_bytes),
        last_extra_activation_bytes=_round(profile.last_extra_activation_bytes),
        p2p_time_s=_round(profile.p2p_time_s),
        fixed_bytes=_round(profile.fixed_bytes),
        usable_bytes=math.inf if ignore_memory else _round(profile.usable_bytes),
        num_microbatches=0,
    )


def _is_uniform(profile: LayerProfile) -> bool:
    return all(
        seq.count(seq[0]) == len(seq)
        for seq in (profile.layer_time_s, profile.layer_state_bytes, profile.layer_activation_bytes)
    )


def _cache_key(rp: LayerProfile, pipeline: int, virtual: int) -> tuple[Any, ...]:
    num_layers = len(rp.layer_time_s)
    if _is_uniform(rp):
        layers: tuple[Any, ...] = (
            rp.layer_time_s[0],
            rp.layer_state_bytes[0],
            rp.layer_activation_bytes[0],
        )
    else:
        layers = (rp.layer_time_s, rp.layer_state_bytes, rp.layer_activation_bytes)
    return (
        num_layers,
        pipeline,
        virtual,
        layers,
        rp.first_extra_time_s,
        rp.last_extra_time_s,
        rp.first_extra_state_bytes,
        rp.last_extra_state_bytes,
        rp.first_extra_activation_bytes,
        rp.last_extra_activation_bytes,
        rp.p2p_time_s,
        rp.fixed_bytes,
        rp.usable_bytes,
        tuple(tuple(row[:virtual]) for row in rp.inflight_microbatches[:pipeline]),
    )


class PartitionSolver:
    """Solves partition sub-problems with a bounded LRU cache and call counters.

    Thread-safe; one instance may serve many searches (answers depend only on the rounded
    numbers, never on history).
    """

    def __init__(self, cache_size: int = CACHE_SIZE) -> None:
        self._cache: OrderedDict[tuple[Any, ...], PartitionResult] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.calls = 0
        """Sub-problems solved (cache misses)."""
        self.ilp_calls = 0
        """Of which went to the integer program."""
        self.cache_hits = 0

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self.calls = self.ilp_calls = self.cache_hits = 0

    def solve(
        self,
        profile: LayerProfile,
        pipeline: int,
        virtual: int,
        *,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        ignore_memory: bool = False,
        method: str = "auto",
        ilp: bool = True,
    ) -> PartitionResult:
        """The time-optimal split of `profile` into `pipeline × virtual` chunks.

        Args:
            profile: per-layer costs (its `usable_bytes` is the memory limit U).
            pipeline, virtual: p and v.
            time_limit_s: limit of one ILP solve.
            ignore_memory: drop constraint (d) (the time-optimal split).
            method: `auto` (the exact algorithms of the module docstring where they
                apply: `uniform_exact`, `dp_exact`, `head_exact`; else the ILP), `ilp`.
            ilp: False: answer TIMEOUT (method `skipped`, not cached) instead of running
                the ILP (a caller that only wants the optimum when it is cheap).
        Returns:
            PartitionResult; `max_rank_time_s` is recomputed on the unrounded profile.
        """
        _inflight_key(profile.inflight_microbatches, pipeline, virtual)  # checks the shape
        if not profile.layer_time_s:
            raise SpecError("profile.layer_time_s", "must have at least one layer", 0)
        rkey, seqs = _rounded_key(profile, pipeline, virtual, ignore_memory)
        key = (*rkey, method)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.cache_hits += 1
        from_cache = hit is not None
        if hit is None:
            rp = _profile_of_key(rkey, seqs, profile.inflight_microbatches)
            if not ilp and method == "auto" and _needs_ilp(rp, pipeline, virtual):
                return PartitionResult(SolveStatus.TIMEOUT, None, None, None, "skipped")
            hit = _solve_uncached(rp, pipeline, virtual, time_limit_s, method)
            with self._lock:
                self.calls += 1
                self.ilp_calls += hit.method == "ilp"
                if hit.status != SolveStatus.TIMEOUT:  # a timeout may succeed with more time
                    self._cache[key] = hit
                    if len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
        if hit.stage_layers is None:
            return PartitionResult(
                hit.status, None, hit.max_rank_time_s, hit.gap, hit.method, from_cache
            )
        return PartitionResult(
            hit.status,
            list(hit.stage_layers),
            max(rank_times_s(profile, pipeline, hit.stage_layers)),
            hit.gap,
            hit.method,
            from_cache,
        )


_DEFAULT_SOLVER = PartitionSolver()


def default_solver() -> PartitionSolver:
    """The process-wide solver (and cache)."""
    return _DEFAULT_SOLVER


def solve_stage_partition(
    profile: LayerProfile,
    pipeline: int,
    virtual: int,
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    ignore_memory: bool = False,
    method: str = "auto",
) -> PartitionResult:
    """`PartitionSolver.solve` on the process-wide solver."""
    return _DEFAULT_SOLVER.solve(
        profile,
        pipeline,
        virtual,
        time_limit_s=time_limit_s,
        ignore_memory=ignore_memory,
        method=method,
    )


def _solve_uncached(
    rp: LayerProfile, pipeline: int, virtual: int, time_limit_s: float, method: str
) -> PartitionResult:
    num_layers = len(rp.layer_time_s)
    if pipeline < 1 or virtual < 1 or pipeline * virtual > num_layers:
        return PartitionResult(SolveStatus.INFEASIBLE, None, None, None, method="ilp")
    if pipeline * virtual == 1:  # one chunk: nothing to choose, only check (d)
        if max(rank_memory_bytes(rp, 1, [num_layers])) > rp.usable_bytes * (1 + _EPS):
            return PartitionResult(SolveStatus.INFEASIBLE, None, None, None, method="fixed")
        obj = rank_times_s(rp, 1, [num_layers])[0]
        return PartitionResult(SolveStatus.OPTIMAL, [num_layers], obj, 0.0, method="fixed")
    if method == "auto":
        if _is_uniform(rp):
            return _solve_uniform_exact(rp, pipeline, virtual)
        if _is_nonnegative(rp):
            if virtual == 1:
                return _solve_dp_exact(rp, pipeline)
            head = _head_length(rp)
            if head <= MAX_HEAD_LAYERS:
                return _solve_head_exact(rp, pipeline, virtual, head)
    if memory_lower_bound_bytes(rp, pipeline, virtual) > rp.usable_bytes * (1 + _EPS):
        return PartitionResult(SolveStatus.INFEASIBLE, None, None, None, method="bound")
    return _solve_ilp(rp, pipeline, virtual, time_limit_s)


def _needs_ilp(rp: LayerProfile, pipeline: int, virtual: int) -> bool:
    """Whether `_solve_uncached` (method `auto`) would run the ILP on `rp`."""
    if pipeline < 1 or virtual < 1 or pipeline * virtual > len(rp.layer_time_s):
        return False
    if pipeline * virtual == 1 or _is_uniform(rp):
        return False
    if not _is_nonnegative(rp):
        return True
    return virtual > 1 and _head_length(rp) > MAX_HEAD_LAYERS


def _is_nonnegative(rp: LayerProfile) -> bool:
    """Every per-layer number and in-flight count ≥ 0: segment sums then grow with the
    segment, which the exact algorithms below rely on."""
    return (
        min(rp.layer_time_s) >= 0.0
        and min(rp.layer_state_bytes) >= 0.0
        and min(rp.layer_activation_bytes) >= 0.0
        and min(min(row) for row in rp.inflight_microbatches) >= 0
    )


# ---- exact dynamic program for one chunk per rank (v = 1), any layers -------------------
def _solve_dp_exact(rp: LayerProfile, p: int) -> PartitionResult:
    r"""Exact optimum of the program for v = 1 and arbitrary non-negative per-layer numbers.

    With v = 1 chunk j is rank j and holds the layers [b_j, b_{j+1}) for boundaries
    0 = b_0 < b_1 < … < b_p = L. With prefix sums P (times), S (states), A (activations):
    W_j = P[b_{j+1}] − P[b_j] + e_j and M_j = S[·] − S[·] + ι_j·(A[·] − A[·]) + m_j, where
    e_j, m_j are the constants of (c) and (d) (`_rank_extras`) and ι_j = ι[j][0].

    feasible(T): segment (k, l) is *admissible* for stage j when its W_j ≤ T and M_j ≤ U;
    reach[j][l] ⇔ some boundaries 0 < b_1 < … < b_j < l make stages 0..j admissible with
    stage j ending at l. reach[0][l] ⇔ (0, l) admissible; for j ≥ 1, reach[j][l] ⇔
    (k*, l) is admissible for k* = the largest k < l with reach[j−1][k]. Proof of ⇐ is
    direct; for ⇒, if (k, l) is admissible with reach[j−1][k] then k ≤ k* < l, and (k*, l)
    is a sub-segment of (k, l): with τ, σ, α, ι ≥ 0 its time and bytes are no larger (the
    float differences of non-decreasing prefix sums are monotone too, rounding being
    monotone), so (k*, l) is admissible. The split exists ⇔ reach[p−1][L]; O(p·L) per T.
    (A greedy "fill each stage as far as it fits" is not exact when the memory limits
    differ per stage; this check keeps every reachable end.)

    Optimum: every split's objective is max_j W_j, one of the values
    P[l] − P[k] + e for 0 ≤ k < l ≤ L, l − k ≤ L − p + 1 and e among the e_j, so T* is the
    smallest candidate value T with feasible(T) (feasibility is monotone in T: a split
    feasible at T is feasible at any T' ≥ T). The largest candidate bounds every segment's
    time, so it is feasible iff the memory limits alone allow a split. Bisection over the
    sorted candidates: O(L² log L + p·L·log L). The candidates and the check evaluate the
    same float expression, so T* is attained exactly; the split is read back from the
    k* pointers of the last check.
    """
    num_layers = len(rp.layer_time_s)
    e, m_const = _rank_extras(rp, p)
    times = list(accumulate(rp.layer_time_s, initial=0.0))
    states = list(accumulate(rp.layer_state_bytes, initial=0.0))
    acts = list(accumulate(rp.layer_activation_bytes, initial=0.0))
    infl = [rp.inflight_microbatches[j][0] for j in range(p)]
    limit = rp.usable_bytes * (1 + _EPS)
    longest = num_layers - p + 1

    def reach_parents(t_max: float) -> list[list[int]] | None:
        """parents[j][l] = k* (−1: stage j cannot end at l); None when infeasible."""
        parents: list[list[int]] = []
        prev: list[int] | None = None
        for j in range(p):
            e_j, m_j, i_j = e[j], m_const[j], infl[j]
            par = [-1] * (num_layers + 1)
            last = -1 if j else 0  # stage 0 starts at layer 0
            for end in range(j + 1, num_layers - p + j + 2):
                if prev is not None and prev[end - 1] >= 0:
                    last = end - 1
                if last < 0:
                    continue
                if (times[end] - times[last]) + e_j <= t_max and (
                    (states[end] - states[last]) + i_j * (acts[end] - acts[last]) + m_j <= limit
                ):
                    par[end] = last
            if max(par) < 0:
                return None
            parents.append(par)
            prev = [0 if k >= 0 else -1 for k in par]
        return parents if parents[-1][num_layers] >= 0 else None

    candidates = sorted(
        {
            (times[end] - times[start]) + e_j
            for e_j in set(e)
            for start in range(num_layers)
            for end in range(start + 1, min(num_layers, start + longest) + 1)
        }
    )
    best = reach_parents(candidates[-1])
    if best is None:
        return PartitionResult(SolveStatus.INFEASIBLE, None, None, None, method="dp_exact")
    lo, hi = 0, len(candidates) - 1  # candidates[hi] is feasible
    while lo < hi:
        mid = (lo + hi) // 2
        found = reach_parents(candidates[mid])
        if found is not None:
            hi, best = mid, found
        else:
            lo = mid + 1
    # best holds the pointers of candidates[hi] = T*
    bounds = [num_layers]
    for j in range(p - 1, -1, -1):
        bounds.append(best[j][bounds[-1]])
    bounds.reverse()
    stage_layers = [bounds[j + 1] - bounds[j] for j in range(p)]
    obj = max(rank_times_s(rp, p, stage_layers))
    return PartitionResult(SolveStatus.OPTIMAL, stage_layers, obj, 0.0, method="dp_exact")


# ---- exact counting algorithm for identical layers ---------------------------------------
def _rank_extras(rp: LayerProfile, pipeline: int) -> tuple[list[float], list[float]]:
    """Per rank: the constant time of (c) and the constant bytes of (d) (extras + φ)."""
    comm = 2.0 * rp.p2p_time_s if pipeline > 1 else 0.0
    e = [comm] * pipeline
    e[0] += rp.first_extra_time_s
    e[pipeline - 1] += rp.last_extra_time_s
    m = [rp.fixed_bytes] * pipeline
    m[0] += (
        rp.first_extra_state_bytes
        + rp.inflight_microbatches[0][0] * rp.first_extra_activation_bytes
    )
    m[pipeline - 1] += rp.last_extra_state_bytes + rp.last_extra_activation_bytes
    return e, m


def _solve_uniform_exact(rp: LayerProfile, p: int, v: int) -> PartitionResult:
    num_layers = len(rp.layer_time_s)
    tau, sigma, alpha = rp.layer_time_s[0], rp.layer_state_bytes[0], rp.layer_activation_bytes[0]
    e, m_const = _rank_extras(rp, p)
    max_n = num_layers - v * (p - 1)
    # cap_j: most layers rank j can hold, with the surplus on its least-loaded local chunk
    caps: list[int] = []
    rows, usable = rp.inflight_microbatches, rp.usable_bytes
    limit, unlimited = usable * (1 + _EPS), math.isinf(usable)
    for j in range(p):
        infl = rows[j][:v]
        mu = min(infl)
        base = m_const[j] + alpha * (sum(infl) - mu * v)
        slope = sigma + alpha * mu
        if base + slope * v > limit:
            return PartitionResult(SolveStatus.INFEASIBLE, None, None, None, method="uniform_exact")
        if slope <= 0 or unlimited:
            caps.append(max_n)
        else:
            caps.append(min(max_n, math.floor((usable - base) / slope * (1 + _EPS) + _EPS)))
    if sum(caps) < num_layers:
        return PartitionResult(SolveStatus.INFEASIBLE, None, None, None, method="uniform_exact")

    def counts(t_max: float) -> list[int]:
        if tau <= 0:
            return list(caps)
        return [min(caps[j], math.floor((t_max - e[j]) / tau + 1e-7)) for j in range(p)]

    # feasible(T) ⇔ min_j n_j ≥ v and Σ_j n_j ≥ L with n_j = min(cap_j, q(e_j)): ranks with
    # the same e_j share q, so per distinct e the sum is Σ_{cap ≤ q} cap + q·#{cap > q}
    # (sorted caps and their prefix sums), the same integers `counts` adds up.
    by_e: dict[float, list[int]] = {}
    for j in range(p):
        by_e.setdefault(e[j], []).append(caps[j])
    groups = []
    for e_j, group_caps in by_e.items():
        group_caps.sort()
        groups.append(
            (
                e_j,
                group_caps,
                list(accumulate(group_caps, initial=0)),
                group_caps[0],
                len(group_caps),
            )
        )

    def feasible(t_max: float) -> bool:
        total = 0
        for e_j, group_caps, prefix, smallest, size in groups:
            q = math.floor((t_max - e_j) / tau + 1e-7)
            if min(smallest, q) < v:
                return False
            below = bisect_right(group_caps, q)
            total += prefix[below] + q * (size - below)
        return total >= num_layers

    best_t = math.inf
    for e_g in sorted(set(e)):
        if tau <= 0:
            best_t = min(best_t, max(e))
            break
        lo, hi = v, num_layers  # smallest q with feasible(τ·q + e_g); feasible at q = L?
        if not feasible(tau * hi + e_g):
            continue
        while lo < hi:
            mid = (lo + hi) // 2
            if feasible(tau * mid + e_g):
                hi = mid
            else:
                lo = mid + 1
        best_t = min(best_t, tau * lo + e_g)
    n = counts(best_t)
    # trim the surplus from the slowest ranks (ties: lowest rank) to balance the split
    heap = [(-(tau * n[j] + e[j]), j) for j in range(p)]
    heapq.heapify(heap)
    surplus = sum(n) - num_layers
    while surplus > 0:
        _, j = heapq.heappop(heap)
        if n[j] > v:
            n[j] -= 1
            surplus -= 1
            heapq.heappush(heap, (-(tau * n[j] + e[j]), j))
    stage_layers = [0] * (p * v)
    for j in range(p):
        per_chunk = _spread(
            n[j], rp.inflight_microbatches[j][:v], alpha, sigma, rp.usable_bytes - m_const[j]
        )
        for k in range(v):
            stage_layers[j + k * p] = per_chunk[k]
    obj = max(tau * n[j] + e[j] for j in range(p))
    return PartitionResult(SolveStatus.OPTIMAL, stage_layers, obj, 0.0, method="uniform_exact")


def _spread(
    total: int, infl: Sequence[int], alpha: float, sigma: float, budget: float
) -> list[int]:
    """Split a rank's layers over its chunks as evenly as possible, then move layers to the
    chunk with the fewest in-flight micro-batches until (d) holds."""
    v = len(infl)
    if v == 1:  # one chunk: nothing to move
        return [total]
    base, extra = divmod(total, v)
    n = [base + (1 if k < extra else 0) for k in range(v)]
    lo = min(range(v), key=lambda k: (infl[k], k))

    def mem() -> float:
        return sum(n[k] * (sigma + alpha * infl[k]) for k in range(v))

    while mem() > budget * (1 + _EPS):
        donors = [k for k in range(v) if k != lo and n[k] > 1 and infl[k] > infl[lo]]
        if not donors:
            break
        k = max(donors, key=lambda d: (infl[d], -d))
        n[k] -= 1
        n[lo] += 1
    return n


# ---- exact algorithm for a short head of distinct layers + identical layers (any v) -----
def _head_length(rp: LayerProfile) -> int:
    """H: the fewest leading layers after which every layer equals the last one (time,
    states and activations); e.g. 3 for DeepSeek-V3's 3 dense + 58 MoE layers."""
    t, s, a = rp.layer_time_s, rp.layer_state_bytes, rp.layer_activation_bytes
    last = (t[-1], s[-1], a[-1])
    head = len(t)
    while head > 0 and (t[head - 1], s[head - 1], a[head - 1]) == last:
        head -= 1
    return head


class _HeadConfig(NamedTuple):
    """One placement of the head's chunk boundaries (see `_solve_head_exact`)."""

    bounds: tuple[int, ...]
    """0 and the boundaries ≤ H: chunks 0..k−1 are [bounds[i], bounds[i+1]), chunk k
    starts at bounds[-1]."""
    const_time: list[float]
    """E_j: rank j's time without its body layers."""
    base_bytes: list[float]
    """Rank j's bytes with the minimum body layers on its free chunks."""
    lo: list[int]
    """Fewest body layers of rank j (1 per free chunk, 0 for chunk k with head layers)."""
    cap: list[int]
    """Most body layers of rank j within U (the surplus on its cheapest free chunk)."""


def _head_configs(rp: LayerProfile, p: int, v: int, head: int) -> list[_HeadConfig]:
    """Every head placement whose minimum body layers fit in memory, in a fixed order."""
    chunks, body = p * v, len(rp.layer_time_s) - head
    sigma, alpha = rp.layer_state_bytes[-1], rp.layer_activation_bytes[-1]
    e, m_const = _rank_extras(rp, p)
    times = list(accumulate(rp.layer_time_s[:head], initial=0.0))
    states = list(accumulate(rp.layer_state_bytes[:head], initial=0.0))
    acts = list(accumulate(rp.layer_activation_bytes[:head], initial=0.0))
    rows, usable = rp.inflight_microbatches, rp.usable_bytes
    limit = usable * (1 + _EPS)
    out: list[_HeadConfig] = []
    for size in range(min(head, chunks - 1) + 1):
        for cuts in combinations(range(1, head + 1), size):
            bounds = (0, *cuts)
            const_time, base = list(e), list(m_const)
            for c in range(size + 1):  # head layers of chunks 0..k (chunk k: up to H)
                start, end = bounds[c], bounds[c + 1] if c < size else head
                j = c % p
                const_time[j] += times[end] - times[start]
                base[j] += (states[end] - states[start]) + rows[j][c // p] * (
                    acts[end] - acts[start]
                )
            lo, cheapest = [0] * p, [math.inf] * p
            for c in range(size, chunks):  # free chunks: k..C−1
                j = c % p
                slope = sigma + rows[j][c // p] * alpha
                need = 0 if c == size and bounds[-1] < head else 1
                lo[j] += need
                base[j] += need * slope
                cheapest[j] = min(cheapest[j], slope)
            if sum(lo) > body or max(b - limit for b in base) > 0:
                continue
            cap = [
                lo[j]
                if math.isinf(cheapest[j])  # no free chunk on rank j: lo = 0
                else body
                if cheapest[j] <= 0 or math.isinf(usable)
                else min(
                    body, lo[j] + math.floor((usable - base[j]) / cheapest[j] * (1 + _EPS) + _EPS)
                )
                for j in range(p)
            ]
            if sum(cap) >= body:
                out.append(_HeadConfig(bounds, const_time, base, lo, cap))
    return out


def _solve_head_exact(rp: LayerProfile, p: int, v: int, head: int) -> PartitionResult:
    r"""Exact optimum of the program when only the first H ≤ `MAX_HEAD_LAYERS` layers differ
    (the rest, B = L − H layers, all have the numbers τ, σ, α), any v, by enumeration.

    Every split is, one-to-one, (i) the set of its boundaries b_1 < … < b_{C−1} that are
    ≤ H (a subset of {1..H} of size k ≤ C − 1, at most 2^H choices): it fixes chunks
    0..k−1 (head layers only) and the h = H − b_k head layers of chunk k, the first chunk
    that reaches the body; and (ii) body counts n_c for chunks c ≥ k ("free" chunks) with
    Σ n_c = B, n_k ≥ [h = 0] and n_c ≥ 1 for c > k. For a fixed (i) rank j's time is
    W_j = E_j + τ·N_j with N_j = Σ_{free c on j} n_c, and its least bytes for a given N_j put
    the minimum on each free chunk and the surplus on its free chunk with the fewest
    in-flight micro-batches (bytes are linear in the n_c with slope σ + ι·α), so (d) holds
    for some distribution ⇔ lo_j ≤ N_j ≤ cap_j (`_head_configs`). Hence (i) admits T ⇔
    hi_j(T) = min(cap_j, ⌊(T − E_j)/τ⌋) ≥ lo_j for every j and Σ_j hi_j(T) ≥ B (then some
    N with lo ≤ N ≤ hi sums to B, since Σ lo ≤ B). This is the counting argument of
    `_solve_uniform_exact` with per-rank constants, minima and caps. The optimum of (i) is
    one of E_j + τ·q (lo_j ≤ q ≤ cap_j) and admissibility is monotone in T, so bisection
    over those sorted values finds it; the best over all (i) is the optimum (ties: the
    first in the enumeration order). Configurations whose max_j E_j + τ·lo_j cannot beat
    the incumbent are skipped. Cost O(2^H · p·B·log(p·B)).
    """
    body = len(rp.layer_time_s) - head
    tau, sigma, alpha = rp.layer_time_s[-1], rp.layer_state_bytes[-1], rp.layer_activation_bytes[-1]

    def highs(cfg: _HeadConfig, t_max: float) -> list[int] | None:
        if tau <= 0:
            hi = list(cfg.cap)
        else:
            hi = [
                min(cfg.cap[j], math.floor((t_max - cfg.const_time[j]) / tau + 1e-7))
                for j in range(p)
            ]
        if any(hi[j] < cfg.lo[j] for j in range(p)) or sum(hi) < body:
            return None
        return hi

    best_t, best_cfg = math.inf, None
    for cfg in _head_configs(rp, p, v, head):
        floor_t = max(cfg.const_time[j] + tau * cfg.lo[j] for j in range(p))
        if floor_t >= best_t:
            continue
        cands = sorted(
            {
                cfg.const_time[j] + tau * q
                for j in range(p)
                for q in range(cfg.lo[j], cfg.cap[j] + 1)
            }
        )
        lo, hi = 0, len(cands) - 1  # cands[hi] (every hi_j = cap_j) is admissible
        if tau <= 0:
            lo = hi = 0
            cands = [floor_t]
        while lo < hi:
            mid = (lo + hi) // 2
            if highs(cfg, cands[mid]) is not None:
                hi = mid
            else:
                lo = mid + 1
        if cands[lo] < best_t and highs(cfg, cands[lo]) is not None:
            best_t, best_cfg = cands[lo], cfg
    if best_cfg is None:
        return PartitionResult(SolveStatus.INFEASIBLE, None, None, None, method="head_exact")
    cfg = best_cfg
    n = highs(cfg, best_t)
    assert n is not None
    # trim the surplus from the slowest ranks (ties: lowest rank) to balance the split
    heap = [(-(cfg.const_time[j] + tau * n[j]), j) for j in range(p)]
    heapq.heapify(heap)
    surplus = sum(n) - body
    while surplus > 0:
        _, j = heapq.heappop(heap)
        if n[j] > cfg.lo[j]:
            n[j] -= 1
            surplus -= 1
            heapq.heappush(heap, (-(cfg.const_time[j] + tau * n[j]), j))
    k, start_k = len(cfg.bounds) - 1, cfg.bounds[-1]
    stage_layers = [cfg.bounds[c + 1] - cfg.bounds[c] for c in range(k)]
    stage_layers += [0] * (p * v - k)
    stage_layers[k] = head - start_k
    rows = rp.inflight_microbatches
    for j in range(p):
        free = [c for c in range(j, p * v, p) if c >= k]
        if not free:
            continue
        need = [0 if c == k and start_k < head else 1 for c in free]
        slopes = [sigma + rows[j][c // p] * alpha for c in free]
        budget = rp.usable_bytes - (
            cfg.base_bytes[j] - sum(m * s for m, s in zip(need, slopes, strict=True))
        )
        per_chunk = _spread_free(n[j], need, [stage_layers[c] for c in free], slopes, budget)
        for c, cnt in zip(free, per_chunk, strict=True):
            stage_layers[c] += cnt
    obj = max(rank_times_s(rp, p, stage_layers))
    return PartitionResult(SolveStatus.OPTIMAL, stage_layers, obj, 0.0, method="head_exact")


def _spread_free(
    total: int, need: list[int], fixed: list[int], slopes: list[float], budget: float
) -> list[int]:
    """Split `total` body layers over a rank's free chunks: at least `need` each, evening
    out the chunk sizes (`fixed` head layers + body layers), then moving layers to the
    cheapest chunk (least bytes per layer) until they fit in `budget` bytes. The end point
    (all surplus on the cheapest chunk) is the least-bytes distribution, so it stops
    within `budget` whenever `_head_configs` admitted `total`."""
    n = list(need)
    for _ in range(total - sum(n)):
        k = min(range(len(n)), key=lambda i: (n[i] + fixed[i], i))
        n[k] += 1
    cheap = min(range(len(n)), key=lambda i: (slopes[i], i))

    def mem() -> float:
        return sum(cnt * s for cnt, s in zip(n, slopes, strict=True))

    while mem() > budget * (1 + _EPS):
        donors = [i for i in range(len(n)) if n[i] > need[i] and slopes[i] > slopes[cheap]]
        if not donors:
            break
        i = max(donors, key=lambda d: (slopes[d], -d))
        n[i] -= 1
        n[cheap] += 1
    return n


# ---- the integer program ---------------------------------------------------------------
_BANNER_LOCK = threading.Lock()
_BANNER_SHOWN = False


def _swallow_highs_banner() -> None:
    """HiGHS prints its banner to the process's stdout (file descriptor 1, from C) the first
    time a `Highs` object is built, whatever `output_flag` says afterwards; that line would
    land in the middle of a CLI's JSON output. Build the first one with descriptor 1 pointed
    at /dev/null."""
    global _BANNER_SHOWN
    with _BANNER_LOCK:
        if _BANNER_SHOWN:
            return
        _BANNER_SHOWN = True
        try:
            import highspy
        except ImportError:  # pragma: no cover - CBC fallback
            return
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 1)
                highspy.Highs()  # type: ignore[no-untyped-call]
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def _make_solver(time_limit_s: float) -> Any:
    limit = max(0.01, time_limit_s)
    _swallow_highs_banner()
    try:
        solver = pulp.HiGHS(
            msg=False, timeLimit=limit, threads=1, gapRel=MIP_REL_GAP, random_seed=0
        )
        if solver.available():
            return solver
    except Exception:  # pragma: no cover - highspy missing or broken
        pass
    return pulp.PULP_CBC_CMD(
        msg=False, timeLimit=limit, threads=1, gapRel=MIP_REL_GAP
    )  # pragma: no cover


def _solve_ilp(rp: LayerProfile, p: int, v: int, time_limit_s: float) -> PartitionResult:
    # data
    num_layers = len(rp.layer_time_s)
    chunks = p * v
    uniform = _is_uniform(rp)
    # scaling: times relative to the total work, memory relative to the limit U, so every
    # coefficient is O(1) and HiGHS's absolute tolerances (1e-7..1e-9) are relative ones
    e, m_const = _rank_extras(rp, p)
    time_scale = 1.0 / max(sum(rp.layer_time_s) + sum(e), 1e-300)
    mem_scale = (
        1.0 / rp.usable_bytes if math.isfinite(rp.usable_bytes) and rp.usable_bytes > 0 else 1.0
    )
    tau = [t * time_scale for t in rp.layer_time_s]
    sigma = [s * mem_scale for s in rp.layer_state_bytes]
    alpha = [a * mem_scale for a in rp.layer_activation_bytes]
    e = [x * time_scale for x in e]
    m_const = [x * mem_scale for x in m_const]
    usable = rp.usable_bytes * mem_scale
    prob = pulp.LpProblem("stage_partition", pulp.LpMinimize)
    # variables
    t_max = pulp.LpVariable("T", lowBound=0)  # T: slowest rank's time per micro-batch (scaled)
    if uniform:
        count_vars = _add_count_vars(prob, chunks, num_layers)
        chunk_time = {c: tau[0] * count_vars[c] for c in range(chunks)}
        chunk_state = {c: sigma[0] * count_vars[c] for c in range(chunks)}
        chunk_act = {c: alpha[0] * count_vars[c] for c in range(chunks)}
    else:
        x = _add_cumulative_vars(prob, chunks, num_layers)
        chunk_time = {
            c: pulp.lpSum(tau[lyr] * x[lyr, c] for lyr in range(num_layers)) for c in range(chunks)
        }
        chunk_state = {
            c: pulp.lpSum(sigma[lyr] * x[lyr, c] for lyr in range(num_layers))
            for c in range(chunks)
        }
        chunk_act = {
            c: pulp.lpSum(alpha[lyr] * x[lyr, c] for lyr in range(num_layers))
            for c in range(chunks)
        }
    # objective
    prob += t_max
    # constraints (c): rank time, (d): rank memory
    for j in range(p):
        own = range(j, chunks, p)
        prob += pulp.lpSum(chunk_time[c] for c in own) + e[j] <= t_max, f"c_time_{j}"
        if math.isfinite(usable):
            prob += (
                pulp.lpSum(
                    chunk_state[c] + rp.inflight_microbatches[j][c // p] * chunk_act[c] for c in own
                )
                + m_const[j]
                <= usable,
                f"d_memory_{j}",
            )
    # solve
    solver = _make_solver(time_limit_s)
    prob.solve(solver)
    # decode
    has_solution = prob.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    if prob.status == pulp.LpStatusInfeasible or (prob.sol_status == pulp.LpSolutionInfeasible):
        return PartitionResult(SolveStatus.INFEASIBLE, None, None, None)
    if not has_solution:
        return PartitionResult(SolveStatus.TIMEOUT, None, None, None)
    if uniform:
        stage_layers = [round(count_vars[c].value()) for c in range(chunks)]
    else:
        stage_layers = [
            sum(round(pulp.value(x[lyr, c])) for lyr in range(num_layers)) for c in range(chunks)
        ]
    optimal = prob.sol_status == pulp.LpSolutionOptimal
    gap = 0.0 if optimal else _mip_gap(prob)
    # verify: a decoded split must be a composition of L into C positive parts
    assert sum(stage_layers) == num_layers and min(stage_layers) >= 1, stage_layers
    obj = max(rank_times_s(rp, p, stage_layers))
    return PartitionResult(
        SolveStatus.OPTIMAL if optimal else SolveStatus.FEASIBLE, stage_layers, obj, gap
    )


def _mip_gap(prob: pulp.LpProblem) -> float | None:
    model = getattr(prob, "solverModel", None)
    try:
        return float(model.getInfo().mip_gap) if model is not None else None
    except Exception:  # pragma: no cover - CBC has no info object
        return None


def _add_count_vars(prob: pulp.LpProblem, chunks: int, num_layers: int) -> dict[int, Any]:
    # n[c]: number of layers of chunk c; (b) n[c] >= 1 as a bound
    n = {
        c: pulp.LpVariable(f"n_{c}", lowBound=1, upBound=num_layers, cat="Integer")
        for c in range(chunks)
    }
    # (a) every layer in exactly one chunk
    prob += pulp.lpSum(n.values()) == num_layers, "a_sum_layers"
    return n


def _add_cumulative_vars(
    prob: pulp.LpProblem, chunks: int, num_layers: int
) -> dict[tuple[int, int], Any]:
    # z[l, c] == 1 iff layer l is in a chunk <= c; z[l, C-1] == 1 (every layer is placed)
    z: dict[tuple[int, int], Any] = {}
    for lyr in range(num_layers):
        for c in range(chunks - 1):
            z[lyr, c] = pulp.LpVariable(f"z_{lyr}_{c}", cat="Binary")
        z[lyr, chunks - 1] = 1
    for lyr in range(num_layers):
        for c in range(1, chunks - 1):
            prob += z[lyr, c] - z[lyr, c - 1] >= 0, f"a1_monotone_chunk_{lyr}_{c}"
    for lyr in range(1, num_layers):
        for c in range(chunks - 1):
            prob += z[lyr - 1, c] - z[lyr, c] >= 0, f"a2_monotone_layer_{lyr}_{c}"
    # x[l, c] == 1 iff layer l is in chunk c
    x = {
        (lyr, c): z[lyr, c] - (z[lyr, c - 1] if c > 0 else 0)
        for lyr in range(num_layers)
        for c in range(chunks)
    }
    for c in range(chunks):
        prob += pulp.lpSum(x[lyr, c] for lyr in range(num_layers)) >= 1, f"b_nonempty_{c}"
    return x
