"""Serving engine behaviours in the simulator, against schedules worked out by hand with
constant or affine fake GPU costs: prompts that stall the decodes (prefill-first
schedulers), multi-step scheduling, whole prompts under a token budget, and the host (CPU)
time per iteration, synchronous, overlapped and spread over a multi-step block."""

from __future__ import annotations

import pytest

from cost_models.serving.base import IterationBatch, SchedulerPolicy, scheduler_of
from cost_models.serving.engines import (
    EngineInstanceCost,
    HostCost,
    build_engine,
    list_engines,
)
from solver.serving import Request, simulate_colocated
from solver.serving.evaluate import InstanceCosts, ServingProblem
from solver.serving.search import serving_search
from specs.errors import SpecError
from tests.solver.serving_fakes import AffineCost

NO_HOST = HostCost(0.0, 0.0, overlapped=False)


def engine(policy: SchedulerPolicy, host: HostCost = NO_HOST, **cost: float) -> EngineInstanceCost:
    return EngineInstanceCost(AffineCost(**cost), host, policy)


# ---- schedulers ------------------------------------------------------------------------------
@pytest.mark.parametrize("fast_forward", [False, True])
def test_a_prompt_only_iteration_stalls_the_decodes(fast_forward: bool) -> None:
    # 1 s per iteration. A: prefill [0,1), decode [1,2); B arrives at 1.5 and, at the
    # boundary 2, gets an iteration of its own [2,3) while A waits; then both decode [3,4)
    # (B's last token), A alone [4,5). Mixed batching would put B's prompt beside A's decode.
    reqs = [Request(0.0, 100, 4), Request(1.5, 50, 2)]
    separate = simulate_colocated(
        reqs, engine(SchedulerPolicy(prefill="separate")), 1, 8, None, fast_forward=fast_forward
    )
    assert separate.ttft_s.tolist() == [1.0, 1.5]
    assert separate.e2e_s.tolist() == [5.0, 2.5]
    assert separate.tpot_s.tolist() == [pytest.approx(4 / 3), 1.0]
    mixed = simulate_colocated(reqs, engine(SchedulerPolicy()), 1, 8, None)
    assert mixed.e2e_s.tolist() == [4.0, 2.5]  # A never waits
    assert mixed.tpot_s.tolist() == [1.0, 1.0]


def test_vllm_v0_separates_prompts_only_without_a_token_budget() -> None:
    policy = build_engine("vllm_v0").scheduler()
    assert policy.separates(chunked=False) and not policy.separates(chunked=True)
    reqs = [Request(0.0, 100, 4), Request(1.5, 50, 2)]
    chunked = simulate_colocated(reqs, engine(policy), 1, 8, 512)
    assert chunked.e2e_s.tolist() == [4.0, 2.5]  # --enable-chunked-prefill: mixed batches
    unchunked = simulate_colocated(reqs, engine(policy), 1, 8, None)
    assert unchunked.e2e_s.tolist() == [5.0, 2.5]


@pytest.mark.parametrize("fast_forward", [False, True])
def test_multi_step_blocks_delay_new_prompts_to_the_block_end(fast_forward: bool) -> None:
    # 3 decode steps per scheduler call, 1 s per iteration. A: prefill [0,1), then a block
    # [1,4). B arrives at 1.5 but joins only at the block's end: its prompt rides beside A's
    # decode [4,5) (first token at 5: TTFT 3.5, against 1.5 with single-step scheduling).
    # B's last token at 6 ends a step inside the next block [5,8); A finishes at 8.
    reqs = [Request(0.0, 100, 8), Request(1.5, 50, 2)]
    blocks = simulate_colocated(
        reqs,
        engine(SchedulerPolicy(decode_steps=3)),
        1,
        8,
        None,
        fast_forward=fast_forward,
    )
    assert blocks.ttft_s.tolist() == [1.0, 3.5]
    assert blocks.e2e_s.tolist() == [8.0, 4.5]
    single = simulate_colocated(reqs, engine(SchedulerPolicy()), 1, 8, None)
    assert single.ttft_s.tolist() == [1.0, 1.5]


