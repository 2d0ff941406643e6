"""Serving simulator: hand-derived schedules with affine fake costs, fast-forward equivalence,
conservation, monotonicity, chunked prefill, guards."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cost_models.serving.base import IterationBatch
from solver.serving import (
    Request,
    SimResult,
    isolated_latency_colocated,
    isolated_latency_disaggregated,
    percentile,
    poisson_unit_stream,
    scale_stream,
    simulate_colocated,
    simulate_disaggregated,
)
from tests.solver.serving_fakes import AffineCost, realistic


def _batches(cost: AffineCost) -> list[tuple[int, int, int, float, int]]:
    return [
        (b.decode_seqs, b.decode_context_tokens, b.prefill_tokens, b.prefill_attention_pairs,
         b.prefill_seqs)
        for b in cost.batches
    ]  # fmt: skip


def _mixed_stream(n: int, rate: float, seed: int) -> list[Request]:
    rng = random.Random(seed)
    prompts = [rng.choice([64, 300, 900, 2500]) for _ in range(n)]
    outputs = [rng.choice([1, 2, 40, 150, 400]) for _ in range(n)]
    return scale_stream(poisson_unit_stream(prompts, outputs, seed), rate)


def dyadic() -> AffineCost:
    """Step times exactly representable, so fast-forward sums equal step-by-step sums."""
    return AffineCost(
        base=2.0**-7,
        per_prefill_token=2.0**-14,
        per_decode_seq=2.0**-12,
        per_context_token=2.0**-23,
        kv_tokens=60_000,
        transfer_s=2.0**-9,
        transfer_per_token_s=2.0**-20,
    )


# ---- hand-derived schedules


def test_single_request_constant_cost() -> None:
    # one pass prefills the prompt (first token at 1 s), then 4 decode passes of 1 s
    res = simulate_colocated([Request(0.0, 100, 5)], AffineCost(), 1, 8, None)
    assert res.ttft_s.tolist() == [1.0]
    assert res.tpot_s.tolist() == [1.0]
    assert res.e2e_s.tolist() == [5.0]
    assert res.output_tokens == 5
    assert res.throughput_tokens_per_s == pytest.approx(1.0)
    assert res.iterations == 5


@pytest.mark.parametrize("fast_forward", [False, True])
def test_arrival_joins_at_next_boundary_in_a_mixed_pass(fast_forward: bool) -> None:
    # A: prefill [0,1), decode [1,2), decode [2,3) together with B's whole prompt
    # (B arrived at 1.5, waited for the boundary at 2), B decodes [3,4).
    cost = AffineCost(record=not fast_forward)
    reqs = [Request(0.0, 100, 3), Request(1.5, 50, 2)]
    res = simulate_colocated(reqs, cost, 1, 8, None, fast_forward=fast_forward)
    assert res.ttft_s.tolist() == [1.0, 1.5]
    assert res.tpot_s.tolist() == [1.0, 1.0]
    assert res.e2e_s.tolist() == [3.0, 2.5]
    assert res.iterations == 4
    if not fast_forward:
        assert _batches(cost) == [
            (0, 0, 100, 100 * 101 / 2, 1),
            (1, 101, 0, 0.0, 0),  # A has 1 token: context 100 + 1
            (1, 102, 50, 50 * 51 / 2, 1),
            (1, 51, 0, 0.0, 0),
        ]


def test_chunked_prefill_affine_costs_by_hand() -> None:
    # t = 1 + prefill_tokens/8 + decode_seqs/2 + context/16; prompt 10 in chunks 4, 4, 2
    cost = AffineCost(
        base=1.0, per_prefill_token=0.125, per_decode_seq=0.5, per_context_token=0.0625,
        record=True,
    )  # fmt: skip
    res = simulate_colocated([Request(0.0, 10, 3)], cost, 1, 8, 4, fast_forward=False)
    ttft = 3 * 1.0 + 10 * 0.125
    decode = (1 + 0.5 + 11 * 0.0625) + (1 + 0.5 + 12 * 0.0625)
    assert res.ttft_s[0] == ttft == 4.25
    assert res.e2e_s[0] == ttft + decode == 8.6875
    assert res.tpot_s[0] == decode / 2
    # causal attention pairs of each chunk: n·past + n(n+1)/2, summing to 10·11/2
    assert [b[3] for b in _batches(cost)[:3]] == [10.0, 16 + 10.0, 16 + 3.0]
    assert sum(b[3] for b in _batches(cost)) == 55.0
    assert isolated_latency_colocated(cost, 10, 3, 4) == (ttft, decode / 2)


def test_token_budget_is_shared_with_decodes() -> None:
    # Sarathi-Serve: budget 4 per pass; A decodes (1 token) so B's prompt gets 3 per pass.
    cost = AffineCost(record=True)
    reqs = [Request(0.0, 2, 10), Request(0.5, 10, 2)]
    res = simulate_colocated(reqs, cost, 1, 8, 4, fast_forward=False)
    assert [b[2] for b in _batches(cost)] == [2, 3, 3, 3, 1, 0, 0, 0, 0, 0]
    assert [b[0] for b in _batches(cost)] == [0, 1, 1, 1, 1, 2, 1, 1, 1, 1]
    assert res.ttft_s.tolist() == [1.0, 4.5]  # B's last chunk ends at 5
    assert res.e2e_s.tolist() == [10.0, 5.5]
    assert res.tpot_s.tolist() == [1.0, 1.0]
    assert res.mean_decode_batch == pytest.approx(10 / 9)


def test_kv_reservation_and_fcfs_head_of_line() -> None:
    # KV holds 20 tokens; A and B reserve 15 each, so B waits for A to finish (t=5).
    # C (reserve 2) would fit beside A but FCFS keeps it behind B: both admitted at 5.
    cost = AffineCost(kv_tokens=20)
    reqs = [Request(0.0, 10, 5), Request(0.0, 10, 5), Request(0.0, 1, 1)]
    res = simulate_colocated(reqs, cost, 1, 8, None)
    assert res.ttft_s.tolist() == [1.0, 6.0, 6.0]
    assert res.e2e_s.tolist() == [5.0, 10.0, 6.0]
    assert res.max_concurrent_sequences == 2
    # the batch limit alone does the same to B
    res = simulate_colocated(reqs[:2], AffineCost(), 1, 1, None)
    assert res.ttft_s.tolist() == [1.0, 6.0]
    assert res.max_concurrent_sequences == res.max_running_per_instance == 1


def test_routing_to_least_outstanding_tokens() -> None:
    # A (200 tokens) is on instance 0, B (20) on instance 1; C goes to instance 1 too and
    # waits for B's prefill pass to end at 1.1: first token at 2.1 (TTFT 1.9). On instance
    # 0 it would have joined at 1.0 (TTFT 1.8).
    reqs = [Request(0.0, 100, 100), Request(0.1, 10, 10), Request(0.2, 10, 10)]
    res = simulate_colocated(reqs, AffineCost(), 2, 8, None)
    assert res.ttft_s == pytest.approx([1.0, 1.0, 1.9])
    assert res.max_concurrent_sequences == 3
    assert res.max_running_per_instance == 2


def test_disaggregated_by_hand() -> None:
    # prefill passes 1 s, decode passes 0.5 s, KV transfer 0.25 s: A's first token at 1, at
    # the decode instance at 1.25, tokens 2 and 3 at 1.75 and 2.25. B (one output token)
    # finishes with its prefill and never transfers.
    pre = AffineCost(base=1.0, transfer_s=0.25)
    dec = AffineCost(base=0.5)
    reqs = [Request(0.0, 10, 3), Request(0.0, 4, 1)]
    res = simulate_disaggregated(reqs, pre, 1, None, dec, 1, 8)
    assert res.ttft_s.tolist() == [1.0, 1.0]
    assert res.e2e_s.tolist() == [2.25, 1.0]
    assert res.tpot_s.tolist() == [0.625, 0.0]
    assert isolated_latency_disaggregated(pre, None, dec, 10, 3) == (1.0, 0.625)


def test_isolated_latency_is_the_zero_load_limit() -> None:
    cost = realistic()
    for chunk in (None, 256):
        res = simulate_colocated([Request(3.0, 700, 50)], cost, 1, 64, chunk)
        ttft, tpot = isolated_latency_colocated(cost, 700, 50, chunk)
        assert res.ttft_s[0] == pytest.approx(ttft, rel=1e-12)
        assert res.tpot_s[0] == pytest.approx(tpot, rel=1e-12)
    res = simulate_disaggregated([Request(0.0, 700, 50)], cost, 1, 512, cost, 1, 64)
    ttft, tpot = isolated_latency_disaggregated(cost, 512, cost, 700, 50)
    assert (res.ttft_s[0], res.tpot_s[0]) == pytest.approx((ttft, tpot), rel=1e-12)


# ---- fast-forward


@pytest.mark.parametrize(
    "mode", ["one", "three", "unchunked", "disaggregated", "disaggregated-chunked"]
)
def test_fast_forward_equals_step_by_step_for_affine_costs(mode: str) -> None:
    reqs = _mixed_stream(200, 3.0, seed=7)
    cost = dyadic()

    def run(ff: bool) -> SimResult:
        if mode == "one":
            return simulate_colocated(reqs, cost, 1, 48, 512, fast_forward=ff)
        if mode == "three":
            return simulate_colocated(reqs, cost, 3, 16, 256, fast_forward=ff)
        if mode == "unchunked":
            return simulate_colocated(reqs, cost, 2, 32, None, fast_forward=ff)
        chunk = 1024 if mode == "disaggregated-chunked" else None
        return simulate_disaggregated(reqs, cost, 2, chunk, cost, 2, 24, fast_forward=ff)

    fast, slow = run(True), run(False)
    for a, b in ((fast.ttft_s, slow.ttft_s), (fast.tpot_s, slow.tpot_s), (fast.e2e_s, slow.e2e_s)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert fast.iterations == slow.iterations
    assert fast.max_concurrent_sequences == slow.max_concurrent_sequences
    assert fast.mean_decode_batch == pytest.approx(slow.mean_decode_batch, rel=1e-12)
    assert fast.events * 4 < slow.events  # the point of it


def test_fast_forward_close_for_a_non_affine_cost() -> None:
    # a cost convex in the context: the chord overestimates each run by at most
    # k·s·((k−1)n)²/4; here that stays well under 1% of the latencies
    cost = realistic()
    cost.per_context_sq = 2e-13
    reqs = _mixed_stream(200, 3.0, seed=3)
    fast = simulate_colocated(reqs, cost, 1, 48, 512)
    slow = simulate_colocated(reqs, cost, 1, 48, 512, fast_forward=False)
    assert not np.array_equal(fast.e2e_s, slow.e2e_s)  # it is an approximation here
    np.testing.assert_allclose(fast.e2e_s, slow.e2e_s, rtol=1e-2)
    assert fast.tpot_percentile_s(90) == pytest.approx(slow.tpot_percentile_s(90), rel=1e-2)


# ---- properties


def test_conservation_of_tokens() -> None:
    reqs = _mixed_stream(150, 4.0, seed=11)
    cost = realistic()
    cost.record = True
    res = simulate_colocated(reqs, cost, 1, 32, 256, fast_forward=False)
    assert res.num_finished == len(reqs) and res.num_rejected == 0 and not res.truncated
    assert sum(b.prefill_tokens for b in cost.batches) == sum(r.prompt_tokens for r in reqs)
    assert sum(b.decode_seqs for b in cost.batches) == sum(r.output_tokens - 1 for r in reqs)
    assert sum(b.prefill_attention_pairs for b in cost.batches) == sum(
        r.prompt_tokens * (r.prompt_tokens + 1) / 2 for r in reqs
    )
    assert all(b.prefill_tokens + b.decode_seqs <= 256 for b in cost.batches)
    assert max(b.decode_seqs + b.prefill_seqs for b in cost.batches) <= 32
    assert res.output_tokens == sum(r.output_tokens for r in reqs)
    makespan = float(np.max(np.array([r.arrival_s for r in reqs]) + res.e2e_s)) - reqs[0].arrival_s
    assert res.makespan_s == pytest.approx(makespan)
    assert res.throughput_tokens_per_s == pytest.approx(res.output_tokens / makespan)
    assert res.iterations == len(cost.batches)
    # TTFT ≤ e2e, single-token requests have TPOT 0
    assert np.all(res.ttft_s <= res.e2e_s)
    ones = np.array([r.output_tokens == 1 for r in reqs])
    assert np.all(res.tpot_s[ones] == 0.0) and np.all(res.tpot_s[~ones] > 0.0)


def test_more_load_never_lowers_ttft_tail() -> None:
    cost = realistic()
    rng = random.Random(5)
    unit = poisson_unit_stream(
        [rng.randint(100, 2000) for _ in range(400)], [rng.randint(10, 300) for _ in range(400)], 5
    )
    p90 = [
        simulate_colocated(scale_stream(unit, rate), cost, 1, 64, 512).ttft_percentile_s(90)
        for rate in (0.5, 1, 2, 3, 4, 5, 6, 8, 12)
    ]
    assert p90 == sorted(p90)
    assert p90[-1] > 3 * p90[0]  # the range does reach saturation


def test_chunked_prefill_lowers_tpot_tail() -> None:
    # long prompts stall every decode in an unchunked pass; chunks of 256 bound the stall
    cost = realistic()
    reqs = _mixed_stream(400, 2.0, seed=2)
    chunked = simulate_colocated(reqs, cost, 1, 64, 256)
    whole = simulate_colocated(reqs, cost, 1, 64, None)
    assert chunked.tpot_percentile_s(99) < 0.8 * whole.tpot_percentile_s(99)
    assert chunked.tpot_s.max() < 0.8 * whole.tpot_s.max()
    # (not the median: each extra chunk pays the fixed per-pass cost again)


def test_deterministic() -> None:
    reqs = _mixed_stream(200, 5.0, seed=9)
    a = simulate_colocated(reqs, realistic(), 2, 32, 512)
    b = simulate_colocated(reqs, realistic(), 2, 32, 512)
    assert np.array_equal(a.ttft_s, b.ttft_s) and np.array_equal(a.e2e_s, b.e2e_s)
    c = simulate_colocated(_mixed_stream(200, 5.0, seed=10), realistic(), 2, 32, 512)
    assert not np.array_equal(a.ttft_s, c.ttft_s)


# ---- guards and definitions


def test_request_that_never_fits_is_rejected_not_hung() -> None:
    cost = AffineCost(kv_tokens=20)
    reqs = [Request(0.0, 30, 1), Request(0.0, 5, 2), Request(0.5, 15, 10)]
    res = simulate_colocated(reqs, cost, 1, 8, None)
    assert res.rejected.tolist() == [True, False, True]
    assert res.ttft_s[0] == math.inf and res.tpot_s[2] == math.inf
    assert res.ttft_s[1] == 1.0 and res.e2e_s[1] == 2.0  # not blocked behind the first
    assert res.attainment(10.0, 10.0) == pytest.approx(1 / 3)
    # disaggregated: prompt over the prefill capacity, or prompt+output over the decode one
    res = simulate_disaggregated(reqs, AffineCost(kv_tokens=25), 1, None, cost, 1, 8)
    assert res.rejected.tolist() == [True, False, True]
    nothing = simulate_colocated([Request(0.0, 30, 1)], cost, 1, 8, None)
    assert nothing.num_finished == 0 and nothing.throughput_tokens_per_s == 0.0


def test_event_cap_stops_the_simulation() -> None:
    res = simulate_colocated(
        [Request(0.0, 10, 100), Request(0.0, 10, 3)], AffineCost(), 1, 8, 4,
        fast_forward=False, max_events=5,
    )  # fmt: skip
    assert res.truncated
    assert res.e2e_s[0] == math.inf
    assert res.attainment(None, None) < 1.0


def test_percentile_is_nearest_rank_and_matches_attainment() -> None:
    x = np.arange(1.0, 11.0)
    assert percentile(x, 50) == 5.0
    assert percentile(x, 90) == 9.0
    assert percentile(x, 91) == 10.0
    assert percentile(np.array([1.0, np.inf]), 50) == 1.0
    assert percentile(np.array([1.0, np.inf]), 51) == math.inf
    res = simulate_colocated(_mixed_stream(100, 6.0, seed=4), realistic(), 1, 32, 512)
    for q in (50.0, 90.0, 99.0):
        s = res.ttft_percentile_s(q)
        assert res.attainment(s, None) >= q / 100
        assert res.attainment(np.nextafter(s, 0.0), None) < q / 100


def test_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="prompt_tokens"):
        Request(0.0, 0, 1)
    with pytest.raises(ValueError, match="output_tokens"):
        Request(0.0, 1, 0)
    with pytest.raises(ValueError, match="arrival_s"):
        Request(math.nan, 1, 1)
    with pytest.raises(ValueError, match="count"):
        simulate_colocated([], AffineCost(), 0, 8, None)
    with pytest.raises(ValueError, match="chunk_size"):
        simulate_colocated([], AffineCost(), 1, 8, 0)
    with pytest.raises(ValueError, match="iteration_time_s returned"):
        simulate_colocated([Request(0.0, 1, 1)], AffineCost(base=-1.0), 1, 8, None)
    empty = simulate_colocated([], AffineCost(), 1, 8, None)
    assert empty.num_requests == 0 and empty.attainment(1.0, 1.0) == 1.0


def test_iteration_batch_is_the_cost_model_interface() -> None:
    cost = AffineCost(record=True)
    simulate_colocated([Request(0.0, 3, 2)], cost, 1, 8, None)
    assert all(isinstance(b, IterationBatch) for b in cost.batches)


def test_degenerate_costs_terminate() -> None:
    # zero-time passes: everything happens at the arrival instants, nothing loops forever
    reqs = _mixed_stream(50, 1.0, seed=12)
    res = simulate_colocated(reqs, AffineCost(base=0.0), 2, 8, 64)
    assert res.num_finished == 50 and np.all(res.ttft_s == 0.0) and np.all(res.tpot_s == 0.0)
    # no KV at all: every request rejected
    res = simulate_disaggregated(reqs, AffineCost(kv_tokens=0), 1, None, AffineCost(), 1, 8)
    assert res.num_rejected == 50 and res.attainment(None, None) == 0.0
    # a one-token budget with long prompts hits the default event cap (200·n + 100000)
    long = [Request(0.0, 2000, 2) for _ in range(60)]
    res = simulate_colocated(long, AffineCost(base=1e-3), 1, 8, 1)
    assert res.truncated and res.events == 200 * 60 + 100_000 + 1


def _first_boundary_reference(t0: float, slope: float, d: float, k: int) -> int:
    """The smallest j in 1..k whose run time reaches d (k if none), by enumeration."""
    for j in range(1, k + 1):
        if j * t0 + slope * (j * (j - 1) * 0.5) >= d:
            return j
    return k


@settings(max_examples=400, deadline=None)
@given(
    t0=st.floats(1e-5, 1.0),
    slope=st.floats(-1e-6, 1e-3),
    d=st.floats(-1.0, 50.0),
    k=st.integers(2, 400),
)
def test_the_first_boundary_of_a_run_is_found_by_enumeration_too(
    t0: float, slope: float, d: float, k: int
) -> None:
    from solver.serving.simulate import _first_boundary_at_or_after

    assume(t0 + slope * (k - 1) > 0)  # every iteration of the run takes time
    assert _first_boundary_at_or_after(t0, slope, d, k) == _first_boundary_reference(
        t0, slope, d, k
    )
