"""Deterministic discrete-event simulation of LLM serving engines (issue 5).

Model
-----
Each engine instance (one replica of the model on `InstanceCost.num_gpus` GPUs) runs
*continuous batching* (iteration-level scheduling: Orca, Yu et al., OSDI'22; vLLM, Kwon et
al., SOSP'23) with *chunked prefill* (Sarathi-Serve, Agrawal et al., OSDI'24). At every
iteration boundary the scheduler of an instance builds one forward pass:

1. every running sequence whose prompt is fully prefilled decodes one token (decodes are
   never preempted);
2. the remaining *token budget* (`chunk_size` minus the number of decodes, Sarathi-Serve's
   stall-free batching) goes to the prompts already admitted but not fully prefilled, oldest
   first, one chunk each;
3. then, while budget remains, requests are admitted from the instance's FCFS queue (head of
   line only: a request that does not fit blocks the ones behind it, as in vLLM's FCFS
   policy) when the running count is below `max_batch_size` and the KV cache can *reserve*
   the request's prompt + output tokens. Reserving the final length up front (instead of
   paging in blocks and preempting, as vLLM does) means no preemption or recomputation is
   ever needed; it under-uses the cache somewhat, in exchange for a simulation whose admission
   never has to be undone.

With `kv_allocation="paged"` (vLLM, SGLang) a colocated instance admits a request when its
prompt fits beside what the running requests hold and the token each decode writes in the
coming iteration; a request's cache then grows a token per decode step. When the decodes of
an iteration need more than is free, the most recently admitted running request is preempted
(recomputation): its cache is freed and it goes back to the head of the queue with its prompt
and generated tokens as the prompt to prefill again and the rest of its output to produce;
its first token keeps its time and its TPOT counts every token from the first. A request is
never preempted to make room for itself alone. Pure-decode runs end where the cache fills.
Prefill and decode pools of a disaggregated plan reserve (below).

`chunk_size=None` means no chunking: the budget is unlimited, so whole prompts run in the same
pass as the decodes (Orca's mixed iterations; Sarathi-Serve with an infinite budget).

Engines (`cost_models.serving.base.SchedulerPolicy`, read from the cost's `scheduler`; an
engine-wrapped cost, `cost_models.serving.engines`, carries its engine's): the policy above
is `prefill="mixed"`. With `separate` (vLLM V0 without chunked prefill, SGLang's default) an
iteration that takes prompts takes nothing else: its budget is the whole `chunk_size` and
the decodes wait for it. With `decode_steps = k` (multi-step scheduling) the scheduler runs
blocks of k decode steps and admits prompts only between blocks: a step that takes prompts
and decodes is the first step of its block, a prompt-only step stands alone; a block is never
cut short by an arrival (a completion inside it still ends the request at its step). With
`split_prompts=False` (TensorRT-LLM without chunked context) a prompt runs whole: it waits
for an iteration whose remaining budget holds it, and one longer than the budget runs
without other prompts.

The pass takes `cost.iteration_time_s(IterationBatch(...))`; its tokens appear when it ends.
A prompt's last chunk emits the first output token (TTFT ends there); each decode step emits
one more. A sequence with `g` generated tokens has context `prompt + g`, which is what
`decode_context_tokens` sums. A chunk of `n` tokens after `past` prefilled tokens contributes
`n·past + n(n+1)/2` causal attention pairs.

Concurrency cap (`concurrency`, a benchmark client's `--max-concurrency`): at most that many
requests are in flight; a request that arrives while the cap is reached is sent when one
finishes (or is rejected), and its latencies count from when it is sent. With every arrival
at 0 this is a closed loop of `concurrency` clients.

Replicas and routing: a request goes, when it arrives, to the instance with the fewest
outstanding tokens (prompt tokens not yet prefilled + output tokens not yet generated, of the
requests queued or running there, as of that instance's last iteration boundary); ties go
to the lowest index. Events at the same instant: arrivals (and KV transfers) are handled
before iteration boundaries, so a boundary sees every request that arrived by then.

Disaggregated serving (DistServe, Zhong et al., OSDI'24; Splitwise, Patel et al., ISCA'24):
prefill instances only prefill (KV reserved for the prompt only; no batch limit other than
the token budget and the KV cache). When a prompt finishes, the first token is emitted (TTFT
ends), the prefill instance frees the prompt's KV and the KV is sent to the decode pool,
arriving `prefill_cost.kv_transfer_time_s(prompt)` later (transfers are independent: no link
contention). It is then routed to the decode instance with the fewest outstanding tokens,
which admits it (FCFS, KV reservation of prompt + output, `decode_max_batch`) and decodes it.
A request with one output token finishes at its prefill and never transfers.

Fast-forward of pure-decode runs
--------------------------------
Between events nothing changes but the decode contexts, so when an iteration would contain
only decodes (nothing to prefill, nobody admissible) the `k` iterations up to the next
completion are simulated as one event. Iteration `i` of the run (`i = 0..k-1`) has
`decode_context_tokens = C0 + i·n` and its time is interpolated on the chord between the
exact first and last iterations: `t_i = t_0 + i·(t_{k-1} - t_0)/(k-1)`. This is exact when
the iteration time is affine in `decode_context_tokens` at a fixed batch (the roofline decode
step: weights + KV read once per step); otherwise the error of the run's duration is at most
`k · max_i |t_i(true) - t_i(chord)|`, i.e. bounded by the cost's deviation from its chord over
the run (zero for affine, second order in the context growth `k·n` otherwise). A request
routed to the instance during a run, that could be admitted at once (empty queue, free slot,
KV and budget), cuts the run at the first iteration boundary at or after its arrival, which
is where step-by-step simulation would admit it; the router reads an instance's outstanding
tokens mid-run from the boundaries the run has passed. So with an affine cost, fast-forward
and step-by-step simulation give the same schedule (`fast_forward=False` gives the latter).

Guards
------
A request that can never fit an instance's KV cache (prompt + output above the capacity, or in
disaggregated mode the prompt above the prefill capacity) is *rejected* on arrival: it never
runs, its latencies are `inf` (so it fails every SLO), and it does not block the queue. The
number of engine events is capped (`max_events`, default `default_max_events(n)`); when the
cap is hit the simulation stops, `SimResult.truncated` is set and unfinished requests keep
`inf` latencies. Iteration times must be finite and ≥ 0 (`ValueError` otherwise).
"""

from __future__ import annotations

import copy
import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from cost_models.serving.base import (
    InstanceCost,
    IterationBatch,
    VirtualEngineCost,
    pipeline_engines,
    scheduler_of,
)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

_UNLIMITED = 1 << 62


