"""torchtitan export: the v0.2-style TOML job config (`[job]`, `[model]`, `[training]`,
`[parallelism]`, `[activation_checkpoint]`) of a training plan.

Keys and rules follow pytorch/torchtitan v0.2 `torchtitan/config/job_config.py`,
`torchtitan/distributed/parallel_dims.py` (`_validate`: dp_replicate × dp_shard × cp × tp ×
pp = world; etp is 1 or tp; `build_mesh`: efsdp = dp_shard × cp × tp / (etp × ep) ranks),
`torchtitan/distributed/pipeline_parallel.py` (stages per rank by schedule, local batch by
microbatch size), `torchtitan/train.py` (global batch = local batch × data degree ×
gradient accumulation) and `torchtitan/models/llama3/infra/parallelize.py` (seq_len divisible
by tp × 2 × cp; DDP only as 1-D parallelism).

Mapping of the plan's data parallelism (torchtitan has FSDP2 and DDP, no ZeRO-1/2 optimizer):
- ZeRO-3 → `data_parallel_shard_degree = data` with `fsdp_reshard_after_forward = "always"`;
- ZeRO-1/2 → `data_parallel_shard_degree = data` with `fsdp_reshard_after_forward = "never"`:
  gradients and optimizer states sharded, parameters gathered once per step and kept until
  the backward pass (ZeRO-2's memory and communication volume; for ZeRO-1 plans it needs no
  more memory than the plan);
- ZeRO-0 → `data_parallel_replicate_degree = data` (DDP), which torchtitan allows only when
  data parallelism is the only parallel dimension.
Context parallelism (`context_parallel_degree`) is PyTorch's `context_parallel`, whose K/V
shards rotate by `context_parallel_rotate_method` (v0.2 job_config: "allgather" gathers all
K/V shards after the first sub-SDPA, "alltoall" shuffles them step by step): ring →
"alltoall", all_gather → "allgather"; Ulysses and the hybrid (head split) are refused.
torchtitan's tensor parallelism always shards norms over the sequence (Megatron-style
sequence parallelism). Pipeline stages are listed exactly with `module_fqns_per_model_part`
(chunk i runs on pipeline rank i mod pp, torchtitan's "loop" stage order).

Architecture: a preset runs as torchtitan's built-in flavor only when that flavor's RoPE
base, norm ε and rope scaling equal the model's (`FLAVOR_ARGS`); otherwise the export names
a flavor to register and the file header gives its arguments as torchtitan spells them
(`model_args`). What a torchtitan model family cannot express (a sliding window, rope
scaling it does not implement) is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tomli_w

from app.exports.base import (
    ExportContext,
    ExportResult,
    UnexpressiblePlan,
    hf_model_id,
    node_layout,
    require,
    torchrun_args,
)
from app.exports.offload import check_offload
from app.exports.schedules import require_vocab_parallel, schedule_options
from specs.model import ModelSpec
from specs.plan import TrainingPlan
from specs.workload import TrainingWorkload

FORMAT = "torchtitan"

TORCHTITAN_FLAVORS: dict[str, tuple[str, str]] = {
    "llama3-8b": ("llama3", "8B"),
    "llama3-70b": ("llama3", "70B"),
    "llama3.1-8b": ("llama3", "8B"),
    "llama3.1-70b": ("llama3", "70B"),
    "llama3-405b": ("llama3", "405B"),
    "qwen3-30b-a3b": ("qwen3", "30B-A3B"),
    "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
    "deepseek-v3": ("deepseek_v3", "671B"),
}
"""torchtitan's built-in (model name, flavor) of the same shape as a preset; the flavor is
used only when its architecture arguments (`FLAVOR_ARGS`) equal the model's too."""

