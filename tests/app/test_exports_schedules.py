"""Every pipeline schedule through the launchers: a format exports a plan's schedule exactly
when the schedule plug-in lists the format's framework (with the option it sets), and
otherwise refuses it (422) naming the rule and the frameworks that do run it."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from app.exports import export_plan
from app.exports import torchtitan as tt_export
from app.exports.base import UnexpressiblePlan
from cost_models.analytical.schedules import SCHEDULES, get
from specs.model import ModelSpec
from tests.support import TINY_MODEL

MODEL = ModelSpec.model_validate({**TINY_MODEL, "num_layers": 8})
"""8 layers: 4 ranks of 2, or 8 chunks of 1 for the two-chunk schedules."""


def _problem_and_row(schedule: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from app.services import planning
    from specs.cluster import ClusterSpec

    chunks = 2 if get(schedule).placement == "v" or schedule == "interleaved_1f1b" else 1
    cluster = planning.resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}]}
        )
    )
    problem = {
        "model": MODEL.model_dump(mode="json"),
        "cluster": cluster.model_dump(mode="json"),
        "workload": {
            "kind": "training",
            "global_batch_size": 64,
            "sequence_length": 4096,
            "precision": "bf16",
        },
    }
    plan = {
        "parallelism": {"data": 2, "pipeline": 4, "virtual_pipeline": chunks},
        "micro_batch_size": 2,
        "zero_stage": 1,
        "pipeline_schedule": schedule,
        "stage_layers": [8 // (4 * chunks)] * (4 * chunks),
    }
    return problem, {"id": "hand-built", "plan": plan}


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_torchtitan_exports_exactly_the_schedules_it_runs(schedule: str) -> None:
    problem, row = _problem_and_row(schedule)
    runs = get(schedule).frameworks
    if "torchtitan" in runs:
        cfg = tomllib.loads(export_plan(row, problem, "torchtitan").content)
        want = runs["torchtitan"].options["pipeline_parallel_schedule"]
        assert cfg["parallelism"]["pipeline_parallel_schedule"] == want
        tt_export.check_config(cfg, world_size=8, num_layers=8)
        return
    with pytest.raises(UnexpressiblePlan) as info:
        export_plan(row, problem, "torchtitan")
    assert info.value.status == 422
    assert info.value.rule == "torchtitan.pipeline-schedule"
    who = ", ".join(sorted(runs)) or "none of the exported frameworks"
    assert f"run by: {who}" in info.value.detail


def test_zero_bubble_h1_names_pytorch_pipelining_as_its_runner() -> None:
    """torchtitan builds ScheduleInterleavedZeroBubble only with ≥ 2 stages per rank; ZB-H1
    (one stage per rank) runs in a plain PyTorch loop (the fsdp profile), which no format
    launches: the torchtitan and Megatron exports both refuse it, naming fsdp."""
    problem, row = _problem_and_row("zero_bubble_h1")
    for fmt in ("torchtitan", "megatron"):
        with pytest.raises(UnexpressiblePlan) as info:
            export_plan(row, problem, fmt)
        assert info.value.rule == f"{fmt}.pipeline-schedule"
        assert "run by: fsdp" in info.value.detail
    problem, row = _problem_and_row("zero_bubble_h2")
    with pytest.raises(UnexpressiblePlan) as info:
        export_plan(row, problem, "torchtitan")
    assert "run by: none of the exported frameworks" in info.value.detail
