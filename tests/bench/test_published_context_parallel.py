"""The published long-context CP comparison (bench/published_context_parallel.py): complete
provenance, a transcription whose own arithmetic holds, and a row's predicted speedup built
from the two plans it names (the published degrees with ring CP; context 1)."""

from __future__ import annotations

import pytest

from bench.published_context_parallel import compare, load, provenance_gaps


def test_the_data_file_has_complete_provenance() -> None:
    data = load()
    assert provenance_gaps(data) == []
    assert [t["id"] for t in data["tables"]] == ["nemo-llama2-7b-h100"]
    del data["sources"]["nemo_long_sequence"]["url"]
    assert provenance_gaps(data) == ["sources.nemo_long_sequence.url"]


def test_the_transcription_is_consistent() -> None:
    """Each row's degrees use its GPUs, and the published speedup is its TFLOP/s ratio (to
    the table's two decimals); tokens per step are the same at every length."""
    (table,) = load()["tables"]
    for r in table["rows"]:
        cp = r["with_cp"]
        assert cp["tensor"] * cp["pipeline"] * cp["data"] * cp["context"] == r["gpus"]
        ratio = r["with_cp_tflops_per_gpu"] / r["without_cp_tflops_per_gpu"]
        assert r["speedup"] == pytest.approx(ratio, abs=0.006)
        assert r["sequence_k"] * r["global_batch_size"] == 4096


def test_a_rows_speedup_is_the_step_ratio_of_its_two_plans() -> None:
    data = load()
    (table,) = data["tables"]
    one = {
        **data,
        "tables": [{**table, "rows": [r for r in table["rows"] if r["sequence_k"] == 128]}],
    }
    (row,) = compare(one)
    assert row.published == pytest.approx(1.31)
    assert row.with_cp is not None and row.without_cp is not None
    par = row.with_cp.plan.parallelism
    assert (par.tensor, par.pipeline, par.data, par.context) == (4, 1, 8, 4)
    assert row.with_cp.plan.context_parallel_algorithm == "ring"
    assert row.without_cp.plan.parallelism.context == 1
    # the published figure is a TFLOP/s ratio: the same model FLOPs over each step
    tflops = row.with_cp.metrics.model_tflops_per_gpu / row.without_cp.metrics.model_tflops_per_gpu
    assert row.predicted == pytest.approx(tflops)
    assert row.predicted == pytest.approx(
        row.without_cp.metrics.step_time_s / row.with_cp.metrics.step_time_s
    )
    predicted = row.predicted
    assert predicted is not None
    assert row.error == pytest.approx((predicted - 1.31) / 1.31)
