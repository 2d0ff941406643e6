"""Diverse serving top-k (`solver.serving.diverse`): a plan that a better-ranked plan of the
same layout matches on every reported metric folds under it; other layouts never fold."""

from __future__ import annotations

from typing import Any

from solver.serving.diverse import dominance_metrics, fold, layout_of
from specs.serving import ServingMetrics, ServingPlan

METRICS: dict[str, Any] = {
    "ttft_ms_p50": 100.0,
    "ttft_ms_p90": 200.0,
    "ttft_ms_p99": 300.0,
    "tpot_ms_p50": 10.0,
    "tpot_ms_p90": 20.0,
    "tpot_ms_p99": 30.0,
    "e2e_latency_s_p50": 3.0,
    "e2e_latency_s_p90": 5.0,
    "throughput_tokens_per_s": 50_000.0,
    "goodput_rps": 170.0,
    "goodput_rps_per_gpu": 21.25,
    "gpus_used": 8,
    "kv_cache_gib": 40.0,
    "max_concurrent_sequences": 300,
    "arrival_rate_rps": 170.0,
    "slo_attainment": 0.95,
}


def plan(tensor: int = 4, batch: int = 128, chunk: int | None = None) -> ServingPlan:
    return ServingPlan.model_validate(
        {
            "mode": "colocated",
            "instances": [
                {
                    "role": "both",
                    "count": 8 // tensor,
                    "parallelism": {"tensor": tensor, "pipeline": 1, "expert": 1},
                    "max_batch_size": batch,
                    "chunk_size": chunk,
                }
            ],
        }
    )


def metrics(**changes: Any) -> ServingMetrics:
    return ServingMetrics.model_validate({**METRICS, **changes})


def test_knobs_are_not_part_of_the_layout() -> None:
    assert layout_of(plan(4, 128, None)) == layout_of(plan(4, 256, 2048))
    assert layout_of(plan(4)) != layout_of(plan(2))


def test_an_equal_variant_folds_under_the_better_ranked_one() -> None:
    folds = fold([(plan(chunk=None), metrics()), (plan(chunk=8192), metrics())])
    assert folds[0].dominated_by is None
    assert folds[1].dominated_by == 0
    assert folds[1].reason is not None and "chunk size 8192 instead of None" in folds[1].reason


def test_a_variant_better_on_one_metric_stays() -> None:
    for better in ({"ttft_ms_p99": 299.0}, {"goodput_rps": 171.0}, {"slo_attainment": 0.96}):
        folds = fold([(plan(chunk=None), metrics()), (plan(chunk=2048), metrics(**better))])
        assert folds[1].dominated_by is None, better


def test_worse_everywhere_folds_and_other_layouts_never_do() -> None:
    worse = metrics(ttft_ms_p90=250.0, goodput_rps=150.0)
    folds = fold([(plan(4), metrics()), (plan(4, batch=64), worse), (plan(2), worse)])
    assert [f.dominated_by for f in folds] == [None, 0, None]


def test_chains_fold_under_the_first_non_dominated_plan() -> None:
    ranked = [
        (plan(batch=128), metrics()),
        (plan(batch=96), metrics(tpot_ms_p90=21.0)),
        (plan(batch=64), metrics(tpot_ms_p90=22.0)),
    ]
    assert [f.dominated_by for f in fold(ranked)] == [None, 0, 0]


def test_metrics_are_oriented_and_rounded() -> None:
    m = dominance_metrics(metrics(goodput_rps=170.0000000001))
    assert m["goodput_rps"] == -170.0  # higher is better: negated; float noise is a tie
    assert m["ttft_ms_p90"] == 200.0
    assert "kv_cache_gib" not in m  # describes the plan, serves no objective


def test_a_plan_without_metrics_neither_folds_nor_is_folded() -> None:
    folds = fold([(plan(), None), (plan(batch=64), metrics()), (plan(batch=32), metrics())])
    assert [f.dominated_by for f in folds] == [None, None, 1]