def default_max_events(num_requests: int) -> int:
    """Default event cap: `200·n + 100 000` (a few seconds of simulation at most; realistic
    schedules need about `n · (prompt/chunk + 3)` events)."""
    return 200 * num_requests + 100_000


Role = Literal["both", "prefill", "decode"]


@dataclass(frozen=True, slots=True)
class Request:
    """One request: arrival time (s), prompt length and output length (tokens, both ≥ 1)."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int = 0
    """Leading prompt tokens every request shares (a system prompt): an engine with prefix
    caching computes them once per instance and keeps their KV cache, so later requests
    prefill only the rest."""

    def computed_prompt_tokens(self, prefix_cached: bool) -> int:
        """The prompt tokens the request prefills: all of them, or without the shared
        prefix once an instance's prefix cache holds it (at least one token)."""
        if not prefix_cached:
            return self.prompt_tokens
        return self.prompt_tokens - min(self.shared_prefix_tokens, self.prompt_tokens - 1)

    def __post_init__(self) -> None:
        if not math.isfinite(self.arrival_s):
            raise ValueError(f"Request.arrival_s must be finite, got {self.arrival_s}")
        if self.prompt_tokens < 1:
            raise ValueError(f"Request.prompt_tokens must be >= 1, got {self.prompt_tokens}")
        if self.output_tokens < 1:
            raise ValueError(f"Request.output_tokens must be >= 1, got {self.output_tokens}")
        if self.shared_prefix_tokens < 0:
            raise ValueError(
                f"Request.shared_prefix_tokens must be >= 0, got {self.shared_prefix_tokens}"
            )


@dataclass(frozen=True, slots=True)
class StopRule:
    """Stop the simulation once more than `max_misses` requests are known to miss the SLO
    (first token later than `ttft_s` after arrival, TPOT above `tpot_s` when they finish, or
    rejected). The verdict "attainment below target" is then already certain; the goodput
    search uses it to cut short the probes that fail. Unfinished requests count as misses in
    the partial result, so its `attainment` is below the target too."""

    ttft_s: float | None
    tpot_s: float | None
    max_misses: int
    e2e_s: float | None = None
    """Also stop once more than `max_e2e_over` requests are known to take longer than this
    end to end (finished later, or not finished that long after their arrival): then a
    nearest-rank percentile of the end-to-end latencies that `max_e2e_over + 1` values above
    it must lie above is certain to (`SimResult.e2e_exceeded`; no concurrency cap)."""
    max_e2e_over: int = 0


def percentile(values: FloatArray, q: float) -> float:
    """Nearest-rank percentile: the smallest value `v` with at least `q`% of values `≤ v`.

    Chosen over linear interpolation so that `inf` (rejected or unfinished requests) needs no
    arithmetic and so that `percentile(x, q) ≤ s` ⇔ at least `q`% of `x` are `≤ s`, the same
    test as `SimResult.attainment`.
    """
    if values.size == 0:
        return math.nan
    return float(np.percentile(values, q, method="inverted_cdf"))


@dataclass(frozen=True)
class SimResult:
    """Per-request latencies (in the order of the input requests) and aggregate figures.

    `ttft_s`: arrival → first token. `tpot_s`: (last token − first token)/(output − 1), 0 for a
    single output token. `e2e_s`: arrival → last token. All `inf` for rejected or unfinished
    requests. `throughput_tokens_per_s`: output tokens of finished requests / makespan (first
    arrival → last finish). `max_concurrent_sequences`: the peak over time of the number of
    admitted sequences (holding reserved KV) summed over all instances (in transfer between
    pools: not counted); `max_running_per_instance`: the largest peak of a single instance. `iterations` counts forward passes (fast-forwarded ones included),
    `events` the simulated events; `mean_decode_batch` averages the decode batch over the
    passes that had decodes. `truncated`: the event cap was hit; `stopped_early`: a
    `StopRule` ended the simulation (its verdict, a miss, is already certain).
    """

    ttft_s: FloatArray
    tpot_s: FloatArray
    e2e_s: FloatArray
    rejected: BoolArray
    output_tokens: int
    makespan_s: float
    throughput_tokens_per_s: float
    throughput_rps: float
    max_concurrent_sequences: int
    max_running_per_instance: int
    mean_decode_batch: float
    iterations: int
    events: int
    truncated: bool
    stopped_early: bool = False
    preemptions: int = 0
    """Requests preempted for KV space and recomputed (paged engines), over all instances."""
    e2e_exceeded: bool = False
    """The simulation stopped on `StopRule.e2e_s`: more than `max_e2e_over` requests take
    longer than it end to end."""
    budget_slack: int = -1
    """How far the token budget (`chunk_size`) could have been lowered without changing
    the schedule: the least budget left over by an iteration that scheduled prompts, over
    all instances, when the budget never bound (no prompt was cut or kept waiting by it,
    no run was left uncut for want of it); −1 when it bound. With a slack s ≥ 0 every
    budget of at least `chunk_size − s + 1` (any larger one included) takes the same
    decisions, so gives the same result (`goodput.SimulationMemo`)."""
    resume_point: ResumePoint | None = field(default=None, compare=False, repr=False)
    """With `snapshot_at`: the state the simulation had when everything before that time
    was done (`ResumePoint`), None if it never got there (stopped or truncated first)."""

    @property
    def num_requests(self) -> int:
        return int(self.ttft_s.size)

    @property
    def num_rejected(self) -> int:
        return int(self.rejected.sum())

    @property
    def num_finished(self) -> int:
        return int(np.isfinite(self.e2e_s).sum())

    def attainment(self, ttft_s: float | None, tpot_s: float | None) -> float:
        """Fraction of all requests meeting both targets (`None` = no target); DistServe's
        SLO attainment. Rejected and unfinished requests count as misses."""
        n = self.ttft_s.size
        if n == 0:
            return 1.0
        ok = np.isfinite(self.e2e_s)
        if ttft_s is not None:
            ok &= self.ttft_s <= ttft_s
        if tpot_s is not None:
            ok &= self.tpot_s <= tpot_s
        return float(ok.sum()) / n

    def ttft_percentile_s(self, q: float) -> float:
        return percentile(self.ttft_s, q)

    def tpot_percentile_s(self, q: float) -> float:
        return percentile(self.tpot_s, q)

    def e2e_percentile_s(self, q: float) -> float:
        return percentile(self.e2e_s, q)


# --------------------------------------------------------------------------------------------
# engine internals


