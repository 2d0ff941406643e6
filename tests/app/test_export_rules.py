"""The frameworks' consistency rules the exports check, one hand-built plan (or argument
list) per rule: each violation is a 422 `UnexpressiblePlan` naming the rule, and the
accepted variants produce exactly the flags the framework documents."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from app.exports import deepspeed as ds_export
from app.exports import export_plan
from app.exports import megatron as mg_export
from app.exports import sglang as sg_export
from app.exports import torchtitan as tt_export
from app.exports import vllm as vl_export
from app.exports.base import UnexpressiblePlan, parse_flags
from app.exports.megatron import layout_string, moe_layer_pattern, parse_layout
from specs.model import ModelSpec
from specs.presets import get_preset

LLAMA = get_preset("llama3-70b")
MIXTRAL = get_preset("mixtral-8x22b")


def _cluster(nodes: int, gpus_per_node: int = 8) -> dict[str, Any]:
    from app.services import planning
    from specs.cluster import ClusterSpec

    spec = ClusterSpec.model_validate(
        {
            "node_groups": [
                {"accelerator": "h100-sxm", "num_nodes": nodes, "gpus_per_node": gpus_per_node}
            ]
        }
    )
    return planning.resolve_cluster(spec).model_dump(mode="json")


def training(
    model: ModelSpec,
    *,
    nodes: int = 8,
    gbs: int = 1024,
    seq: int = 4096,
    precision: str = "bf16",
    **plan: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A problem and a plan row; `plan` holds the parallel degrees and plan fields."""
    par_keys = (
        "data",
        "tensor",
        "pipeline",
        "virtual_pipeline",
        "context",
        "expert",
        "expert_tensor",
        "sequence_parallel",
    )
    parallelism = {k: plan.pop(k) for k in par_keys if k in plan}
    vpp = parallelism.get("virtual_pipeline", 1)
    body = {
        "parallelism": parallelism,
        "pipeline_schedule": "interleaved_1f1b" if vpp > 1 else "1f1b",
        **plan,
    }
    problem = {
        "model": model.model_dump(mode="json"),
        "cluster": _cluster(nodes),
        "workload": {
            "kind": "training",
            "global_batch_size": gbs,
            "sequence_length": seq,
            "precision": precision,
        },
    }
    return problem, {"id": "hand-built", "plan": body}


def serving(
    model: ModelSpec, instances: list[dict[str, Any]], *, nodes: int = 1, mode: str = "colocated"
) -> tuple[dict[str, Any], dict[str, Any]]:
    problem = {
        "model": model.model_dump(mode="json"),
        "cluster": _cluster(nodes),
        "workload": {
            "kind": "serving",
            "prompt_tokens": 1024,
            "output_tokens": 256,
            "slo": {"ttft_ms": 1000, "tpot_ms": 50},
        },
    }
    return problem, {"id": "hand-built", "plan": {"mode": mode, "instances": instances}}


def refused(problem: dict[str, Any], row: dict[str, Any], fmt: str) -> UnexpressiblePlan:
    with pytest.raises(UnexpressiblePlan) as info:
        export_plan(row, problem, fmt)
    assert info.value.status == 422
    assert info.value.format == fmt
    assert info.value.extensions["rule"] == info.value.rule
    return info.value


def small_model(**overrides: Any) -> ModelSpec:
    base = {
        "name": "toy",
        "num_layers": 8,
        "hidden_size": 1536,
        "num_attention_heads": 12,
        "num_kv_heads": 4,
        "ffn_hidden_size": 4096,
        "vocab_size": 32000,
    }
    return ModelSpec.model_validate({**base, **overrides})