_LLAMA31_SCALING = {
    "scaling_factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
FLAVOR_ARGS: dict[tuple[str, str], dict[str, Any]] = {
    ("llama3", "8B"): {
        "rope_theta": 500000.0,
        "norm_eps": 1e-5,
        "rope_scaling_args": _LLAMA31_SCALING,
    },
    ("llama3", "70B"): {
        "rope_theta": 500000.0,
        "norm_eps": 1e-5,
        "rope_scaling_args": _LLAMA31_SCALING,
    },
    ("llama3", "405B"): {
        "rope_theta": 500000.0,
        "norm_eps": 1e-5,
        "rope_scaling_args": _LLAMA31_SCALING,
    },
    ("qwen3", "30B-A3B"): {"rope_theta": 1000000.0, "norm_eps": 1e-6},
    ("qwen3", "235B-A22B"): {"rope_theta": 5000000.0, "norm_eps": 1e-6},
    ("deepseek_v3", "671B"): {
        "rope_theta": 10000.0,
        "norm_eps": 1e-5,
        "rope_factor": 40.0,
        "original_seq_len": 4096,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
    },
}
"""The architecture arguments of torchtitan v0.2.2's built-in flavors
(`torchtitan/models/<name>/__init__.py` and `model/args.py` defaults: llama3's
`RoPEScalingArgs` always applies Llama 3.1 scaling; qwen3 235B-A22B sets rope_theta 5e6 where
Qwen/Qwen3-235B-A22B has 1e6; deepseek_v3 keeps norm_eps 1e-5 where DeepSeek-V3 has 1e-6).
The exports_real test checks this table against torchtitan itself."""


def model_args(model: ModelSpec, name: str) -> dict[str, Any]:
    """The model's architecture arguments without parameters, as torchtitan v0.2's
    `TransformerModelArgs` (llama3), `Qwen3ModelArgs` and `DeepSeekV3ModelArgs` spell them.

    llama3 always applies its `RoPEScalingArgs` (`precompute_freqs_cis`): a model without
    scaling gets scaling_factor 1, which leaves every frequency unchanged. deepseek_v3 takes
    YaRN as rope_factor/original_seq_len/beta_fast/beta_slow and one `mscale` for the
    softmax temperature (Hugging Face's mscale_all_dim; the rotary tables carry
    mscale/mscale_all_dim, 1 when they are equal). Raises `UnexpressiblePlan` for what the
    family cannot express: rope scaling other than llama3 (llama3), any rope scaling (qwen3),
    other than yarn (deepseek_v3), a sliding window (none of them)."""
    require(
        model.sliding_window is None,
        FORMAT,
        "torchtitan.sliding-window",
        f"torchtitan's {name} model has no sliding-window attention "
        f"(sliding_window {model.sliding_window})",
    )
    rs = model.rope_scaling
    out: dict[str, Any] = {
        "rope_theta": model.rope_base,
        "norm_eps": model.norm_epsilon if model.norm_epsilon is not None else 1e-5,
    }
    if model.norm_epsilon is None and name == "qwen3":
        out["norm_eps"] = 1e-6  # Qwen3ModelArgs' default: unknown keeps torchtitan's own
    if name == "llama3":
        require(
            rs is None or rs.type == "llama3",
            FORMAT,
            "torchtitan.rope-scaling",
            f"torchtitan's llama3 model has llama3 rope scaling only, not {rs and rs.type}",
        )
        scaling = (
            {
                "scaling_factor": float(rs.factor),
                "low_freq_factor": float(rs.low_freq_factor or 0),
                "high_freq_factor": float(rs.high_freq_factor or 0),
                "original_max_position_embeddings": rs.original_max_position_embeddings,
            }
            if rs is not None
            else {**_LLAMA31_SCALING, "scaling_factor": 1.0}
        )
        out["rope_scaling_args"] = scaling
    elif name == "qwen3":
        require(
            rs is None,
            FORMAT,
            "torchtitan.rope-scaling",
            f"torchtitan's qwen3 model has no rope scaling ({rs and rs.type} given)",
        )
    else:
        require(
            rs is None or rs.type == "yarn",
            FORMAT,
            "torchtitan.rope-scaling",
            f"torchtitan's deepseek_v3 model takes yarn rope scaling only, not {rs and rs.type}",
        )
        if rs is not None:
            require(
                rs.mscale is None or rs.mscale_all_dim is None or rs.mscale == rs.mscale_all_dim,
                FORMAT,
                "torchtitan.yarn-mscale",
                "torchtitan's deepseek_v3 has one mscale; the model's mscale "
                f"({rs.mscale}) and mscale_all_dim ({rs.mscale_all_dim}) differ",
            )
        out |= {
            "rope_factor": float(rs.factor) if rs else 1.0,
            "original_seq_len": (rs.original_max_position_embeddings if rs else None) or 4096,
            "beta_fast": float(rs.beta_fast or 32) if rs else 32.0,
            "beta_slow": float(rs.beta_slow or 1) if rs else 1.0,
            "mscale": float(rs.mscale_all_dim or rs.mscale or 1.0) if rs else 1.0,
        }
    return out


SINGLE_STAGE_SCHEDULES = frozenset({"1F1B", "GPipe"})
MULTI_STAGE_SCHEDULES = frozenset(
    {"Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"}
)
AC_MODES = frozenset({"none", "selective", "full", "memory_budget"})


def _python(value: Any) -> str:
    """A model argument as Python source (the `RoPEScalingArgs` dataclass for llama3's)."""
    if isinstance(value, dict):
        inner = ", ".join(f"{k}={v!r}" for k, v in value.items())
        return f"RoPEScalingArgs({inner})"
    return repr(value)


def model_section(model: ModelSpec, precision: str) -> tuple[dict[str, Any], list[str]]:
    """`[model]`: torchtitan's model name and flavor: the built-in flavor when one has the
    model's shape and architecture arguments (`FLAVOR_ARGS`), otherwise the family closest
    in architecture and a flavor named after the model, to register with `model_args`."""
    notes: list[str] = []
    known = TORCHTITAN_FLAVORS.get(model.name.lower())
    if known is not None:
        name = known[0]
    elif model.mla is not None:
        name = "deepseek_v3"
    elif model.qk_norm or model.moe is not None:
        name = "qwen3"
    else:
        name = "llama3"
    args = model_args(model, name)
    flavor = model.name
    if known is not None and FLAVOR_ARGS[known] == args:
        flavor = known[1]
    elif known is not None:
        differ = sorted(k for k in args if FLAVOR_ARGS[known].get(k) != args[k])
        notes.append(
            f"torchtitan's built-in flavor {known[1]!r} of {name!r} has this shape but differs "
            f"in {', '.join(differ)}: register flavor {flavor!r} with the model arguments in "
            "the file header"
        )
    else:
        notes.append(
            f"torchtitan has no built-in flavor for {model.name}: register flavor "
            f"{flavor!r} of model {name!r} with the dimensions and model arguments in the "
            "file header"
        )
    if model.attention_bias or model.mlp_bias:
        notes.append(f"torchtitan's {name} model has no linear biases; the model has them")
    hf_id = hf_model_id(model)
    assets = "./assets/hf/" + (hf_id.split("/")[-1] if hf_id else model.name)
    section: dict[str, Any] = {"name": name, "flavor": flavor, "hf_assets_path": assets}
    if precision == "fp8":
        section["converters"] = ["quantize.linear.float8"]
    return section, notes


def build_config(
    model: ModelSpec,
    plan: TrainingPlan,
    workload: TrainingWorkload,
    *,
    world_size: int,
    description: str,
) -> tuple[dict[str, Any], list[str]]:
    """The TOML document (as a dict) and the notes of the mapping."""
    p = plan.parallelism
    notes: list[str] = []
    require_vocab_parallel(FORMAT, "torchtitan", plan)
    require(
        workload.precision != "fp16",
        FORMAT,
        "torchtitan.precision",
        "torchtitan's mixed precision parameters are bfloat16 or float32 (no fp16)",
    )
    if plan.zero_stage == 0:
        replicate, shard, reshard = p.data, 1, "default"
    else:
        replicate, shard = 1, p.data
        reshard = "always" if plan.zero_stage == 3 else "never"
        if plan.zero_stage in (1, 2):
            notes.append(
                f"ZeRO-{plan.zero_stage} maps to FSDP2 with fsdp_reshard_after_forward"
                " = never (ZeRO-2 sharding)"
            )
    if p.expert > 1:
        require(
            p.expert_tensor in (1, p.tensor),
            FORMAT,
            "torchtitan.expert-tensor-degree",
            f"torchtitan supports expert tensor parallel degree 1 or tp ({p.tensor}); the "
            f"plan has {p.expert_tensor}",
        )
    rotate = None
    if p.context > 1:
        rotate = ROTATE_METHODS.get(plan.context_parallel_algorithm)
        require(
            rotate is not None,
            FORMAT,
            "torchtitan.context-parallel-algorithm",
            f"torchtitan's context parallelism rotates K/V shards (ring: alltoall, "
            f"all_gather: allgather); it has no {plan.context_parallel_algorithm} head split",
        )
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": reshard,
        "tensor_parallel_degree": p.tensor,
        "context_parallel_degree": p.context,
        "pipeline_parallel_degree": p.pipeline,
        "expert_parallel_degree": p.expert,
        "expert_tensor_parallel_degree": p.expert_tensor if p.expert > 1 else 1,
    }
    if rotate is not None:
        parallelism["context_parallel_rotate_method"] = rotate
    dp = p.data
    gbs, mbs = workload.global_batch_size, plan.micro_batch_size
    require(
        gbs % (mbs * dp) == 0,
        FORMAT,
        "torchtitan.global-batch",
        f"global batch {gbs} is not a multiple of micro batch {mbs} × data degree {dp}",
    )
    if p.pipeline > 1:
        # the whole per-replica batch enters the pipeline; microbatches of the plan's size
        local = gbs // dp
        layers = list(
            plan.stage_layers or _even_split(model.num_layers, p.pipeline * p.virtual_pipeline)
        )
        parallelism.update(
            {
                "pipeline_parallel_schedule": schedule_options(FORMAT, "torchtitan", plan)[
                    "pipeline_parallel_schedule"
                ],
                "pipeline_parallel_microbatch_size": mbs,
                "module_fqns_per_model_part": module_fqns(layers, model.num_layers),
            }
        )
    else:
        local = mbs
    lengths = workload.sequence_lengths
    if lengths is not None and lengths.packing != "pad":
        notes.append(
            f"sequence_lengths packing {lengths.packing}: per-document attention needs the "
            'flavor\'s model arguments attn_type = "varlen" (or "flex") and '
            'attn_mask_type = "block_causal" (torchtitan 0.2.2 TransformerModelArgs; '
            "llama3 has built-in 8B_varlen / 8B_flex flavors); torchtitan's text datasets "
            "concatenate documents and cut them at seq_len (concat)"
        )
    elif lengths is not None:
        notes.append(
            "sequence_lengths packing pad: torchtitan's text datasets pack documents; padding "
            "to seq_len needs a dataset of its own"
        )
    check_offload(FORMAT, "torchtitan", model, plan)
    training = {
        "local_batch_size": local,
        "global_batch_size": gbs,
        "seq_len": workload.sequence_length,
        "steps": 100,
        "mixed_precision_param": "float32" if workload.precision == "fp32" else "bfloat16",
        "mixed_precision_reduce": "float32",
        "dataset": "c4_test",
    }
    if plan.offload.optimizer == "cpu":  # FSDP2 CPUOffloadPolicy: params, grads, optimizer
        training["enable_cpu_offload"] = True
    mode = {"none": "none", "selective": "selective", "full": "full"}[plan.recompute]
    ac: dict[str, Any] = {"mode": mode}
    if mode == "selective":
        ac["selective_ac_option"] = "op"
        notes.append(
            "selective recompute maps to torchtitan's per-op selective activation "
            "checkpointing (selective_ac_option = op)"
        )
    model_sec, model_notes = model_section(model, workload.precision)
    cfg: dict[str, Any] = {
        "job": {"dump_folder": "./outputs", "description": description},
        "model": model_sec,
        "training": training,
        "parallelism": parallelism,
        "activation_checkpoint": ac,
    }
    if workload.precision == "fp8":
        cfg["quantize"] = {"linear": {"float8": {"recipe_name": "tensorwise"}}}
    notes += model_notes
    check_config(cfg, world_size=world_size, num_layers=model.num_layers)
    return cfg, notes


