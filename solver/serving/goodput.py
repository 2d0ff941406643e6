"""Request streams and goodput (issue 5).

Goodput (DistServe, Zhong et al., OSDI'24, §2.2): the highest request rate at which at least
`percentile`% of requests meet both the TTFT and the TPOT target. Found by bisection over the
rate with one fixed *unit-rate* arrival stream whose arrival times are divided by the rate
(common random numbers: every rate sees the same requests in the same order, so the search is
deterministic given the seed, and attainment is, in practice, monotone in the rate).

The search is bracketed above by the analytical capacity bound (`queueing.py`): with a finite
stream a rate above the steady-state capacity can still meet a loose SLO (the queue has not
grown long enough by the last request), so the goodput is capped at that bound and reported as
`limited_by="capacity_bound"` when the SLO holds there. Below, rates `U/2, U/8, U/32, …` are
tried until one meets the SLO (down to `U·min_fraction`, else the SLO is unattainable and the
goodput is 0), then the bracket is bisected geometrically to a relative width `rel_tol`.

Probes that fail can stop early (`SLOTarget.stop_rule`): once more requests have missed than
the percentile allows, the verdict cannot change.

Steady state. A stream starts on an empty system, so a short one is optimistic: at high
rates the requests in flight (`L = λ·W`, Little's law) take longer than the stream lasts to
build up, and the stream ends while the batches, and the queue, are still growing. Two
checks keep the goodput to what the plan sustains:
* the capacity bound prices prompts and decodes on the same GPUs together
  (`queueing.shared_rate_rps`), so the bisection never probes far above the steady state;
* a probe near the plan's steady-state rate (within `STEADY_BAND` of `steady_rps`, the rate
  its instances sustain with each iteration meeting the TPOT target) that meets the SLO must
  also show a settled backlog (`backlog_settles`: the MSER-5 truncation rule on the number of
  requests each arrival finds in the system, or a backlog level over the second half). When
  the short stream cannot tell, the answer of the bisection is simulated again on a stream
  of a few request lifetimes (the unit stream repeated, `repeated_stream`, at
  most `STEADY_MAX_REQUESTS` requests), which must meet the SLO with a backlog that has
  settled or is still filling; when it fails, the bisection goes on below with every pass
  confirmed so (`SteadyProbe`). Where no allowed stream covers the lifetimes, a pass holds
  up to the steady-state rate. Probes far below the steady-state rate and those that
  settled on the short stream keep the short stream's verdict, so only the plans that need
  it pay for longer streams.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from cost_models.serving.base import InstanceCost, scheduler_of
from solver.serving.queueing import (
    capacity_upper_bound_disaggregated_rps,
    capacity_upper_bound_rps,
    steady_rate_rps,
)
from solver.serving.simulate import (
    ColocatedPart,
    Request,
    ResumePoint,
    SimResult,
    StopRule,
    budget_reusable,
    simulate_colocated,
    simulate_colocated_mix,
    simulate_disaggregated,
)


@dataclass(frozen=True, slots=True)
class SLOTarget:
    """TTFT and TPOT targets in seconds (`None` = no target) met by `percentile`% of requests."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    percentile: float = 90.0

    def __post_init__(self) -> None:
        for name, v in (("ttft_s", self.ttft_s), ("tpot_s", self.tpot_s)):
            if v is not None and not v > 0.0:
                raise ValueError(f"SLOTarget.{name} must be > 0, got {v}")
        if not 0.0 < self.percentile <= 100.0:
            raise ValueError(f"SLOTarget.percentile must be in (0, 100], got {self.percentile}")

    def met_by(self, result: SimResult) -> bool:
        return result.attainment(self.ttft_s, self.tpot_s) >= self.percentile / 100.0 - 1e-12

    def stop_rule(self, num_requests: int) -> StopRule:
        """Stop a simulation once the misses exceed `(1 − percentile/100)·n`: it has failed."""
        allowed = math.floor(num_requests * (1.0 - self.percentile / 100.0) + 1e-9)
        return StopRule(self.ttft_s, self.tpot_s, allowed)


# --------------------------------------------------------------------------------------------
# streams


