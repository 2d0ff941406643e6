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

Streams:
* `poisson_unit_stream(prompts, outputs, seed)`: Poisson arrivals of rate 1 (exponential
  gaps), rescaled so that the mean gap is exactly 1 (the `n` arrival times of a Poisson
  process conditioned on the `n`-th arrival at time `n` — same shape, no sampling error in the
  rate), first arrival after one gap.
* `trace_stream(rows)`: a trace as given (arrival offset s, prompt, output), sorted by arrival.
  `unit_rate_stream` rescales any stream to mean gap 1 (a trace's shape, burstiness included,
  is kept; rate `λ` then divides its gaps by `λ / native rate`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from cost_models.serving.base import InstanceCost, scheduler_of
from solver.serving.queueing import (
    capacity_upper_bound_disaggregated_rps,
    capacity_upper_bound_rps,
)
from solver.serving.simulate import (
    ColocatedPart,
    Request,
    SimResult,
    StopRule,
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
    return [replace(r, arrival_s=r.arrival_s * inv) for r in unit_stream]


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


def goodput_rps(
    simulate: Callable[[list[Request]], SimResult],
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
    rate just below it instead of halving down from the bound."""
    if not rel_tol > 0.0:
        raise ValueError(f"rel_tol must be > 0, got {rel_tol}")
    evaluations = 0

    def run(rate: float) -> tuple[bool, SimResult]:
        nonlocal evaluations
        evaluations += 1
        res = simulate(scale_stream(unit_stream, rate))
        return slo.met_by(res), res

    def att(res: SimResult) -> float:
        return res.attainment(slo.ttft_s, slo.tpot_s)

    ub = upper_bound_rps
    if not ub > 0.0 or not unit_stream:
        return GoodputResult(0.0, max(ub, 0.0), 0.0, None, 0, "unattainable")
    if not math.isfinite(ub):
        raise ValueError("upper_bound_rps must be finite")
    ok, res = run(ub)
    if ok:
        return GoodputResult(ub, ub, att(res), res, evaluations, "capacity_bound")
    # Rates on a fixed geometric grid below the bound, r_k = ub / (1 + rel_tol)^k: the answer
    # is the largest grid rate that meets the SLO (attainment taken as monotone in the rate),
    # whatever path the search takes to it, so a search that starts from a known-good rate
    # and one that does not agree exactly.
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
    jump = max(1, math.ceil(math.log(2.0) / step))  # halve the rate, then quarter, ...
    while k_pass is None and evaluations < max_evaluations:
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
        return GoodputResult(0.0, ub, 0.0, None, evaluations, "unattainable")
    while k_pass - k_fail > 1 and evaluations < max_evaluations:
        mid = (k_fail + k_pass) // 2
        ok, res = run(rate_of(mid))
        if ok:
            k_pass, lo_res = mid, res
        else:
            k_fail = mid
    return GoodputResult(rate_of(k_pass), ub, att(lo_res), lo_res, evaluations, "slo")


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
) -> GoodputResult:
    """Goodput of `count` colocated instances, bracketed by `capacity_upper_bound_rps`.
    `early_stop` ends failing probes as soon as their misses exceed the allowance (same
    verdicts, less time); the result at the goodput is always a complete simulation."""
    mp, mo = mean_lengths(unit_stream, scheduler_of(cost).prefix_caching)
    ub = capacity_upper_bound_rps(cost, count, max_batch_size, chunk_size, mp, mo)
    stop = slo.stop_rule(len(unit_stream)) if early_stop else None

    def sim(reqs: list[Request]) -> SimResult:
        return simulate_colocated(
            reqs, cost, count, max_batch_size, chunk_size, max_events=max_events, stop=stop
        )

    return goodput_rps(sim, unit_stream, slo, ub, rel_tol=rel_tol, known_good=known_good)


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
    (`simulate_colocated_mix`), bracketed by the sum of their capacity bounds."""
    ub = 0.0
    for part in parts:
        mp, mo = mean_lengths(unit_stream, scheduler_of(part.cost).prefix_caching)
        ub += capacity_upper_bound_rps(
            part.cost, part.count, part.max_batch_size, part.chunk_size, mp, mo
        )
    stop = slo.stop_rule(len(unit_stream)) if early_stop else None

    def sim(reqs: list[Request]) -> SimResult:
        return simulate_colocated_mix(reqs, parts, max_events=max_events, stop=stop)

    return goodput_rps(sim, unit_stream, slo, ub, rel_tol=rel_tol)


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
) -> GoodputResult:
    """Goodput of a disaggregated plan, bracketed by `capacity_upper_bound_disaggregated_rps`."""
    mp, mo = mean_lengths(unit_stream, scheduler_of(prefill_cost).prefix_caching)
    ub = capacity_upper_bound_disaggregated_rps(
        prefill_cost, prefill_count, prefill_chunk, decode_cost, decode_count,
        decode_max_batch, mp, mo,
    )  # fmt: skip

    stop = slo.stop_rule(len(unit_stream)) if early_stop else None

    def sim(reqs: list[Request]) -> SimResult:
        return simulate_disaggregated(
            reqs, prefill_cost, prefill_count, prefill_chunk, decode_cost, decode_count,
            decode_max_batch, max_events=max_events, stop=stop,
        )  # fmt: skip

    return goodput_rps(sim, unit_stream, slo, ub, rel_tol=rel_tol, known_good=known_good)