def test_a_request_that_arrives_during_a_block_is_not_cut_in() -> None:
    # with fast-forward a decode run would be cut at the first boundary after an arrival;
    # a multi-step block is not: the schedule equals the step-by-step one
    reqs = [Request(0.0, 10, 20), Request(0.3, 10, 5), Request(7.2, 10, 3)]
    policy = SchedulerPolicy(decode_steps=4)
    fast = simulate_colocated(reqs, engine(policy), 1, 8, None, fast_forward=True)
    slow = simulate_colocated(reqs, engine(policy), 1, 8, None, fast_forward=False)
    assert fast.ttft_s.tolist() == slow.ttft_s.tolist()
    assert fast.e2e_s.tolist() == slow.e2e_s.tolist()
    # B (arrived at 0.3) joins at the end of A's prefill, a scheduling point: [1,2) mixed,
    # the first step of the block [1,5); the next block is [5,9); C (arrived at 7.2) joins
    # at 9, first token at 10.
    assert fast.ttft_s.tolist()[1:] == pytest.approx([1.7, 2.8])


def test_whole_prompts_wait_for_a_budget_that_holds_them() -> None:
    # 1 s + 0.01 s per prompt token, budget 100. A (60 tokens, 1 output) and B (60) arrive
    # together. Chunked: [0,2.0) A 60 + B 40, [2.0,3.2) B 20. Whole prompts (TensorRT-LLM
    # without chunked context): B does not fit beside A: [0,1.6) A, [1.6,3.2) B.
    reqs = [Request(0.0, 60, 1), Request(0.0, 60, 1)]
    chunked = simulate_colocated(reqs, engine(SchedulerPolicy(), per_prefill_token=0.01), 1, 8, 100)
    assert chunked.ttft_s.tolist() == pytest.approx([2.0, 3.2])
    whole = simulate_colocated(
        reqs, engine(SchedulerPolicy(split_prompts=False), per_prefill_token=0.01), 1, 8, 100
    )
    assert whole.ttft_s.tolist() == pytest.approx([1.6, 3.2])
    # a prompt longer than the whole budget still runs, alone
    alone = simulate_colocated(
        [Request(0.0, 150, 1)], engine(SchedulerPolicy(split_prompts=False)), 1, 8, 100
    )
    assert alone.ttft_s.tolist() == [1.0]


# ---- KV allocation: reserve vs paged with preemption --------------------------------------------
@pytest.mark.parametrize("fast_forward", [False, True])
def test_paged_kv_admits_early_and_preempts_the_last_admitted(fast_forward: bool) -> None:
    # 12 KV tokens, 1 s per iteration; A and B arrive at 0, each 4 prompt + 5 output tokens.
    # Reserve: B (9) waits for A (9) to finish: A [0,5), B prefills [5,6), decodes to 10.
    # Paged: both prompts (8 tokens) prefill [0,1); at 1 they hold 10 and the next step's two
    # tokens fit (12); at 2 they hold 12, so B, admitted last, is preempted with 2 tokens
    # generated: it waits as a 6-token prompt with 3 tokens to go, which does not fit beside A
    # (6 + 1 + 6 > 12) until A finishes at 5; B prefills again [5,6) (its third token, no new
    # first token) and decodes [6,8).
    reqs = [Request(0.0, 4, 5), Request(0.0, 4, 5)]
    reserve = simulate_colocated(
        reqs, engine(SchedulerPolicy(), kv_tokens=12), 1, 8, None, fast_forward=fast_forward
    )
    assert reserve.ttft_s.tolist() == [1.0, 6.0]
    assert reserve.e2e_s.tolist() == [5.0, 10.0]
    assert reserve.preemptions == 0
    paged = simulate_colocated(
        reqs,
        engine(SchedulerPolicy(kv_allocation="paged"), kv_tokens=12),
        1,
        8,
        None,
        fast_forward=fast_forward,
    )
    assert paged.ttft_s.tolist() == [1.0, 1.0]
    assert paged.e2e_s.tolist() == [5.0, 8.0]
    assert paged.tpot_s.tolist() == [1.0, 1.75]  # B's 4 later tokens over 7 s
    assert paged.preemptions == 1
    assert paged.output_tokens == reserve.output_tokens == 10
    assert paged.max_concurrent_sequences == 2 and reserve.max_concurrent_sequences == 1