# ---- Megatron ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "nodes", "gbs", "plan", "rule"),
    [
        (
            small_model(),
            8,
            1024,
            {"data": 8, "tensor": 8, "sequence_parallel": True},
            "megatron.heads-divisible-by-tp",
        ),  # 12 heads over 8
        (
            LLAMA,
            8,
            1024,
            {"data": 4, "tensor": 16, "sequence_parallel": True},
            "megatron.query-groups-divisible-by-tp",
        ),  # 8 KV groups over 16
        (
            MIXTRAL,
            1,
            96,
            {"data": 3, "expert": 3, "pipeline": 2, "stage_layers": [28, 28]},
            "megatron.experts-divisible-by-ep",
        ),  # 8 experts over 3
        (
            MIXTRAL,
            8,
            1024,
            {"data": 8, "tensor": 4, "expert": 4, "pipeline": 2, "stage_layers": [28, 28]},
            "megatron.expert-and-tensor-parallel-need-sp",
        ),
        (
            LLAMA,
            8,
            1024,
            {
                "data": 16,
                "tensor": 2,
                "pipeline": 2,
                "sequence_parallel": True,
                "zero_stage": 3,
                "stage_layers": [40, 40],
            },
            "megatron.fsdp2-no-pipeline",
        ),
        (
            LLAMA,
            8,
            96,
            {
                "data": 8,
                "pipeline": 8,
                "virtual_pipeline": 2,
                "micro_batch_size": 1,
                "stage_layers": [5] * 16,
            },
            "megatron.interleaved-microbatches",
        ),  # 12 micro-batches, pp = 8
    ],
)
def test_megatron_rules(
    model: ModelSpec, nodes: int, gbs: int, plan: dict[str, Any], rule: str
) -> None:
    problem, row = training(model, nodes=nodes, gbs=gbs, **plan)
    assert refused(problem, row, "megatron").rule == rule


def test_megatron_batch_and_context_rules() -> None:
    problem, row = training(
        LLAMA,
        data=4,
        tensor=8,
        pipeline=2,
        sequence_parallel=True,
        micro_batch_size=3,
        gbs=100,
        stage_layers=[40, 40],
    )
    assert refused(problem, row, "megatron").rule == "megatron.global-batch-divisible"
    problem, row = training(LLAMA, data=4, tensor=8, context=2, sequence_parallel=True, seq=4098)
    assert refused(problem, row, "megatron").rule == "megatron.seq-length-divisible-by-2cp"


@pytest.mark.parametrize(
    ("stage_layers", "pp", "vpp", "flags"),
    [
        ([20, 20, 20, 20], 4, 1, {}),
        (
            [18, 21, 21, 20],
            4,
            1,
            {
                "--decoder-first-pipeline-num-layers": "18",
                "--decoder-last-pipeline-num-layers": "20",
            },
        ),
        ([10] * 8, 4, 2, {"--num-layers-per-virtual-pipeline-stage": "10"}),
        (
            [8, 11, 11, 10, 8, 11, 11, 10],
            4,
            2,
            {
                "--decoder-first-pipeline-num-layers": "16",
                "--decoder-last-pipeline-num-layers": "20",
                "--num-virtual-stages-per-pipeline-rank": "2",
            },
        ),
        (
            [8, 10, 10, 10, 11, 11, 11, 9],
            8,
            1,
            {"--pipeline-model-parallel-layout": "Et*8|t*10|t*10|t*10|t*11|t*11|t*11|t*9L"},
        ),
    ],
)
def test_megatron_pipeline_split_forms(
    stage_layers: list[int], pp: int, vpp: int, flags: dict[str, str]
) -> None:
    """Even splits need no flag; splits that differ only at the first and last rank use the
    first/last flags; anything else is a layout string. Megatron's own distribution of the
    flags gives back the plan's split (`test_exports.megatron_stage_layers`)."""
    from test_exports import megatron_stage_layers

    problem, row = training(
        LLAMA,
        nodes=8,
        data=64 // (8 * pp),
        tensor=8,
        pipeline=pp,
        virtual_pipeline=vpp,
        sequence_parallel=True,
        stage_layers=stage_layers,
        micro_batch_size=1,
    )
    result = export_plan(row, problem, "megatron")
    got = parse_flags(result.args, mg_export.SWITCHES)
    keys = (
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
        "--num-layers-per-virtual-pipeline-stage",
        "--num-virtual-stages-per-pipeline-rank",
        "--pipeline-model-parallel-layout",
    )
    assert {k: got[k] for k in keys if k in got} == flags
    assert megatron_stage_layers(result.args) == stage_layers


def test_megatron_layout_grammar_round_trips() -> None:
    layout = layout_string([3, 1, 2])
    assert layout == "Et*3|t|t*2L"
    assert parse_layout(layout) == [["E", "t", "t", "t"], ["t"], ["t", "t", "L"]]
    # Megatron's own example string
    assert parse_layout("Ettt|(tt|)*2,m|L") == [
        ["E", "t", "t", "t"],
        ["t", "t"],
        ["t", "t"],
        ["m"],
        ["L"],
    ]