def _even_split(num_layers: int, stages: int) -> list[int]:
    require(
        num_layers % stages == 0,
        FORMAT,
        "torchtitan.pipeline-stages",
        f"{num_layers} layers do not split evenly over {stages} stages",
    )
    return [num_layers // stages] * stages


def module_fqns(stage_layers: list[int], num_layers: int) -> list[list[str]]:
    """`module_fqns_per_model_part`: the embedding with the first stage, `layers.i` in
    order, the final norm and output head with the last stage."""
    require(
        sum(stage_layers) == num_layers,
        FORMAT,
        "torchtitan.pipeline-stages",
        f"stage_layers add up to {sum(stage_layers)}, the model has {num_layers} layers",
    )
    parts: list[list[str]] = []
    start = 0
    for n in stage_layers:
        parts.append([f"layers.{i}" for i in range(start, start + n)])
        start += n
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


ROTATE_METHODS = {"ring": "alltoall", "all_gather": "allgather"}
"""`context_parallel_rotate_method` of the algorithms torchtitan runs."""


def check_config(cfg: Mapping[str, Any], *, world_size: int, num_layers: int) -> None:
    """torchtitan's rules on a job config (raises `UnexpressiblePlan` naming the rule)."""
    par = cfg.get("parallelism", {})
    tr = cfg.get("training", {})
    rep = int(par.get("data_parallel_replicate_degree", 1))
    shard = int(par.get("data_parallel_shard_degree", -1))
    cp = int(par.get("context_parallel_degree", 1))
    tp = int(par.get("tensor_parallel_degree", 1))
    pp = int(par.get("pipeline_parallel_degree", 1))
    ep = int(par.get("expert_parallel_degree", 1))
    etp = int(par.get("expert_tensor_parallel_degree", 1))
    if shard < 0:
        shard = world_size // (rep * cp * tp * pp)
    rotate = par.get("context_parallel_rotate_method", "allgather")
    require(
        rotate in ROTATE_METHODS.values(),
        FORMAT,
        "torchtitan.rotate-method",
        f"context_parallel_rotate_method must be allgather or alltoall (got {rotate})",
    )
    # ParallelDims._validate
    require(
        rep * shard * cp * tp * pp == world_size,
        FORMAT,
        "torchtitan.degree-product",
        f"dp_replicate({rep}) * dp_shard({shard}) * cp({cp}) * tp({tp}) * pp({pp}) != "
        f"WORLD_SIZE({world_size})",
    )
    if ep > 1:
        require(
            etp in (1, tp),
            FORMAT,
            "torchtitan.expert-tensor-degree",
            "currently torchtitan only supports ETP=TP or ETP=1",
        )
        # ParallelDims.build_mesh: the sparse mesh [pp, dp_replicate, efsdp, ep, etp]
        require(
            (shard * cp * tp) % (etp * ep) == 0,
            FORMAT,
            "torchtitan.expert-mesh",
            f"expert parallelism borrows from dp_shard × cp × tp = {shard * cp * tp} "
            f"ranks, which etp × ep = {etp * ep} does not divide",
        )
    # parallelize: DDP is applied only as 1-D parallelism
    if rep > 1 and shard == 1 and cp == 1:
        require(
            rep == world_size,
            FORMAT,
            "torchtitan.ddp-one-dimensional",
            "DDP has not supported > 1D parallelism (ZeRO-0 with tensor, pipeline or "
            "expert parallelism)",
        )
    seq = int(tr.get("seq_len", 0))
    require(
        seq % (tp * 2 * cp) == 0,
        FORMAT,
        "torchtitan.seq-len-divisor",
        f"sequence length {seq} must be divisible by the product of TP degree ({tp}) and "
        f"2 * CP degree ({cp})",
    )
    local = int(tr.get("local_batch_size", 0))
    gbs = int(tr.get("global_batch_size", -1))
    batch_degree = rep * shard
    if gbs < 0:
        gbs = local * batch_degree
    require(
        local > 0 and gbs % (local * batch_degree) == 0,
        FORMAT,
        "torchtitan.global-batch",
        f"global batch size must be multiple of local batch size times data-parallel "
        f"degree ({gbs} % ({local} * {batch_degree}) != 0)",
    )
    precision = tr.get("mixed_precision_param", "bfloat16")
    require(
        precision in ("bfloat16", "float32"),
        FORMAT,
        "torchtitan.precision",
        f"mixed_precision_param must be bfloat16 or float32 (got {precision})",
    )
    mode = cfg.get("activation_checkpoint", {}).get("mode", "selective")
    require(
        mode in AC_MODES,
        FORMAT,
        "torchtitan.activation-checkpoint-mode",
        f"activation_checkpoint.mode must be one of {sorted(AC_MODES)} (got {mode})",
    )
    if pp > 1:
        micro = int(par.get("pipeline_parallel_microbatch_size", 1))
        require(
            local % micro == 0,
            FORMAT,
            "torchtitan.pipeline-microbatch",
            f"batch size {local} must be divisible by microbatch_size {micro}",
        )
        schedule = str(par.get("pipeline_parallel_schedule", "1F1B"))
        require(
            schedule in SINGLE_STAGE_SCHEDULES | MULTI_STAGE_SCHEDULES,
            FORMAT,
            "torchtitan.pipeline-schedule",
            f"unknown pipeline schedule {schedule}",
        )
        parts = par.get("module_fqns_per_model_part")
        if parts is None:
            raise UnexpressiblePlan(
                FORMAT,
                "torchtitan.pipeline-stages",
                "pipelined configs list module_fqns_per_model_part",
            )
        require(
            len(parts) % pp == 0,
            FORMAT,
            "torchtitan.pipeline-stages",
            f"num_stages {len(parts)} must be evenly divisible by pp_degree {pp}",
        )
        per_rank = len(parts) // pp
        if schedule in SINGLE_STAGE_SCHEDULES:
            require(
                per_rank == 1,
                FORMAT,
                "torchtitan.pipeline-stages-per-rank",
                f"single stage schedule requires exactly 1 stage per rank, got {per_rank}",
            )
        else:
            require(
                per_rank >= 2,
                FORMAT,
                "torchtitan.pipeline-stages-per-rank",
                f"multi-stage schedule requires at least 2 stages per rank, got {per_rank}",
            )
        flat = [m for part in parts for m in part]
        expected = ["tok_embeddings", *[f"layers.{i}" for i in range(num_layers)], "norm", "output"]
        require(
            flat == expected and all(parts),
            FORMAT,
            "torchtitan.pipeline-modules",
            "every module must sit in exactly one stage, in model order, no stage empty",
        )


def export(ctx: ExportContext) -> ExportResult:
    plan, workload = ctx.training_plan(FORMAT)
    world = plan.parallelism.world_size
    layout = node_layout(FORMAT, ctx.cluster, world)
    description = (
        f"meshplan plan {ctx.plan_id or ''}: {ctx.model.name} on {world} × {layout.accelerator}"
    ).replace("  ", " ")
    cfg, notes = build_config(ctx.model, plan, workload, world_size=world, description=description)
    m = ctx.model
    header = (
        "# torchtitan job config written by meshplan (torchtitan v0.2 keys).\n"
        f"# model {m.name}: layers={m.num_layers} hidden={m.hidden_size} "
        f"heads={m.num_attention_heads} kv_heads={m.kv_heads} ffn={m.ffn_hidden_size} "
        f"vocab={m.vocab_size}"
        + (
            f" experts={m.moe.num_experts} top_k={m.moe.top_k} "
            f"expert_ffn={m.moe.expert_ffn_hidden_size}"
            if m.moe
            else ""
        )
        + "\n"
        f"# model args ({cfg['model']['name']}): "
        + ", ".join(
            f"{k}={_python(v)}" for k, v in model_args(m, str(cfg["model"]["name"])).items()
        )
        + "\n"
        f"# launch: torchrun --nnodes {layout.num_nodes} --nproc-per-node "
        f"{layout.gpus_per_node} -m torchtitan.train --job.config_file train.toml\n"
    )
    content = header + tomli_w.dumps(cfg)
    args = [
        *torchrun_args(layout, None),
        "-m",
        "torchtitan.train",
        "--job.config_file",
        "train.toml",
    ]
    return ExportResult(
        format=FORMAT, filename="train.toml", content=content, args=args, env={}, notes=notes
    )