def test_paged_fast_forward_matches_step_by_step_under_preemption() -> None:
    import random

    rng = random.Random(3)
    reqs = [
        Request(rng.uniform(0.0, 2.0), rng.randint(20, 200), rng.randint(2, 300)) for _ in range(60)
    ]
    policy = SchedulerPolicy(kv_allocation="paged")
    costs = {"base": 0.01, "per_decode_seq": 1e-4, "per_context_token": 1e-6, "kv_tokens": 2500}
    fast = simulate_colocated(reqs, engine(policy, **costs), 1, 64, 256)
    slow = simulate_colocated(reqs, engine(policy, **costs), 1, 64, 256, fast_forward=False)
    assert fast.preemptions == slow.preemptions > 0
    assert fast.num_finished == slow.num_finished == len(reqs)
    assert fast.e2e_s.tolist() == pytest.approx(slow.e2e_s.tolist(), rel=1e-9)
    assert fast.ttft_s.tolist() == pytest.approx(slow.ttft_s.tolist(), rel=1e-9)
    reserve = simulate_colocated(reqs, engine(SchedulerPolicy(), **costs), 1, 64, 256)
    # optimistic admission runs more requests at once, and so finishes sooner here
    assert fast.max_concurrent_sequences > reserve.max_concurrent_sequences
    assert fast.makespan_s < reserve.makespan_s


# ---- host cost ------------------------------------------------------------------------------
def test_synchronous_host_time_adds_to_every_iteration() -> None:
    # GPU 1 s per iteration; CPU 0.5 s + 0.25 s per sequence: 1.75 s per iteration of one
    # sequence (the prefill counts its sequence too)
    cost = engine(SchedulerPolicy(), HostCost(0.5, 0.25, overlapped=False))
    res = simulate_colocated([Request(0.0, 100, 3)], cost, 1, 8, None)
    assert res.ttft_s.tolist() == [1.75]
    assert res.e2e_s.tolist() == [5.25]


def test_overlapped_host_time_only_shows_when_it_outlasts_the_gpu() -> None:
    short = engine(SchedulerPolicy(), HostCost(0.5, 0.25, overlapped=True))
    assert simulate_colocated([Request(0.0, 100, 3)], short, 1, 8, None).e2e_s.tolist() == [3.0]
    long = engine(SchedulerPolicy(), HostCost(2.0, 0.5, overlapped=True))
    assert simulate_colocated([Request(0.0, 100, 3)], long, 1, 8, None).e2e_s.tolist() == [7.5]


def test_serial_host_time_adds_even_when_the_rest_overlaps() -> None:
    host = HostCost(0.5, 0.0, overlapped=True, serial_fixed_s=0.25)
    cost = engine(SchedulerPolicy(), host)
    res = simulate_colocated([Request(0.0, 100, 3)], cost, 1, 8, None)
    assert res.e2e_s.tolist() == [3.75]  # 3 iterations of max(1, 0.5) + 0.25


def test_multi_step_pays_the_host_time_once_per_block() -> None:
    cost = engine(SchedulerPolicy(decode_steps=4), HostCost(0.4, 0.0, overlapped=False))
    decode = IterationBatch(decode_seqs=1, decode_context_tokens=10)
    prefill = IterationBatch(prefill_tokens=10, prefill_attention_pairs=55.0, prefill_seqs=1)
    assert cost.iteration_time_s(decode) == pytest.approx(1.1)  # 1 + 0.4 / 4
    assert cost.iteration_time_s(prefill) == pytest.approx(1.4)  # a scheduler call of its own


# ---- profiles ---------------------------------------------------------------------------------
def test_registered_profiles_and_their_behaviour() -> None:
    assert list_engines() == ["sglang", "tensorrt_llm", "vllm", "vllm_v0"]
    vllm = build_engine("vllm")
    assert vllm.scheduler() == SchedulerPolicy(
        prefill="mixed", prefix_caching=True, kv_allocation="paged"
    )
    assert build_engine("sglang").scheduler().kv_allocation == "paged"
    assert build_engine("tensorrt_llm").scheduler().kv_allocation == "reserve"
    assert not build_engine("vllm_v0").scheduler().prefix_caching
    assert not build_engine("sglang", {"disable_radix_cache": True}).scheduler().prefix_caching
    assert vllm.host().overlapped  # async scheduling, vLLM's default from 0.14
    assert not build_engine("vllm", {"async_scheduling": False}).host().overlapped
    # V1 synchronous: 5.5 ms between decode steps at 256 sequences (vLLM issue #10634)
    assert build_engine("vllm").host().step_s(256) == pytest.approx(5.5e-3, rel=0.01)
    v0 = build_engine("vllm_v0", {"num_scheduler_steps": 8})
    assert v0.scheduler().decode_steps == 8
    assert not v0.host().overlapped  # the block's bubble is paid once per block, in line
    # V0 output processing: 0.2 ms at batch 1, 3.4 ms at batch 32 (RFC #6913)
    assert build_engine("vllm_v0").host().step_s(1) == pytest.approx(0.3e-3)
    assert build_engine("vllm_v0").host().step_s(32) == pytest.approx(3.4e-3)
    # scheduling + input preparation stay serial (Vidur's V0 profile: 0.52 + 0.81 ms at 32)
    assert build_engine("vllm_v0").host().serial_s(32) == pytest.approx(1.24e-3, rel=0.1)
    assert build_engine("sglang").scheduler().prefill == "separate"
    assert build_engine("sglang", {"enable_mixed_chunk": True}).scheduler().prefill == "mixed"
    assert not build_engine("tensorrt_llm").scheduler().split_prompts
    assert build_engine("vllm", {"host_cost_scale": 0.0}).host().step_s(256) == 0.0
    with pytest.raises(SpecError) as bad:
        build_engine("vllm_v0", {"num_scheduler_steps": 0})
    assert bad.value.field == "plan.engine_options.num_scheduler_steps"