def test_megatron_moe_layer_pattern_marks_leading_dense_layers() -> None:
    deepseek = get_preset("deepseek-v3")
    assert deepseek.moe is not None and deepseek.moe.num_dense_layers == 3
    assert moe_layer_pattern(deepseek) == f"[0]*3+[1]*{deepseek.num_layers - 3}"
    assert mg_export.expand_layer_pattern(moe_layer_pattern(deepseek)) == [
        int(deepseek.is_moe_layer(i)) for i in range(deepseek.num_layers)
    ]


def test_megatron_zero_stages_and_recompute_flags() -> None:
    expected = {
        0: ([], ["--use-distributed-optimizer", "--use-torch-fsdp2"]),
        1: (["--use-distributed-optimizer"], ["--use-torch-fsdp2"]),
        2: (
            ["--use-torch-fsdp2", "--torch-fsdp2-no-reshard-after-forward"],
            ["--use-distributed-optimizer"],
        ),
        3: (["--use-torch-fsdp2"], ["--torch-fsdp2-no-reshard-after-forward"]),
    }
    for zero, (present, absent) in expected.items():
        problem, row = training(
            LLAMA, data=8, tensor=8, sequence_parallel=True, zero_stage=zero, recompute="full"
        )
        result = export_plan(row, problem, "megatron")
        f = parse_flags(result.args, mg_export.SWITCHES)
        assert all(k in f for k in present) and not any(k in f for k in absent), zero
        assert (
            f["--recompute-granularity"],
            f["--recompute-method"],
            f["--recompute-num-layers"],
        ) == ("full", "uniform", "1")
        # FSDP needs more than one hardware queue; TP without FSDP exactly one
        assert result.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == (None if zero >= 2 else "1")


@pytest.mark.parametrize(
    ("mutate", "rule"),
    [
        (lambda a: a + ["--recompute-method", "uniform"], "megatron.recompute-flags"),
        (
            lambda a: [x if x != "2" else "1" for x in a[:2]] + a[2:],
            "megatron.sequence-parallel-needs-tp",
        ),
        (lambda a: a + ["--fp16"], "megatron.bf16-or-fp16"),
        (
            lambda a: (
                a
                + [
                    "--num-layers-per-virtual-pipeline-stage",
                    "5",
                    "--num-virtual-stages-per-pipeline-rank",
                    "2",
                ]
            ),
            "megatron.virtual-pipeline-options-exclusive",
        ),
    ],
)
def test_megatron_checker_refuses_inconsistent_flags(mutate: Any, rule: str) -> None:
    problem, row = training(
        LLAMA,
        data=4,
        tensor=2,
        pipeline=8,
        sequence_parallel=True,
        recompute="selective",
        stage_layers=[10] * 8,
    )
    result = export_plan(row, problem, "megatron")
    mg_export.check_args(result.args, world_size=64, env=result.env)  # accepted as made
    with pytest.raises(UnexpressiblePlan) as info:
        mg_export.check_args(mutate(list(result.args)), world_size=64, env=result.env)
    assert info.value.rule == rule
    with pytest.raises(UnexpressiblePlan) as info:
        mg_export.check_args(result.args, world_size=64, env={})
    assert info.value.rule == "megatron.cuda-device-max-connections"


# ---- torchtitan --------------------------------------------------------------------------
def test_torchtitan_rules() -> None:
    problem, row = training(
        MIXTRAL,
        data=4,
        tensor=2,
        expert=4,
        expert_tensor=4,
        pipeline=2,
        sequence_parallel=True,
        stage_layers=[28, 28],
    )
    assert refused(problem, row, "torchtitan").rule == "torchtitan.expert-tensor-degree"
    problem, row = training(LLAMA, data=8, tensor=8, sequence_parallel=True, seq=4100)
    assert refused(problem, row, "torchtitan").rule == "torchtitan.seq-len-divisor"
    problem, row = training(LLAMA, data=8, tensor=8, sequence_parallel=True, zero_stage=0)
    assert refused(problem, row, "torchtitan").rule == "torchtitan.ddp-one-dimensional"
    problem, row = training(LLAMA, data=8, tensor=8, sequence_parallel=True, precision="fp16")
    assert refused(problem, row, "torchtitan").rule == "torchtitan.precision"
    # ZeRO-0 as the only parallel dimension is plain DDP
    problem, row = training(small_model(), nodes=1, data=8, zero_stage=0, gbs=64)
    cfg = __import__("tomllib").loads(export_plan(row, problem, "torchtitan").content)
    assert cfg["parallelism"]["data_parallel_replicate_degree"] == 8
    assert cfg["parallelism"]["data_parallel_shard_degree"] == 1


