"""Closed-form serving estimates used to bracket and prune the simulation (issue 5).

* `capacity_upper_bound_rps` / `capacity_upper_bound_disaggregated_rps`: an optimistic
  request rate above which an instance pool cannot keep up in steady state. Each pool is
  bounded separately by its prefill work and its decode work, and the bound is the smaller:
  - prefill-bound: per instance, `1 / (prefill time per request)` with prompts batched as
    efficiently as the token budget allows (the best of one prompt alone and a full budget of
    prompt tokens per iteration);
  - decode-bound (and KV-bound): per instance, `b / ((output − 1) · step(b))` where `b` is
    the largest decode batch the instance can hold (`max_batch`, and `KV capacity /
    kv_tokens_per_seq`: prompt + output where the engine reserves, prompt + output/2 where it
    pages, `kv_tokens_per_seq`), at the mean context
    `prompt + output/2` (the best over `b, b/2, b/4, …, 1`, so a cost that is not
    sub-linear in the batch cannot make it pessimistic);
  multiplied by the instance count. Evaluated at the mean prompt and output length: for
  prefill costs convex in the prompt (attention) Jensen's inequality keeps this optimistic.
  A colocated instance does both on the same GPUs; taking the smaller of the two (instead of
  adding them) keeps the bound valid when prefill chunks ride along with decodes at little
  extra cost (Sarathi-Serve's piggybacking). A third, `shared_rate_rps`, prices the two on
  the same GPUs together: in steady state every iteration's time pays for its decodes and
  its share of the prompts (`p / (o − 1)` prompt tokens per decode token), so the rate is
  `b / ((o − 1) · t(b, c))` at `c = b·p/(o − 1)` (or what the token budget leaves), where
  the separate bounds price a full batch of decodes as if prompts cost nothing beside them.
  Throughput above it is impossible, so the goodput bisection never searches above it.
* `isolated_latency_*`: TTFT and TPOT of a request alone in the system — what the simulator
  gives as the arrival rate goes to zero (exact for costs affine in the decode context); for
  costs that do not decrease with load, no rate does better, so an SLO below them is
  unattainable.
* `queueing_ttft_estimate_s`: a percentile of TTFT at a given rate, from an M/D/c queue
  (Poisson arrivals, `c` instances, deterministic service at the instance's capacity) via
  the M/M/c waiting-time distribution (Erlang C: `P(W > t) = C(c, a)·e^{−(cμ−λ)t}`, Kleinrock,
  *Queueing Systems* Vol. 1, §3.5) scaled by the Allen–Cunneen factor `(c_a² + c_s²)/2 = 1/2`
  for deterministic service (Allen, *Probability, Statistics and Queueing Theory*, 1990,
  §6.5), plus the isolated TTFT. An estimate to rank and prune candidates before simulating,
  not a bound: batching makes the true queue neither M/M/c nor M/D/c.
"""

from __future__ import annotations

import math

from cost_models.serving.base import (
    InstanceCost,
    IterationBatch,
    pipeline_engines,
    scheduler_of,
)


def _checked(cost: InstanceCost, batch: IterationBatch) -> float:
    t = float(cost.iteration_time_s(batch))
    if not (t >= 0.0 and math.isfinite(t)):
        raise ValueError(f"iteration_time_s returned {t} for {batch}")
    return t


_UNLIMITED_TOKENS = 1 << 62  # an unchunked token budget


def _halvings(top: int) -> list[int]:
    out = []
    b = max(1, top)
    while b >= 1:
        out.append(b)
        b //= 2
    return out