def poisson_unit_stream(
    prompt_tokens: Sequence[int], output_tokens: Sequence[int], seed: int
) -> list[Request]:
    """Unit-rate Poisson arrivals for the given request lengths (request `i` is the `i`-th
    arrival). The arrival generator is seeded from `seed` independently of any generator the
    caller used for the lengths."""
    n = len(prompt_tokens)
    if len(output_tokens) != n:
        raise ValueError(
            f"prompt_tokens and output_tokens differ in length: {n} vs {len(output_tokens)}"
        )
    if n == 0:
        return []
    rng = random.Random(f"meshplan-serving-arrivals:{seed}")
    gaps = [rng.expovariate(1.0) for _ in range(n)]
    scale = n / math.fsum(gaps)
    out = []
    t = 0.0
    for g, p, o in zip(gaps, prompt_tokens, output_tokens, strict=True):
        t += g * scale
        out.append(Request(t, int(p), int(o)))
    return out


def trace_stream(rows: Iterable[tuple[float, int, int]]) -> list[Request]:
    """A trace of (arrival offset s, prompt tokens, output tokens), sorted by arrival (stable)."""
    reqs = [Request(float(a), int(p), int(o)) for a, p, o in rows]
    reqs.sort(key=lambda r: r.arrival_s)
    return reqs