def test_torchtitan_checker_on_hand_made_configs() -> None:
    good = {
        "parallelism": {
            "data_parallel_replicate_degree": 1,
            "data_parallel_shard_degree": 8,
            "tensor_parallel_degree": 8,
        },
        "training": {"local_batch_size": 1, "global_batch_size": 64, "seq_len": 4096},
    }
    tt_export.check_config(good, world_size=64, num_layers=80)
    bad_product = {**good, "parallelism": {**good["parallelism"], "tensor_parallel_degree": 4}}
    with pytest.raises(UnexpressiblePlan) as info:
        tt_export.check_config(bad_product, world_size=64, num_layers=80)
    assert info.value.rule == "torchtitan.degree-product"
    bad_ep = {
        **good,
        "parallelism": {
            **good["parallelism"],
            "expert_parallel_degree": 16,
            "expert_tensor_parallel_degree": 8,
        },
    }
    with pytest.raises(UnexpressiblePlan) as info:  # efsdp = 8·1·8 / (8·16) is not whole
        tt_export.check_config(bad_ep, world_size=64, num_layers=80)
    assert info.value.rule == "torchtitan.expert-mesh"
    bad_batch = {**good, "training": {**good["training"], "global_batch_size": 60}}
    with pytest.raises(UnexpressiblePlan) as info:
        tt_export.check_config(bad_batch, world_size=64, num_layers=80)
    assert info.value.rule == "torchtitan.global-batch"


def test_torchtitan_interleaved_stages_per_rank() -> None:
    problem, row = training(
        LLAMA,
        data=4,
        tensor=2,
        pipeline=8,
        virtual_pipeline=2,
        sequence_parallel=True,
        stage_layers=[5] * 16,
        gbs=1024,
    )
    cfg = __import__("tomllib").loads(export_plan(row, problem, "torchtitan").content)
    par = cfg["parallelism"]
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert len(par["module_fqns_per_model_part"]) == 16
    single = {**cfg, "parallelism": {**par, "pipeline_parallel_schedule": "1F1B"}}
    with pytest.raises(UnexpressiblePlan) as info:
        tt_export.check_config(single, world_size=64, num_layers=80)
    assert info.value.rule == "torchtitan.pipeline-stages-per-rank"


# ---- DeepSpeed ---------------------------------------------------------------------------
def test_deepspeed_rules() -> None:
    problem, row = training(LLAMA, data=32, pipeline=2, zero_stage=3, stage_layers=[40, 40])
    assert refused(problem, row, "deepspeed").rule == "deepspeed.zero-with-pipeline"
    problem, row = training(LLAMA, data=32, pipeline=2, zero_stage=2, stage_layers=[40, 40])
    assert refused(problem, row, "deepspeed").rule == "deepspeed.zero-with-pipeline"
    problem, row = training(
        LLAMA, data=8, pipeline=8, zero_stage=1, stage_layers=[8, 10, 10, 10, 11, 11, 11, 9]
    )
    assert refused(problem, row, "deepspeed").rule == "deepspeed.pipeline-partition"
    problem, row = training(
        LLAMA, data=8, pipeline=4, virtual_pipeline=2, zero_stage=1, stage_layers=[10] * 8
    )
    assert refused(problem, row, "deepspeed").rule == "deepspeed.interleaved-pipeline"
    problem, row = training(small_model(), data=8, tensor=8, sequence_parallel=True)
    assert refused(problem, row, "deepspeed").rule == "deepspeed.autotp-heads"
    # tensor × pipeline: refused with the searches that give a plan this export launches
    problem, row = training(
        LLAMA, data=4, tensor=2, pipeline=8, zero_stage=1, stage_layers=[10] * 8
    )
    err = refused(problem, row, "deepspeed")
    assert err.rule == "deepspeed.tensor-with-pipeline"
    assert "pipeline: 1}" in str(err) and "tensor: 1}" in str(err)
    # ZeRO-1 with an even pipeline split is fine: stages, partition, batch triple
    problem, row = training(
        LLAMA, data=8, pipeline=8, zero_stage=1, micro_batch_size=2, stage_layers=[10] * 8
    )
    cfg = json.loads(export_plan(row, problem, "deepspeed").content)
    assert cfg["pipeline"]["stages"] == 8 and cfg["gradient_accumulation_steps"] == 64