def test_instance_costs_run_as_the_problem_engine() -> None:
    from tests.solver.test_serving_search import make_problem

    problem = make_problem(1).with_engine("vllm_v0", {"num_scheduler_steps": 4})
    from cost_models.serving.registry import build_serving_cost_model

    cost = InstanceCosts(problem, build_serving_cost_model("analytical")).get(1, 1, 1, "bf16")
    assert scheduler_of(cost) == SchedulerPolicy(
        prefill="separate_unless_chunked", decode_steps=4, kv_allocation="paged"
    )
    batch = IterationBatch(decode_seqs=32, decode_context_tokens=32 * 600)
    gpu = cost.base.iteration_time_s(batch)
    # V0 multi-step: output processing (0.2 + 0.1 ms × 32) and scheduling + input
    # preparation (0.28 + 0.03 ms × 32) once per block of 4 steps
    assert cost.iteration_time_s(batch) == pytest.approx(gpu + (3.4e-3 + 1.24e-3) / 4)


def test_engines_are_searched_and_compared() -> None:
    from cost_models.serving.registry import build_serving_cost_model
    from tests.solver.test_serving_search import make_problem

    cm = build_serving_cost_model("analytical")
    problem = ServingProblem(
        make_problem(2).model, make_problem(2).cluster, make_problem(2).workload
    )
    pinned = serving_search(problem, cm, fixed={"engine": "sglang", "mode": "colocated"}, top_k=2)
    assert pinned.plans and {p.estimate.plan.engine for p in pinned.plans} == {"sglang"}
    both = serving_search(
        problem, cm, fixed={"mode": "colocated"}, engines=["vllm", "vllm_v0"], top_k=200
    )
    engines = [p.estimate.plan.engine for p in both.plans]
    assert set(engines) == {"vllm", "vllm_v0"}
    per_gpu = [p.estimate.goodput_rps_per_gpu for p in both.plans]
    assert per_gpu == sorted(per_gpu, reverse=True)
    assert [p.rank for p in both.plans] == list(range(1, len(both.plans) + 1))
    # vLLM V1 mixes prompts into the decode batches and overlaps its host work: under the
    # same SLO its best plan carries at least V0's
    best = {
        e: max(p.estimate.goodput_rps_per_gpu for p in both.plans if p.estimate.plan.engine == e)
        for e in ("vllm", "vllm_v0")
    }
    assert best["vllm"] >= best["vllm_v0"]
    with pytest.raises(SpecError) as bad:
        serving_search(problem, cm, engines=["vllm", "tgi"])
    assert bad.value.field == "constraints.engines.1"