def repeated_stream(unit_stream: Sequence[Request], num_requests: int) -> list[Request]:
    """The first `num_requests` requests of the unit stream repeated back to back: copy `k`
    arrives `k·n` later (a unit-rate stream of `n` requests spans about `n`, so the copies
    continue at the same rate with the same lengths)."""
    n = len(unit_stream)
    if n == 0:
        return []
    # the constructor, not dataclasses.replace: the same requests, a few times faster
    return [
        Request(
            r.arrival_s + (i // n) * n, r.prompt_tokens, r.output_tokens, r.shared_prefix_tokens
        )
        for i, r in ((i, unit_stream[i % n]) for i in range(num_requests))
    ]


def backlog_series(arrival_s: npt.NDArray[np.float64], result: SimResult) -> npt.NDArray[np.int64]:
    """The number of requests in the system (arrived, not finished) that each arrival finds,
    in arrival order; the backlog sampled at arrival instants (time averages by PASTA for
    Poisson arrivals)."""
    order = np.argsort(arrival_s, kind="stable")
    arr = arrival_s[order]
    finish = np.sort(arrival_s + result.e2e_s)  # inf for those that never finish
    return np.arange(arr.size) - np.searchsorted(finish, arr, side="right")


MSER_BATCH = 5
"""MSER-5: the rule is applied to means of 5 consecutive observations (White, Cobb and Spratt,
2000; the variant Hoad and Robinson, WSC 2011, found the most reliable warm-up rule)."""


def mser_truncation(series: npt.NDArray[np.float64]) -> tuple[int, int]:
    """(the MSER-5 truncation point d*, the number of batch means m): the batches to delete
    from the front so that the rest has the least squared standard error of its mean,
    `Σ_{j>d} (Z_j − Z̄_d)² / (m − d)²` (White, "An effective truncation heuristic for bias
    reduction in simulation output", Simulation 69(6), 1997). The last 5 batches are never
    all deleted (the criterion is degenerate there)."""
    m = series.size // MSER_BATCH
    if m < 2:
        return 0, m
    z = series[: m * MSER_BATCH].reshape(m, MSER_BATCH).mean(axis=1)[::-1]
    # suffix sums from the back: for d, the kept part is z_rev[: m − d]
    s1 = np.cumsum(z)
    s2 = np.cumsum(z * z)
    k = np.arange(1, m + 1, dtype=np.float64)  # kept batches
    sse = s2 - s1 * s1 / k
    mse = sse / (k * k)
    keep_min = min(5, m)
    kept = int(np.argmin(mse[keep_min - 1 :][::-1]))  # 0 = keep all (d = 0)
    return kept, m


BACKLOG_GROWTH_TOL = 0.15
"""A backlog that grows, over the second half of the arrivals, by less than 0.15 request per
arrival (least-squares slope) has levelled off (flow balance: the backlog grows at the
arrival rate minus the departure rate, so at most 15 % of the arrivals stay). The slack is
for the batches still filling (a stable Llama-3-8B node at 160 requests/s over 2,400
requests: 0.12); milder overloads are left to the capacity bound."""


def backlog_settles(arrival_s: npt.NDArray[np.float64], result: SimResult) -> bool:
    """Whether the simulation reached a steady state: the MSER-5 truncation point of the
    backlog series (`backlog_series`) lies in its first half, or the backlog has levelled
    off over the second half (`BACKLOG_GROWTH_TOL`). A truncation point in the second half
    means no steady part long enough to measure was found: the run is too short for its
    transient, or the backlog grows throughout (Hoad and Robinson, WSC 2011: MSER's deletion
    point beyond half the run signals an insufficient run length); the slope test accepts
    a transient that ended early in the second half (MSER would delete it with the plateau)."""
    x = backlog_series(arrival_s, result).astype(np.float64)
    d, m = mser_truncation(x)
    if m >= 2 and d <= m // 2:
        return True
    half = x[x.size // 2 :]
    if half.size < 2:
        return False
    slope = float(np.polyfit(np.arange(half.size, dtype=np.float64), half, 1)[0])
    return slope <= BACKLOG_GROWTH_TOL


def mean_lifetime_s(result: SimResult) -> float:
    """Mean time a request spends being served, over those that finished (`inf` if none):
    first token to last (`e2e − ttft`) plus the shortest TTFT (a prefill without a queue).
    The wait in the queue is left out: it is what grows when a rate is not sustainable, and
    the transient to wait out is that of the batches filling."""
    done = np.isfinite(result.e2e_s)
    if not done.any():
        return math.inf
    serving = result.e2e_s[done] - result.ttft_s[done]
    return float(serving.mean() + result.ttft_s[done].min())


def stream_rate_rps(requests: Sequence[Request]) -> float:
    """Empirical arrival rate: (n − 1) / (last arrival − first arrival)."""
    if len(requests) < 2:
        raise ValueError("a rate needs at least two requests")
    span = max(r.arrival_s for r in requests) - min(r.arrival_s for r in requests)
    if span <= 0.0:
        raise ValueError("all requests arrive at the same instant: the stream has no rate")
    return (len(requests) - 1) / span


def unit_rate_stream(requests: Sequence[Request]) -> list[Request]:
    """The same stream shifted to start at 0 and rescaled to a mean gap of 1 s."""
    rate = stream_rate_rps(requests)
    t0 = min(r.arrival_s for r in requests)
    return [replace(r, arrival_s=(r.arrival_s - t0) * rate) for r in requests]


def scale_stream(unit_stream: Sequence[Request], rate_rps: float) -> list[Request]:
    """Arrival times divided by `rate_rps` (a unit-rate stream becomes a rate-`rate_rps` one)."""
    if not (rate_rps > 0.0 and math.isfinite(rate_rps)):
        raise ValueError(f"rate_rps must be positive and finite, got {rate_rps}")
    inv = 1.0 / rate_rps
    # the constructor, not dataclasses.replace: the same requests, a few times faster (this
    # runs once per simulation of the goodput search)
    return [
        Request(r.arrival_s * inv, r.prompt_tokens, r.output_tokens, r.shared_prefix_tokens)
        for r in unit_stream
    ]


def mean_lengths(requests: Sequence[Request], prefix_cached: bool = False) -> tuple[float, float]:
    """(mean prompt tokens, mean output tokens); with `prefix_cached`, the prompt tokens
    each request computes once its shared prefix is cached (what bounds must assume)."""
    if not requests:
        raise ValueError("no requests")
    n = len(requests)
    return (
        sum(r.computed_prompt_tokens(prefix_cached) for r in requests) / n,
        sum(r.output_tokens for r in requests) / n,
    )


# --------------------------------------------------------------------------------------------
# goodput

STEADY_BAND = 0.1
"""Probes above `(1 − STEADY_BAND) ×` the steady-state rate need a settled backlog; below it
the plan's steady-state iterations meet the TPOT target with room (10 %: about twice the
error of the closed-form steady state against streams of 20,000 requests on Llama-3-8B
instances) and the short stream's verdict stands."""

STEADY_MAX_REQUESTS = 2400
"""Longest stream an inconclusive probe is simulated on (4 × the default 600 requests: the
confirmations stay within a few times a probe's cost; a plan whose lifetimes need more is
held to its closed-form steady-state rate)."""

STEADY_LIFETIMES = 2.0
"""A backlog that has not settled after this many mean service lifetimes of arrivals
(`mean_lifetime_s`) is growing: by Little's law the backlog of an empty start fills in
about one lifetime, so the second half of such a window is past the transient."""

STEADY_STRETCH = 2.0
"""A confirmation simulates `STEADY_STRETCH × STEADY_LIFETIMES` lifetimes as the short stream
measured them: lifetimes lengthen as the batches fill (Llama-3-8B on H100s at its goodput:
3.4 s over 600 requests, 7.8 s over 4,800)."""


@dataclass(frozen=True)
class GoodputResult:
    """`goodput_rps`: highest rate found meeting the SLO (0 if none); `result`: the simulation
    at that rate (`None` when 0); `upper_bound_rps`: the capacity bound used as the bracket;
    `evaluations`: simulations run; `limited_by`: "slo" (bisection), "capacity_bound" (the SLO
    holds at the bound, goodput capped there) or "unattainable"."""

    goodput_rps: float
    upper_bound_rps: float
    attainment: float
    result: SimResult | None
    evaluations: int
    limited_by: Literal["slo", "capacity_bound", "unattainable"]


class SteadyProbe:
    """Simulates a plan at a rate and says whether the SLO holds there in steady state (the
    module docstring): the short stream's verdict, and near the steady-state rate
    `steady_rps` (None: never) a settled backlog, on a longer stream when the short one is
    inconclusive. Counts the simulations it runs (`evaluations`)."""

    def __init__(
        self,
        simulate: Callable[..., SimResult],
        unit_stream: Sequence[Request],
        slo: SLOTarget,
        steady_rps: float | None = None,
        max_requests: int = STEADY_MAX_REQUESTS,
    ) -> None:
        self.simulate = simulate
        """The simulation of a stream (`simulate(requests)`; a `resumable` one also takes
        `snapshot_at` and `resume`)."""
        self.unit_stream = unit_stream
        self.slo = slo
        self.steady_rps = steady_rps
        self.max_requests = max_requests
        self.evaluations = 0
        self._longer: dict[int, list[Request]] = {}
        self.resumable = False
        """`simulate` takes `snapshot_at` and `resume` (`simulate.simulate_colocated`)."""

    def near(self, rate: float) -> bool:
        """Whether a pass at `rate` needs a settled backlog (within `STEADY_BAND` of the
        steady-state rate, or above it)."""
        return self.steady_rps is not None and rate > (1.0 - STEADY_BAND) * self.steady_rps

    def attempt(
        self,
        stream: Sequence[Request],
        rate: float,
        check: bool,
        resume: ResumePoint | None = None,
    ) -> tuple[bool, SimResult, bool, bool]:
        """(meets the SLO, the result, settled, growing), the last two only with `check`
        (else True, False). Growing: not settled after `STEADY_LIFETIMES` mean lifetimes of
        arrivals. A `resumable` probe keeps, with an inconclusive pass of the short stream,
        the point its longer stream can go on from (`simulate.ResumePoint`: the repeated
        stream's first copy is the short stream, its second arrives after all of it), and
        goes on from `resume` when given one."""
        self.evaluations += 1
        reqs = scale_stream(stream, rate)
        if not self.resumable:
            res = self.simulate(reqs)
        elif resume is not None:
            res = self.simulate(reqs, resume=resume)
        elif check and stream is self.unit_stream and len(stream) >= 1:
            # the second copy of `repeated_stream`, scaled as `scale_stream` scales it
            at = (min(r.arrival_s for r in stream) + len(stream)) * (1.0 / rate)
            res = self.simulate(reqs, snapshot_at=at)
        else:
            res = self.simulate(reqs)
        met = self.slo.met_by(res)
        if not met or not check:
            _release(res)
            return met, res, True, False
        arrivals = np.fromiter((r.arrival_s for r in reqs), np.float64, len(reqs))
        if backlog_settles(arrivals, res):
            _release(res)
            return True, res, True, False
        window = float(arrivals.max() - arrivals.min())
        return True, res, False, window >= STEADY_LIFETIMES * mean_lifetime_s(res)

    def confirm(self, rate: float, res: SimResult, settled: bool) -> tuple[bool, SimResult]:
        """An inconclusive pass simulated again, once, on a stream of `STEADY_STRETCH ×
        STEADY_LIFETIMES` mean lifetimes (as the short stream measured them) of arrivals,
        which fails if it misses the SLO or its backlog grows; a short stream that long
        already fails as it is; a pass that would need more than `max_requests` requests
        holds up to the steady-state rate (its iterations there meet the TPOT target on
        average; above it the mean step, which every request's TPOT averages, misses it)."""
        if settled:
            return True, res
        need = math.ceil(STEADY_STRETCH * STEADY_LIFETIMES * mean_lifetime_s(res) * rate)
        if need <= len(self.unit_stream):
            return False, res  # long enough already, and its backlog grows
        if need > self.max_requests:  # out of reach: the closed-form steady state decides
            return self.steady_rps is None or rate <= self.steady_rps, res
        if need not in self._longer:
            self._longer[need] = repeated_stream(self.unit_stream, need)
        point = res.resume_point
        met, res, _, growing = self.attempt(self._longer[need], rate, True, point)
        return met and not growing, res

    def short(self, rate: float) -> tuple[bool, SimResult, bool]:
        """(meets the SLO, the result, settled) on the short stream at `rate`, its backlog
        checked when `near`. A short stream's unsettled backlog is only inconclusive (too
        few requests to call it growing): `confirm` decides."""
        met, res, settled, _ = self.attempt(self.unit_stream, rate, self.near(rate))
        return met, res, settled

    def holds(self, rate: float) -> tuple[bool, SimResult]:
        """Whether the SLO holds at `rate` in steady state (confirmed where inconclusive)."""
        ok, res, settled = self.short(rate)
        return self.confirm(rate, res, settled) if ok else (ok, res)


def _release(res: SimResult) -> None:
    if res.resume_point is not None:
        res.resume_point.release()


def goodput_rps(
    simulate: Callable[[list[Request]], SimResult] | SteadyProbe,
    unit_stream: Sequence[Request],
    slo: SLOTarget,
    upper_bound_rps: float,
    *,
    rel_tol: float = 0.02,
    min_fraction: float = 1e-4,
    max_evaluations: int = 32,
    known_good: float | None = None,
) -> GoodputResult:
    """Bisection for the goodput of `simulate` on `unit_stream` (see the module docstring).
    `known_good`: a rate already seen to meet the SLO; the search then first tries the grid
    rate just below it instead of halving down from the bound. A plain `simulate` keeps every
    verdict of the short stream; a `SteadyProbe` (built on the same stream and SLO) also
    asks for a steady state near its steady-state rate."""
    if not rel_tol > 0.0:
        raise ValueError(f"rel_tol must be > 0, got {rel_tol}")
    probe = (
        simulate if isinstance(simulate, SteadyProbe) else SteadyProbe(simulate, unit_stream, slo)
    )
    strict = False  # after a failed confirmation every pass is confirmed

    def run(rate: float) -> tuple[bool, SimResult]:
        ok, res, settled = probe.short(rate)
        if ok and strict:
            ok, res = probe.confirm(rate, res, settled)
        return ok, res

    def confirmed(rate: float, res: SimResult) -> tuple[bool, SimResult]:
        """The answer confirmed where it needs it (`strict` passes already were)."""
        if strict or not probe.near(rate):
            return True, res
        arrivals = np.fromiter(
            (r.arrival_s for r in scale_stream(unit_stream, rate)), np.float64, len(unit_stream)
        )
        return probe.confirm(rate, res, backlog_settles(arrivals, res))

    def att(res: SimResult) -> float:
        return res.attainment(slo.ttft_s, slo.tpot_s)

    ub = upper_bound_rps
    if not ub > 0.0 or not unit_stream:
        return GoodputResult(0.0, max(ub, 0.0), 0.0, None, 0, "unattainable")
    if not math.isfinite(ub):
        raise ValueError("upper_bound_rps must be finite")
    ok, res = run(ub)
    if ok:
        ok, res = confirmed(ub, res)
        if ok:
            return GoodputResult(ub, ub, att(res), res, probe.evaluations, "capacity_bound")
        strict = True
    # Rates on a fixed geometric grid below the bound, r_k = ub / (1 + rel_tol)^k: the answer
    # is the largest grid rate that meets the SLO (attainment taken as monotone in the rate),
    # whatever path the search takes to it, so a search that starts from a known-good rate
    # and one that does not agree exactly. The probes run on the short stream; the answer is
    # then confirmed on a longer one where it needs it, and when that fails the search goes
    # on below it confirming every pass.
    step = math.log1p(rel_tol)
    k_max = math.ceil(-math.log(min_fraction) / step)

    def rate_of(k: int) -> float:
        return ub * math.exp(-k * step)

    k_fail = 0
    k_pass: int | None = None
    lo_res: SimResult | None = None
    if known_good is not None and 0.0 < known_good < ub:
        k = min(k_max, max(1, math.ceil(math.log(ub / known_good) / step - 1e-9)))
        ok, res = run(rate_of(k))
        if ok:
            k_pass, lo_res = k, res
        else:
            k_fail = k
    while True:
        # halve the rate, then quarter, ...; below a failed confirmation the answer is near:
        # one grid step, then two, four, ...
        jump = 1 if strict else max(1, math.ceil(math.log(2.0) / step))
        while k_pass is None and probe.evaluations < max_evaluations:
            k = min(k_max, k_fail + jump)
            ok, res = run(rate_of(k))
            if ok:
                k_pass, lo_res = k, res
                break
            k_fail = k
            jump *= 2
            if k >= k_max:
                break
        if k_pass is None or lo_res is None:
            return GoodputResult(0.0, ub, 0.0, None, probe.evaluations, "unattainable")
        while k_pass - k_fail > 1 and probe.evaluations < max_evaluations:
            mid = (k_fail + k_pass) // 2
            ok, res = run(rate_of(mid))
            if ok:
                k_pass, lo_res = mid, res
            else:
                k_fail = mid
        ok, res = confirmed(rate_of(k_pass), lo_res)
        if ok:
            return GoodputResult(rate_of(k_pass), ub, att(res), res, probe.evaluations, "slo")
        strict, k_fail, k_pass, lo_res = True, k_pass, None, None


class SimulationMemo:
    """Simulations a search has run, for candidates that differ only in their max batch or
    their token budget, or not at all. A simulation whose instances never ran as many
    sequences as its max batch (peak P below it) never met that limit, so with any max
    batch above P every admission decision, and so the whole schedule and result, is the
    same (the simulator reads the max batch only in `n_running < max_batch`); likewise a
    budget that never bound leaves the same schedule to the budgets `budget_reusable`
    accepts. Keyed by everything else the simulation reads: the instance costs (by
    identity: one search's costs are cached and live as long as it), counts, the scheduler
    policy the budget selects, event cap, stop rule and every request's arrival and
    lengths."""

    def __init__(self) -> None:
        self._runs: dict[tuple[object, ...], list[tuple[int, int | None, SimResult]]] = {}
        self.hits = 0

    @staticmethod
    def key(setting: tuple[object, ...], requests: Sequence[Request]) -> tuple[object, ...]:
        return (
            setting,
            tuple(r.arrival_s for r in requests),
            tuple(r.prompt_tokens for r in requests),
            tuple(r.output_tokens for r in requests),
            tuple(r.shared_prefix_tokens for r in requests),
        )

    def get(
        self, key: tuple[object, ...], max_batch: int, chunk: int | None = None
    ) -> SimResult | None:
        for batch, budget, res in self._runs.get(key, ()):
            peak = res.max_running_per_instance
            if (batch == max_batch or (peak < batch and peak < max_batch)) and (
                budget_reusable(res.budget_slack, budget, chunk)
            ):
                self.hits += 1
                return res
        return None

    def put(
        self, key: tuple[object, ...], max_batch: int, res: SimResult, chunk: int | None = None
    ) -> None:
        self._runs.setdefault(key, []).append((max_batch, chunk, res))

    def run(
        self,
        setting: tuple[object, ...],
        requests: Sequence[Request],
        max_batch: int,
        simulate: Callable[[], SimResult],
        chunk: int | None = None,
    ) -> SimResult:
        """`simulate()` (the simulation of `requests` under `setting` with `max_batch` and
        token budget `chunk`), or the result of one that gives the same schedule."""
        key = self.key(setting, requests)
        hit = self.get(key, max_batch, chunk)
        if hit is None:
            hit = simulate()
            self.put(key, max_batch, hit, chunk)
        return hit


def colocated_probe(
    unit_stream: Sequence[Request],
    cost: InstanceCost,
    count: int,
    max_batch_size: int,
    chunk_size: int | None,
    slo: SLOTarget,
    *,
    max_events: int | None = None,
    early_stop: bool = True,
    memo: SimulationMemo | None = None,
) -> tuple[SteadyProbe, float]:
    """(the probe of `count` colocated instances, their `capacity_upper_bound_rps`); the
    steady-state rate is `queueing.steady_rate_rps` at the TPOT target. `early_stop` ends
    failing probes as soon as their misses exceed the allowance (same verdicts); `memo`
    reuses the simulations of other max batches that never reached theirs."""
    mp, mo = mean_lengths(unit_stream, scheduler_of(cost).prefix_caching)
    ub = capacity_upper_bound_rps(cost, count, max_batch_size, chunk_size, mp, mo)
    steady = steady_rate_rps(cost, count, max_batch_size, chunk_size, mp, mo, slo.tpot_s)

    tag = ("colocated", id(cost), count, max_batch_size, chunk_size, max_events)

    def sim(
        reqs: list[Request], snapshot_at: float | None = None, resume: ResumePoint | None = None
    ) -> SimResult:
        stop = slo.stop_rule(len(reqs)) if early_stop else None
        if resume is not None and (resume.tag != tag or resume.state is None):
            resume = None  # another plan's (a memo's reuse): simulate from the start

        def run() -> SimResult:
            res = simulate_colocated(
                reqs, cost, count, max_batch_size, chunk_size, max_events=max_events, stop=stop,
                snapshot_at=snapshot_at, resume=resume,
            )  # fmt: skip
            if res.resume_point is not None:
                res.resume_point.tag = tag
            return res

        if memo is None:
            return run()
        separate = scheduler_of(cost).separates(chunk_size is not None)
        setting = ("colocated", id(cost), count, separate, max_events, stop)
        return memo.run(setting, reqs, max_batch_size, run, chunk_size)

    probe = SteadyProbe(sim, unit_stream, slo, steady)
    probe.resumable = True
    return probe, ub


def goodput_colocated(
    unit_stream: Sequence[Request],
    cost: InstanceCost,
    count: int,
    max_batch_size: int,
    chunk_size: int | None,
    slo: SLOTarget,
    *,
    rel_tol: float = 0.02,
    max_events: int | None = None,
    early_stop: bool = True,
    known_good: float | None = None,
    memo: SimulationMemo | None = None,
) -> GoodputResult:
    """Goodput of `count` colocated instances, bracketed by `capacity_upper_bound_rps`
    (`colocated_probe`); the result at the goodput is always a complete simulation."""
    probe, ub = colocated_probe(
        unit_stream, cost, count, max_batch_size, chunk_size, slo,
        max_events=max_events, early_stop=early_stop, memo=memo,
    )  # fmt: skip
    return goodput_rps(probe, unit_stream, slo, ub, rel_tol=rel_tol, known_good=known_good)


def goodput_colocated_mix(
    unit_stream: Sequence[Request],
    parts: Sequence[ColocatedPart],
    slo: SLOTarget,
    *,
    rel_tol: float = 0.02,
    max_events: int | None = None,
    early_stop: bool = True,
) -> GoodputResult:
    """Goodput of colocated instances of several kinds behind one router
    (`simulate_colocated_mix`), bracketed by the sum of their capacity bounds (and their
    steady-state rates summed likewise)."""
    ub = steady = 0.0
    for part in parts:
        mp, mo = mean_lengths(unit_stream, scheduler_of(part.cost).prefix_caching)
        ub += capacity_upper_bound_rps(
            part.cost, part.count, part.max_batch_size, part.chunk_size, mp, mo
        )
        steady += steady_rate_rps(
            part.cost, part.count, part.max_batch_size, part.chunk_size, mp, mo, slo.tpot_s
        )

    def sim(reqs: list[Request]) -> SimResult:
        stop = slo.stop_rule(len(reqs)) if early_stop else None
        return simulate_colocated_mix(reqs, parts, max_events=max_events, stop=stop)

    probe = SteadyProbe(sim, unit_stream, slo, steady)
    return goodput_rps(probe, unit_stream, slo, ub, rel_tol=rel_tol)


def disaggregated_probe(
    unit_stream: Sequence[Request],
    prefill_cost: InstanceCost,
    prefill_count: int,
    prefill_chunk: int | None,
    decode_cost: InstanceCost,
    decode_count: int,
    decode_max_batch: int,
    slo: SLOTarget,
    *,
    max_events: int | None = None,
    early_stop: bool = True,
    memo: SimulationMemo | None = None,
) -> tuple[SteadyProbe, float]:
    """(the probe of a disaggregated plan, its `capacity_upper_bound_disaggregated_rps`);
    each pool runs one kind of work, so the capacity bound is the steady-state rate.
    `memo`: as for `colocated_probe` (the peak over both pools stands for the decode
    pool's, so a reuse is never wrong, only sometimes missed)."""
    mp, mo = mean_lengths(unit_stream, scheduler_of(prefill_cost).prefix_caching)
    ub = capacity_upper_bound_disaggregated_rps(
        prefill_cost, prefill_count, prefill_chunk, decode_cost, decode_count,
        decode_max_batch, mp, mo,
    )  # fmt: skip

    tag = (
        "disaggregated", id(prefill_cost), prefill_count, prefill_chunk, id(decode_cost),
        decode_count, decode_max_batch, max_events,
    )  # fmt: skip

    def sim(
        reqs: list[Request], snapshot_at: float | None = None, resume: ResumePoint | None = None
    ) -> SimResult:
        stop = slo.stop_rule(len(reqs)) if early_stop else None
        if resume is not None and (resume.tag != tag or resume.state is None):
            resume = None  # another plan's (a memo's reuse): simulate from the start

        def run() -> SimResult:
            res = simulate_disaggregated(
                reqs, prefill_cost, prefill_count, prefill_chunk, decode_cost, decode_count,
                decode_max_batch, max_events=max_events, stop=stop, snapshot_at=snapshot_at,
                resume=resume,
            )  # fmt: skip
            if res.resume_point is not None:
                res.resume_point.tag = tag
            return res

        if memo is None:
            return run()
        # a prefill instance's policy does not depend on its budget (it runs no decodes)
        setting = (
            "disaggregated", id(prefill_cost), prefill_count, id(decode_cost), decode_count,
            max_events, stop,
        )  # fmt: skip
        return memo.run(setting, reqs, decode_max_batch, run, prefill_chunk)

    probe = SteadyProbe(sim, unit_stream, slo, ub)
    probe.resumable = True
    return probe, ub


def goodput_disaggregated(
    unit_stream: Sequence[Request],
    prefill_cost: InstanceCost,
    prefill_count: int,
    prefill_chunk: int | None,
    decode_cost: InstanceCost,
    decode_count: int,
    decode_max_batch: int,
    slo: SLOTarget,
    *,
    rel_tol: float = 0.02,
    max_events: int | None = None,
    early_stop: bool = True,
    known_good: float | None = None,
    memo: SimulationMemo | None = None,
) -> GoodputResult:
    """Goodput of a disaggregated plan, bracketed by `capacity_upper_bound_disaggregated_rps`
    (`disaggregated_probe`)."""
    probe, ub = disaggregated_probe(
        unit_stream, prefill_cost, prefill_count, prefill_chunk, decode_cost, decode_count,
        decode_max_batch, slo, max_events=max_events, early_stop=early_stop, memo=memo,
    )  # fmt: skip
    return goodput_rps(probe, unit_stream, slo, ub, rel_tol=rel_tol, known_good=known_good)