def test_deepspeed_checker_on_hand_made_configs() -> None:
    good = {
        "train_batch_size": 1024,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 8,
        "zero_optimization": {"stage": 1},
        "bf16": {"enabled": True},
        "tensor_parallel": {"autotp_size": 8},
    }
    ds_export.check_config(good, world_size=512)  # dp = 64: 2 × 8 × 64 = 1024
    with pytest.raises(UnexpressiblePlan) as info:
        ds_export.check_config(good, world_size=256)
    assert info.value.rule == "deepspeed.batch-triple"
    with pytest.raises(UnexpressiblePlan) as info:
        ds_export.check_config({**good, "fp16": {"enabled": True}}, world_size=512)
    assert info.value.rule == "deepspeed.bf16-or-fp16"
    ep = {
        **good,
        "tensor_parallel": {"autotp_size": 1},
        "gradient_accumulation_steps": 1,
        "train_micro_batch_size_per_gpu": 2,
        "expert_parallel": {"enabled": True, "autoep_size": 3},
    }
    with pytest.raises(UnexpressiblePlan) as info:
        ds_export.check_config(ep, world_size=512)
    assert info.value.rule == "deepspeed.autoep-grid"


# ---- vLLM and SGLang ---------------------------------------------------------------------
def _instance(tensor: int, pipeline: int = 1, expert: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "role": "both",
        "count": 1,
        "max_batch_size": 64,
        "parallelism": {"tensor": tensor, "pipeline": pipeline, "expert": expert},
        **extra,
    }


def test_vllm_heads_must_divide_by_tensor_size() -> None:
    problem, row = serving(LLAMA, [_instance(3)])  # 64 heads over 3 GPUs
    err = refused(problem, row, "vllm")
    assert err.rule == "vllm.heads-divisible-by-tp"
    assert "64" in err.detail and "3" in err.detail
    # SGLang refuses the same plan by its own rule
    assert refused(problem, row, "sglang").rule == "sglang.heads-divisible-by-attention-tp"


def test_kv_heads_must_split_or_replicate_evenly() -> None:
    model = small_model()  # 12 heads, 4 KV heads: tp 6 splits the heads but not the KV heads
    problem, row = serving(model, [_instance(6)])
    assert refused(problem, row, "vllm").rule == "vllm.kv-heads-by-tp"
    assert refused(problem, row, "sglang").rule == "sglang.kv-heads-by-attention-tp"
    # tp 2 splits 4 KV heads, tp 12 would replicate them 3 times: both fine for vLLM
    vl_export.check_args(
        [
            "m",
            "--tensor-parallel-size",
            "2",
            "--max-num-seqs",
            "8",
            "--max-num-batched-tokens",
            "8192",
            "--max-model-len",
            "4096",
        ],
        model,
    )
    vl_export.check_args(
        [
            "m",
            "--tensor-parallel-size",
            "12",
            "--max-num-seqs",
            "8",
            "--max-num-batched-tokens",
            "8192",
            "--max-model-len",
            "4096",
        ],
        model,
    )


def test_vllm_scheduler_rules() -> None:
    base = ["m", "--tensor-parallel-size", "8", "--max-num-seqs", "256", "--max-model-len", "8192"]
    with pytest.raises(UnexpressiblePlan) as info:
        vl_export.check_args(
            base + ["--enable-chunked-prefill", "--max-num-batched-tokens", "128"], LLAMA
        )
    assert info.value.rule == "vllm.batched-tokens-vs-seqs"
    with pytest.raises(UnexpressiblePlan) as info:
        vl_export.check_args(
            base + ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096"], LLAMA
        )
    assert info.value.rule == "vllm.batched-tokens-vs-model-len"
    with pytest.raises(UnexpressiblePlan) as info:
        vl_export.check_args(
            base + ["--max-num-batched-tokens", "8192", "--enable-expert-parallel"], LLAMA
        )
    assert info.value.rule == "vllm.expert-parallel-needs-moe"


def test_sglang_dp_attention_rules() -> None:
    with pytest.raises(UnexpressiblePlan) as info:
        sg_export.check_args(["--tp-size", "6", "--dp-size", "4", "--enable-dp-attention"], MIXTRAL)
    assert info.value.rule == "sglang.tp-divisible-by-dp"
    with pytest.raises(UnexpressiblePlan) as info:
        sg_export.check_args(["--tp-size", "8", "--dp-size", "2"], MIXTRAL)
    assert info.value.rule == "sglang.dp-attention"
    sg_export.check_args(
        ["--tp-size", "16", "--dp-size", "2", "--enable-dp-attention", "--ep-size", "16"], MIXTRAL
    )


