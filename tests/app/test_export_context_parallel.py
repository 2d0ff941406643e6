"""Context-parallel algorithms in the exports (issue 15): Megatron's `--cp-comm-type` (and
the hybrid's `--hierarchical-context-parallel-sizes`), torchtitan's rotate method,
DeepSpeed-Ulysses' `sequence_parallel_size`; what a framework cannot run is a 422 naming
the rule."""

from __future__ import annotations

import json
import tomllib

import pytest
from test_export_rules import LLAMA, refused, training

from app.exports import export_plan
from app.exports import megatron as mg_export
from app.exports.base import UnexpressiblePlan, parse_flags


def _megatron(**plan):
    problem, row = training(LLAMA, **plan)
    result = export_plan(row, problem, "megatron")
    return result, parse_flags(result.args, mg_export.SWITCHES)


@pytest.mark.parametrize(
    ("plan", "comm"),
    [
        ({"data": 4, "tensor": 8, "context": 2, "sequence_parallel": True}, "p2p"),
        ({"data": 8, "context": 8, "context_parallel_algorithm": "ulysses"}, "a2a"),
        ({"data": 8, "context": 8, "context_parallel_algorithm": "all_gather"}, "allgather"),
    ],
)
def test_megatron_cp_comm_type(plan, comm) -> None:
    result, f = _megatron(**plan)
    assert f["--context-parallel-size"] == str(plan["context"])
    assert f["--cp-comm-type"] == comm
    assert "--hierarchical-context-parallel-sizes" not in f
    mg_export.check_args(result.args, world_size=64, env=result.env)


def test_megatron_hybrid_writes_both_levels_heads_first() -> None:
    result, f = _megatron(
        data=4, context=16, context_parallel_algorithm="hybrid", context_parallel_heads=8
    )
    assert f["--cp-comm-type"] == "a2a+p2p"
    i = result.args.index("--hierarchical-context-parallel-sizes")
    assert result.args[i + 1 : i + 3] == ["8", "2"]  # a2a level (adjacent GPUs), then p2p
    mg_export.check_args(result.args, world_size=64, env=result.env)
    # validate_args: a2a+p2p needs the sizes, and their product is the context size
    args = list(result.args)
    del args[i : i + 3]
    with pytest.raises(UnexpressiblePlan) as info:
        mg_export.check_args(args, world_size=64, env=result.env)
    assert info.value.rule == "megatron.hierarchical-cp-sizes"
    args = list(result.args)
    args[i + 2] = "4"
    with pytest.raises(UnexpressiblePlan) as info:
        mg_export.check_args(args, world_size=64, env=result.env)
    assert info.value.rule == "megatron.hierarchical-cp-sizes"


def test_megatron_no_cp_comm_type_without_context_parallelism() -> None:
    _result, f = _megatron(data=8, tensor=8, sequence_parallel=True)
    assert "--cp-comm-type" not in f


def test_megatron_refuses_an_all_to_all_over_too_few_kv_heads() -> None:
    # 8 KV heads over tensor 8 leave 1 per rank: nothing to split over 2 context ranks
    problem, row = training(
        LLAMA,
        data=4,
        tensor=8,
        context=2,
        sequence_parallel=True,
        context_parallel_algorithm="ulysses",
    )
    assert refused(problem, row, "megatron").rule == "megatron.cp-a2a-heads"


@pytest.mark.parametrize(
    ("algorithm", "rotate"), [("ring", "alltoall"), ("all_gather", "allgather")]
)
def test_torchtitan_rotate_method(algorithm: str, rotate: str) -> None:
    problem, row = training(
        LLAMA, data=8, context=8, zero_stage=3, context_parallel_algorithm=algorithm
    )
    result = export_plan(row, problem, "torchtitan")
    par = tomllib.loads(result.content)["parallelism"]
    assert par["context_parallel_degree"] == 8
    assert par["context_parallel_rotate_method"] == rotate


def test_torchtitan_without_context_parallelism_writes_no_rotate_method() -> None:
    problem, row = training(LLAMA, data=64, zero_stage=3)
    par = tomllib.loads(export_plan(row, problem, "torchtitan").content)["parallelism"]
    assert "context_parallel_rotate_method" not in par


@pytest.mark.parametrize("algorithm", ["ulysses", "hybrid"])
def test_torchtitan_refuses_head_splits(algorithm: str) -> None:
    extra = {"context_parallel_heads": 4} if algorithm == "hybrid" else {}
    problem, row = training(
        LLAMA, data=8, context=8, zero_stage=3, context_parallel_algorithm=algorithm, **extra
    )
    assert refused(problem, row, "torchtitan").rule == "torchtitan.context-parallel-algorithm"


def test_deepspeed_ulysses_is_sequence_parallel_size() -> None:
    problem, row = training(
        LLAMA, data=8, context=8, zero_stage=2, gbs=64, context_parallel_algorithm="ulysses"
    )
    result = export_plan(row, problem, "deepspeed")
    cfg = json.loads(result.content)
    assert cfg["sequence_parallel_size"] == 8
    # the 8 ranks of a sequence-parallel group share a micro-batch: data-parallel size 8
    assert cfg["train_batch_size"] == 64
    assert cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 8 == 64
    assert any("DeepSpeed-Ulysses" in note for note in result.notes)


@pytest.mark.parametrize("algorithm", ["ring", "all_gather"])
def test_deepspeed_refuses_other_algorithms(algorithm: str) -> None:
    problem, row = training(
        LLAMA, data=8, context=8, zero_stage=2, gbs=64, context_parallel_algorithm=algorithm
    )
    assert refused(problem, row, "deepspeed").rule == "deepspeed.context-parallel"


def test_deepspeed_ulysses_needs_divisible_heads() -> None:
    problem, row = training(
        LLAMA, data=4, context=16, zero_stage=2, gbs=64, context_parallel_algorithm="ulysses"
    )
    assert refused(problem, row, "deepspeed").rule == "deepspeed.ulysses-heads"