def prefill_rate_rps(
    cost: InstanceCost,
    chunk_size: int | None,
    max_seqs: int | None,
    mean_prompt_tokens: float,
) -> float:
    """Optimistic prefills per second of one instance (see the module docstring)."""
    p = max(1, round(mean_prompt_tokens))
    pairs_per_token = (mean_prompt_tokens + 1.0) * 0.5  # Σ_j j / p over the causal prompt
    best = 0.0
    budgets = [p]
    if chunk_size is not None:
        budgets.append(chunk_size)
    elif max_seqs is not None:
        budgets.append(p * max_seqs)
    for tokens in budgets:
        seqs = max(1, tokens // p)
        t = _checked(cost, IterationBatch(0, 0, tokens, tokens * pairs_per_token, seqs))
        if t <= 0.0:
            return math.inf
        best = max(best, tokens / (t * p))  # prompts per second
    return best


def kv_tokens_per_seq(
    cost: InstanceCost, mean_prompt_tokens: float, mean_output_tokens: float, colocated: bool
) -> float:
    """KV tokens a running request holds, for the KV-limited batch of an instance: its prompt
    and whole output where the engine reserves them at admission (and in every disaggregated
    pool, `solver.serving.simulate`); its prompt and, on average over its decode steps, half
    its output where a colocated engine pages (`SchedulerPolicy.kv_allocation`). The paged
    figure is a time average: a batch can exceed it for a while, the mean over a request's
    life cannot (at independent prompt and output lengths), which is what rates depend on."""
    paged = colocated and scheduler_of(cost).kv_allocation == "paged"
    return mean_prompt_tokens + (0.5 if paged else 1.0) * mean_output_tokens


def decode_rate_rps(
    cost: InstanceCost,
    max_batch_size: int,
    kv_tokens_per_seq: float,
    mean_prompt_tokens: float,
    mean_output_tokens: float,
) -> float:
    """Optimistic decode completions per second of one instance (decode- and KV-bound)."""
    if mean_output_tokens <= 1.0:
        return math.inf
    kv_seqs = int(cost.kv_capacity_tokens // max(kv_tokens_per_seq, 1.0))
    top = min(max_batch_size, kv_seqs)
    if top < 1:
        return 0.0
    ctx = mean_prompt_tokens + mean_output_tokens * 0.5
    best = 0.0
    for b in _halvings(top):
        t = _checked(cost, IterationBatch(b, round(b * ctx), 0, 0.0, 0))
        if t <= 0.0:
            return math.inf
        best = max(best, b / ((mean_output_tokens - 1.0) * t))
    return best


def shared_rate_rps(
    cost: InstanceCost,
    max_batch_size: int,
    chunk_size: int | None,
    kv_tokens_per_seq: float,
    mean_prompt_tokens: float,
    mean_output_tokens: float,
    tpot_s: float | None = None,
) -> float:
    """Requests per second one colocated instance can sustain when its prompts and decodes
    share its iterations (the steady state of continuous batching).

    In steady state at rate λ an instance produces `λ·(o − 1)` decode tokens and `λ·p`
    prompt tokens per second (`p` the prompt tokens it computes). Over `n` iterations of
    `b_i` decodes and `c_i` prompt tokens, for an iteration time convex in `(b, c)` (affine
    and roofline `max` costs are), Jensen's inequality gives `Σ t(b_i, c_i) ≥ n·t(b̄, c̄)`, so
    `λ ≤ min(b̄/(o − 1), c̄/p) / t(b̄, c̄)`; for each batch the best `c̄` is `b̄·p/(o − 1)` (both
    kinds of work keep pace) capped by the token budget `chunk − b̄`. Where the scheduler runs
    prompts without the decodes (`SchedulerPolicy.separates`) the two kinds of iteration add
    up: `1/λ ≥ 1/decode rate + 1/prefill rate`. Evaluated over the batches `b, b/2, …, 1` of
    the largest batch the instance holds (max batch and KV at `kv_tokens_per_seq`), at the
    mean context `p + o/2`, like `decode_rate_rps`; with `tpot_s`, only over the batches whose
    iteration meets it (a steady state whose mean step misses the TPOT target cannot meet
    it: `decode_phase_bound_rps`'s argument, a near-bound under a percentile). `inf` when
    there is nothing to decode (`o ≤ 1`: `prefill_rate_rps` bounds it)."""
    if mean_output_tokens <= 1.0:
        return math.inf
    decodes = mean_output_tokens - 1.0
    top = min(max_batch_size, int(cost.kv_capacity_tokens // max(kv_tokens_per_seq, 1.0)))
    if top < 1:
        return 0.0
    policy = scheduler_of(cost)
    budget = _UNLIMITED_TOKENS if chunk_size is None else chunk_size
    ctx = mean_prompt_tokens + mean_output_tokens * 0.5
    pairs_per_token = (mean_prompt_tokens + 1.0) * 0.5  # Σ_j j / p over the causal prompt
    if policy.separates(chunk_size is not None):
        pre = prefill_rate_rps(cost, chunk_size, top, mean_prompt_tokens)
        dec = decode_rate_rps(cost, top, kv_tokens_per_seq, mean_prompt_tokens, mean_output_tokens)
        return 0.0 if pre <= 0.0 or dec <= 0.0 else 1.0 / (1.0 / pre + 1.0 / dec)
    best = 0.0
    for b in _halvings(top):
        room = budget - b if policy.split_prompts else max(budget - b, mean_prompt_tokens)
        c = max(0, min(round(b * mean_prompt_tokens / decodes), int(room)))
        seqs = max(1, round(c / max(mean_prompt_tokens, 1.0))) if c else 0
        t = _checked(cost, IterationBatch(b, round(b * ctx), c, c * pairs_per_token, seqs))
        if t <= 0.0:
            return math.inf
        if tpot_s is not None and t > tpot_s:
            continue
        best = max(best, min(b / decodes, c / max(mean_prompt_tokens, 1e-9)) / t)
    return best


def capacity_upper_bound_rps(
    cost: InstanceCost,
    count: int,
    max_batch_size: int,
    chunk_size: int | None,
    mean_prompt_tokens: float,
    mean_output_tokens: float,
) -> float:
    """Upper bound on the sustainable request rate of `count` colocated instances (a
    p-stage instance counts as p schedulers, `pipeline_engines`)."""
    cost, stages = pipeline_engines(cost)
    count *= stages
    if cost.kv_capacity_tokens < mean_prompt_tokens + mean_output_tokens:
        return 0.0
    hold = kv_tokens_per_seq(cost, mean_prompt_tokens, mean_output_tokens, colocated=True)
    kv_seqs = int(cost.kv_capacity_tokens // hold)
    pre = prefill_rate_rps(cost, chunk_size, min(max_batch_size, kv_seqs), mean_prompt_tokens)
    dec = decode_rate_rps(cost, max_batch_size, hold, mean_prompt_tokens, mean_output_tokens)
    shared = shared_rate_rps(
        cost, max_batch_size, chunk_size, hold, mean_prompt_tokens, mean_output_tokens
    )
    return count * min(pre, dec, shared)


def steady_rate_rps(
    cost: InstanceCost,
    count: int,
    max_batch_size: int,
    chunk_size: int | None,
    mean_prompt_tokens: float,
    mean_output_tokens: float,
    tpot_s: float | None,
) -> float:
    """The rate `count` colocated instances sustain in steady state with their iterations
    meeting the TPOT target (`shared_rate_rps` with `tpot_s`, within the capacity bound):
    the goodput search's reference for when a probe needs a settled backlog."""
    ub = capacity_upper_bound_rps(
        cost, count, max_batch_size, chunk_size, mean_prompt_tokens, mean_output_tokens
    )
    if tpot_s is None or ub <= 0.0:
        return ub
    one, stages = pipeline_engines(cost)
    hold = kv_tokens_per_seq(one, mean_prompt_tokens, mean_output_tokens, colocated=True)
    shared = shared_rate_rps(
        one, max_batch_size, chunk_size, hold, mean_prompt_tokens, mean_output_tokens, tpot_s
    )
    return min(ub, count * stages * shared)


def capacity_upper_bound_disaggregated_rps(
    prefill_cost: InstanceCost,
    prefill_count: int,
    prefill_chunk: int | None,
    decode_cost: InstanceCost,
    decode_count: int,
    decode_max_batch: int,
    mean_prompt_tokens: float,
    mean_output_tokens: float,
) -> float:
    """Upper bound on the sustainable request rate of a prefill pool feeding a decode pool
    (a p-stage instance counts as p schedulers, `pipeline_engines`)."""
    prefill_cost, prefill_stages = pipeline_engines(prefill_cost)
    decode_cost, decode_stages = pipeline_engines(decode_cost)
    prefill_count *= prefill_stages
    decode_count *= decode_stages
    if prefill_cost.kv_capacity_tokens < mean_prompt_tokens:
        return 0.0
    kv_seqs = int(prefill_cost.kv_capacity_tokens // max(mean_prompt_tokens, 1.0))
    pre = prefill_count * prefill_rate_rps(prefill_cost, prefill_chunk, kv_seqs, mean_prompt_tokens)
    dec = decode_count * decode_rate_rps(
        decode_cost,
        decode_max_batch,
        mean_prompt_tokens + mean_output_tokens,
        mean_prompt_tokens,
        mean_output_tokens,
    )
    return min(pre, dec)


def isolated_prefill_s(cost: InstanceCost, prompt_tokens: int, chunk_size: int | None) -> float:
    """Time to prefill one prompt alone, in chunks of `chunk_size` (one pass if `None`)."""
    step = prompt_tokens if chunk_size is None else chunk_size
    total = 0.0
    past = 0
    while past < prompt_tokens:
        c = min(step, prompt_tokens - past)
        total += _checked(cost, IterationBatch(0, 0, c, c * past + c * (c + 1) * 0.5, 1))
        past += c
    return total


def isolated_decode_total_s(cost: InstanceCost, prompt_tokens: int, output_tokens: int) -> float:
    """Σ of the `output − 1` decode steps of one sequence alone (contexts prompt+1 …
    prompt+output−1), by the chord rule (exact for costs affine in the context)."""
    k = output_tokens - 1
    if k <= 0:
        return 0.0
    first = _checked(cost, IterationBatch(1, prompt_tokens + 1, 0, 0.0, 0))
    last = _checked(cost, IterationBatch(1, prompt_tokens + k, 0, 0.0, 0))
    return k * (first + last) * 0.5


def isolated_latency_colocated(
    cost: InstanceCost, prompt_tokens: int, output_tokens: int, chunk_size: int | None
) -> tuple[float, float]:
    """(TTFT s, TPOT s) of one request alone on a colocated instance."""
    ttft = isolated_prefill_s(cost, prompt_tokens, chunk_size)
    if output_tokens <= 1:
        return ttft, 0.0
    return ttft, isolated_decode_total_s(cost, prompt_tokens, output_tokens) / (output_tokens - 1)


def isolated_latency_disaggregated(
    prefill_cost: InstanceCost,
    prefill_chunk: int | None,
    decode_cost: InstanceCost,
    prompt_tokens: int,
    output_tokens: int,
) -> tuple[float, float]:
    """(TTFT s, TPOT s) of one request alone in a disaggregated pair; the KV transfer falls
    between the first and second token, so it is part of TPOT."""
    ttft = isolated_prefill_s(prefill_cost, prompt_tokens, prefill_chunk)
    if output_tokens <= 1:
        return ttft, 0.0
    xfer = float(prefill_cost.kv_transfer_time_s(prompt_tokens))
    decode = isolated_decode_total_s(decode_cost, prompt_tokens, output_tokens)
    return ttft, (xfer + decode) / (output_tokens - 1)


def erlang_c(servers: int, offered_load: float) -> float:
    """Erlang C: probability that an arrival waits in M/M/c with `offered_load = λ/μ`
    (`< servers`), by the numerically stable Erlang-B recursion
    `B_k = a·B_{k−1} / (k + a·B_{k−1})`, `C = c·B_c / (c − a·(1 − B_c))`."""
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    a = offered_load
    if a <= 0.0:
        return 0.0
    if a >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):
        b = a * b / (k + a * b)
    return servers * b / (servers - a * (1.0 - b))


def queueing_wait_quantile_s(
    rate_rps: float, service_rate_rps: float, servers: int, percentile: float
) -> float:
    """`percentile`-th percentile of the queueing delay in M/D/c (Allen–Cunneen-scaled M/M/c;
    see the module docstring); `inf` at or above saturation."""
    if rate_rps <= 0.0:
        return 0.0
    if service_rate_rps <= 0.0 or rate_rps >= servers * service_rate_rps:
        return math.inf
    c_wait = erlang_c(servers, rate_rps / service_rate_rps)
    tail = 1.0 - percentile / 100.0
    if c_wait <= tail:
        return 0.0
    mmc = math.log(c_wait / tail) / (servers * service_rate_rps - rate_rps)
    return 0.5 * mmc


def queueing_ttft_estimate_s(
    rate_rps: float,
    *,
    servers: int,
    service_rate_rps: float,
    isolated_ttft_s: float,
    percentile: float = 90.0,
) -> float:
    """Estimated `percentile`-th percentile TTFT at `rate_rps`: isolated TTFT + M/D/c wait."""
    return isolated_ttft_s + queueing_wait_quantile_s(
        rate_rps, service_rate_rps, servers, percentile
    )


def estimate_ttft_colocated_s(
    rate_rps: float,
    cost: InstanceCost,
    count: int,
    max_batch_size: int,
    chunk_size: int | None,
    mean_prompt_tokens: float,
    mean_output_tokens: float,
    percentile: float = 90.0,
) -> float:
    """`queueing_ttft_estimate_s` for a colocated pool: servers = instances, service rate =
    one instance's capacity bound, isolated TTFT of the mean prompt."""
    per_instance = capacity_upper_bound_rps(
        cost, 1, max_batch_size, chunk_size, mean_prompt_tokens, mean_output_tokens
    )
    ttft0 = isolated_prefill_s(cost, max(1, round(mean_prompt_tokens)), chunk_size)
    return queueing_ttft_estimate_s(
        rate_rps,
        servers=count,
        service_rate_rps=per_instance,
        isolated_ttft_s=ttft0,
        percentile=percentile,
    )


def estimate_ttft_disaggregated_s(
    rate_rps: float,
    prefill_cost: InstanceCost,
    prefill_count: int,
    prefill_chunk: int | None,
    mean_prompt_tokens: float,
    percentile: float = 90.0,
) -> float:
    """`queueing_ttft_estimate_s` for the prefill pool of a disaggregated plan (TTFT ends on
    the prefill instance, so only that pool queues it)."""
    kv_seqs = int(prefill_cost.kv_capacity_tokens // max(mean_prompt_tokens, 1.0))
    if kv_seqs < 1:
        return math.inf
    mu = prefill_rate_rps(prefill_cost, prefill_chunk, kv_seqs, mean_prompt_tokens)
    ttft0 = isolated_prefill_s(prefill_cost, max(1, round(mean_prompt_tokens)), prefill_chunk)
    return queueing_ttft_estimate_s(
        rate_rps,
        servers=prefill_count,
        service_rate_rps=mu,
        isolated_ttft_s=ttft0,
        percentile=percentile,
    )