def test_unknown_format_lists_the_formats() -> None:
    from app.exports import FORMATS, UnknownFormat

    problem, row = training(LLAMA, data=8, tensor=8, sequence_parallel=True)
    with pytest.raises(UnknownFormat) as info:
        export_plan(row, problem, "horovod")
    assert info.value.status == 422
    assert (
        info.value.extensions["formats"]
        == list(FORMATS)
        == [
            "megatron",
            "torchtitan",
            "deepspeed",
            "vllm",
            "sglang",
            "slurm",
            "kubernetes",
            "trtllm",
        ]
    )


def test_launchers_refuse_plans_that_do_not_fill_whole_nodes() -> None:
    problem, row = training(small_model(), nodes=2, data=12, gbs=96)
    for fmt in ("megatron", "slurm", "kubernetes"):
        assert refused(problem, row, fmt).rule == "whole-nodes"
    problem, row = training(small_model(), nodes=1, data=16, gbs=96)
    assert refused(problem, row, "slurm").rule == "world-size"


# ---- TensorRT-LLM ------------------------------------------------------------------------
def test_trtllm_command_and_options_follow_the_plan() -> None:
    from app.exports import trtllm as tt
    from specs.serving import ServingInstance, ServingWorkload

    workload = ServingWorkload.model_validate(
        {"kind": "serving", "prompt_tokens": 1000, "output_tokens": 200, "precision": "fp8",
         "slo": {"ttft_ms": 500}}
    )  # fmt: skip
    inst = ServingInstance.model_validate(
        {"role": "both", "parallelism": {"tensor": 2, "expert": 4}, "max_batch_size": 64,
         "chunk_size": 2048}
    )  # fmt: skip
    args = tt.instance_args("model", inst, workload)
    flags = dict(zip(args[1::2], args[2::2], strict=False))
    assert flags["--tp_size"] == "8" and flags["--ep_size"] == "8"
    assert flags["--max_num_tokens"] == "2048" and flags["--max_batch_size"] == "64"
    assert flags["--max_seq_len"] == "1280"  # 1000 + 200, a multiple of 256
    options = tt.llm_api_options(inst, workload, {"enable_chunked_prefill": True})
    assert options["enable_attention_dp"] is True
    assert options["enable_chunked_prefill"] is True
    assert options["kv_cache_config"] == {"enable_block_reuse": True, "dtype": "fp8"}
    no_chunk = ServingInstance.model_validate({"role": "both", "max_batch_size": 16})
    plain = dict(zip(*[iter(tt.instance_args("m", no_chunk, workload)[1:])] * 2, strict=False))
    assert plain["--max_num_tokens"] == str(tt.DEFAULT_MAX_NUM_TOKENS)


# ---- mixed clusters --------------------------------------------------------------------------
def shell_words(text: str) -> list[str]:
    """Words as the shell reads them (backslash-newline continues a line, `#` comments)."""
    import shlex

    return shlex.split(text.replace("\\\n", " "), comments=True)


def _across_groups() -> tuple[dict[str, Any], dict[str, Any]]:
    """Llama-3-70B on one H100 node ("new") and one A100 node ("old"): tensor 8, two
    stages, the A100 stage first with fewer layers."""
    from app.services import planning
    from specs.cluster import ClusterSpec

    cluster = planning.resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {"accelerator": "h100-sxm", "num_nodes": 1, "name": "new"},
                    {"accelerator": "a100-80gb", "num_nodes": 1, "name": "old"},
                ]
            }
        )
    )
    problem, row = training(LLAMA, nodes=2, data=1, tensor=8, pipeline=2, gbs=64)
    problem = {**problem, "cluster": cluster.model_dump(mode="json")}
    plan = {**row["plan"], "stage_layers": [30, 50], "stage_groups": ["old", "new"]}
    return problem, {**row, "plan": plan}