# ---- prefix caching ----------------------------------------------------------------------------
@pytest.mark.parametrize("fast_forward", [False, True])
def test_a_cached_prefix_is_prefilled_once(fast_forward: bool) -> None:
    # 1 s + 0.01 s per prompt token and 0.0001 s per attention pair. Two requests of 100
    # prompt tokens sharing an 80-token prefix, far apart. Without caching each prefill
    # costs 1 + 1.0 + 0.505 = 2.505 s; with it the second computes 20 tokens after 80 cached:
    # 1 + 0.2 + (20·80 + 20·21/2)·0.0001 = 1.381 s.
    cost = {"per_prefill_token": 0.01, "per_pair": 1e-4}
    reqs = [Request(0.0, 100, 1, shared_prefix_tokens=80), Request(10.0, 100, 1, 80)]
    plain = simulate_colocated(
        reqs, engine(SchedulerPolicy(), **cost), 1, 8, None, fast_forward=fast_forward
    )
    assert plain.ttft_s.tolist() == pytest.approx([2.505, 2.505])
    cached = simulate_colocated(
        reqs,
        engine(SchedulerPolicy(prefix_caching=True), **cost),
        1,
        8,
        None,
        fast_forward=fast_forward,
    )
    assert cached.ttft_s.tolist() == pytest.approx([2.505, 1.381])


def test_the_cache_holds_the_prefix_once_in_the_kv_budget() -> None:
    # KV for 300 tokens: each request needs 100 + 50 = 150; with an 80-token shared prefix
    # held once, a warm cache fits (300 - 80) // 70 = 3 requests at once instead of 2.
    reqs = [Request(0.0, 100, 50, 80)] + [Request(5.0, 100, 50, 80) for _ in range(3)]
    plain = simulate_colocated(reqs, engine(SchedulerPolicy(), kv_tokens=300), 1, 8, None)
    cached = simulate_colocated(
        reqs, engine(SchedulerPolicy(prefix_caching=True), kv_tokens=300), 1, 8, None
    )
    assert plain.max_running_per_instance == 2
    assert cached.max_running_per_instance == 3


# ---- concurrency cap (benchmark clients) ------------------------------------------------------
@pytest.mark.parametrize("fast_forward", [False, True])
def test_a_concurrency_cap_sends_requests_as_slots_free(fast_forward: bool) -> None:
    # 1 s per iteration; three requests ready at 0 (prompt 10, output 2). With one slot each
    # is sent when the previous finishes: prefill then one decode, 2 s each, back to back;
    # latencies count from the send. Without a cap the three share every iteration.
    reqs = [Request(0.0, 10, 2) for _ in range(3)]
    capped = simulate_colocated(
        reqs, engine(SchedulerPolicy()), 1, 8, None, concurrency=1, fast_forward=fast_forward
    )
    assert capped.ttft_s.tolist() == [1.0, 1.0, 1.0]
    assert capped.e2e_s.tolist() == [2.0, 2.0, 2.0]
    assert capped.makespan_s == 6.0 and capped.max_concurrent_sequences == 1
    free = simulate_colocated(reqs, engine(SchedulerPolicy()), 1, 8, None)
    assert free.e2e_s.tolist() == [2.0, 2.0, 2.0] and free.makespan_s == 2.0
    # two slots: the third request waits for the first pair (sent at 2)
    two = simulate_colocated(reqs, engine(SchedulerPolicy()), 1, 8, None, concurrency=2)
    assert two.makespan_s == 4.0 and two.max_concurrent_sequences == 2
    with pytest.raises(ValueError):
        simulate_colocated(reqs, engine(SchedulerPolicy()), 1, 8, None, concurrency=0)


# ---- instances of several kinds behind one router ------------------------------------------------
def test_the_router_weighs_outstanding_work_by_instance_speed() -> None:
    from solver.serving.simulate import ColocatedPart, simulate_colocated_mix

    # a fast instance (1 s per iteration) and a slow one (2 s), one request per iteration,
    # ten one-token requests at 0 (11 outstanding tokens each). Per unit of speed the router
    # sends them fast, slow, fast, fast, slow, fast, fast, slow, fast, fast (ties go to the
    # faster, listed first): the fast one finishes its 7 at 1..7 s, the slow one its 3 at
    # 2, 4, 6 s. Plain least-outstanding routing would alternate and end at 10 s.
    fast = ColocatedPart(AffineCost(base=1.0), 1, 1, None)
    slow = ColocatedPart(AffineCost(base=2.0), 1, 1, None)
    reqs = [Request(0.0, 10, 1) for _ in range(10)]
    res = simulate_colocated_mix(reqs, [fast, slow])
    assert res.e2e_s.tolist() == [1.0, 2.0, 2.0, 3.0, 4.0, 4.0, 5.0, 6.0, 6.0, 7.0]
    assert res.makespan_s == 7.0
    alone = simulate_colocated(reqs, AffineCost(base=1.0), 2, 1, None)
    assert alone.makespan_s == 5.0  # two fast instances share them evenly
