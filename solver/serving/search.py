"""Serving plan search: instance layouts, batch and chunk sizes, colocated or prefill/decode
disaggregated, ranked by the workload's objective; exact over the declared space up to the
simulator's goodput tolerance, by branch and bound on closed-form capacity bounds.

Space (every degree and size below can be pinned with `constraints.fixed`):
- an instance layout: weight format (`workload.precision` and `precision_options`), tensor t
  (divisors of the node size), pipeline p (powers of two up to the GPU count and the layer
  count), expert e (MoE only: attention data-parallel replicas with the experts spread over
  all t·e GPUs, `ServingParallelism`), with t·e inside one node; layouts whose weights do not
  fit are dropped by the cost model (`InfeasiblePlan`);
- colocated: the layout × max batch (powers of two from 8 and the KV-cache limit, up to
  `MAX_BATCH`) × prefill chunk (`CHUNKS`, Sarathi-Serve token budgets); the plan replicates
  the instance over the cluster;
- disaggregated (DistServe, Zhong et al., OSDI'24): a prefill layout × chunk, a decode layout
  × max batch, and a ratio of a prefill to b decode instances per unit (a, b ≤ `MAX_RATIO`,
  coprime); the plan replicates the unit.

Objectives:
- `max_goodput_per_gpu` (default): the unit's goodput / its GPUs, highest first;
- `min_gpus`: the fewest GPUs whose units carry `arrival_rate_rps` within the SLO, then the
  highest goodput per GPU;
- `min_latency`: the lowest P90 end-to-end latency with the whole cluster, simulated per unit
  at its share of the rate (as many units as
  fit) among plans that meet the SLO: simulated at the arrival rate when one is given; when
  none is, near idle, i.e. every request alone (`queueing.isolated_*`; the limit of the
  simulation as the rate goes to zero), reported in `details.ranked_e2e_latency_s_p90`.

Bounds. `capacity_upper_bound_rps` (`solver.serving.queueing`) bounds any goodput from above
(the bisection never searches above it). Candidates are taken best bound first (a heap);
once the best remaining bound is not above the k-th best score found, no later one can
enter the top k and the search ends (`pruned.throughput_bound`). The units' goodput
bisections are interleaved (`_lazy_goodput_search`): the unit on top of the heap takes one
probe of its bisection (on the grid of `goodput.goodput_rps`) and goes back under the
tighter of its bound and the score of the lowest grid rate seen to miss; it is ranked when
its goodput is known exactly there. A unit's first probe aims at the rate it would need to
beat the k-th best score known so far, and a unit whose upper bound falls below that score
is dropped (`pruned.slo_threshold`; goodput is taken as monotone in the rate, as the
bisection also assumes). (`BISECT_LAZILY = False`: each unit simulated once at the rate it
would need to enter the top k, then bisected to its end.) For a disaggregated unit of a prefill and b decode instances the
bound is min(prefill-pool bound, b · decode-phase bound) / GPUs. The prefill pool starts at
its closed-form capacity (a × `prefill_rate_rps`); when the unit reaches the top of the heap
the whole pool of a instances is simulated under the TTFT target alone (one-token requests
end at their first token, and the decode side never delays a prefill) and the unit goes back
with that tighter bound, the upper end of the pool's bisection bracket
(`_prefill_pool_bound`). The pool is simulated, not one instance scaled by a: a instances
behind one router carry more than a times one instance's goodput. The decode phase is
bounded in closed form under the TPOT target (`decode_phase_bound_rps`).

min_latency bounds: each request's latencies under load are at least its latencies alone,
so the near-idle P90 bounds the loaded P90 from below (`pruned.latency_bound`), and a plan
whose requests alone miss the SLO is dropped (`pruned.slo_unattainable`). At a rate, a plan
must meet the SLO there (`pruned.slo_at_rate`) and the rate must not exceed the plan's
capacity bound, the cap of the goodput bisection (`pruned.capacity_at_rate`: above it the
queue grows without end, whatever a finite stream shows); a plan's simulation stops once
its P90 is certain to exceed the k-th best latency found (`pruned.latency_at_rate`); max
batches a simulation never reached, and token budgets it never met, reuse its result
(`solver_cache_hits`).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from cost_models.serving.base import (
    InstanceCost,
    IterationBatch,
    ServingCostModel,
    pipeline_engines,
    scheduler_of,
)
from cost_models.serving.engines import build_engine, list_engines
from solver.base import SearchStats
from solver.search.steps import Monitor, Stopped
from solver.serving.evaluate import (
    GOODPUT_REL_TOL,
    InstanceCosts,
    ServingEstimate,
    ServingProblem,
    evaluate_plan,
    node_replicas,
    plan_price_or_none,
    request_stream,
    unit_kv_transfer_tier,
)
from solver.serving.goodput import (
    GoodputResult,
    SimulationMemo,
    SLOTarget,
    SteadyProbe,
    colocated_probe,
    disaggregated_probe,
    goodput_colocated,
    goodput_disaggregated,
    mean_lengths,
    scale_stream,
)
from solver.serving.queueing import (
    capacity_upper_bound_disaggregated_rps,
    capacity_upper_bound_rps,
    isolated_decode_total_s,
    isolated_prefill_s,
    kv_tokens_per_seq,
    prefill_rate_rps,
)
from solver.serving.simulate import (
    FloatArray,
    Request,
    SimResult,
    budget_reusable,
    percentile,
    simulate_colocated,
    simulate_disaggregated,
)
from specs.errors import InfeasiblePlan, SpecError
from specs.serving import ServingInstance, ServingParallelism, ServingPlan

MAX_BATCH = 1024
"""Largest max batch size searched (vLLM's default `max_num_seqs` is 256–1024)."""
MIN_BATCH = 8
CHUNKS: tuple[int | None, ...] = (512, 2048, 8192)
"""Prefill token budgets per iteration searched for colocated instances (vLLM's default
`max_num_batched_tokens` is 2048 online, 8192 offline; Sarathi-Serve evaluates 512–2048)."""
PREFILL_CHUNKS: tuple[int | None, ...] = (None, 2048, 8192)
"""Token budgets of prefill-only instances (None: every waiting prompt in one pass)."""
MAX_RATIO = 8
"""Largest prefill or decode instance count of a disaggregated unit."""
FIXED_KEYS = (
    "mode",
    "tensor",
    "pipeline",
    "expert",
    "max_batch_size",
    "chunk_size",
    "precision",
    "engine",
)
"""`constraints.fixed` keys a serving search understands."""
LAZY_UNITS = True
"""Goodput objectives keep disaggregated units as table rows until the heap yields them and
simulate one-instance prefill pools only then (`_disaggregated_table`); False builds every
unit up front with those pools simulated (the same answers, slower: tests compare them)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """One engine instance's degrees and weight format."""

    tensor: int
    pipeline: int
    expert: int
    precision: str

    @property
    def gpus(self) -> int:
        return self.tensor * self.pipeline * self.expert

    def instance(self, role: str, count: int, max_batch: int, chunk: int | None) -> ServingInstance:
        return ServingInstance(
            role=role,
            count=count,
            parallelism=ServingParallelism(
                tensor=self.tensor, pipeline=self.pipeline, expert=self.expert
            ),
            max_batch_size=max_batch,
            chunk_size=chunk,
            precision=self.precision,
        )

    def label(self) -> str:
        parts = [f"TP{self.tensor}"]
        if self.pipeline > 1:
            parts.append(f"PP{self.pipeline}")
        if self.expert > 1:
            parts.append(f"EP{self.expert * self.tensor}(DP{self.expert})")
        return " ".join(parts) + f" {self.precision}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A unit to price: colocated (one instance) or disaggregated (a prefill + b decode)."""

    mode: str
    layout: Layout
    """The colocated layout, or the decode layout of a disaggregated unit."""
    max_batch: int
    chunk: int | None
    prefill: Layout | None = None
    prefill_chunk: int | None = None
    prefill_count: int = 0
    decode_count: int = 1
    replicas: int = 1
    """Colocated instances per unit (`evaluate.node_replicas`: a node's worth)."""

    @property
    def gpus(self) -> int:
        if self.mode == "colocated":
            return self.replicas * self.layout.gpus
        assert self.prefill is not None
        return self.prefill_count * self.prefill.gpus + self.decode_count * self.layout.gpus

    def plan(self, units: int) -> ServingPlan:
        if self.mode == "colocated":
            return ServingPlan(
                mode="colocated",
                instances=[
                    self.layout.instance("both", units * self.replicas, self.max_batch, self.chunk)
                ],
            )
        assert self.prefill is not None
        return ServingPlan(
            mode="disaggregated",
            instances=[
                self.prefill.instance(
                    "prefill", units * self.prefill_count, MAX_BATCH, self.prefill_chunk
                ),
                self.layout.instance("decode", units * self.decode_count, self.max_batch, None),
            ],
        )


@dataclass(frozen=True)
class RankedServingPlan:
    rank: int
    estimate: ServingEstimate
    explanation: str


@dataclass(frozen=True)
class ServingSearchResult:
    plans: list[RankedServingPlan]
    stats: SearchStats


# ---- the space -----------------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers_of_two(limit: int) -> list[int]:
    out, p = [], 1
    while p <= limit:
        out.append(p)
        p *= 2
    return out


def check_fixed(fixed: dict[str, Any]) -> None:
    """Reject `constraints.fixed` keys and values a serving search does not understand."""
    for key, value in fixed.items():
        field = f"constraints.fixed.{key}"
        if key not in FIXED_KEYS:
            raise SpecError(field, f"a serving search fixes only {list(FIXED_KEYS)}", value)
        if key == "engine":
            check_engine(value, field)
        if key == "mode" and value not in ("colocated", "disaggregated"):
            raise SpecError(field, "one of ['colocated', 'disaggregated']", value)
        if key == "precision" and value not in ("bf16", "fp16", "fp8", "int4"):
            raise SpecError(field, "one of ['bf16', 'fp16', 'fp8', 'int4']", value)
        if key in ("tensor", "pipeline", "expert", "max_batch_size", "chunk_size") and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise SpecError(field, "positive integer", value)


def layouts(problem: ServingProblem, fixed: dict[str, Any]) -> list[Layout]:
    """Instance layouts of the space (before the cost model's memory check)."""
    node = problem.cluster.gpus_per_node
    n = problem.num_gpus
    precisions = (
        [fixed["precision"]] if "precision" in fixed else list(problem.workload.weight_formats)
    )
    tensors = [fixed["tensor"]] if "tensor" in fixed else _divisors(node)
    pipelines = (
        [fixed["pipeline"]]
        if "pipeline" in fixed
        else [p for p in _powers_of_two(n) if p <= problem.model.num_layers]
    )
    moe = problem.model.moe
    if "expert" in fixed:
        experts = [fixed["expert"]]
    elif moe is None:
        experts = [1]
    else:
        experts = _divisors(node)
    out = []
    for precision in precisions:
        for t in tensors:
            for e in experts:
                if t * e > node:
                    continue
                for p in pipelines:
                    if t * e * p <= n:
                        out.append(Layout(t, p, e, precision))
    return out


def batch_options(
    cost: InstanceCost,
    mean_prompt: float,
    mean_output: float,
    fixed: dict[str, Any],
    colocated: bool = False,
) -> list[int]:
    """Max batch sizes worth trying: powers of two from MIN_BATCH below the KV-cache limit
    (`kv_tokens_per_seq`), and the limit itself (a larger max batch behaves like it)."""
    if "max_batch_size" in fixed:
        return [int(fixed["max_batch_size"])]
    cost, _ = pipeline_engines(cost)  # the max batch is per scheduler (vLLM max_num_seqs)
    hold = kv_tokens_per_seq(cost, mean_prompt, mean_output, colocated)
    kv_limit = int(cost.kv_capacity_tokens // max(1.0, hold))
    top = min(MAX_BATCH, max(1, kv_limit))
    out = [b for b in _powers_of_two(top) if b >= MIN_BATCH]
    if top not in out:
        out.append(top)
    return sorted(out)


def decode_phase_bound_rps(
    cost: InstanceCost,
    max_batch: int,
    mean_prompt: float,
    mean_output: float,
    tpot_s: float | None,
    colocated: bool = False,
) -> float:
    """Closed-form bound on the requests/s a decode-only instance finishes under a TPOT
    target: max b / ((o − 1) · step(b)) at the mean context p + o/2 over the batches b ≤ the
    max batch and the KV limit whose step meets the target.

    Why the target caps the batch: a request's TPOT is the mean of the steps it rides in, so
    if every request meets it, the token-weighted mean step Σ b_s·τ(b_s) / Σ b_s ≤ TPOT; for
    a step time affine in the batch, τ(b) = α + β·b, Cauchy–Schwarz (Σ b_s² ≥ (Σ b_s)²/n)
    then caps the mean batch (Σ b_s)/n at b* with τ(b*) = TPOT, and the token rate
    Σ b_s / Σ τ(b_s) = 1 / (α·n/Σb_s + β) at b*/τ(b*). So the largest batch meeting the target
    is found exactly (bisection over the integers, τ increasing in b), not only among
    halvings of the top batch (a batch between two halvings would be missed and the bound
    would be too low); halvings are also tried, in case b/τ(b) is not increasing. (With a
    percentile below 100 the few requests allowed to miss make this a near-bound, not a
    proof.)"""
    if mean_output <= 1.0:
        return math.inf
    cost, stages = pipeline_engines(cost)  # p schedulers of a p-stage instance
    hold = kv_tokens_per_seq(cost, mean_prompt, mean_output, colocated)
    kv_limit = int(cost.kv_capacity_tokens // max(1.0, hold))
    top = min(max_batch, kv_limit)
    ctx = mean_prompt + mean_output / 2

    def step(b: int) -> float:
        return cost.iteration_time_s(IterationBatch(b, round(b * ctx)))

    batches: set[int] = set()
    b = top
    while b >= 1:
        batches.add(b)
        b //= 2
    if tpot_s is not None and top >= 1 and step(top) > tpot_s and step(1) <= tpot_s:
        lo, hi = 1, top  # step(lo) meets the target, step(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if step(mid) <= tpot_s:
                lo = mid
            else:
                hi = mid
        batches.add(lo)
    best = 0.0
    for b in sorted(batches):
        t = step(b)
        if t <= 0.0:
            return math.inf
        if tpot_s is None or t <= tpot_s:
            best = max(best, b / ((mean_output - 1.0) * t))
    return best * stages


# ---- the search ----------------------------------------------------------------------------
def _family(cand: Candidate) -> tuple[Any, ...]:
    """Candidates that differ only in their max batch: at most one of them is ranked."""
    return (
        cand.mode,
        cand.layout,
        cand.chunk,
        cand.prefill,
        cand.prefill_chunk,
        cand.prefill_count,
        cand.decode_count,
    )


class _Top:
    """The k best units by score (higher is better), one per family (`_family`: a larger max
    batch that the load never reaches scores the same; the smaller one is kept), deterministic
    on ties."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.best: dict[tuple[Any, ...], tuple[float, int, Candidate, GoodputResult | None]] = {}
        self.counter = 0

    def _ranked(self) -> list[tuple[float, int, Candidate, GoodputResult | None]]:
        return sorted(self.best.values(), key=lambda x: (-x[0], x[1]))

    def threshold(self) -> float:
        ranked = self._ranked()
        return ranked[self.k - 1][0] if len(ranked) >= self.k else -math.inf

    def push(self, score: float, cand: Candidate, res: GoodputResult | None) -> None:
        self.counter += 1
        key = _family(cand)
        old = self.best.get(key)
        if (
            old is None
            or score > old[0] + 1e-12
            or (abs(score - old[0]) <= 1e-12 and cand.max_batch < old[2].max_batch)
        ):
            self.best[key] = (score, self.counter, cand, res)

    def best_first(self) -> list[tuple[float, Candidate, GoodputResult | None]]:
        return [(s, c, r) for s, _, c, r in self._ranked()[: self.k]]


@dataclass
class _Context:
    problem: ServingProblem
    costs: InstanceCosts
    stream: list[Request]
    slo: SLOTarget
    mean_prompt: float
    mean_output: float
    stats: SearchStats
    monitor: Monitor
    prefill_pools: dict[tuple[Any, ...], float] = field(default_factory=dict)
    idle: dict[tuple[Any, ...], float | None] = field(default_factory=dict)
    idle_parts: dict[tuple[Any, ...], FloatArray] = field(default_factory=dict)
    latency_runs: dict[tuple[Any, ...], list[tuple[int, int | None, int, int, float | None]]] = (
        field(default_factory=dict)
    )
    side_rates: dict[tuple[Any, ...], tuple[float, float]] = field(default_factory=dict)
    prefix_cached: bool = False
    """The engine caches the requests' shared prefix: the bounds price prompts without it,
    so that they stay bounds."""
    memo: SimulationMemo = field(default_factory=SimulationMemo)
    """Goodput simulations, reused by the candidates of a family that differ only in a max
    batch neither reached (`goodput.SimulationMemo`)."""


def _cost(ctx: _Context, layout: Layout, tier: str = "inter") -> InstanceCost | None:
    try:
        return ctx.costs.get(layout.tensor, layout.pipeline, layout.expert, layout.precision, tier)
    except InfeasiblePlan as exc:
        ctx.stats.add_pruned(f"rule:{exc.kind}")
        return None


def _colocated_candidates(
    ctx: _Context, fixed: dict[str, Any]
) -> Iterator[tuple[float, Candidate, bool]]:
    chunks = [fixed["chunk_size"]] if "chunk_size" in fixed else list(CHUNKS)
    for layout in layouts(ctx.problem, fixed):
        cost = _cost(ctx, layout)
        if cost is None:
            continue
        longest = max(r.prompt_tokens + r.output_tokens for r in ctx.stream)
        if cost.kv_capacity_tokens < longest:
            ctx.stats.add_pruned("rule:memory")
            continue
        replicas = node_replicas(
            layout.gpus,
            ctx.problem.cluster.gpus_per_node,
            ctx.problem.num_gpus,
            ctx.problem.workload.objective,
        )
        for batch in batch_options(cost, ctx.mean_prompt, ctx.mean_output, fixed, True):
            for chunk in chunks:
                ctx.stats.enumerated += 1
                ub = capacity_upper_bound_rps(
                    cost, replicas, batch, chunk, ctx.mean_prompt, ctx.mean_output
                )
                # decodes must also meet the TPOT target: the decode-phase bound caps the
                # batch a colocated instance can usefully run (prefill chunks only slow it)
                ub = min(
                    ub,
                    replicas
                    * decode_phase_bound_rps(
                        cost, batch, ctx.mean_prompt, ctx.mean_output, ctx.slo.tpot_s, True
                    ),
                )
                cand = Candidate("colocated", layout, batch, chunk, replicas=replicas)
                yield ub / cand.gpus, cand, True


PHASE_REL_TOL = 0.05
"""Relative width of the prefill-phase bisection (the bound takes the bracket's upper end)."""


def _prefill_pool_bound(ctx: _Context, layout: Layout, chunk: int | None, count: int) -> float:
    """An upper bound on the goodput of a disaggregated unit whose prefill pool is `count`
    instances of `layout`: the pool's goodput under the TTFT target alone, simulated with the
    disaggregated simulator on one-token requests (they finish at their prefill, so their
    TTFT is exactly what the unit's prefill pool gives them: the decode side never delays a
    prefill), taken at the upper end of its bisection bracket. The whole pool is simulated:
    `count` instances behind the router carry more than `count` times one instance's goodput
    (pooling), so scaling a single instance's figure would not bound the unit."""
    key = (layout, chunk, count)
    hit = ctx.prefill_pools.get(key)
    if hit is not None:
        return hit
    cost = ctx.costs.get(layout.tensor, layout.pipeline, layout.expert, layout.precision, "inter")
    prompts_only = [replace(r, output_tokens=1) for r in ctx.stream]
    slo = SLOTarget(ttft_s=ctx.slo.ttft_s, tpot_s=None, percentile=ctx.slo.percentile)
    res = goodput_disaggregated(
        prompts_only, cost, count, chunk, cost, 1, MAX_BATCH, slo, rel_tol=PHASE_REL_TOL,
        memo=ctx.memo,
    )  # fmt: skip
    ctx.stats.solver_calls += res.evaluations
    if res.limited_by == "slo":
        bound = min(res.upper_bound_rps, res.goodput_rps * (1.0 + PHASE_REL_TOL))
    else:
        bound = res.goodput_rps  # the capacity bound itself, or 0 (TTFT unattainable)
    ctx.prefill_pools[key] = bound
    return bound


@dataclass
class _DisaggregatedTable:
    """Every disaggregated unit of the space, in the order the space lists them (prefill
    entry, decode entry, a, b), as arrays: candidates are built only for the units a search
    takes from its heap (`candidate`). `bound` is each unit's first bound per GPU."""

    prefill: list[tuple[Layout, int | None]]
    decode: list[tuple[Layout, int]]
    p_index: npt.NDArray[np.intp]
    d_index: npt.NDArray[np.intp]
    a: npt.NDArray[np.int64]
    b: npt.NDArray[np.int64]
    gpus: npt.NDArray[np.int64]
    bound: FloatArray
    final: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return int(self.bound.size)

    def candidate(self, i: int) -> Candidate:
        p_layout, chunk = self.prefill[int(self.p_index[i])]
        d_layout, batch = self.decode[int(self.d_index[i])]
        return Candidate(
            "disaggregated", d_layout, batch, None, p_layout, chunk, int(self.a[i]), int(self.b[i])
        )

    def scores(self, problem: ServingProblem) -> FloatArray:
        """`_bound_score` of every unit, with the same floating-point operations."""
        gpus = self.gpus.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            goodput = self.bound * gpus
            per_gpu = goodput / gpus
            if problem.workload.objective == "min_gpus":
                rate = problem.target_rate_rps
                assert rate is not None
                units = np.ceil(rate / goodput * (1 - 1e-9))
                score = -(units * gpus) + np.minimum(per_gpu, 1e5) * TIE_BREAK
                score = np.where(
                    (goodput <= 0) | (units * gpus > problem.num_gpus), -math.inf, score
                )
            else:
                score = per_gpu
        return np.where(np.isfinite(self.bound), score, math.inf)


def _disaggregated_table(ctx: _Context, fixed: dict[str, Any], lazy: bool) -> _DisaggregatedTable:
    """Disaggregated units with a first bound: the prefill side is bounded by the pool's
    closed-form capacity (`prefill_rate_rps` × count) until `_refine` simulates the pool.
    With `lazy`, one prefill instance (a = 1) is bounded in closed form too (the capacity
    bound its pool simulation brackets by, `capacity_upper_bound_disaggregated_rps` on the
    prompts: no lower than the simulated bound) and simulated only when a unit of it is
    taken (every unit starts unrefined); otherwise it is simulated here, and a prefill
    layout and chunk one instance of which cannot meet the TTFT target is left out."""
    problem = ctx.problem
    all_layouts = layouts(problem, fixed)
    chunks = [fixed["chunk_size"]] if "chunk_size" in fixed else list(PREFILL_CHUNKS)
    longest_prompt = max(r.prompt_tokens for r in ctx.stream)
    longest = max(r.prompt_tokens + r.output_tokens for r in ctx.stream)
    prompts_only = [replace(r, output_tokens=1) for r in ctx.stream] if lazy else []
    prefill: list[tuple[Layout, int | None]] = []
    p_caps: list[float] = []
    singles: list[float] = []
    decode: list[tuple[Layout, int]] = []
    d_rates: list[float] = []
    for layout in all_layouts:
        cost = _cost(ctx, layout)
        if cost is None:
            continue
        if cost.kv_capacity_tokens >= longest_prompt + 1:
            kv_seqs = int(cost.kv_capacity_tokens // max(ctx.mean_prompt, 1.0))
            if lazy:
                mp, mo = mean_lengths(prompts_only, scheduler_of(cost).prefix_caching)
            for chunk in chunks:
                ctx.monitor.poll(report=False)
                if lazy:
                    single = capacity_upper_bound_disaggregated_rps(
                        cost, 1, chunk, cost, 1, MAX_BATCH, mp, mo
                    )
                else:
                    # a pool at a vanishing rate is one instance alone: if one instance
                    # cannot meet the TTFT target, no pool can
                    single = _prefill_pool_bound(ctx, layout, chunk, 1)
                    if not single > 0:
                        continue
                prefill.append((layout, chunk))
                p_caps.append(prefill_rate_rps(cost, chunk, kv_seqs, ctx.mean_prompt))
                singles.append(single)
        else:
            ctx.stats.add_pruned("rule:memory")
        if cost.kv_capacity_tokens < longest:
            ctx.stats.add_pruned("rule:memory")
            continue
        for batch in batch_options(cost, ctx.mean_prompt, ctx.mean_output, fixed):
            bound = decode_phase_bound_rps(
                cost, batch, ctx.mean_prompt, ctx.mean_output, ctx.slo.tpot_s
            )
            if bound > 0:
                decode.append((layout, batch))
                d_rates.append(bound)
    # (a, b) in the order the space lists them, coprime only
    pairs = [
        (a, b)
        for a in range(1, MAX_RATIO + 1)
        for b in range(1, MAX_RATIO + 1)
        if math.gcd(a, b) == 1
    ]
    a_k = np.array([a for a, _ in pairs], dtype=np.int64)
    b_k = np.array([b for _, b in pairs], dtype=np.int64)
    pg = np.array([layout.gpus for layout, _ in prefill], dtype=np.int64)
    dg = np.array([layout.gpus for layout, _ in decode], dtype=np.int64)
    gpus = a_k[None, None, :] * pg[:, None, None] + b_k[None, None, :] * dg[None, :, None]
    p_i, d_i, k_i = np.nonzero(gpus <= problem.num_gpus)
    a, b = a_k[k_i], b_k[k_i]
    p_cap = np.asarray(p_caps, dtype=np.float64)[p_i]
    p_rate = np.where(a == 1, np.asarray(singles, dtype=np.float64)[p_i], a * p_cap)
    d_rate = np.asarray(d_rates, dtype=np.float64)[d_i]
    unit_gpus = gpus[p_i, d_i, k_i]
    with np.errstate(invalid="ignore"):
        bounds = np.minimum(p_rate, b * d_rate) / unit_gpus
    ctx.stats.enumerated += int(bounds.size)
    final = np.zeros(bounds.shape, dtype=np.bool_) if lazy else a == 1
    return _DisaggregatedTable(prefill, decode, p_i, d_i, a, b, unit_gpus, bounds, final)


def _disaggregated_candidates(
    ctx: _Context, fixed: dict[str, Any]
) -> Iterator[tuple[float, Candidate, bool]]:
    """The units of `_disaggregated_table` (prefill pools of one instance simulated) one by
    one, as (bound per GPU, candidate, final)."""
    table = _disaggregated_table(ctx, fixed, lazy=False)
    for i in range(len(table)):
        yield float(table.bound[i]), table.candidate(i), bool(table.final[i])


def _requeue_refined(ctx: _Context, cand: Candidate, order: Any, heap: list[Any]) -> None:
    """Queue `cand` again with its refined (`_refine`) bound, final from then on; drop it,
    counted as `slo_unattainable`, when no prefill pool meets the TTFT target."""
    tighter = _refine(ctx, cand)
    if tighter is None:
        ctx.stats.add_pruned("slo_unattainable")
        return
    heapq.heappush(heap, (-_bound_score(ctx.problem, cand, tighter), order, cand, True))


def _refine(ctx: _Context, cand: Candidate) -> float | None:
    """The tighter bound per GPU of a disaggregated unit: its prefill pool simulated; None
    when one prefill instance cannot meet the TTFT target even alone (then no pool can,
    and the space leaves the unit out)."""
    assert cand.prefill is not None
    if not _prefill_pool_bound(ctx, cand.prefill, cand.prefill_chunk, 1) > 0:
        return None
    cost = ctx.costs.get(
        cand.layout.tensor, cand.layout.pipeline, cand.layout.expert, cand.layout.precision, "inter"
    )
    d_rate = decode_phase_bound_rps(
        cost, cand.max_batch, ctx.mean_prompt, ctx.mean_output, ctx.slo.tpot_s
    )
    p_rate = _prefill_pool_bound(ctx, cand.prefill, cand.prefill_chunk, cand.prefill_count)
    return min(p_rate, cand.decode_count * d_rate) / cand.gpus


def _tier(ctx: _Context, cand: Candidate) -> str:
    return unit_kv_transfer_tier(cand.mode, cand.gpus, ctx.problem.cluster.gpus_per_node)


def _unit_goodput(
    ctx: _Context, cand: Candidate, rate: float | None = None, known_good: float | None = None
) -> GoodputResult | bool:
    """The unit's goodput (bisection, starting below `known_good`, a rate seen to meet the
    SLO); with `rate`, only whether the SLO holds there."""
    tier = _tier(ctx, cand)
    decode_cost = ctx.costs.get(
        cand.layout.tensor, cand.layout.pipeline, cand.layout.expert, cand.layout.precision, tier
    )
    if cand.mode == "colocated":
        if rate is not None:  # in steady state (`SteadyProbe`), as the bisection would judge it
            probe, _ = colocated_probe(
                ctx.stream, decode_cost, cand.replicas, cand.max_batch, cand.chunk, ctx.slo,
                memo=ctx.memo,
            )  # fmt: skip
            ok = probe.holds(rate)[0]
            ctx.stats.solver_calls += probe.evaluations
            return ok
        res = goodput_colocated(
            ctx.stream,
            decode_cost,
            cand.replicas,
            cand.max_batch,
            cand.chunk,
            ctx.slo,
            rel_tol=GOODPUT_REL_TOL,
            known_good=known_good,
            memo=ctx.memo,
        )
    else:
        assert cand.prefill is not None
        pre = cand.prefill
        prefill_cost = ctx.costs.get(pre.tensor, pre.pipeline, pre.expert, pre.precision, tier)
        if rate is not None:
            probe, _ = disaggregated_probe(
                ctx.stream, prefill_cost, cand.prefill_count, cand.prefill_chunk,
                decode_cost, cand.decode_count, cand.max_batch, ctx.slo, memo=ctx.memo,
            )  # fmt: skip
            ok = probe.holds(rate)[0]
            ctx.stats.solver_calls += probe.evaluations
            return ok
        res = goodput_disaggregated(
            ctx.stream,
            prefill_cost,
            cand.prefill_count,
            cand.prefill_chunk,
            decode_cost,
            cand.decode_count,
            cand.max_batch,
            ctx.slo,
            rel_tol=GOODPUT_REL_TOL,
            known_good=known_good,
            memo=ctx.memo,
        )
    ctx.stats.solver_calls += res.evaluations
    return res


def _units_for(problem: ServingProblem, cand: Candidate, unit_goodput: float) -> int:
    """Units a plan replicates: all that fit, or the fewest that carry the target rate."""
    most = max(1, problem.num_gpus // cand.gpus)
    rate = problem.target_rate_rps
    if problem.workload.objective == "min_gpus" and rate is not None and unit_goodput > 0:
        return min(most, max(1, math.ceil(rate / unit_goodput * (1 - 1e-9))))
    return most


TIE_BREAK = 1e-6
"""min_gpus: weight of the goodput per GPU (capped at 1e5) added to −GPUs; at most 0.1."""


def _score(problem: ServingProblem, cand: Candidate, goodput: float) -> float:
    """Higher is better. max_goodput_per_gpu: unit goodput / GPU. min_gpus: −GPUs needed
    for the rate (plus goodput per GPU × TIE_BREAK as the tie-break); −inf when the cluster
    cannot carry it."""
    per_gpu = goodput / cand.gpus
    if problem.workload.objective == "min_gpus":
        rate = problem.target_rate_rps
        assert rate is not None
        if goodput <= 0:
            return -math.inf
        units = math.ceil(rate / goodput * (1 - 1e-9))
        if units * cand.gpus > problem.num_gpus:
            return -math.inf
        return -float(units * cand.gpus) + min(per_gpu, 1e5) * TIE_BREAK
    return per_gpu


def _needed_rate(problem: ServingProblem, cand: Candidate, threshold: float) -> float:
    """A unit goodput a candidate needs to beat the score `threshold` (a necessary one)."""
    if problem.workload.objective == "min_gpus":
        rate = problem.target_rate_rps
        assert rate is not None
        # threshold = −G + tie-break (< 1): a plan on G GPUs can still beat it on the
        # tie-break, so it may use up to G GPUs (ceil, not floor)
        gpus_allowed = math.ceil(-threshold - 1e-9)
        units = max(1, gpus_allowed // cand.gpus)
        if units * cand.gpus < gpus_allowed:
            return rate / units  # lands below the threshold's GPUs: any goodput that fits
        # on exactly the threshold's GPUs it must also win the tie-break (goodput per GPU
        # above the threshold's), unless it fits on fewer units
        per_gpu_t = (threshold + gpus_allowed) / TIE_BREAK
        tie = max(rate / units, per_gpu_t * cand.gpus)
        fewer = (units - 1) * cand.gpus
        return min(tie, rate / (units - 1)) if fewer >= 1 and units > 1 else tie
    return threshold * cand.gpus


def _bound_score(problem: ServingProblem, cand: Candidate, bound_per_gpu: float) -> float:
    return (
        _score(problem, cand, bound_per_gpu * cand.gpus)
        if math.isfinite(bound_per_gpu)
        else math.inf
    )


# ---- goodput objectives: bisections interleaved ----------------------------------------------
BISECT_LAZILY = True
"""Goodput objectives bisect the units' goodputs a step at a time, best upper bound first
(`_lazy_goodput_search`); False runs each unit's bisection to its end in turn, with a
probe at the rate it needs to enter the top k first (the same plans: tests compare them)."""


@dataclass
class _Grid:
    """What a search knows of a unit's goodput on the grid of `goodput.goodput_rps`, rates
    `ub / (1 + rel_tol)^k`: the goodput is the rate of the least k that meets the SLO in
    steady state (attainment taken as monotone in the rate, as the bisection takes it), so
    every probe at a grid rate narrows it. `failed`: the largest k known to miss (−1:
    none); `passed`: the least k whose short stream met the SLO, with its result and
    whether that pass holds in steady state (`settled`: the short stream says so; else a
    confirmation decides, as at the end of `goodput_rps`); `held`: the least k known to hold,
    with the result `goodput_rps` reports there; `strict`: a confirmation failed, so every
    later pass is confirmed at once (as in `goodput_rps`)."""

    probe: SteadyProbe
    ub: float
    step: float
    k_max: int
    failed: int = -1
    passed: int | None = None
    passed_res: SimResult | None = None
    settled: bool = False
    held: int | None = None
    held_res: SimResult | None = None
    strict: bool = False
    jump: int = 0

    def rate(self, k: int) -> float:
        return self.ub * math.exp(-k * self.step)

    @property
    def exact(self) -> bool:
        return self.held is not None and self.held == self.failed + 1

    @property
    def unattainable(self) -> bool:
        return not self.ub > 0.0 or self.failed >= self.k_max

    def upper(self) -> float:
        """A rate the goodput does not exceed."""
        if self.unattainable:
            return 0.0
        return self.rate(self.failed + 1)

    def lower(self) -> float | None:
        """A rate the goodput reaches (None: none known)."""
        return None if self.held is None else self.rate(self.held)

    def run(self, k: int) -> None:
        """Probe grid rate k (`SteadyProbe.short`, confirmed at once when `strict`)."""
        rate = self.rate(k)
        ok, res, settled = self.probe.short(rate)
        if ok and self.strict:
            ok, res = self.probe.confirm(rate, res, settled)
            settled = True
        if not ok:
            self.failed = max(self.failed, k)
            return
        if self.passed is None or k < self.passed:
            self.passed, self.passed_res, self.settled = k, res, settled
        if settled and (self.held is None or k < self.held):
            self.held, self.held_res = k, res

    def index_at_least(self, rate: float) -> int:
        """The largest k whose grid rate is at least `rate` (−1: none is)."""
        if not rate <= self.ub:
            return -1
        k = max(0, math.floor(math.log(self.ub / rate) / self.step))
        while k > 0 and self.rate(k) < rate:
            k -= 1
        while self.rate(k + 1) >= rate:
            k += 1
        return k

    def refine(self) -> None:
        """One step of `goodput_rps`'s search: the bound, then halvings down to a pass,
        then bisection, then the confirmation of the answer where it needs one (when that
        fails, the search goes on below with every pass confirmed)."""
        if self.passed is None:
            if self.failed < 0:
                self.run(0)
                return
            if self.jump == 0:
                self.jump = 1 if self.strict else max(1, math.ceil(math.log(2.0) / self.step))
            k = min(self.k_max, self.failed + self.jump)
            self.jump *= 2
            self.run(k)
            return
        if self.passed - self.failed > 1:
            self.run((self.failed + self.passed) // 2)
            return
        # the answer of the bisection, a pass on the short stream that needs confirming
        assert self.passed_res is not None
        rate = self.rate(self.passed)
        ok, res = self.probe.confirm(rate, self.passed_res, self.settled)
        if ok:
            self.held, self.held_res = self.passed, res
            return
        self.strict, self.failed, self.jump = True, self.passed, 0
        self.passed, self.passed_res = self.held, self.held_res
        self.settled = self.held is not None

    def result(self, slo: SLOTarget) -> GoodputResult:
        assert self.held is not None and self.held_res is not None
        res = self.held_res
        return GoodputResult(
            self.rate(self.held),
            self.ub,
            res.attainment(slo.ttft_s, slo.tpot_s),
            res,
            self.probe.evaluations,
            "capacity_bound" if self.held == 0 else "slo",
        )


def _grid(ctx: _Context, cand: Candidate) -> _Grid:
    probe, ub = _probe(ctx, cand)
    step = math.log1p(GOODPUT_REL_TOL)
    return _Grid(probe, ub, step, math.ceil(-math.log(GOODPUT_MIN_FRACTION) / step))


GOODPUT_MIN_FRACTION = 1e-4
"""The lowest rate a goodput search tries, as a fraction of the bound (`goodput_rps`'s
`min_fraction`)."""


def _probe(ctx: _Context, cand: Candidate) -> tuple[SteadyProbe, float]:
    """The unit's steady-state probe and capacity bound, as `_unit_goodput` builds them."""
    tier = _tier(ctx, cand)
    decode_cost = _layout_cost(ctx, cand.layout, tier)
    if cand.mode == "colocated":
        return colocated_probe(
            ctx.stream, decode_cost, cand.replicas, cand.max_batch, cand.chunk, ctx.slo,
            memo=ctx.memo,
        )  # fmt: skip
    assert cand.prefill is not None
    prefill_cost = _layout_cost(ctx, cand.prefill, tier)
    return disaggregated_probe(
        ctx.stream, prefill_cost, cand.prefill_count, cand.prefill_chunk, decode_cost,
        cand.decode_count, cand.max_batch, ctx.slo, memo=ctx.memo,
    )  # fmt: skip


def _kth(values: Mapping[tuple[Any, ...], float], k: int) -> float:
    if len(values) < k:
        return -math.inf
    return sorted(values.values(), reverse=True)[k - 1]


class _Rows:
    """Heap entries (−bound score, order, table row, final) of a table's units, sorted
    once (as a heap of them would yield them: by score, then order) and taken in turn."""

    def __init__(self, neg_scores: FloatArray, base: int, final: npt.NDArray[np.bool_]) -> None:
        self.index = np.argsort(neg_scores, kind="stable")  # ties: by row, i.e. by order
        self.neg = neg_scores[self.index]
        self.final = final[self.index]
        self.base = base
        self.size = int(self.index.size)
        self.next = 0

    def peek(self) -> tuple[float, int, int, bool] | None:
        i = self.next
        if i >= self.size:
            return None
        row = int(self.index[i])
        return float(self.neg[i]), self.base + row, row, bool(self.final[i])

    @property
    def left(self) -> int:
        return self.size - self.next


def _lazy_goodput_search(
    ctx: _Context,
    heap: list[tuple[float, int, Candidate | int, bool]],
    table: _DisaggregatedTable | None,
    top: _Top,
    rows: _Rows | None = None,
) -> None:
    """Goodput objectives: the `top.k` best units by the score of their goodput, into
    `top` as a search that bisects each unit's goodput to its end in turn ranks them.

    The heap holds every unit under an upper bound on its score: its bound, then, once its
    goodput search has started (`_Grid`), the lower of that and the score of the lowest grid
    rate known to miss. The unit on top takes one step: a disaggregated unit's bound is
    refined (its prefill pool simulated), or its goodput search one probe further, and it
    goes back; a unit whose goodput is known exactly there is ranked (no other's score can
    exceed it). A unit that has not passed yet is first probed halfway (on the grid) between
    its upper bound and the lowest grid rate that would beat the k-th best score any k
    families are known to reach; a unit whose upper bound falls below that score is dropped
    (`pruned.slo_threshold`). The search ends when the top bound is below the k-th ranked score
    (`pruned.throughput_bound`). The units ranked are those whose goodput the bisection
    gives exactly, each the same rate (the least grid rate meeting the SLO in steady state,
    attainment monotone in the rate) with its simulation at that rate; ties rank in the order
    the bisecting search would have met them (best bound first), one per family (`_Top`).
    (`goodput_rps` also stops a unit's bisection after 32 simulations; here a unit's search
    runs to its end.) Stopped early (`Stopped`), the units known exactly so far are ranked.
    Statistics: `evaluated` counts the units whose goodput was found (`feasible`) or found
    unattainable, `pruned.slo_threshold` those dropped below what k families are known to
    reach, `pruned.throughput_bound` those left when the search ended."""
    problem, stats, monitor = ctx.problem, ctx.stats, ctx.monitor
    grids: dict[Candidate, _Grid] = {}
    first_key: dict[Candidate, tuple[float, int]] = {}
    ranked = _Top(top.k)
    kept: list[tuple[tuple[float, int], float, Candidate, GoodputResult]] = []
    known: dict[tuple[Any, ...], float] = {}  # family → the best score it is known to reach
    done = 0

    def candidate(ref: Candidate | int) -> Candidate:
        if isinstance(ref, Candidate):
            return ref
        assert table is not None
        return table.candidate(ref)

    try:
        while True:
            row = None if rows is None else rows.peek()
            if heap and (row is None or heap[0][:2] < row[:2]):
                neg_key, order, ref, final = heap[0]
            elif row is not None:
                neg_key, order, ref, final = row
            else:
                break
            key = -neg_key
            threshold = ranked.threshold()
            if key == -math.inf or key < threshold - 1e-12:
                stats.add_pruned("throughput_bound", len(heap) + (0 if rows is None else rows.left))
                break
            if row is not None and (neg_key, order) == row[:2]:
                assert rows is not None
                rows.next += 1
            else:
                heapq.heappop(heap)
            cand = candidate(ref)
            if not final:
                monitor.poll(report=False)
                _requeue_refined(ctx, cand, order, heap)
                continue
            monitor.poll(report=False)
            grid = grids.get(cand)
            if grid is None:
                if _idle_latency(ctx, cand) is None:  # misses the SLO even alone
                    stats.add_pruned("slo_unattainable")
                    continue
                grid = grids[cand] = _grid(ctx, cand)
                first_key[cand] = (-key, order)
            if grid.exact or grid.unattainable:
                monitor.done = done
                monitor.poll(report=True)
                done += 1
                stats.evaluated += 1
                if grid.unattainable:
                    stats.add_pruned("slo_unattainable")
                    continue
                stats.feasible += 1
                score = _score(problem, cand, grid.rate(grid.held or 0))
                if score > -math.inf:
                    res = grid.result(ctx.slo)
                    ranked.push(score, cand, res)
                    kept.append((first_key[cand], score, cand, res))
                continue
            known_kth = _kth(known, top.k)
            if key < known_kth - 1e-12:  # below what k families are known to reach
                stats.add_pruned("slo_threshold")
                continue
            k = -1
            if grid.passed is None and known_kth > -math.inf:
                needed = _needed_rate(problem, cand, known_kth)
                k = grid.index_at_least(needed) if needed > 0 else -1
                # halfway up to the unit's own bound: most units fall short of the top k
                # by more than the k-th known score does
                top_rate = _needed_rate(problem, cand, key)
                k_top = grid.index_at_least(top_rate) if top_rate > 0 else grid.failed
                k_top = max(k_top, grid.failed)
                if k - k_top > 1:
                    k = (k + k_top) // 2
            before = grid.probe.evaluations
            if k > grid.failed:
                grid.run(k)
            else:
                grid.refine()
            stats.solver_calls += grid.probe.evaluations - before
            lower = grid.lower()
            if lower is not None:
                score = _score(problem, cand, lower)
                fam = _family(cand)
                if score > known.get(fam, -math.inf):
                    known[fam] = score
            upper = min(key, _score(problem, cand, grid.upper()))
            if lower is not None:
                upper = max(upper, _score(problem, cand, lower))
            heapq.heappush(heap, (-upper, order, cand, True))
    finally:
        # ranked as the bisecting search ranks them: in the order it evaluates them
        kept.sort(key=lambda x: x[0])
        for _, score, cand, res in kept:
            top.push(score, cand, res)


# ---- min_latency ---------------------------------------------------------------------------
LATENCY_CUTOFF = True
"""min_latency at a rate: a plan's simulation stops once its P90 is certain to exceed the
k-th best latency found (`_plan_latency`'s `worse_than`); False simulates every plan to its
end (the same plans: tests compare them)."""
IDLE_PERCENTILE = 90.0
"""min_latency ranks by this percentile of the end-to-end latency."""


def _per_request(
    ctx: _Context, key: tuple[Any, ...], fn: Callable[[int, int], float]
) -> FloatArray:
    """`fn(prompt, output)` for every request of the stream (cached under `key`; lengths
    repeat, so each distinct pair is computed once)."""
    hit = ctx.idle_parts.get(key)
    if hit is None:
        seen: dict[tuple[int, int], float] = {}
        values = []
        for r in ctx.stream:
            pair = (r.computed_prompt_tokens(ctx.prefix_cached), r.output_tokens)
            if pair not in seen:
                seen[pair] = fn(*pair)
            values.append(seen[pair])
        hit = np.asarray(values, dtype=np.float64)
        ctx.idle_parts[key] = hit
    return hit


def _layout_cost(ctx: _Context, layout: Layout, tier: str = "inter") -> InstanceCost:
    return ctx.costs.get(layout.tensor, layout.pipeline, layout.expert, layout.precision, tier)


def _idle_latency(ctx: _Context, cand: Candidate) -> float | None:
    """The near-idle P90 end-to-end latency of the candidate's plan, None when the SLO is
    missed even there: every request of the stream alone on the candidate's instances
    (`queueing.isolated_*`, what the simulator gives as the rate goes to zero). Under load
    every iteration a request rides in costs at least its own share alone (the cost grows
    with the batch, and a prompt split into more chunks costs no less), so each request's
    simulated latencies are at least these: their percentile bounds the loaded one from
    below, and the share meeting the SLO here bounds the attainment from above. Prefill,
    decode and KV-transfer times are cached apart (per layout and chunk, per layout, per
    layout and tier) and combined per candidate kind."""
    tier = _tier(ctx, cand)
    if cand.mode == "colocated":
        key: tuple[Any, ...] = ("both", cand.layout, cand.chunk)
        front, front_chunk = cand.layout, cand.chunk
    else:
        assert cand.prefill is not None
        key = ("pd", cand.prefill, cand.prefill_chunk, cand.layout, tier)
        front, front_chunk = cand.prefill, cand.prefill_chunk
    if key in ctx.idle:
        return ctx.idle[key]
    front_cost, back_cost = _layout_cost(ctx, front), _layout_cost(ctx, cand.layout)
    ttft = _per_request(
        ctx,
        ("prefill", front, front_chunk),
        lambda p, _o: isolated_prefill_s(front_cost, p, front_chunk),
    )
    after = _per_request(
        ctx, ("decode", cand.layout), lambda p, o: isolated_decode_total_s(back_cost, p, o)
    )
    if cand.mode == "disaggregated":
        xfer_cost = _layout_cost(ctx, front, tier)
        after = after + _per_request(
            ctx,
            ("transfer", front, tier),
            lambda p, o: xfer_cost.kv_transfer_time_s(p) if o > 1 else 0.0,
        )
    outputs = _per_request(ctx, ("outputs",), lambda _p, o: float(o))
    ok = np.ones(ttft.shape, dtype=bool)
    if ctx.slo.ttft_s is not None:
        ok &= ttft <= ctx.slo.ttft_s
    if ctx.slo.tpot_s is not None:
        ok &= np.where(outputs > 1, after / np.maximum(outputs - 1, 1), 0.0) <= ctx.slo.tpot_s
    latency: float | None = None
    if not ok.size or float(ok.mean()) >= ctx.slo.percentile / 100.0 - 1e-12:
        latency = percentile(ttft + after, IDLE_PERCENTILE)
    ctx.idle[key] = latency
    return latency


def _plan_capacity_rps(ctx: _Context, cand: Candidate) -> float:
    """The whole-cluster plan's capacity bound (`queueing.capacity_upper_bound*`), the cap
    the goodput bisection also uses: above it the queue grows without end."""
    units = max(1, ctx.problem.num_gpus // cand.gpus)
    mp, mo = ctx.mean_prompt, ctx.mean_output
    back = _layout_cost(ctx, cand.layout)
    if cand.mode == "colocated":
        return capacity_upper_bound_rps(
            back, units * cand.replicas, cand.max_batch, cand.chunk, mp, mo
        )
    assert cand.prefill is not None
    # the bound is min(prefill instances × one's rate, decode instances × one's rate):
    # each side's per-instance rate is computed once per (layouts, chunk, batch)
    key = (cand.prefill, cand.prefill_chunk, cand.layout, cand.max_batch)
    rates = ctx.side_rates.get(key)
    if rates is None:
        front = _layout_cost(ctx, cand.prefill)
        many = 1 << 30
        rates = (
            capacity_upper_bound_disaggregated_rps(
                front, 1, cand.prefill_chunk, back, many, cand.max_batch, mp, mo
            ),
            capacity_upper_bound_disaggregated_rps(
                front, many, cand.prefill_chunk, back, 1, cand.max_batch, mp, mo
            ),
        )
        ctx.side_rates[key] = rates
    return min(units * cand.prefill_count * rates[0], units * cand.decode_count * rates[1])


def _pareto_instance_counts(
    ctx: _Context, candidates: Iterator[tuple[float, Candidate, bool]]
) -> Iterator[tuple[float, Candidate, bool]]:
    """min_latency, disaggregated: of the prefill:decode ratios of one (prefill layout and
    chunk, decode layout and max batch), keep those whose whole-cluster plan is not
    dominated in instance counts. A plan with at least as many prefill and as many decode
    instances of the same kinds gives each instance no more of the rate, so (latency being
    monotone in the load) its latency is no higher; the dominated ratios are dropped
    (`pruned.dominated`)."""
    groups: dict[tuple[Any, ...], list[tuple[float, Candidate, bool]]] = {}
    for item in candidates:
        cand = item[1]
        key = (cand.prefill, cand.prefill_chunk, cand.layout, cand.max_batch)
        groups.setdefault(key, []).append(item)
    n = ctx.problem.num_gpus
    for items in groups.values():
        totals = []
        for item in items:
            cand = item[1]
            units = max(1, n // cand.gpus)
            totals.append((units * cand.prefill_count, units * cand.decode_count))
        for i, item in enumerate(items):
            p, d = totals[i]
            dominated = any(q >= p and e >= d and (q, e) != (p, d) for q, e in totals)
            duplicate = any(totals[j] == (p, d) for j in range(i))
            if dominated or duplicate:
                ctx.stats.add_pruned("dominated")
                continue
            yield item


def _latency_key(ctx: _Context, cand: Candidate) -> tuple[Any, ...]:
    """What a min_latency simulation reads but its max batch and token budget: the
    candidate's family without the budget the simulation may share (the colocated chunk, with
    the scheduler policy it selects; the prefill chunk)."""
    if cand.mode == "colocated":
        cost = _layout_cost(ctx, cand.layout)
        separate = scheduler_of(cost).separates(cand.chunk is not None)
        return (cand.mode, cand.layout, separate, cand.replicas)
    return (cand.mode, cand.layout, cand.prefill, cand.prefill_count, cand.decode_count)


def _budget_of(cand: Candidate) -> int | None:
    return cand.chunk if cand.mode == "colocated" else cand.prefill_chunk


def _plan_latency(
    ctx: _Context, cand: Candidate, rate: float, worse_than: float = math.inf
) -> float | None:
    """P90 end-to-end latency of the whole-cluster plan at `rate`, simulated on one of its
    units at its share of the rate (rate / units: a Poisson stream split over the units
    stays Poisson; units behind one router only pool better, as in the goodput), None if it
    misses the SLO there. A simulation is reused by the candidates it gives the same
    schedule (`solver_cache_hits`): one whose instances never ran more than `peak`
    sequences at once never met its max batch, so every max batch above `peak` gives the
    same schedule, as far as it ran (a run cut short by its stop rule is cut short at the
    same point, with the same verdict); one whose token budget never bound gives the same
    schedule to the budgets `simulate.budget_reusable` accepts. `worse_than`: a latency the plan must
    beat to matter (the k-th best so far); `inf` once it is certain the plan's P90 exceeds
    it (the simulation stops when more requests than the percentile allows have taken longer
    end to end, `StopRule.e2e_s`). A search's k-th best only falls, so a run cut short so
    stays an answer for the candidates that reuse it."""
    runs = ctx.latency_runs.setdefault(_latency_key(ctx, cand), [])
    budget = _budget_of(cand)
    for batch, chunk, peak, slack, seen in runs:
        if (batch == cand.max_batch or peak < min(batch, cand.max_batch)) and budget_reusable(
            slack, chunk, budget
        ):
            ctx.stats.solver_cache_hits += 1
            return seen
    units = max(1, ctx.problem.num_gpus // cand.gpus)
    tier = _tier(ctx, cand)
    decode_cost = ctx.costs.get(
        cand.layout.tensor, cand.layout.pipeline, cand.layout.expert, cand.layout.precision, tier
    )
    requests = scale_stream(ctx.stream, rate / units)
    stop = ctx.slo.stop_rule(len(ctx.stream))
    if worse_than < math.inf:
        n = len(ctx.stream)
        # nearest rank: the P90 exceeds the limit once more than n − ⌊0.9 n⌋ values do
        over = n - math.floor(n * IDLE_PERCENTILE / 100.0)
        stop = replace(stop, e2e_s=worse_than + 1e-9 * max(1.0, worse_than), max_e2e_over=over)
    if cand.mode == "colocated":
        sim = simulate_colocated(
            requests, decode_cost, cand.replicas, cand.max_batch, cand.chunk, stop=stop
        )
    else:
        assert cand.prefill is not None
        pre = cand.prefill
        prefill_cost = ctx.costs.get(pre.tensor, pre.pipeline, pre.expert, pre.precision, tier)
        sim = simulate_disaggregated(
            requests,
            prefill_cost,
            cand.prefill_count,
            cand.prefill_chunk,
            decode_cost,
            cand.decode_count,
            cand.max_batch,
            stop=stop,
        )
    ctx.stats.solver_calls += 1
    if sim.e2e_exceeded:
        latency: float | None = math.inf
    else:
        latency = sim.e2e_percentile_s(IDLE_PERCENTILE) if ctx.slo.met_by(sim) else None
    runs.append((cand.max_batch, budget, sim.max_running_per_instance, sim.budget_slack, latency))
    return latency


# ---- the search loop -----------------------------------------------------------------------
def serving_search(
    problem: ServingProblem,
    cost_model: ServingCostModel,
    *,
    fixed: dict[str, Any] | None = None,
    engines: Sequence[str] | None = None,
    engine_options: Mapping[str, Mapping[str, Any]] | None = None,
    time_limit_s: float = 60.0,
    top_k: int = 10,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> ServingSearchResult:
    """The `top_k` serving plans for the workload's objective (module docstring), for the
    problem's engine, `fixed["engine"]`, or each of `engines` (their plans ranked
    together; the time limit is shared)."""
    if top_k < 1:
        raise SpecError("top_k", "must be at least 1", top_k)
    problem.workload.check_objective()
    if problem.workload.objective == "min_cost":
        # one kind of node: the cheapest plan is the one on the fewest GPUs
        problem = replace(
            problem, workload=problem.workload.model_copy(update={"objective": "min_gpus"})
        )
    fixed = dict(fixed or {})
    check_fixed(fixed)
    pinned = fixed.pop("engine", None)
    if pinned is not None and engines and pinned not in engines:
        raise SpecError(
            "constraints.fixed.engine",
            f"one of constraints.engines ({list(engines)}) when both are given",
            pinned,
        )
    names = [pinned] if pinned is not None else list(dict.fromkeys(engines or [problem.engine]))
    for i, name in enumerate(names):
        check_engine(name, "constraints.fixed.engine" if pinned else f"constraints.engines.{i}")
    chosen = dict(engine_options or {})
    check_engine_options(chosen, names)

    def options_of(name: str) -> Mapping[str, Any] | None:
        if name in chosen:
            return chosen[name]
        return problem.engine_options if name == problem.engine else None

    if len(names) == 1:
        return _search_engine(
            problem.with_engine(names[0], options_of(names[0])),
            cost_model,
            fixed,
            time_limit_s,
            top_k,
            progress,
            should_stop,
        )
    started = time.perf_counter()
    merged: list[RankedServingPlan] = []
    stats = SearchStats()
    for name in dict.fromkeys(names):
        res = _search_engine(
            problem.with_engine(name, options_of(name)),
            cost_model,
            fixed,
            time_limit_s / len(names),
            top_k,
            progress,
            should_stop,
        )
        merged += res.plans
        stats.merge(res.stats)
    merged.sort(key=lambda r: _rank_key(problem, r.estimate), reverse=True)
    ranked = merged[:top_k]
    plans = [
        replace(r, rank=i + 1, explanation=explain_serving(problem, r.estimate, i + 1, ranked))
        for i, r in enumerate(ranked)
    ]
    stats.wall_time_s = time.perf_counter() - started
    return ServingSearchResult(plans, stats)


def check_engine(name: Any, field: str) -> None:
    """Refuse (422 naming `field`) an engine name no profile is registered under."""
    known = list_engines()
    if not isinstance(name, str) or name not in known:
        raise SpecError(field, f"one of {known} (GET /v1/engines)", name)


def check_engine_options(
    options: Mapping[str, Mapping[str, Any]], engines: Sequence[str] | None
) -> None:
    """Refuse (422 naming the field) settings for an engine the search does not run, or
    settings its profile does not accept (`engines` None: any registered engine)."""
    for name, values in options.items():
        field = f"constraints.engine_options.{name}"
        if engines is not None and name not in engines:
            raise SpecError(field, f"an engine the search runs ({list(engines)})", name)
        check_engine(name, field)
        build_engine(name, dict(values), field=field)


def plan_price_per_hour(problem: ServingProblem, plan: ServingPlan) -> float:
    """What the plan's GPUs cost per hour (`ServingMetrics.price_per_hour`; 0 unpriced)."""
    return plan_price_or_none(problem, plan) or 0.0


def _rank_key(problem: ServingProblem, est: ServingEstimate) -> float:
    """The objective's score of a priced plan (higher is better), to rank plans found for
    different engines together."""
    m = est.metrics
    if m is None:
        return -math.inf
    objective = problem.workload.objective
    if objective == "min_gpus":
        return -float(m.gpus_used) + min(m.goodput_rps_per_gpu, 1e5) * TIE_BREAK
    if objective == "min_cost":
        return -plan_price_per_hour(problem, est.plan) + min(m.goodput_rps_per_gpu, 1e5) * (
            TIE_BREAK
        )
    if objective == "min_latency":
        return -float(est.details.get("ranked_e2e_latency_s_p90", m.e2e_latency_s_p90))
    return m.goodput_rps_per_gpu


def _search_engine(
    problem: ServingProblem,
    cost_model: ServingCostModel,
    fixed: dict[str, Any],
    time_limit_s: float,
    top_k: int,
    progress: Callable[[int, int], None] | None,
    should_stop: Callable[[], bool] | None,
) -> ServingSearchResult:
    """`serving_search` for the problem's own engine."""
    started = time.perf_counter()
    stats = SearchStats()
    stream = request_stream(problem.workload)
    costs = InstanceCosts(problem, cost_model)
    monitor = Monitor(time_limit_s, progress, should_stop, 0)
    cached = problem.engine_profile.scheduler().prefix_caching
    mean_prompt, mean_output = mean_lengths(stream, cached)
    ctx = _Context(problem, costs, stream, problem.slo, mean_prompt, mean_output, stats, monitor)
    ctx.prefix_cached = cached
    modes = [fixed["mode"]] if "mode" in fixed else ["colocated", "disaggregated"]
    top = _Top(top_k)
    min_latency = problem.workload.objective == "min_latency"
    rate = problem.target_rate_rps
    try:
        # heap of (−bound score, order, candidate, bound final?): best bound first; a
        # disaggregated unit's first bound is refined (its prefill pool simulated) when it
        # reaches the top, then it goes back into the heap
        heap: list[tuple[float, int, Candidate | int, bool]] = []
        table: _DisaggregatedTable | None = None
        rows: _Rows | None = None
        for mode in modes:
            if mode == "disaggregated" and not min_latency and LAZY_UNITS:
                # units stay rows of the table until the search takes them
                table = _disaggregated_table(ctx, fixed, lazy=True)
                base = len(heap)
                if BISECT_LAZILY:  # taken in order from the table sorted once
                    rows = _Rows(-table.scores(problem), base, table.final)
                    continue
                heap += zip(
                    (-table.scores(problem)).tolist(),
                    range(base, base + len(table)),
                    range(len(table)),
                    table.final.tolist(),
                    strict=True,
                )
                continue
            gen = (
                _colocated_candidates(ctx, fixed)
                if mode == "colocated"
                else _disaggregated_candidates(ctx, fixed)
            )
            if min_latency and mode == "disaggregated":
                gen = _pareto_instance_counts(ctx, gen)
            for bound, cand, final in gen:
                if min_latency:
                    # bound on −latency: the near-idle latency (None: the SLO cannot hold)
                    idle = _idle_latency(ctx, cand) if bound > 0 else None
                    if idle is None:
                        stats.add_pruned("slo_unattainable")
                        continue
                    if rate is not None and _plan_capacity_rps(ctx, cand) < rate:
                        stats.add_pruned("capacity_at_rate")
                        continue
                    heap.append((idle, len(heap), cand, True))
                else:
                    heap.append((-_bound_score(problem, cand, bound), len(heap), cand, final))
        heapq.heapify(heap)
        monitor.total = len(heap) + (0 if rows is None else rows.size)
        done = 0
        if not min_latency and BISECT_LAZILY:
            _lazy_goodput_search(ctx, heap, table, top, rows)
            heap = []
        while heap:
            neg_bound, order, ref, final = heap[0]
            if isinstance(ref, Candidate):
                cand = ref
            else:
                assert table is not None
                cand = table.candidate(ref)
            bound_score = -neg_bound
            threshold = top.threshold()
            if bound_score <= threshold or bound_score == -math.inf:
                stats.add_pruned(
                    "throughput_bound" if not min_latency else "latency_bound", len(heap)
                )
                break
            heapq.heappop(heap)
            if not final:
                monitor.poll(report=False)
                _requeue_refined(ctx, cand, order, heap)
                continue
            monitor.done = done
            monitor.poll(report=True)
            done += 1
            if min_latency:
                worse = -threshold if threshold > -math.inf and LATENCY_CUTOFF else math.inf
                latency = -bound_score if rate is None else _plan_latency(ctx, cand, rate, worse)
                stats.evaluated += 1
                if latency is None:
                    stats.add_pruned("slo_at_rate")
                    continue
                if latency == math.inf:
                    stats.add_pruned("latency_at_rate")
                    continue
                stats.feasible += 1
                top.push(-latency, cand, None)
                continue
            if _idle_latency(ctx, cand) is None:  # misses the SLO even alone: no goodput
                stats.add_pruned("slo_unattainable")
                continue
            known_good = None
            if threshold > -math.inf:
                needed = _needed_rate(problem, cand, threshold)
                if needed > 0 and not _unit_goodput(ctx, cand, needed):
                    stats.add_pruned("slo_threshold")
                    continue
                known_good = needed if needed > 0 else None
            res = _unit_goodput(ctx, cand, known_good=known_good)
            assert isinstance(res, GoodputResult)
            stats.evaluated += 1
            if res.goodput_rps <= 0:
                stats.add_pruned("slo_unattainable")
                continue
            stats.feasible += 1
            score = _score(problem, cand, res.goodput_rps)
            if score > -math.inf:
                top.push(score, cand, res)
        monitor.done = monitor.total
        if progress is not None:  # the whole space is covered: report it as done
            progress(monitor.total, monitor.total)
    except Stopped as stop:
        stats.status = stop.status  # type: ignore[assignment]
    # probes answered by the memo ran no simulation
    stats.solver_calls -= ctx.memo.hits
    stats.solver_cache_hits += ctx.memo.hits
    ranked = _finish(ctx, top)
    plans = [
        replace(r, rank=i + 1, explanation=explain_serving(problem, r.estimate, i + 1, ranked))
        for i, r in enumerate(ranked)
    ]
    stats.wall_time_s = time.perf_counter() - started
    return ServingSearchResult(plans, stats)


def _finish(ctx: _Context, top: _Top) -> list[RankedServingPlan]:
    out = []
    for score, cand, res in top.best_first():
        units = _units_for(ctx.problem, cand, 0.0 if res is None else res.goodput_rps)
        est = evaluate_plan(ctx.problem, cand.plan(units), ctx.costs, ctx.stream, res)
        if ctx.problem.workload.objective == "min_latency":
            est.details["ranked_e2e_latency_s_p90"] = -score
            est.details["ranked_at"] = (
                "idle" if ctx.problem.target_rate_rps is None else "arrival_rate"
            )
        out.append(RankedServingPlan(0, est, ""))
    return out


# ---- explanations --------------------------------------------------------------------------
def describe_plan(plan: ServingPlan) -> str:
    """One line naming a serving plan: mode, then count × role [layout, max batch, chunk]."""

    def one(inst: ServingInstance) -> str:
        p = inst.parallelism
        layout = Layout(p.tensor, p.pipeline, p.expert, inst.precision or "bf16").label()
        chunk = f", chunk {inst.chunk_size}" if inst.chunk_size else ""
        batch = f", max batch {inst.max_batch_size}" if inst.role != "prefill" else ""
        return f"{inst.count} × {inst.role} [{layout}{batch}{chunk}]"

    return f"{plan.mode}: " + " + ".join(one(i) for i in plan.instances)


def explain_serving(
    problem: ServingProblem, est: ServingEstimate, rank: int, ranked: list[RankedServingPlan]
) -> str:
    """Why this plan: its goodput, what limits it, its memory, and how it compares with the
    best plan of a different layout."""
    m = est.metrics
    if m is None:
        return f"{describe_plan(est.plan)}: " + "; ".join(v.detail for v in est.violations)
    slo = problem.workload.slo
    targets = []
    if slo.ttft_ms is not None:
        targets.append(f"TTFT ≤ {slo.ttft_ms:g} ms")
    if slo.tpot_ms is not None:
        targets.append(f"TPOT ≤ {slo.tpot_ms:g} ms")
    engine = est.plan.engine or problem.engine
    text = [
        f"{describe_plan(est.plan)} on {m.gpus_used} GPUs under "
        f"{build_engine(engine, est.plan.engine_options or None).label}: goodput {m.goodput_rps:.3g} "
        f"requests/s ({m.goodput_rps_per_gpu:.3g} per GPU) with P{slo.percentile:g} "
        f"{' and '.join(targets) or 'no SLO'}; at {m.arrival_rate_rps:.3g} requests/s "
        f"P90 TTFT {m.ttft_ms_p90:.0f} ms, P90 TPOT {m.tpot_ms_p90:.1f} ms"
    ]
    insts = est.details.get("instances", [])
    for d in insts:
        text.append(
            f"{d['role']} instance: weights {d['weights_gib']:.1f} GiB and KV cache "
            f"{d['kv_cache_gib']:.1f} GiB per GPU ({d['kv_capacity_tokens']} tokens, "
            f"{d['kv_limited_batch']} requests of mean length); decode step "
            f"{d['decode_step_ms_batch_1']:.1f} ms alone, prefill of the mean prompt "
            f"{d['prefill_ms_mean_prompt']:.0f} ms"
            + (f"; pipeline stages: {d['stage_split']}" if d.get("stage_split") else "")
        )
    if m.preemptions:
        text.append(
            f"{m.preemptions} requests were preempted for KV-cache space at that rate and "
            "prefilled again (the engine pages its cache; a smaller max batch avoids it)"
        )
    limited = est.details.get("goodput_limited_by")
    if limited == "capacity_bound":
        text.append("the SLO holds up to the throughput capacity: goodput is capacity-bound")
    elif limited == "slo":
        text.append(
            "goodput ends where the SLO percentile breaks (queueing and batch growth "
            "stretch TTFT/TPOT), below the throughput capacity "
            f"{est.details.get('capacity_upper_bound_rps', 0):.3g} requests/s"
        )
    if rank == 1:
        other = next(
            (
                r.estimate
                for r in ranked[1:]
                if _describe_layout(r.estimate.plan) != _describe_layout(est.plan)
                and r.estimate.metrics is not None
            ),
            None,
        )
        if other is not None and other.metrics is not None:
            ratio = m.goodput_rps_per_gpu / max(other.metrics.goodput_rps_per_gpu, 1e-12)
            if ratio >= 1.005:
                versus = f" (this plan carries {ratio:.2f}× its goodput per GPU)"
            elif ratio > 0.995:
                versus = " (as much per GPU: within the goodput search's tolerance)"
            else:
                versus = ""
            text.append(
                f"the best other layout, {describe_plan(other.plan)}, reaches "
                f"{other.metrics.goodput_rps_per_gpu:.3g} requests/s per GPU{versus}"
            )
    for v in est.violations:
        text.append(f"violation ({v.kind}): {v.detail}")
    return "; ".join(text) + "."


def _describe_layout(plan: ServingPlan) -> tuple[Any, ...]:
    return (
        plan.mode,
        tuple(
            (
                i.role,
                i.parallelism.tensor,
                i.parallelism.pipeline,
                i.parallelism.expert,
                i.precision,
            )
            for i in plan.instances
        ),
    )
