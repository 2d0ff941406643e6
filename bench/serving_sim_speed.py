"""Serving simulator speed (issue 5): one simulation and one goodput bisection.

Targets: one simulation of 600 requests with an affine cost ≪ 50 ms; one goodput bisection
(≈ 10 simulations) ≪ 0.5 s. The cost is a fake affine `InstanceCost` (roughly an 8B model
on one GPU: 10 ms per pass + 50 µs per prompt token + 0.2 ms per decode sequence + 0.1 µs
per context token; 100k KV tokens), so the figures are the simulator's own, not the cost
model's. Lengths: lognormal prompts (median ≈ 650) and outputs (median ≈ 150). Each figure is
printed as min / median of `--repeat` runs; the stream is fixed by `--seed`.

Usage: `python bench/serving_sim_speed.py [--repeat 7] [--requests 600] [--seed 0]`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_models.serving.base import IterationBatch  # noqa: E402
from solver.serving import (  # noqa: E402
    GoodputResult,
    Request,
    SimResult,
    SLOTarget,
    capacity_upper_bound_rps,
    goodput_colocated,
    goodput_disaggregated,
    mean_lengths,
    poisson_unit_stream,
    scale_stream,
    simulate_colocated,
    simulate_disaggregated,
)

T = TypeVar("T")


@dataclass(frozen=True)
class AffineCost:
    base: float = 0.01
    per_prefill_token: float = 5e-5
    per_decode_seq: float = 2e-4
    per_context_token: float = 1e-7
    kv_capacity_tokens: int = 100_000
    num_gpus: int = 1
    kv_cache_gib: float = 10.0
    weights_gib: float = 16.0

    def iteration_time_s(self, batch: IterationBatch) -> float:
        return (
            self.base
            + self.per_prefill_token * batch.prefill_tokens
            + self.per_decode_seq * batch.decode_seqs
            + self.per_context_token * batch.decode_context_tokens
        )

    def kv_transfer_time_s(self, tokens: int) -> float:
        return 2e-3 + 1e-6 * tokens


def _timed(fn: Callable[[], T], repeat: int) -> tuple[str, T]:
    """'min / median' ms over `repeat` runs (min: least disturbed by other load)."""
    times = []
    out = fn()
    for _ in range(repeat - 1):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return f"{min(times) * 1e3:.1f} / {statistics.median(times) * 1e3:.1f}", out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    n = args.requests
    prompts = [min(8192, max(1, round(rng.lognormvariate(6.5, 0.8)))) for _ in range(n)]
    outputs = [min(2048, max(1, round(rng.lognormvariate(5.0, 0.8)))) for _ in range(n)]
    unit: list[Request] = poisson_unit_stream(prompts, outputs, args.seed)
    cost = AffineCost()
    mp, mo = mean_lengths(unit)
    ub1 = capacity_upper_bound_rps(cost, 1, 128, 512, mp, mo)
    print(f"{n} requests, mean prompt {mp:.0f}, mean output {mo:.0f}; "
          f"capacity bound of one instance {ub1:.2f} req/s")  # fmt: skip
    print(f"{'case':<52} {'min / med ms':>14} {'events':>8} {'passes':>8}")

    for label, count, chunk, frac in [
        ("colocated x1, chunk 512, 50% of bound", 1, 512, 0.5),
        ("colocated x1, chunk 512, 90% of bound", 1, 512, 0.9),
        ("colocated x1, chunk 512, 200% of bound (overload)", 1, 512, 2.0),
        ("colocated x1, unchunked, 50% of bound", 1, None, 0.5),
        ("colocated x4, chunk 512, 70% of bound", 4, 512, 0.7),
        ("colocated x16, chunk 512, 70% of bound", 16, 512, 0.7),
    ]:
        reqs = scale_stream(unit, frac * ub1 * count)
        run: Callable[[], SimResult] = partial(simulate_colocated, reqs, cost, count, 128, chunk)
        dt, res = _timed(run, args.repeat)
        print(f"{label:<52} {dt:>14} {res.events:>8} {res.iterations:>8}")
    reqs = scale_stream(unit, 0.7 * ub1 * 2)
    dt, res = _timed(lambda: simulate_disaggregated(reqs, cost, 1, 2048, cost, 2, 128), args.repeat)
    label = "disaggregated 1 prefill + 2 decode, 70%"
    print(f"{label:<52} {dt:>14} {res.events:>8} {res.iterations:>8}")

    print(f"\n{'goodput bisection':<52} {'min / med ms':>14} {'sims':>8} {'req/s':>8}")
    slo = SLOTarget(ttft_s=0.3, tpot_s=0.015, percentile=90)
    for label, count in [("colocated x1, chunk 512, TTFT 300 ms, TPOT 15 ms", 1),
                         ("colocated x4, chunk 512, TTFT 300 ms, TPOT 15 ms", 4)]:  # fmt: skip
        search: Callable[[], GoodputResult] = partial(
            goodput_colocated, unit, cost, count, 128, 512, slo
        )
        dt, g = _timed(search, args.repeat)
        print(f"{label:<52} {dt:>14} {g.evaluations:>8} {g.goodput_rps:>8.2f}")
    dt, g = _timed(
        lambda: goodput_disaggregated(unit, cost, 1, 2048, cost, 2, 128, slo), args.repeat
    )
    label = "disaggregated 1 + 2, TTFT 300 ms, TPOT 15 ms"
    print(f"{label:<52} {dt:>14} {g.evaluations:>8} {g.goodput_rps:>8.2f}")


if __name__ == "__main__":
    main()