class _Seq:
    __slots__ = (
        "idx", "prompt", "output", "reserve", "prefilled", "finish_step", "ctx_key", "prefix",
        "total_out", "resumed", "admit_no",
    )  # fmt: skip

    def __init__(
        self, idx: int, prompt: int, output: int, reserve: int, prefilled: int, prefix: int = 0
    ) -> None:
        self.idx = idx
        self.prompt = prompt
        self.output = output
        self.reserve = reserve
        self.prefilled = prefilled
        self.finish_step = 0
        self.ctx_key = 0
        self.prefix = min(prefix, prompt - 1)  # at least one token is always computed
        self.total_out = output  # the request's output tokens (`output` is what is left)
        self.resumed = False  # preempted after its first token; prefilling it again
        self.admit_no = 0  # admission order on its instance (the last admitted goes first)


def budget_reusable(slack: int, chunk: int | None, other: int | None) -> bool:
    """Whether a simulation with token budget `chunk` whose budget had `slack`
    (`SimResult.budget_slack`) takes the same decisions, so gives the same result, with the
    budget `other` (None: unlimited): the same budget, or, if it never bound, one no more
    than `slack − 1` below it or any above it (every comparison with the budget then comes
    out as it did). The caller checks that both budgets run the same scheduler policy
    (`SchedulerPolicy.separates`)."""
    if chunk == other:
        return True
    if slack < 0:
        return False
    c = _UNLIMITED if chunk is None else chunk
    o = _UNLIMITED if other is None else other
    return o >= c or c - o < slack


_batch = tuple.__new__
"""Builds an `IterationBatch` from a ready tuple of its five fields in order, without the
named tuple's keyword-argument `__new__` (the simulator builds one per iteration)."""


def _run_time(t0: float, slope: float, j: int) -> float:
    """Duration of the first `j` iterations of a run with `t_i = t0 + slope·i`."""
    return j * t0 + slope * (j * (j - 1) * 0.5)


def _first_boundary_at_or_after(t0: float, slope: float, d: float, k: int) -> int:
    """Smallest `j` in `1..k` with `_run_time(j) ≥ d` (`k` if none)."""
    if d <= 0.0:
        return 1
    a = 0.5 * slope
    b = t0 - 0.5 * slope
    if abs(a) <= 1e-300:
        guess = d / b if b > 0.0 else float(k)
    else:
        disc = b * b + 4.0 * a * d
        guess = (-b + math.sqrt(disc)) / (2.0 * a) if disc >= 0.0 else float(k)
    if math.isfinite(guess):
        j = math.ceil(guess)
        if j < 1:
            j = 1
        if j > k:
            j = k
    else:
        j = k
    # `_run_time(t0, slope, i)` inlined, the same operations (the router calls this once
    # per engine and request)
    while j > 1:
        i = j - 1
        if i * t0 + slope * (i * (i - 1) * 0.5) < d:
            break
        j = i
    while j < k and j * t0 + slope * (j * (j - 1) * 0.5) < d:
        j += 1
    return j


class _Sim:
    """Shared state of one simulation: clock events, per-request records, counters."""

    def __init__(
        self,
        requests: Sequence[Request],
        max_events: int,
        stop: StopRule | None,
        concurrency: int | None = None,
    ) -> None:
        n = len(requests)
        self.cap = n if concurrency is None else concurrency
        """Requests in flight at most (a client's `--max-concurrency`)."""
        self.in_flight = 0
        # (time, prio, seqno, kind, ref, version); prio 0 (arrivals, transfers) before 1
        self.heap: list[tuple[float, int, int, int, int, int]] = []
        self.seqno = 0
        self.first_token = [math.inf] * n
        self.finish = [math.inf] * n
        self.arrival = [r.arrival_s for r in requests]
        self.ttft_limit = math.inf if stop is None or stop.ttft_s is None else stop.ttft_s
        self.tpot_limit = math.inf if stop is None or stop.tpot_s is None else stop.tpot_s
        self.max_misses = n if stop is None else stop.max_misses
        self.missed = [False] * n
        self.misses = 0
        self.stopped = False
        self.e2e_limit = math.inf
        self.e2e_allowed = n
        if stop is not None and stop.e2e_s is not None and concurrency is None:
            self.e2e_limit, self.e2e_allowed = stop.e2e_s, stop.max_e2e_over
        self.e2e_over = [False] * n
        self.e2e_count = 0
        self.e2e_exceeded = False
        self.running = 0
        self.peak_running = 0
        self.events = 0
        self.max_events = max_events
        self.iterations = 0
        self.decode_seq_steps = 0
        self.decode_steps = 0

    def miss(self, idx: int) -> None:
        if not self.missed[idx]:
            self.missed[idx] = True
            self.misses += 1
            if self.misses > self.max_misses:
                self.stopped = True

    def first(self, idx: int, now: float) -> None:
        self.first_token[idx] = now
        if now - self.arrival[idx] > self.ttft_limit:
            self.miss(idx)

    def done(self, idx: int, now: float, output: int) -> None:
        self.finish[idx] = now
        self.in_flight -= 1
        if output > 1 and (now - self.first_token[idx]) / (output - 1) > self.tpot_limit:
            self.miss(idx)
        if now - self.arrival[idx] > self.e2e_limit:
            self.over(idx)

    def over(self, idx: int) -> None:
        """Request `idx` takes longer than `e2e_limit` end to end."""
        if not self.e2e_over[idx]:
            self.e2e_over[idx] = True
            self.e2e_count += 1
            if self.e2e_count > self.e2e_allowed:
                self.stopped = self.e2e_exceeded = True

    def push(self, time: float, prio: int, kind: int, ref: int, version: int = 0) -> None:
        self.seqno += 1
        heapq.heappush(self.heap, (time, prio, self.seqno, kind, ref, version))


_EV_ENGINE = 0
_EV_TRANSFER = 1


def _iteration_time_fn(cost: InstanceCost) -> Callable[[IterationBatch], float]:
    """`cost.iteration_time_s`, without the layer of a pipeline engine whose stages are
    even (`VirtualEngineCost` without stage parts returns its base's time as it is)."""
    if isinstance(cost, VirtualEngineCost):
        return cost.iteration_time_fn
    return cost.iteration_time_s


