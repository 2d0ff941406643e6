"""A p-stage pipelined instance runs as p schedulers with 1/p of the KV cache each
(`cost_models.serving.base.pipeline_engines`): the simulator, the capacity bound and the
search's decode bound all see p engines."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cost_models.serving.base import VirtualEngineCost, pipeline_engines
from solver.serving.queueing import capacity_upper_bound_rps
from solver.serving.search import decode_phase_bound_rps
from solver.serving.simulate import Request, simulate_colocated
from tests.solver.serving_fakes import AffineCost


@dataclass
class PipelinedAffine(AffineCost):
    pipeline_stages: int = 2


def saturated(n: int, prompt: int, output: int) -> list[Request]:
    return [Request(0.0, prompt, output) for _ in range(n)]


def test_pipeline_engines_splits_the_kv_cache_and_keeps_the_latency() -> None:
    cost = PipelinedAffine(base=0.01, kv_tokens=1000, pipeline_stages=4)
    view, stages = pipeline_engines(cost)
    assert stages == 4 and isinstance(view, VirtualEngineCost)
    assert view.kv_capacity_tokens == 250
    from cost_models.serving.base import IterationBatch

    batch = IterationBatch(3, 300)
    assert view.iteration_time_s(batch) == cost.iteration_time_s(batch)
    plain = AffineCost(base=0.01)
    assert pipeline_engines(plain) == (plain, 1)


def test_two_stages_serve_a_saturated_stream_twice_as_fast() -> None:
    """Constant 10 ms iterations, one decode token per sequence per iteration: one engine
    with max batch 8 finishes 8 tokens per 10 ms; two engines (same latency, 2 stages in
    flight) finish 16. 64 requests of 1 prompt + 20 output tokens, no chunk limit."""
    one = AffineCost(base=0.01)
    two = PipelinedAffine(base=0.01, pipeline_stages=2)
    r1 = simulate_colocated(saturated(64, 1, 20), one, 1, 8, None)
    r2 = simulate_colocated(saturated(64, 1, 20), two, 1, 8, None)
    assert r2.throughput_tokens_per_s == pytest.approx(2 * r1.throughput_tokens_per_s, rel=0.02)
    # every request still sees the same per-token latency (the pipeline's)
    assert max(r2.tpot_s) == pytest.approx(max(r1.tpot_s), rel=1e-9)


def test_bounds_count_the_schedulers() -> None:
    one = AffineCost(base=0.01, per_decode_seq=1e-4, kv_tokens=10_000)
    two = PipelinedAffine(base=0.01, per_decode_seq=1e-4, kv_tokens=20_000)
    # same per-scheduler KV (10k tokens), so each scheduler bounds like `one`
    assert capacity_upper_bound_rps(two, 1, 16, 512, 100, 50) == pytest.approx(
        2 * capacity_upper_bound_rps(one, 1, 16, 512, 100, 50)
    )
    assert decode_phase_bound_rps(two, 16, 100, 50, 0.05) == pytest.approx(
        2 * decode_phase_bound_rps(one, 16, 100, 50, 0.05)
    )
