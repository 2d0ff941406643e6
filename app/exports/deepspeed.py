"""DeepSpeed export: the JSON config (`ds_config.json`) of a training plan and the launcher
command that consumes it.

Keys and rules follow deepspeedai/DeepSpeed `deepspeed/runtime/config.py`
(`DeepSpeedConfig._batch_assertion`: train_batch_size = micro batch × gradient accumulation
× data-parallel world size; bf16 and fp16 exclusive; `get_pipeline_config`),
`deepspeed/runtime/pipe/engine.py` ("ZeRO-2 and ZeRO-3 are incompatible with pipeline
parallelism"), `deepspeed/runtime/pipe/module.py` (a PipelineModule partitions its layer list
by a method, uniform by default here; one stage per rank, no interleaving),
`deepspeed/runtime/tensor_parallel/config.py` (AutoTP training, `tensor_parallel.autotp_size`)
and `deepspeed/module_inject/auto_ep_folding.py` (AutoEP, `expert_parallel.autoep_size`:
expert tensor size 1, ep × etp tiles a pipeline stage, AutoTP folding only without pipeline).

What a DeepSpeed config cannot express is refused: tensor parallelism together with pipeline
parallelism (AutoTP shards a model DeepSpeed wraps itself and takes over the model-parallel
groups, which a PipelineModule's topology owns), context parallelism other than Ulysses
(DeepSpeed's sequence parallelism is DeepSpeed-Ulysses, Jacobs et al. 2023: a plan with
`context_parallel_algorithm` ulysses maps to the config's `sequence_parallel_size`, the
attention wrapped in DeepSpeed's all-to-all attention; not with a PipelineModule),
interleaved schedules and pipeline splits other than an even (±1 layer) one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from app.exports.base import ExportContext, ExportResult, node_layout, require
from app.exports.offload import NVME_PATH, check_offload
from app.exports.schedules import require_vocab_parallel
from specs.model import ModelSpec
from specs.plan import TrainingPlan
from specs.workload import TrainingWorkload

FORMAT = "deepspeed"


def build_config(
    model: ModelSpec, plan: TrainingPlan, workload: TrainingWorkload
) -> tuple[dict[str, Any], list[str]]:
    p = plan.parallelism
    notes: list[str] = []
    require_vocab_parallel(FORMAT, "deepspeed", plan)
    if p.context > 1:
        require(
            plan.context_parallel_algorithm == "ulysses",
            FORMAT,
            "deepspeed.context-parallel",
            f"DeepSpeed's sequence parallelism is Ulysses (all-to-all over heads); it has no "
            f"{plan.context_parallel_algorithm} context parallelism",
        )
        require(
            p.pipeline == 1,
            FORMAT,
            "deepspeed.ulysses-with-pipeline",
            "DeepSpeed-Ulysses (sequence_parallel_size) runs without a PipelineModule",
        )
        kv = model.num_attention_heads if model.mla is not None else model.kv_heads
        require(
            (model.num_attention_heads // p.tensor) % p.context == 0
            and (kv // p.tensor) % p.context == 0,
            FORMAT,
            "deepspeed.ulysses-heads",
            f"Ulysses splits heads over the sequence-parallel group: "
            f"{model.num_attention_heads} query and {kv} KV heads over tensor {p.tensor} × "
            f"sequence_parallel_size {p.context}",
        )
    require(
        p.virtual_pipeline == 1,
        FORMAT,
        "deepspeed.interleaved-pipeline",
        "DeepSpeed's PipelineEngine runs one stage per rank (no interleaved 1F1B)",
    )
    require(
        not (p.tensor > 1 and p.pipeline > 1),
        FORMAT,
        "deepspeed.tensor-with-pipeline",
        "a DeepSpeed config expresses tensor parallelism only as AutoTP "
        "(tensor_parallel.autotp_size), which does not combine with a PipelineModule; "
        "tensor × pipeline needs Megatron-DeepSpeed's own model-parallel groups. For a "
        "plan this export launches, search with constraints.fixed = {framework: "
        "'deepspeed', pipeline: 1} (tensor parallelism as AutoTP) or {framework: "
        "'deepspeed', tensor: 1} (pipeline stages without tensor parallelism)",
    )
    dp = p.data
    mbs = plan.micro_batch_size
    gbs = workload.global_batch_size
    require(
        gbs % (mbs * dp) == 0,
        FORMAT,
        "deepspeed.batch-triple",
        f"train_batch_size {gbs} is not micro batch {mbs} × gradient accumulation × data "
        f"parallel size {dp}",
    )
    cfg: dict[str, Any] = {
        "train_batch_size": gbs,
        "train_micro_batch_size_per_gpu": mbs,
        "gradient_accumulation_steps": gbs // (mbs * dp),
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "zero_optimization": {
            "stage": plan.zero_stage,
            "offload_optimizer": {"device": "none"},
            "offload_param": {"device": "none"},
            "overlap_comm": True,
            "contiguous_gradients": True,
        },
        "bf16": {"enabled": workload.precision in ("bf16", "fp8")},
        "fp16": {"enabled": workload.precision == "fp16"},
    }
    if plan.zero_stage < 3:
        del cfg["zero_optimization"]["offload_param"]
    check_offload(FORMAT, "deepspeed", model, plan)
    for field, device in (
        ("offload_optimizer", plan.offload.optimizer),
        ("offload_param", plan.offload.parameters),
    ):
        if device != "none":
            block: dict[str, Any] = {"device": device, "pin_memory": True}
            if device == "nvme":
                block["nvme_path"] = NVME_PATH
            cfg["zero_optimization"][field] = block
    if "nvme" in (plan.offload.optimizer, plan.offload.parameters):
        notes.append(
            f"NVMe offload (ZeRO-Infinity) reads and writes {NVME_PATH}: mount the node's "
            "local NVMe drives there (aio settings left at DeepSpeed's defaults)"
        )
    if workload.precision == "fp8":
        notes.append(
            "fp8 GEMMs come from Transformer Engine in the model code; the config "
            "keeps bf16 weights"
        )
    if p.context > 1:
        cfg["sequence_parallel_size"] = p.context
        notes.append(
            f"sequence_parallel_size {p.context} is DeepSpeed-Ulysses: the model's attention "
            "must run through DeepSpeed's all-to-all attention (UlyssesSPAttentionHF."
            "register_with_transformers, or deepspeed.sequence.layer.DistributedAttention), "
            "its mpu passed to deepspeed.initialize"
        )
    if p.tensor > 1:
        require(
            model.num_attention_heads % p.tensor == 0,
            FORMAT,
            "deepspeed.autotp-heads",
            f"AutoTP splits attention heads: {model.num_attention_heads} heads over "
            f"{p.tensor} ranks",
        )
        cfg["tensor_parallel"] = {"autotp_size": p.tensor}
    if p.expert > 1:
        cfg["expert_parallel"] = {
            "enabled": True,
            "autoep_size": p.expert,
            "expert_tensor_parallel_size": p.expert_tensor,
        }
    if p.pipeline > 1:
        layers = list(plan.stage_layers or [])
        if layers:
            require(
                max(layers) - min(layers) <= 1,
                FORMAT,
                "deepspeed.pipeline-partition",
                f"DeepSpeed's PipelineModule partitions layers by a method, not by explicit "
                f"counts; only an even split (±1 layer) is reproducible, the plan has "
                f"{layers}",
            )
        cfg["pipeline"] = {
            "stages": p.pipeline,
            "partition": "uniform",
            "activation_checkpoint_interval": 1 if plan.recompute == "full" else 0,
        }
    if plan.recompute != "none":
        cfg["activation_checkpointing"] = {
            "partition_activations": False,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": plan.offload.activations > 0.0,
        }
        if plan.recompute == "selective":
            notes.append(
                "selective recompute (attention core only) is chosen in the model code"
                "; DeepSpeed's activation checkpointing wraps what the model marks"
            )
    check_config(cfg, world_size=p.world_size)
    return cfg, notes


def check_config(cfg: Mapping[str, Any], *, world_size: int) -> None:
    """DeepSpeed's rules on a config for a job of `world_size` GPUs (the data-parallel size
    is world / (autotp_size × pipeline stages × sequence_parallel_size): the ranks of a
    sequence-parallel group share one micro-batch)."""
    tp = int(cfg.get("tensor_parallel", {}).get("autotp_size", 1) or 1)
    pipeline = cfg.get("pipeline")
    pp = int(pipeline.get("stages", 1)) if isinstance(pipeline, Mapping) else 1
    sp = int(cfg.get("sequence_parallel_size", 1) or 1)
    require(
        world_size % (tp * pp * sp) == 0,
        FORMAT,
        "deepspeed.world-size",
        f"world size {world_size} is not divisible by autotp_size × stages × "
        f"sequence_parallel_size = {tp * pp * sp}",
    )
    require(
        sp == 1 or pp == 1,
        FORMAT,
        "deepspeed.ulysses-with-pipeline",
        "DeepSpeed-Ulysses (sequence_parallel_size) runs without a PipelineModule",
    )
    dp = world_size // (tp * pp * sp)
    train = cfg.get("train_batch_size")
    micro = cfg.get("train_micro_batch_size_per_gpu")
    gas = cfg.get("gradient_accumulation_steps")
    require(
        all(isinstance(x, int) and x > 0 for x in (train, micro, gas)),
        FORMAT,
        "deepspeed.batch-triple",
        "train_batch_size, train_micro_batch_size_per_gpu and "
        "gradient_accumulation_steps must be positive integers",
    )
    assert isinstance(train, int) and isinstance(micro, int) and isinstance(gas, int)
    require(
        train == micro * gas * dp,
        FORMAT,
        "deepspeed.batch-triple",
        f"train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * "
        f"world_size {train} != {micro} * {gas} * {dp}",
    )
    stage = int(cfg.get("zero_optimization", {}).get("stage", 0))
    require(0 <= stage <= 3, FORMAT, "deepspeed.zero-stage", "maximum supported ZeRO stage is 3")
    if pp > 1:
        require(
            stage < 2,
            FORMAT,
            "deepspeed.zero-with-pipeline",
            "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
        )
        require(
            tp == 1,
            FORMAT,
            "deepspeed.tensor-with-pipeline",
            "AutoTP does not combine with a PipelineModule",
        )
    bf16 = bool(cfg.get("bf16", {}).get("enabled", False))
    fp16 = bool(cfg.get("fp16", {}).get("enabled", False))
    require(
        not (bf16 and fp16),
        FORMAT,
        "deepspeed.bf16-or-fp16",
        "bfloat16 and fp16 modes cannot be simultaneously enabled",
    )
    ep_cfg = cfg.get("expert_parallel")
    if isinstance(ep_cfg, Mapping) and ep_cfg.get("enabled"):
        ep = int(ep_cfg.get("autoep_size", 1))
        etp = int(ep_cfg.get("expert_tensor_parallel_size", 1))
        require(
            etp == 1,
            FORMAT,
            "deepspeed.autoep-expert-tensor",
            "expert_parallel.expert_tensor_parallel_size must be 1 (AutoEP)",
        )
        stage_size = world_size // pp
        require(
            stage_size % (ep * etp) == 0,
            FORMAT,
            "deepspeed.autoep-grid",
            f"autoep_size × expert_tensor_parallel_size ({ep * etp}) must divide the stage "
            f"size ({stage_size})",
        )


def export(ctx: ExportContext) -> ExportResult:
    plan, workload = ctx.training_plan(FORMAT)
    layout = node_layout(FORMAT, ctx.cluster, plan.parallelism.world_size)
    cfg, notes = build_config(ctx.model, plan, workload)
    args = [
        "deepspeed",
        "--num_nodes",
        str(layout.num_nodes),
        "--num_gpus",
        str(layout.gpus_per_node),
        "${TRAIN_SCRIPT}",
        "--deepspeed",
        "--deepspeed_config",
        "ds_config.json",
    ]
    if plan.parallelism.pipeline > 1:
        notes.append(
            f"build the model as a deepspeed.pipe.PipelineModule with num_stages="
            f"{plan.parallelism.pipeline} and partition_method='uniform'"
        )
    return ExportResult(
        format=FORMAT,
        filename="ds_config.json",
        content=json.dumps(cfg, indent=2) + "\n",
        args=args,
        env={"TRAIN_SCRIPT": "train.py"},
        notes=notes,
    )