class _Engine:
    """One instance's scheduler state (see the module docstring for the policy)."""

    __slots__ = (
        "index", "cost", "role", "sim", "fast_forward", "kv_cap", "max_batch", "budget_cap",
        "waiting", "prefilling", "dec_heap", "n_dec", "ctx_base", "dec_out", "other_out",
        "steps", "kv_used", "n_running", "peak", "version", "busy", "cur_start", "cur_end",
        "cur_k", "cur_chunks", "is_run", "run_t0", "run_slope", "handoff", "time_fn",
        "separate", "block", "block_pos", "split", "prefix_cache", "prefix_warm", "paged",
        "gen_base", "admits", "preemptions", "weight", "slack",
    )  # fmt: skip

    def __init__(
        self,
        index: int,
        cost: InstanceCost,
        role: Role,
        max_batch: int | None,
        chunk: int | None,
        sim: _Sim,
        fast_forward: bool,
        handoff: list[tuple[float, _Seq]] | None,
    ) -> None:
        self.index = index
        self.weight = 1.0  # routing weight: outstanding tokens are compared per unit of it
        self.cost = cost
        self.time_fn = _iteration_time_fn(cost)
        self.role = role
        self.sim = sim
        self.fast_forward = fast_forward
        self.kv_cap = int(cost.kv_capacity_tokens)
        self.max_batch = _UNLIMITED if max_batch is None else max_batch
        self.budget_cap = _UNLIMITED if chunk is None else chunk
        self.waiting: deque[_Seq] = deque()
        self.prefilling: list[_Seq] = []
        self.dec_heap: list[tuple[int, int, _Seq]] = []
        self.n_dec = 0
        self.ctx_base = 0  # Σ over decoding seqs of (prompt + g0 − step0)
        self.dec_out = 0  # Σ over decoding seqs of finish_step
        self.other_out = 0  # outstanding tokens of queued / prefilling seqs
        self.steps = 0  # decode iterations run so far
        self.kv_used = 0
        self.n_running = 0
        self.peak = 0
        self.version = 0
        self.busy = False
        self.cur_start = 0.0
        self.cur_end = 0.0
        self.cur_k = 0
        self.cur_chunks: list[tuple[_Seq, int]] = []
        self.is_run = False
        self.run_t0 = 0.0
        self.run_slope = 0.0
        self.handoff = handoff  # prefill role: (time, seq) of finished prompts
        policy = scheduler_of(cost)
        self.separate = policy.separates(chunk is not None)  # prompts stall the decodes
        self.block = policy.decode_steps  # decode steps per scheduler call
        self.block_pos = 0  # decode steps into the current block
        self.split = policy.split_prompts  # prompts may be chunked over iterations
        self.prefix_cache = policy.prefix_caching  # shared prefixes are computed once
        self.prefix_warm = 0  # shared-prefix tokens whose KV the instance holds
        # paged KV: a decoding seq holds `reserve` + its generated tokens, which are
        # Σ (ctx_key − prompt) + n_dec · steps over the decoding seqs
        self.paged = policy.kv_allocation == "paged" and role == "both"
        self.gen_base = 0
        self.admits = 0
        self.preemptions = 0
        # the least budget left at the end of a scheduling iteration; −1 once it bound
        self.slack = _UNLIMITED

    # ---- routing

    def outstanding(self, now: float) -> int:
        steps = self.steps
        if self.is_run and self.busy and self.cur_k > 1:
            done = _first_boundary_at_or_after(
                self.run_t0, self.run_slope, now - self.cur_start, self.cur_k
            )
            steps += done - 1
        return self.other_out + self.dec_out - self.n_dec * steps

    def kv_in_use(self, steps: int | None = None) -> int:
        """KV tokens held after `steps` decode iterations (default: those run so far)."""
        if not self.paged:
            return self.kv_used
        s = self.steps if steps is None else steps
        return self.kv_used + self.gen_base + self.n_dec * s

    def _kv_admits(self, need: int, steps: int | None = None) -> bool:
        """Whether `need` more tokens fit at an iteration boundary (after `steps` decode
        iterations); paged, beside the token each running decode writes next."""
        growth = self.n_dec if self.paged else 0
        return self.kv_in_use(steps) + growth + need <= self.kv_cap

    def enqueue(self, seq: _Seq, now: float) -> None:
        if self.paged:
            seq.reserve = seq.prompt  # the cache grows with the output
        if self.role == "both":
            self.other_out += seq.prompt + seq.output
        elif self.role == "prefill":
            self.other_out += seq.prompt
        else:
            self.other_out += seq.output - 1
        self.waiting.append(seq)
        if not self.busy:
            self.busy = True
            self.cur_k = 0
            self.cur_chunks = []
            self.is_run = False
            self.cur_start = self.cur_end = now
            self.version += 1
            self.sim.push(now, 1, _EV_ENGINE, self.index, self.version)
        elif (
            self.is_run
            and self.block == 1  # a multi-step block is never cut: it runs to its end
            and len(self.waiting) == 1
            and self.n_running < self.max_batch
            and self._budget_left_for_cut()
        ):
            j = _first_boundary_at_or_after(
                self.run_t0, self.run_slope, now - self.cur_start, self.cur_k
            )
            hit = min(seq.prefix, self.prefix_warm) if self.prefix_cache else 0
            if j < self.cur_k and self._kv_admits(seq.reserve - hit, self.steps + j):
                self.cur_k = j
                self.cur_end = self.cur_start + _run_time(self.run_t0, self.run_slope, j)
                self.version += 1
                self.sim.push(self.cur_end, 1, _EV_ENGINE, self.index, self.version)

    def _budget_left_for_cut(self) -> bool:
        """Whether the budget leaves room for a prompt next to the run's decodes (a run is
        cut for a request only then); when it does not, the budget bound."""
        if self.budget_cap - (0 if self.separate else self.n_dec) > 0:
            return True
        self.slack = -1
        return False

    # ---- iterations

    def _join_decode(self, seq: _Seq) -> None:
        """`seq` has its first token; it decodes from the next iteration on."""
        seq.finish_step = self.steps + seq.output - 1
        seq.ctx_key = seq.prompt + 1 - self.steps
        self.ctx_base += seq.ctx_key
        self.dec_out += seq.finish_step
        self.n_dec += 1
        if self.paged:
            self.gen_base += seq.ctx_key - seq.prompt
        heapq.heappush(self.dec_heap, (seq.finish_step, seq.idx, seq))

    def _release(self, seq: _Seq) -> None:
        self.kv_used -= seq.reserve
        self.n_running -= 1
        self.sim.running -= 1

    def complete(self, now: float) -> None:
        """End the iteration (or run) in flight at `now`."""
        sim = self.sim
        k = self.cur_k
        chunks = self.cur_chunks
        if k:
            steps = self.steps = self.steps + k
            sim.iterations += k
            sim.decode_steps += k
            sim.decode_seq_steps += k * self.n_dec
            heap = self.dec_heap
            while heap and heap[0][0] <= steps:
                seq = heapq.heappop(heap)[2]
                self.n_dec -= 1
                self.ctx_base -= seq.ctx_key
                self.dec_out -= seq.finish_step
                if self.paged:
                    self.gen_base -= seq.ctx_key - seq.prompt
                sim.done(seq.idx, now, seq.total_out)
                self._release(seq)
        elif chunks:
            sim.iterations += 1
        if chunks:
            done = False
            colocated = self.role == "both"
            for seq, c in chunks:
                seq.prefilled += c
                self.other_out -= c
                if seq.prefilled == seq.prompt:
                    done = True
                    if not seq.resumed:
                        sim.first(seq.idx, now)
                    if self.prefix_cache and seq.prefix > self.prefix_warm:
                        # its prefix blocks now belong to the cache, held for good (still
                        # counted in kv_used, no longer in the request's reservation)
                        seq.reserve -= seq.prefix - self.prefix_warm
                        self.prefix_warm = seq.prefix
                    if colocated:
                        self.other_out -= seq.output
                        if seq.output == 1:
                            sim.done(seq.idx, now, seq.total_out)
                            self._release(seq)
                        else:
                            self._join_decode(seq)
                    else:  # prefill instance: free the prompt's KV, hand the request over
                        self._release(seq)
                        if seq.output == 1:
                            sim.done(seq.idx, now, 1)
                        else:
                            assert self.handoff is not None
                            self.handoff.append((now, seq))
            if done:
                self.prefilling = [s for s in self.prefilling if s.prefilled < s.prompt]
            self.cur_chunks = []
            # a scheduler call: a prompt-only step stands alone; a step that also decoded is
            # the first step of the block it starts (vLLM's multi-step with chunked prefill)
            self.block_pos = k % self.block
        elif k:
            self.block_pos = (self.block_pos + k) % self.block
        self.cur_k = 0
        self.is_run = False

    def _preempt(self, seq: _Seq) -> None:
        """Free `seq`'s cache and put it back at the head of the queue (recomputation)."""
        if seq.prefilled == seq.prompt:  # decoding: its prompt grows by what it generated
            self.dec_heap = [x for x in self.dec_heap if x[2] is not seq]
            heapq.heapify(self.dec_heap)
            generated = self.steps + seq.ctx_key - seq.prompt
            self.n_dec -= 1
            self.ctx_base -= seq.ctx_key
            self.dec_out -= seq.finish_step
            self.gen_base -= seq.ctx_key - seq.prompt
            seq.prompt += generated
            seq.output -= generated
            seq.resumed = True
            self.other_out += seq.prompt + seq.output
        else:
            self.prefilling.remove(seq)
            self.other_out += seq.prefilled
        self.kv_used -= seq.reserve
        seq.prefilled = 0
        seq.reserve = seq.prompt
        self.n_running -= 1
        self.sim.running -= 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def _make_room(self) -> None:
        """Preempt the most recently admitted running requests until the next decode step
        fits (never the last one running)."""
        while self.n_running > 1 and not self._kv_admits(0):
            victims = [x[2] for x in self.dec_heap] + self.prefilling
            self._preempt(max(victims, key=lambda v: v.admit_no))

    def plan(self, now: float) -> None:
        """Start the next iteration at `now` (or go idle)."""
        sim = self.sim
        n_dec = self.n_dec
        # `_make_room` when the next decode step does not fit (`_kv_admits(0)`, inlined)
        if (
            self.paged
            and n_dec
            and self.n_running > 1
            and self.kv_used + self.gen_base + n_dec * self.steps + n_dec > self.kv_cap
        ):
            self._make_room()
            n_dec = self.n_dec
        # Mid-block of a multi-step scheduler only the decodes run; prompts wait for the
        # block's end. A scheduler that separates prompts gives them the whole budget.
        scheduling = self.block_pos == 0 or n_dec == 0
        budget = (self.budget_cap - (0 if self.separate else n_dec)) if scheduling else 0
        chunks: list[tuple[_Seq, int]] = []
        ptoks = 0
        pairs = 0.0
        for seq in self.prefilling:
            if budget <= 0:
                if scheduling:
                    self.slack = -1  # a prompt left waiting by the budget
                break
            past = seq.prefilled
            c = seq.prompt - past
            if c > budget:
                c = budget
                self.slack = -1  # a prompt cut by the budget
            chunks.append((seq, c))
            budget -= c
            ptoks += c
            pairs += c * past + c * (c + 1) * 0.5
        waiting = self.waiting
        if waiting and budget > 0:
            decode_role = self.role == "decode"
            while waiting and budget > 0 and self.n_running < self.max_batch:
                seq = waiting[0]
                hit = (
                    min(seq.prefix, self.prefix_warm)
                    if self.prefix_cache and seq.prefilled == 0
                    else 0
                )
                if not self._kv_admits(seq.reserve - hit):
                    break
                if not (self.split or decode_role or seq.prompt <= budget or not chunks):
                    self.slack = -1
                    break  # a whole prompt waits for an iteration whose budget holds it
                waiting.popleft()
                if hit:  # the cached prefix: its KV is shared, its prefill skipped
                    seq.reserve -= hit
                    seq.prefilled = hit
                self.kv_used += seq.reserve
                self.admits += 1
                seq.admit_no = self.admits
                self.n_running += 1
                if self.n_running > self.peak:
                    self.peak = self.n_running
                sim.running += 1
                if sim.running > sim.peak_running:
                    sim.peak_running = sim.running
                if decode_role:
                    self.other_out -= seq.output - 1
                    self._join_decode(seq)
                else:
                    self.prefilling.append(seq)
                    past = seq.prefilled
                    rest = seq.prompt - past
                    if rest <= budget or not self.split:
                        c = rest
                    else:
                        c = budget
                        self.slack = -1  # a prompt cut by the budget
                    chunks.append((seq, c))
                    budget -= c
                    ptoks += c
                    pairs += c * past + c * (c + 1) * 0.5
            n_dec = self.n_dec
            if waiting and budget <= 0 and self.n_running < self.max_batch:
                self.slack = -1  # requests left queued by the budget
        elif waiting and scheduling and budget <= 0:
            self.slack = -1
        if scheduling and budget < self.slack:
            self.slack = budget if budget >= 0 else -1
        if not chunks and n_dec == 0:
            self.busy = False
            return
        sim.events += 1
        if sim.events > sim.max_events:
            self.busy = False
            return
        steps = self.steps
        ctx0 = self.ctx_base + n_dec * steps  # Σ (prompt + generated) of decoding seqs
        self.busy = True
        self.cur_start = now
        self.is_run = False
        if chunks:
            self.cur_chunks = chunks
            if self.separate:  # the decodes wait for this prompt-only iteration
                self.cur_k = 0
                t = self.time_fn(_batch(IterationBatch, (0, 0, ptoks, pairs, len(chunks))))
            else:
                self.cur_k = 1 if n_dec else 0
                t = self.time_fn(_batch(IterationBatch, (n_dec, ctx0, ptoks, pairs, len(chunks))))
        else:
            self.cur_k = 1
            k = self.dec_heap[0][0] - steps
            if self.block > 1:  # a run ends at its block's end at the latest
                k = min(k, self.block - self.block_pos)
            if self.paged:  # … and where its decodes fill the cache
                k = min(k, max(1, (self.kv_cap - self.kv_in_use()) // n_dec))
            t = self.time_fn(_batch(IterationBatch, (n_dec, ctx0, 0, 0.0, 0)))
            if k >= 2 and self.fast_forward:
                last = (n_dec, ctx0 + (k - 1) * n_dec, 0, 0.0, 0)
                t_last = self.time_fn(_batch(IterationBatch, last))
                if not 0.0 <= t_last < math.inf:
                    raise ValueError(f"iteration_time_s returned {t_last}")
                self.is_run = True
                self.cur_k = k
                self.run_t0 = t
                slope = self.run_slope = (t_last - t) / (k - 1)
                t = _run_time(t, slope, k)
        if not 0.0 <= t < math.inf:
            raise ValueError(f"iteration_time_s returned {t}")
        end = self.cur_end = now + t
        self.version += 1
        sim.seqno += 1
        heapq.heappush(sim.heap, (end, 1, sim.seqno, _EV_ENGINE, self.index, self.version))


def _route(engines: list[_Engine], now: float, need: int) -> _Engine:
    """The engine with the fewest outstanding tokens per unit of weight among those whose
    KV cache can hold `need` tokens (one exists: the caller rejects the others)."""
    if len(engines) == 1:
        return engines[0]
    best: _Engine | None = None
    best_out = math.inf
    for e in engines:
        if e.kv_cap < need:
            continue
        # `e.outstanding(now)`, inlined: the router's loop runs once per engine per request
        steps = e.steps
        if e.is_run and e.busy and e.cur_k > 1:
            steps += (
                _first_boundary_at_or_after(e.run_t0, e.run_slope, now - e.cur_start, e.cur_k) - 1
            )
        o = (e.other_out + e.dec_out - e.n_dec * steps) / e.weight
        if o < best_out:
            best, best_out = e, o
    assert best is not None
    return best


def _check_args(count: int, max_batch: int | None, chunk: int | None, what: str) -> None:
    if count < 1:
        raise ValueError(f"{what}: instance count must be >= 1, got {count}")
    if max_batch is not None and max_batch < 1:
        raise ValueError(f"{what}: max_batch_size must be >= 1, got {max_batch}")
    if chunk is not None and chunk < 1:
        raise ValueError(f"{what}: chunk_size must be >= 1, got {chunk}")


def _check_concurrency(concurrency: int | None) -> None:
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")


_State = tuple[
    "_Sim", list["_Engine"], list["_Engine"], list[tuple[float, "_Seq"]], dict[int, "_Seq"],
    list[bool], float,
]  # fmt: skip
"""A simulation's state between events: (sim, front, back, hand-offs, transfers in
flight, rejections, clock)."""


class ResumePoint:
    """A simulation's whole state at a time T when every request has arrived and nothing
    at T or later has happened yet (`snapshot_at`): a longer stream whose first requests
    are these, and whose later ones all arrive at T or later, goes through exactly the same
    events up to T (the later arrivals come after everything before T; event order is by
    time, arrivals first), so its simulation can go on from here (`resume`) instead of
    running those events again. Holds a private copy of the state; one resume per point."""

    __slots__ = ("prefix", "at", "state", "tag")

    def __init__(
        self, prefix: tuple[tuple[float, int, int, int], ...], at: float, state: _State
    ) -> None:
        self.prefix = prefix
        self.at = at
        self.state: _State | None = state
        self.tag: object = None
        """What the caller knows the simulation by (the resume must be of the same)."""

    def release(self) -> None:
        """Drop the state (the point can no longer be resumed)."""
        self.state = None


def _fingerprint(requests: Sequence[Request]) -> tuple[tuple[float, int, int, int], ...]:
    return tuple(
        (r.arrival_s, r.prompt_tokens, r.output_tokens, r.shared_prefix_tokens) for r in requests
    )


def _snapshot(requests: Sequence[Request], at: float, state: _State) -> ResumePoint:
    return ResumePoint(_fingerprint(requests), at, _copy_state(state))


def _copy_state(state: _State) -> _State:
    """A copy of the state that shares nothing mutable with it: the records and queues
    copied, every request in them copied once (the costs, immutable, are shared)."""
    sim, front, back, handoff, pending, rejected, clock = state
    seqs: dict[int, _Seq] = {}

    def seq(q: _Seq) -> _Seq:
        c = seqs.get(id(q))
        if c is None:
            c = seqs[id(q)] = _Seq.__new__(_Seq)
            for name in _Seq.__slots__:
                setattr(c, name, getattr(q, name))
        return c

    new_sim = copy.copy(sim)
    new_sim.heap = list(sim.heap)
    new_sim.first_token = list(sim.first_token)
    new_sim.finish = list(sim.finish)
    new_sim.arrival = list(sim.arrival)
    new_sim.missed = list(sim.missed)
    new_sim.e2e_over = list(sim.e2e_over)
    new_handoff = [(t, seq(q)) for t, q in handoff]

    def engine(e: _Engine) -> _Engine:
        c = _Engine.__new__(_Engine)
        for name in _Engine.__slots__:
            setattr(c, name, getattr(e, name))
        c.sim = new_sim
        c.waiting = deque(seq(q) for q in e.waiting)
        c.prefilling = [seq(q) for q in e.prefilling]
        c.dec_heap = [(f, i, seq(q)) for f, i, q in e.dec_heap]
        c.cur_chunks = [(seq(q), n) for q, n in e.cur_chunks]
        c.handoff = None if e.handoff is None else new_handoff
        return c

    return (
        new_sim,
        [engine(e) for e in front],
        [engine(e) for e in back],
        new_handoff,
        {i: seq(q) for i, q in pending.items()},
        list(rejected),
        clock,
    )


def _run_resumed(
    point: ResumePoint,
    requests: Sequence[Request],
    max_events: int,
    stop: StopRule | None,
    transfer_cost: InstanceCost | None,
) -> SimResult:
    """Go on from `point` with `requests` (its requests first, every later one arriving at
    `point.at` or later), under this run's event cap and stop rule."""
    n = len(point.prefix)
    if point.state is None or len(requests) <= n or _fingerprint(requests[:n]) != point.prefix:
        raise ValueError("resume: the requests do not extend the resume point's")
    if min(r.arrival_s for r in requests[n:]) < point.at:
        raise ValueError("resume: a later request arrives before the resume point")
    sim, front, back, handoff, pending, rejected, clock = point.state
    point.release()  # the run goes on in that state
    extra = len(requests) - n
    sim.cap = len(requests)
    sim.first_token += [math.inf] * extra
    sim.finish += [math.inf] * extra
    sim.arrival += [r.arrival_s for r in requests[n:]]
    sim.missed += [False] * extra
    sim.e2e_over += [False] * extra
    rejected += [False] * extra
    sim.ttft_limit = math.inf if stop is None or stop.ttft_s is None else stop.ttft_s
    sim.tpot_limit = math.inf if stop is None or stop.tpot_s is None else stop.tpot_s
    sim.max_misses = len(requests) if stop is None else stop.max_misses
    if stop is not None and stop.e2e_s is not None:
        raise ValueError("resume: no end-to-end stop rule")
    sim.e2e_allowed = len(requests)
    sim.stopped = sim.misses > sim.max_misses
    sim.max_events = max_events
    return _run(
        requests, front, back, handoff, transfer_cost, sim, start=(pending, rejected, clock, n)
    )


def _run(
    requests: Sequence[Request],
    front: list[_Engine],
    back: list[_Engine],
    handoff: list[tuple[float, _Seq]],
    transfer_cost: InstanceCost | None,
    sim: _Sim,
    snapshot_at: float | None = None,
    start: tuple[dict[int, _Seq], list[bool], float, int] | None = None,
) -> SimResult:
    """The event loop: arrivals (pre-sorted, FCFS in arrival order, ties by input order),
    KV-transfer completions and engine iteration boundaries, in time order. `snapshot_at`:
    keep a `ResumePoint` at that time (every request must have arrived before it); `start`:
    go on from a resumed state (pending transfers, rejections, clock) with `sim`'s requests
    before the first of `requests` to arrive at or after it already handled."""
    n = len(requests)
    order = sorted(range(n), key=lambda i: requests[i].arrival_s)
    arrivals = [requests[i].arrival_s for i in order]
    rejected = [False] * n
    engines = front + back
    colocated = front[0].role == "both"
    front_cap = max(e.kv_cap for e in front)
    back_cap = max((e.kv_cap for e in back), default=0)
    pending: dict[int, _Seq] = {}  # requests whose KV is in transfer, by index
    heap = sim.heap
    i_arr = 0
    clock = 0.0  # time of the last event handled
    if start is not None:
        pending, rejected, clock, i_arr = start
        snapshot_at = None
    truncated = False
    # end-to-end limit: requests in arrival order whose limit has not passed yet
    e2e_limit = sim.e2e_limit
    watching = e2e_limit < math.inf
    watch = 0 if start is None else start[3]
    finish = sim.finish
    point: ResumePoint | None = None
    if snapshot_at is not None and (
        (arrivals and arrivals[-1] >= snapshot_at) or sim.e2e_limit < math.inf
    ):
        snapshot_at = None  # not every request has arrived by then, or a watch to keep
    while True:
        if snapshot_at is not None and i_arr == n and (not heap or heap[0][0] >= snapshot_at):
            point = _snapshot(
                requests, snapshot_at, (sim, front, back, handoff, pending, rejected, clock)
            )
            snapshot_at = None
        if sim.events > sim.max_events:
            truncated = True
            break
        if sim.stopped:
            break
        # the next request goes out at its arrival, or when a slot frees under the cap
        ready = max(arrivals[i_arr], clock) if i_arr < n else math.inf
        if sim.in_flight < sim.cap and i_arr < n and (not heap or ready <= heap[0][0]):
            idx = order[i_arr]
            now = clock = ready
            if watching:
                while watch < i_arr and now - arrivals[watch] > e2e_limit:
                    if finish[order[watch]] == math.inf:  # not finished by now: longer
                        sim.over(order[watch])
                    watch += 1
                if sim.stopped:
                    continue
            sim.arrival[idx] = now  # latencies count from when the request is sent
            i_arr += 1
            r = requests[idx]
            p, o = r.prompt_tokens, r.output_tokens
            sim.in_flight += 1
            if colocated:
                if p + o > front_cap:
                    rejected[idx] = True
                    sim.in_flight -= 1
                    sim.miss(idx)
                    continue
                seq = _Seq(idx, p, o, p + o, 0, r.shared_prefix_tokens)
            else:
                if p > front_cap or (o > 1 and p + o > back_cap):
                    rejected[idx] = True
                    sim.in_flight -= 1
                    sim.miss(idx)
                    continue
                seq = _Seq(idx, p, o, p, 0, r.shared_prefix_tokens)
            _route(front, now, seq.reserve).enqueue(seq, now)
            continue
        if not heap:
            break
        if watching and watch < i_arr and heap[0][0] - arrivals[watch] > e2e_limit:
            t = heap[0][0]
            while watch < i_arr and t - arrivals[watch] > e2e_limit:
                if finish[order[watch]] == math.inf:
                    sim.over(order[watch])
                watch += 1
            if sim.stopped:
                continue
        now, _, _, kind, ref, version = heapq.heappop(heap)
        clock = now
        if kind == _EV_ENGINE:
            eng = engines[ref]
            if version != eng.version:
                continue  # superseded (the run was cut short)
            eng.complete(now)
            eng.plan(now)
            if handoff:
                assert transfer_cost is not None
                for t_done, s in handoff:
                    pending[s.idx] = s
                    xfer = float(transfer_cost.kv_transfer_time_s(s.prompt))
                    if not (xfer >= 0.0 and math.isfinite(xfer)):
                        raise ValueError(f"kv_transfer_time_s returned {xfer}")
                    sim.push(t_done + xfer, 0, _EV_TRANSFER, s.idx)
                handoff.clear()
        else:
            s = pending.pop(ref)
            s.reserve = s.prompt + s.output
            _route(back, now, s.reserve).enqueue(s, now)
    return _result(requests, sim, rejected, engines, truncated, point)


def _result(
    requests: Sequence[Request],
    sim: _Sim,
    rejected: list[bool],
    engines: list[_Engine],
    truncated: bool,
    point: ResumePoint | None = None,
) -> SimResult:
    n = len(requests)
    arrival = np.asarray(sim.arrival, dtype=np.float64)  # when each request was sent
    out = np.fromiter((r.output_tokens for r in requests), dtype=np.float64, count=n)
    first = np.asarray(sim.first_token, dtype=np.float64)
    finish = np.asarray(sim.finish, dtype=np.float64)
    done = np.isfinite(finish)
    ttft = np.where(done, first - arrival, np.inf)
    e2e = np.where(done, finish - arrival, np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1.0, 1.0), 0.0)
    tpot = np.where(done, tpot, np.inf)
    out_tokens = int(out[done].sum())
    if done.any():
        makespan = float(finish[done].max() - arrival.min())
    else:
        makespan = 0.0
    finished = int(done.sum())
    return SimResult(
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        rejected=np.asarray(rejected, dtype=np.bool_),
        output_tokens=out_tokens,
        makespan_s=makespan,
        throughput_tokens_per_s=out_tokens / makespan if makespan > 0 else 0.0,
        throughput_rps=finished / makespan if makespan > 0 else 0.0,
        max_concurrent_sequences=sim.peak_running,
        max_running_per_instance=max((e.peak for e in engines), default=0),
        mean_decode_batch=sim.decode_seq_steps / sim.decode_steps if sim.decode_steps else 0.0,
        iterations=sim.iterations,
        events=sim.events,
        truncated=truncated,
        stopped_early=sim.stopped,
        preemptions=sum(e.preemptions for e in engines),
        e2e_exceeded=sim.e2e_exceeded,
        budget_slack=min((e.slack for e in engines), default=-1),
        resume_point=point,
    )


@dataclass(frozen=True)
class ColocatedPart:
    """Identical colocated instances in a set of mixed ones (`simulate_colocated_mix`)."""

    cost: InstanceCost
    count: int
    max_batch_size: int
    chunk_size: int | None


def routing_weight(cost: InstanceCost) -> float:
    """An instance's speed for routing across mixed instances: the inverse of its decode
    step for one sequence of 1,024 tokens of context (an instance twice as fast takes twice
    the outstanding tokens before the router prefers another)."""
    step = cost.iteration_time_s(IterationBatch(decode_seqs=1, decode_context_tokens=1024))
    return 1.0 / step if step > 0 else 1.0


def instance_speed(cost: InstanceCost) -> float:
    """One instance's speed as one server behind a router (what an export weights it by):
    `simulate_colocated_mix` routes to each of its schedulers (`pipeline_engines`: p for a
    p-stage instance, each with the instance's iteration time) by `routing_weight`, so the
    instance as a whole takes p times one scheduler's weight."""
    engine, stages = pipeline_engines(cost)
    return stages * routing_weight(engine)


def simulate_colocated(
    requests: Sequence[Request],
    cost: InstanceCost,
    count: int,
    max_batch_size: int,
    chunk_size: int | None,
    *,
    fast_forward: bool = True,
    max_events: int | None = None,
    stop: StopRule | None = None,
    concurrency: int | None = None,
    snapshot_at: float | None = None,
    resume: ResumePoint | None = None,
) -> SimResult:
    """Simulate `count` identical instances, each prefilling and decoding (continuous
    batching with a `chunk_size` token budget per iteration, `None` = unchunked), requests
    routed by least outstanding tokens, at most `concurrency` of them in flight (None: no
    cap). See the module docstring for the policy. `snapshot_at` / `resume`: keep a
    `ResumePoint` in the result, go on from one (the same instances and limits)."""
    return simulate_colocated_mix(
        requests,
        [ColocatedPart(cost, count, max_batch_size, chunk_size)],
        fast_forward=fast_forward,
        max_events=max_events,
        stop=stop,
        concurrency=concurrency,
        snapshot_at=snapshot_at,
        resume=resume,
    )


def simulate_colocated_mix(
    requests: Sequence[Request],
    parts: Sequence[ColocatedPart],
    *,
    fast_forward: bool = True,
    max_events: int | None = None,
    stop: StopRule | None = None,
    concurrency: int | None = None,
    snapshot_at: float | None = None,
    resume: ResumePoint | None = None,
) -> SimResult:
    """Colocated instances of several kinds (different GPUs, layouts or limits) behind one
    router: a request goes to the instance with the fewest outstanding tokens per unit of
    its `routing_weight` (capacity-weighted least work; one kind: plain least outstanding
    tokens), ties to the lowest index, the parts in the order given. `snapshot_at` /
    `resume` as for `simulate_colocated` (no concurrency cap)."""
    _check_concurrency(concurrency)
    cap = default_max_events(len(requests)) if max_events is None else max_events
    if concurrency is not None:
        snapshot_at = None
    if resume is not None:
        assert concurrency is None
        return _run_resumed(resume, requests, cap, stop, None)
    sim = _Sim(requests, cap, stop, concurrency)
    front: list[_Engine] = []
    for part in parts:
        _check_args(part.count, part.max_batch_size, part.chunk_size, "colocated")
        cost, stages = pipeline_engines(part.cost)  # a p-stage instance runs p schedulers
        weight = routing_weight(cost) if len(parts) > 1 else 1.0
        for _ in range(part.count * stages):
            engine = _Engine(
                len(front), cost, "both", part.max_batch_size, part.chunk_size, sim,
                fast_forward, None,
            )  # fmt: skip
            engine.weight = weight
            front.append(engine)
    return _run(requests, front, [], [], None, sim, snapshot_at)


def simulate_disaggregated(
    requests: Sequence[Request],
    prefill_cost: InstanceCost,
    prefill_count: int,
    prefill_chunk: int | None,
    decode_cost: InstanceCost,
    decode_count: int,
    decode_max_batch: int,
    *,
    fast_forward: bool = True,
    max_events: int | None = None,
    stop: StopRule | None = None,
    concurrency: int | None = None,
    snapshot_at: float | None = None,
    resume: ResumePoint | None = None,
) -> SimResult:
    """Simulate a prefill pool (`prefill_count` instances, token budget `prefill_chunk` per
    iteration, `None` = unlimited) feeding a decode pool (`decode_count` instances, at most
    `decode_max_batch` sequences each) through a KV transfer of
    `prefill_cost.kv_transfer_time_s(prompt)`. See the module docstring for the policy.
    `snapshot_at` / `resume` as for `simulate_colocated` (no concurrency cap)."""
    _check_args(prefill_count, None, prefill_chunk, "disaggregated prefill")
    _check_args(decode_count, decode_max_batch, None, "disaggregated decode")
    _check_concurrency(concurrency)
    prefill_cost, prefill_stages = pipeline_engines(prefill_cost)
    decode_cost, decode_stages = pipeline_engines(decode_cost)
    prefill_count *= prefill_stages
    decode_count *= decode_stages
    cap = default_max_events(len(requests)) if max_events is None else max_events
    if concurrency is not None:
        snapshot_at = None
    if resume is not None:
        assert concurrency is None
        return _run_resumed(resume, requests, cap, stop, prefill_cost)
    sim = _Sim(requests, cap, stop, concurrency)
    handoff: list[tuple[float, _Seq]] = []
    front = [
        _Engine(i, prefill_cost, "prefill", None, prefill_chunk, sim, fast_forward, handoff)
        for i in range(prefill_count)
    ]
    back = [
        _Engine(prefill_count + i, decode_cost, "decode", decode_max_batch, None, sim,
                fast_forward, None)
        for i in range(decode_count)
    ]  # fmt: skip
    return _run(requests, front, back, handoff, prefill_cost, sim, snapshot_at)
