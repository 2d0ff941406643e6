"""Vocabulary parallelism in the exports (issue 15): Megatron's `--enable-vocab-parallel` of
the sail-sg/VocabularyParallelism fork with its split flags and vocabulary padding; what
the fork or a framework cannot run is a 422 naming the rule."""

from __future__ import annotations

import pytest
from test_export_rules import LLAMA, refused, small_model, training

from app.exports import export_plan
from app.exports import megatron as mg_export
from app.exports.base import parse_flags


def _megatron(**plan):
    problem, row = training(LLAMA, vocab_parallel=True, **plan)
    result = export_plan(row, problem, "megatron")
    return result, parse_flags(result.args, mg_export.SWITCHES)


def test_megatron_enables_vocab_parallel_on_an_even_split() -> None:
    result, f = _megatron(data=2, tensor=8, pipeline=4, sequence_parallel=True)
    assert f["--enable-vocab-parallel"] is True
    assert f["--untie-embeddings-and-output-weights"] is True
    # the fork asserts make_vocab_size_divisible_by % (tp × pp) == 0: lcm(128, 32) = 128
    assert f["--make-vocab-size-divisible-by"] == "128"
    for flag in (
        "--decoder-first-pipeline-num-layers",
        "--pipeline-model-parallel-layout",
        "--enable-layer-redistribution",
    ):
        assert flag not in f
    assert any("sail-sg/VocabularyParallelism" in note for note in result.notes)
    mg_export.check_args(result.args, world_size=64, env=result.env)


def test_megatron_pads_the_vocabulary_to_tensor_times_pipeline() -> None:
    # tp 8 × pp 20 = 160 does not divide 128: lcm(128, 160) = 640
    problem, row = training(
        LLAMA, nodes=20, data=1, tensor=8, pipeline=20, sequence_parallel=True, vocab_parallel=True
    )
    f = parse_flags(export_plan(row, problem, "megatron").args, mg_export.SWITCHES)
    assert f["--make-vocab-size-divisible-by"] == "640"


def test_megatron_without_vocab_parallel_writes_none_of_it() -> None:
    problem, row = training(LLAMA, data=2, tensor=8, pipeline=4, sequence_parallel=True)
    f = parse_flags(export_plan(row, problem, "megatron").args, mg_export.SWITCHES)
    assert "--enable-vocab-parallel" not in f
    assert f["--make-vocab-size-divisible-by"] == "128"


def test_megatron_final_stage_layers_for_the_forks_redistribution() -> None:
    # 80 layers over 4 stages with 17 on the last: the fork spreads 63 over 3 → 21 each
    _result, f = _megatron(
        data=2, tensor=8, pipeline=4, sequence_parallel=True, stage_layers=[21, 21, 21, 17]
    )
    assert f["--enable-layer-redistribution"] is True
    assert f["--final-stage-num-layers"] == "17"


def test_fork_split_formula_by_hand() -> None:
    # get_num_layers_to_build: L // p each, the remainder on ranks p-2, p-3, ...
    assert mg_export.fork_stage_layers(30, 4, None) == [7, 8, 8, 7]
    assert mg_export.fork_stage_layers(80, 4, 17) == [21, 21, 21, 17]
    assert mg_export.fork_stage_layers(80, 4, 18) == [20, 21, 21, 18]


def test_megatron_refuses_a_split_the_fork_cannot_build() -> None:
    problem, row = training(
        LLAMA,
        data=2,
        tensor=8,
        pipeline=4,
        sequence_parallel=True,
        vocab_parallel=True,
        stage_layers=[17, 21, 21, 21],
    )
    refusal = refused(problem, row, "megatron")
    assert refusal.rule == "megatron.vocab-parallel"
    assert "[17, 21, 21, 21]" in refusal.detail


def test_megatron_refuses_tied_embeddings() -> None:
    problem, row = training(
        small_model(tie_embeddings=True),
        nodes=1,
        gbs=64,
        data=2,
        tensor=1,
        pipeline=4,
        vocab_parallel=True,
    )
    assert refused(problem, row, "megatron").rule == "megatron.vocab-parallel"


@pytest.mark.parametrize(("fmt", "zero"), [("torchtitan", 1), ("deepspeed", 1)])
def test_other_frameworks_refuse_vocab_parallel(fmt: str, zero: int) -> None:
    problem, row = training(
        LLAMA, data=16, pipeline=4, zero_stage=zero, gbs=256, vocab_parallel=True
    )
    refusal = refused(problem, row, fmt)
    assert refusal.rule == f"{fmt}.vocab-parallel"
    assert "megatron" in refusal.detail


def test_slurm_wraps_the_megatron_flags() -> None:
    problem, row = training(
        LLAMA, data=2, tensor=8, pipeline=4, sequence_parallel=True, vocab_parallel=True
    )
    result = export_plan(row, problem, "slurm")
    assert "--enable-vocab-parallel" in result.content
