"""SGLang export: the `python -m sglang.launch_server` command line of each engine instance.

Flags follow sgl-project/sglang `python/sglang/srt/server_args.py`. SGLang's `--tp-size` is
the instance's whole world; with `--enable-dp-attention` the attention runs as `--dp-size`
replicas of tp/dp GPUs ("tp_size must be divisible by dp_size") and the MoE layers are
expert-parallel over `--ep-size` GPUs (ranks per MoE group divisible by ep_size). Attention
heads must divide by the attention tensor size (tp/dp), and KV heads divide it or the
reverse, as in vLLM.

Plan → flags: an instance of tensor t, pipeline p, expert e → `--tp-size t·e --pp-size p`
and, when e > 1, `--dp-size e --enable-dp-attention --ep-size t·e`; `max_batch_size` →
`--max-running-requests`; `chunk_size` → `--chunked-prefill-size` (-1 disables); fp8 weights
→ `--quantization fp8`; an fp8 KV cache → `--kv-cache-dtype fp8_e4m3`; disaggregated roles
→ `--disaggregation-mode prefill|decode`; instances wider than a node → `--nnodes`,
`--node-rank`, `--dist-init-addr`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from app.exports.base import (
    ExportContext,
    ExportResult,
    int_flag,
    model_reference,
    parse_flags,
    require,
    shell_command,
)
from app.exports.serving_common import (
    ROLE_ORDER,
    check_context_length,
    check_kv_heads,
    checkpoint_overrides,
    instance_shape,
    kv_format,
    max_model_len,
    refuse_stages_across_groups,
    sglang_context_length,
    weight_format,
)
from hardware_catalog.schema import ResolvedCluster
from specs.model import ModelSpec
from specs.serving import ServingInstance, ServingWorkload

FORMAT = "sglang"
SWITCHES = frozenset(
    {
        "--enable-dp-attention",
        "--trust-remote-code",
        "--enable-mixed-chunk",
        "--disable-overlap-schedule",
        "--disable-radix-cache",
    }
)
LAUNCH = ["python", "-m", "sglang.launch_server"]


def instance_args(
    model_ref: str,
    inst: ServingInstance,
    workload: ServingWorkload,
    *,
    cluster: ResolvedCluster,
    port: int,
    engine_options: Mapping[str, Any] | None = None,
    model: ModelSpec | None = None,
) -> list[str]:
    """SGLang launcher arguments of one instance. With `model`, where it differs from the
    checkpoint's config.json (`serving_common.checkpoint_overrides`), the difference is
    passed as `--json-model-override-args` (SGLang's JSON of config keys to replace)."""
    par = inst.parallelism
    engine_options = engine_options or {}
    shape = instance_shape(FORMAT, cluster, inst)
    weights = weight_format(inst, workload)
    world = par.tensor * par.expert
    args = ["--model-path", model_ref, "--tp-size", str(world), "--pp-size", str(par.pipeline)]
    if par.expert > 1:
        args += ["--dp-size", str(par.expert), "--enable-dp-attention", "--ep-size", str(world)]
    args += [
        "--max-running-requests",
        str(inst.max_batch_size),
        "--chunked-prefill-size",
        str(inst.chunk_size if inst.chunk_size is not None else -1),
        "--context-length",
        str(max_model_len(workload)),
        "--dtype",
        "float16" if weights == "fp16" else "bfloat16",
    ]
    if weights == "fp8":
        args += ["--quantization", "fp8"]
    if kv_format(inst, workload) == "fp8":
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    args += ["--mem-fraction-static", "0.9"]
    overrides = checkpoint_overrides(model) if model is not None else {}
    if overrides:
        args += [
            "--json-model-override-args",
            json.dumps(overrides, sort_keys=True, separators=(",", ":")),
        ]
    # the engine profile's settings (`cost_models/serving/engines/sglang.py`)
    if engine_options.get("enable_mixed_chunk"):
        args.append("--enable-mixed-chunk")
    if engine_options.get("disable_overlap_schedule"):
        args.append("--disable-overlap-schedule")
    if engine_options.get("disable_radix_cache"):
        args.append("--disable-radix-cache")
    if shape.nodes > 1:
        args += [
            "--nnodes",
            str(shape.nodes),
            "--node-rank",
            "${NODE_RANK}",
            "--dist-init-addr",
            "${LEADER_ADDR}:5000",
        ]
    if inst.role in ("prefill", "decode"):
        args += [
            "--disaggregation-mode",
            inst.role,
            "--disaggregation-transfer-backend",
            "mooncake",
        ]
    args += ["--host", "0.0.0.0", "--port", str(port)]
    return args


def check_args(args: Sequence[str], model: ModelSpec) -> None:
    """SGLang's rules on one instance's arguments (raises `UnexpressiblePlan`)."""
    f = parse_flags(args, SWITCHES)
    tp = int_flag(f, "--tp-size", 1)
    dp = int_flag(f, "--dp-size", 1)
    ep = int_flag(f, "--ep-size", 1)
    if dp > 1:
        require(
            bool(f.get("--enable-dp-attention")),
            FORMAT,
            "sglang.dp-attention",
            "an instance-internal --dp-size needs --enable-dp-attention (otherwise dp "
            "replicas are separate instances)",
        )
        require(
            tp % dp == 0,
            FORMAT,
            "sglang.tp-divisible-by-dp",
            f"tp_size ({tp}) must be divisible by dp_size ({dp}) with DP attention",
        )
    attn_tp = tp // dp
    require(
        model.num_attention_heads % attn_tp == 0,
        FORMAT,
        "sglang.heads-divisible-by-attention-tp",
        f"{model.num_attention_heads} attention heads must be divisible by the attention "
        f"tensor size {attn_tp}",
    )
    if model.mla is None:
        check_kv_heads(FORMAT, "sglang.kv-heads-by-attention-tp", model.kv_heads, attn_tp)
    if ep > 1:
        require(
            model.moe is not None,
            FORMAT,
            "sglang.expert-parallel-needs-moe",
            "--ep-size > 1 needs an MoE model",
        )
        require(
            tp % ep == 0,
            FORMAT,
            "sglang.tp-divisible-by-ep",
            f"ranks per MoE group ({tp}) must be divisible by ep_size ({ep})",
        )
    # ModelConfig: a --context-length above the derived one is refused unless allowed
    check_context_length(
        FORMAT,
        "sglang.context-length",
        int_flag(f, "--context-length", 0),
        sglang_context_length(model),
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
    )
    mode = f.get("--disaggregation-mode", "null")
    require(
        mode in ("null", "prefill", "decode"),
        FORMAT,
        "sglang.disaggregation-mode",
        f"unknown --disaggregation-mode {mode}",
    )


def export(ctx: ExportContext) -> ExportResult:
    plan, workload = ctx.serving_plan(FORMAT)
    refuse_stages_across_groups(
        FORMAT,
        plan,
        "SGLang launches one engine on one kind of node and has no per-stage layer counts for pipeline stages on different GPU types (export it as vllm, which takes VLLM_PP_LAYER_PARTITION)",
    )
    env: dict[str, str] = {}
    model_ref = model_reference(ctx.model, env)
    roles: dict[str, list[str]] = {}
    blocks: list[str] = []
    instances = sorted(plan.instances, key=lambda i: ROLE_ORDER.index(i.role))
    multi_node = False
    for n, inst in enumerate(instances):
        shape = instance_shape(FORMAT, ctx.cluster, inst)
        multi_node = multi_node or shape.nodes > 1
        args = instance_args(
            model_ref,
            inst,
            workload,
            cluster=ctx.cluster,
            port=30000 + 100 * n,
            engine_options=plan.engine_options,
            model=ctx.model,
        )
        check_args(args, ctx.model)
        roles[inst.role] = [*LAUNCH, *args]
        blocks.append(
            f"# {inst.role} instance: {inst.count} replica(s) of {shape.gpus} GPU(s)"
            f" on {shape.nodes} node(s)\n"
            + shell_command([*LAUNCH, *args])
            + (" &" if len(instances) > 1 else "")
            + "\n"
        )
    if multi_node:
        env.update({"NODE_RANK": "0", "LEADER_ADDR": "127.0.0.1"})
    notes = ["args are one instance's command; run `count` replicas of each role"]
    if plan.mode == "disaggregated":
        notes.append(
            "route requests through sglang_router with --pd-disaggregation, naming "
            "the prefill and decode servers"
        )
    content = (
        "#!/usr/bin/env bash\n"
        f"# SGLang serving of meshplan plan {ctx.plan_id or ''} ({plan.mode}).\n"
        "set -euo pipefail\n\n" + "\n".join(blocks) + ("wait\n" if len(instances) > 1 else "")
    )
    return ExportResult(
        format=FORMAT,
        filename="serve_sglang.sh",
        content=content,
        args=roles[instances[0].role],
        env=env,
        roles=roles if plan.mode == "disaggregated" else None,
        notes=notes,
    )
