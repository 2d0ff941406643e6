"""The CLI's tables at 80 and 120 columns (`app.cli_tables`): rendered with rich consoles of
those widths from plan and search data shaped like the API's (long ids, seven-digit token
rates, disaggregated serving layouts), every shown header and every value must appear
whole, no line may pass the width, no cell may be cut with an ellipsis, and the columns
hidden for want of room must be named; `--wide` shows every column."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rich.console import Console

from app import cli_tables as tables

IDS = [
    "fbc28038-1864-480f-bd99-007377d76d57",
    "8ccec1e2-1508-4702-b7d6-7793c0a2c46b",
    "aed8808a-c6dd-408e-a4e9-641f0de13ffb",
]
EXPLANATION = (
    "The throughput leader; the bottleneck is compute (89% of the step), the bubble is "
    "2.3%, 2.49 s exposed communication (mostly tensor-parallel communication), and 2.1 GiB "
    "of memory headroom"
)


def _training(rank: int) -> dict[str, Any]:
    return {
        "id": IDS[rank - 1],
        "search_id": "9f7df246-4f31-4723-a6cb-48fedd74ca44",
        "rank": rank,
        "kind": "training",
        "parallelism": {
            "data": 16,
            "tensor": 8,
            "pipeline": 16,
            "virtual_pipeline": 2,
            "context": 4,
            "expert": 8 if rank == 1 else 1,
        },
        "micro_batch_size": 2,
        "zero_stage": 1,
        "recompute": "selective",
        "pipeline_schedule": "interleaved_1f1b",
        "metrics": {
            "step_time_s": 12.345 * rank,
            "tokens_per_s": 1_234_567.0 / rank,
            "mfu": 0.4123,
            "bubble_fraction": 0.0512,
        },
        "memory": {"peak_gib": 71.34},
        "explanation": f"{rank}; {EXPLANATION}",
    }


def _serving(rank: int) -> dict[str, Any]:
    disaggregated = rank == 1
    instances = (
        [
            {"role": "prefill", "count": 4, "parallelism": {"tensor": 2, "pipeline": 4},
             "max_batch_size": 1024, "precision": "bf16"},
            {"role": "decode", "count": 3, "parallelism": {"tensor": 8, "expert": 8},
             "max_batch_size": 512, "precision": "fp8"},
        ]
        if disaggregated
        else [{"role": "both", "count": 2, "parallelism": {"tensor": 4}, "max_batch_size": 112}]
    )  # fmt: skip
    return {
        "id": IDS[rank - 1],
        "search_id": "3f88457a-c45a-4e9a-98ff-8cf3d22992ef",
        "rank": rank,
        "kind": "serving",
        "mode": "disaggregated" if disaggregated else "colocated",
        "instances": instances,
        "engine": "vllm",
        "metrics": {
            "gpus_used": 1024 // rank,
            "goodput_rps": 12_345.6 / rank,
            "goodput_rps_per_gpu": 53.98 / rank,
            "ttft_ms_p90": 1_227.4,
            "tpot_ms_p90": 17.17,
            "ttft_ms_p99": 2_345.6,
            "tpot_ms_p99": 21.5,
            "throughput_tokens_per_s": 3_692_612.0,
            "kv_cache_gib": 54.2,
        },
        "explanation": f"{rank}; at 378 requests/s P90 TTFT 227 ms, P90 TPOT 17.2 ms",
    }


def _search(i: int, kind: str) -> dict[str, Any]:
    return {
        "id": IDS[i],
        "status": "succeeded",
        "num_plans": 10 + i,
        "model_name": "qwen3-235b-a22b",
        "num_gpus": 4096,
        "created_at": "2026-12-03T07:36:47.123456+00:00",
        "workload": {"kind": kind},
        "stats": {"wall_time_s": 123.456},
    }


PLANS = {
    "training": [_training(r) for r in (1, 2, 3)],
    "serving": [_serving(r) for r in (1, 2, 3)],
}
SEARCHES = [_search(0, "training"), _search(1, "serving"), _search(2, "training")]


def _render(renderable: Any, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def _check(layout: tables.Layout, text: str, width: int | None) -> None:
    """Every header line and every cell of the layout appears whole in `text` (text cells
    may wrap: each of their words appears whole); nothing is cut; no line is wider."""
    assert "…" not in text
    if width is not None:
        assert max(len(line) for line in text.splitlines()) <= width
    for column, values in zip(layout.columns, layout.cells, strict=True):
        for line in column.header.splitlines():
            assert re.search(rf"[┃ ]{re.escape(line)}[┃ ]", text), (column.header, text)
        for value in values:
            assert value, column.header
            if tables.wraps(column):  # wrapped at spaces; words up to WORD_MAX whole
                for word in value.split():
                    assert len(word) > tables.WORD_MAX or word in text, (column.header, word)
            else:
                # whole, between cell borders (right- or left-aligned)
                assert re.search(rf"│ *{re.escape(value)} *│", text), (column.header, value)


@pytest.mark.parametrize("kind", ["training", "serving"])
@pytest.mark.parametrize("width", [80, 120])
def test_plan_tables_fit_the_width_with_every_value_whole(kind: str, width: int) -> None:
    plans = PLANS[kind]
    layout = tables.plans_layout(plans, width, show_ids=True)
    text = _render(tables.build(layout, f"plans of a {kind} search"), width)
    _check(layout, text, width)
    shown = {c.header for c in layout.columns}
    # the columns a reader needs are there at 80 columns already
    needed = (
        {"rank", "dp/tp/pp/vp/cp", "step s", "tokens/s", "MFU", "peak GiB"}
        if kind == "training"
        else {"rank", "layout", "GPUs", "goodput\nrps", "rps/GPU", "TTFT p90\nms", "TPOT p90\nms"}
    )
    assert needed <= shown
    assert "id" not in shown and "explanation" not in shown  # in the details table
    if layout.hidden:
        assert "--wide" in text and all(h in text for h in layout.hidden)
    # independent figures: 1,234,567 tokens/s and 41.2% MFU; 53.98 requests/s per GPU
    if kind == "training":
        assert "1,234,567" in text and "41.2%" in text and "16/8/16/2/4 ep8" in text
    else:
        assert "53.98" in text and "12,346" in text and "1,024" in text


@pytest.mark.parametrize("kind", ["training", "serving"])
@pytest.mark.parametrize("width", [80, 120])
def test_details_keep_ids_whole_and_wrap_explanations(kind: str, width: int) -> None:
    plans = PLANS[kind]
    text = _render(tables.details_table(plans, show_ids=True), width)
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    for plan in plans:
        assert plan["id"] in text
        for word in tables.explanation(plan).split():
            assert word in text


def test_training_at_80_hides_the_least_needed_columns_and_120_hides_none() -> None:
    narrow = tables.plans_layout(PLANS["training"], 80)
    assert narrow.hidden == ["mbs", "zero"] and narrow.width <= 80
    roomy = tables.plans_layout(PLANS["training"], 120)
    assert roomy.hidden == [] and roomy.width <= 120


@pytest.mark.parametrize("kind", ["training", "serving"])
def test_wide_shows_every_column(kind: str) -> None:
    layout = tables.plans_layout(PLANS[kind], 80, wide=True, show_ids=True)
    expected = tables.plan_columns(kind == "serving", show_ids=True)
    assert [c.header for c in layout.columns] == [c.header for c in expected]
    assert layout.hidden == []
    text = _render(tables.build(layout, None), layout.width)
    _check(layout, text, layout.width)
    assert IDS[0] in text and "interleaved_1f1b" in text if kind == "training" else "vllm" in text


@pytest.mark.parametrize("width", [80, 120])
def test_searches_table_shows_ids_whole_and_plan_counts(width: int) -> None:
    layout = tables.searches_layout(SEARCHES, width, wide=False)
    text = _render(tables.build(layout, "searches"), width)
    _check(layout, text, width)
    assert [c.header for c in layout.columns][:3] == ["id", "status", "plans"]
    for search in SEARCHES:
        assert re.search(rf"│ {search['id']} │ succeeded │ +{search['num_plans']} │", text)
    assert "qwen3-235b-a22b" in text  # a model name is one word: never folded
    if width == 80:
        assert layout.hidden == ["GPUs", "created", "workload", "wall s"]
    else:  # the longest column of the list is the model name's; only the wall time waits
        assert layout.hidden == ["wall s"] and "2026-12-03 07:36" in text and "4096" in text
    for hidden in layout.hidden:
        assert hidden in text


def test_number_never_uses_an_exponent_for_table_figures() -> None:
    assert tables.number(1_234_567.8) == "1,234,568"
    assert tables.number(12_345) == "12,345"
    assert tables.number(9_999.4) == "9999"
    assert tables.number(0.04123) == "0.04123"
    assert tables.number(None) == ""