def test_a_plan_across_node_groups_launches_with_megatron_and_slurm() -> None:
    problem, row = _across_groups()
    mg = export_plan(row, problem, "megatron")
    flags = parse_flags(mg.args, mg_export.SWITCHES)
    # the uneven split in Megatron's flags: 30 layers on the first stage, 50 on the last
    assert flags["--decoder-first-pipeline-num-layers"] == "30"
    assert flags["--decoder-last-pipeline-num-layers"] == "50"
    words = shell_words(mg.content)
    assert words[words.index("--node-rank") + 1] == "${NODE_RANK}"
    assert "--rdzv-backend" not in words  # fixed node ranks: a static rendezvous
    assert mg.notes[-2:] == [
        "node ranks 0-0: group old (1 × a100-80gb), pipeline stages 0-0",
        "node ranks 1-1: group new (1 × h100-sxm), pipeline stages 1-1",
    ]
    sl = export_plan(row, problem, "slurm")
    lines = sl.content.splitlines()
    assert lines.count("#SBATCH hetjob") == 1
    assert [x for x in lines if x.startswith("#SBATCH --nodes=")] == ["#SBATCH --nodes=1"] * 2
    assert "$SLURM_JOB_NODELIST_HET_GROUP_0" in sl.content
    assert sl.args[:2] == ["srun", "--het-group=0,1"]
    task = shell_words(sl.args[-1])
    assert task[task.index("--node-rank") + 1] == "$SLURM_PROCID"
    assert task[task.index("--decoder-first-pipeline-num-layers") + 1] == "30"


def test_launchers_without_node_group_placement_refuse_a_plan_across_groups() -> None:
    problem, row = _across_groups()
    for fmt in ("torchtitan", "deepspeed"):
        info = refused(problem, row, fmt)
        assert info.rule == "homogeneous-nodes", fmt
        assert "new, old" in str(info) and "megatron or slurm" in str(info)
    # a group visited twice cannot take one block of node ranks
    twice = {**row, "plan": {**row["plan"], "parallelism": {**row["plan"]["parallelism"],
             "pipeline": 3}, "stage_layers": [20, 30, 30], "stage_groups": ["old", "new", "old"]}}  # fmt: skip
    problem3 = {**problem, "cluster": {**problem["cluster"]}}
    info = refused(problem3, twice, "megatron")
    assert info.rule == "megatron.stage-blocks"


def test_a_plan_across_node_groups_is_one_jobset_with_a_job_per_group() -> None:
    import yaml

    problem, row = _across_groups()
    k8 = export_plan(row, problem, "kubernetes")
    (jobset,) = yaml.safe_load_all(k8.content)
    assert jobset["kind"] == "JobSet"
    jobs = jobset["spec"]["replicatedJobs"]
    assert [j["name"] for j in jobs] == ["g0", "g1"]
    for job, group, first in zip(jobs, ("old", "new"), (0, 1), strict=True):
        pod = job["template"]["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"meshplan.dev/node-group": group}
        env = {e["name"]: e["value"] for e in pod["containers"][0]["env"] if "value" in e}
        assert env["GROUP_FIRST_NODE"] == str(first)
        script = pod["containers"][0]["command"][2]
        assert "NODE_RANK=$((GROUP_FIRST_NODE + JOB_COMPLETION_INDEX))" in script
        assert "--master-addr" in script and "-g0-0-0." in script
    with pytest.raises(UnexpressiblePlan) as info:
        export_plan(row, problem, "kubernetes", {"framework": "torchtitan"})
    assert info.value.rule in ("kubernetes.framework", "torchtitan.framework")


def test_a_plan_on_one_group_of_a_mixed_cluster_exports_as_on_that_group() -> None:
    problem, row = _across_groups()
    plan = {**row["plan"], "stage_layers": [40, 40], "stage_groups": ["new", "new"],
            "parallelism": {**row["plan"]["parallelism"], "tensor": 4}}  # fmt: skip
    sl = export_plan({**row, "plan": plan}, problem, "slurm")
    assert "hetjob" not in sl.content and "HET_GROUP" not in sl.content
    assert "#SBATCH --nodes=1" in sl.content
    assert "# node group new of a mixed cluster" in sl.content
    k8s = export_plan({**row, "plan": plan}, problem, "kubernetes")
    (job,) = [d for d in yaml.safe_load_all(k8s.content) if d["kind"] == "PyTorchJob"]
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        assert spec["template"]["spec"]["nodeSelector"] == {"meshplan.dev/node-group": "new"}
    mg = export_plan({**row, "plan": plan}, problem, "megatron")
    assert any(n.startswith("the plan runs on node group new alone") for n in mg.notes)
