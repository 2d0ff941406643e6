"""vLLM export: the `vllm serve` command line of each engine instance of a serving plan.

Flags follow vllm-project/vllm `vllm/engine/arg_utils.py`; the rules checked are vLLM's
`ModelConfig.verify_with_parallel_config` ("Total number of attention heads must be divisible
by tensor parallel size"), the KV-head split of `QKVParallelLinear` (KV heads divide the
tensor size or the reverse), `SchedulerConfig` (max_num_batched_tokens at least max_num_seqs,
and at least max_model_len without chunked prefill) and expert parallelism needing an MoE
model.

Plan → flags: `--tensor-parallel-size` and `--pipeline-parallel-size` per instance; an
instance with `expert` > 1 runs `expert` attention data-parallel replicas with the experts
spread over all tensor × expert GPUs (`--data-parallel-size E --enable-expert-parallel`,
vLLM's EP = TP × DP); `max_batch_size` → `--max-num-seqs`; `chunk_size` →
`--enable-chunked-prefill --max-num-batched-tokens`; fp8 weights → `--quantization fp8`;
an fp8 KV cache → `--kv-cache-dtype fp8`. Disaggregated plans run a prefill instance as KV
producer and a decode instance as KV consumer (`--kv-transfer-config`, P2pNcclConnector).
An instance wider than a node uses the Ray executor (`--distributed-executor-backend ray`).
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
    vllm_max_model_len,
    weight_format,
)
from cost_models.mixed import pool_names
from specs.model import ModelSpec
from specs.serving import ServingInstance, ServingPlan, ServingWorkload

FORMAT = "vllm"
SWITCHES = frozenset(
    {
        "--no-async-scheduling",
        "--disable-async-output-proc",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--enable-expert-parallel",
        "--enable-chunked-prefill",
        "--no-enable-chunked-prefill",
        "--trust-remote-code",
    }
)
KV_ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}


def engine_args(engine: str | None, options: Mapping[str, Any]) -> list[str]:
    """The flags that make vLLM run as the plan's engine profile was priced
    (`cost_models/serving/engines/vllm.py`): V1 with async scheduling is vLLM's default
    (nothing to add), `--no-async-scheduling` otherwise; V0 (`VLLM_USE_V1=0`, see `export`)
    with `--num-scheduler-steps` and `--disable-async-output-proc` as set."""
    if engine == "vllm_v0":
        out = []
        steps = int(options.get("num_scheduler_steps", 1))
        if steps > 1:
            out += ["--num-scheduler-steps", str(steps)]
        if not options.get("async_output_processing", True):
            out.append("--disable-async-output-proc")
        if options.get("enable_prefix_caching", False):
            out.append("--enable-prefix-caching")
        return out
    out = []
    if engine == "vllm" and not options.get("async_scheduling", True):
        out.append("--no-async-scheduling")
    if engine == "vllm" and not options.get("enable_prefix_caching", True):
        out.append("--no-enable-prefix-caching")
    return out


def instance_args(
    model_ref: str,
    inst: ServingInstance,
    workload: ServingWorkload,
    *,
    node_gpus: int,
    port: int,
    engine: str | None = None,
    engine_options: Mapping[str, Any] | None = None,
    model: ModelSpec | None = None,
    kv_port: int | None = None,
) -> list[str]:
    """`vllm serve` arguments (after `vllm serve`) of one instance. With `model`, where it
    differs from the checkpoint's config.json (`serving_common.checkpoint_overrides`), the
    difference is passed as `--hf-overrides` (vLLM's JSON of config keys to replace).
    `kv_port`: the KV connector's port of a prefill / decode instance (default 14579 /
    14580; replicas on one host take their own)."""
    engine_options = engine_options or {}
    par = inst.parallelism
    weights = weight_format(inst, workload)
    ctx_len = max_model_len(workload)
    args = [
        model_ref,
        "--tensor-parallel-size",
        str(par.tensor),
        "--pipeline-parallel-size",
        str(par.pipeline),
    ]
    if par.expert > 1:
        args += ["--data-parallel-size", str(par.expert), "--enable-expert-parallel"]
    args += ["--max-num-seqs", str(inst.max_batch_size), "--max-model-len", str(ctx_len)]
    if inst.chunk_size is not None:
        args += [
            "--enable-chunked-prefill",
            "--max-num-batched-tokens",
            str(max(inst.chunk_size, inst.max_batch_size)),
        ]
    else:
        args += [
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens",
            str(max(ctx_len, inst.max_batch_size)),
        ]
    args += ["--dtype", "float16" if weights == "fp16" else "bfloat16"]
    if weights == "fp8":
        args += ["--quantization", "fp8"]
    if kv_format(inst, workload) == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    args += ["--gpu-memory-utilization", "0.9"]
    overrides = checkpoint_overrides(model) if model is not None else {}
    if overrides:
        args += ["--hf-overrides", json.dumps(overrides, sort_keys=True, separators=(",", ":"))]
    args += engine_args(engine, engine_options)
    if par.num_gpus > node_gpus:
        args += ["--distributed-executor-backend", "ray"]
    if inst.role in KV_ROLES:
        transfer = {
            "kv_connector": "P2pNcclConnector",
            "kv_role": KV_ROLES[inst.role],
            "kv_port": str(
                kv_port if kv_port is not None else (14579 if inst.role == "prefill" else 14580)
            ),
        }
        args += ["--kv-transfer-config", json.dumps(transfer, separators=(",", ":"))]
    args += ["--host", "0.0.0.0", "--port", str(port)]
    return args


def check_args(args: Sequence[str], model: ModelSpec) -> None:
    """vLLM's rules on one instance's arguments (raises `UnexpressiblePlan`)."""
    f = parse_flags(args, SWITCHES)
    tp = int_flag(f, "--tensor-parallel-size", 1)
    dp = int_flag(f, "--data-parallel-size", 1)
    heads = model.num_attention_heads
    require(
        heads % tp == 0,
        FORMAT,
        "vllm.heads-divisible-by-tp",
        f"total number of attention heads ({heads}) must be divisible by tensor parallel "
        f"size ({tp})",
    )
    if model.mla is None:
        check_kv_heads(FORMAT, "vllm.kv-heads-by-tp", model.kv_heads, tp)
    if f.get("--enable-expert-parallel"):
        require(
            model.moe is not None,
            FORMAT,
            "vllm.expert-parallel-needs-moe",
            "--enable-expert-parallel needs an MoE model",
        )
    if dp > 1:
        require(
            model.moe is not None,
            FORMAT,
            "vllm.data-parallel-attention-needs-moe",
            "an instance-internal data-parallel group only pays off for MoE models "
            "(dense replicas are separate instances)",
        )
    seqs = int_flag(f, "--max-num-seqs", 1)
    tokens = int_flag(f, "--max-num-batched-tokens", 0)
    ctx_len = int_flag(f, "--max-model-len", 0)
    require(
        tokens >= seqs,
        FORMAT,
        "vllm.batched-tokens-vs-seqs",
        f"max_num_batched_tokens ({tokens}) must be greater than or equal to max_num_seqs ({seqs})",
    )
    # ModelConfig._get_and_verify_max_len: no longer than the model's derived context
    check_context_length(
        FORMAT,
        "vllm.max-model-len",
        ctx_len,
        vllm_max_model_len(model),
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    )
    if not f.get("--enable-chunked-prefill"):
        require(
            tokens >= ctx_len,
            FORMAT,
            "vllm.batched-tokens-vs-model-len",
            f"max_num_batched_tokens ({tokens}) is smaller than max_model_len ({ctx_len}) "
            "without chunked prefill",
        )
    kv = f.get("--kv-cache-dtype", "auto")
    require(
        kv in ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"),
        FORMAT,
        "vllm.kv-cache-dtype",
        f"unknown --kv-cache-dtype {kv}",
    )
    if "--kv-transfer-config" in f:
        transfer = json.loads(str(f["--kv-transfer-config"]))
        require(
            transfer.get("kv_role") in ("kv_producer", "kv_consumer", "kv_both"),
            FORMAT,
            "vllm.kv-role",
            "kv_role must be kv_producer, kv_consumer or kv_both",
        )


def _staged(
    ctx: ExportContext, plan: ServingPlan, inst: ServingInstance, workload: ServingWorkload
) -> ExportResult:
    """One instance whose pipeline stages run on different node groups: one `vllm serve`
    over a Ray cluster of both groups' nodes, the uneven split in `VLLM_PP_LAYER_PARTITION`
    (vllm-project/vllm `vllm/envs.py`, read by `vllm.distributed.utils.get_pp_indices`:
    comma-separated layers per pipeline rank, adding to the model's layers). vLLM gives
    every worker the same number of KV blocks (the least any worker has room for), as the
    estimate's capacity is the least over stages."""
    assert inst.stage_groups is not None
    require(
        inst.stage_layers is not None,
        FORMAT,
        "vllm.stage-layers",
        "an instance across node groups needs its stage_layers (estimate the plan to fill them)",
    )
    assert inst.stage_layers is not None
    par = inst.parallelism
    require(
        par.expert == 1,
        FORMAT,
        "vllm.stages-with-data-parallel",
        "pipeline stages across node groups with attention data parallelism (expert > 1) "
        "are not launched as one vLLM instance",
    )
    pools = pool_names(ctx.cluster, inst.stage_groups, "plan.instances.0.stage_groups.{}")
    for j, name in enumerate(pools):
        node = ctx.cluster.pools()[name].gpus_per_node
        require(
            par.tensor <= node,
            FORMAT,
            "vllm.stage-inside-a-node",
            f"stage {j} on {name} takes tensor={par.tensor} GPUs; its nodes have {node}",
        )
    partition = ",".join(str(n) for n in inst.stage_layers)
    env: dict[str, str] = {"VLLM_PP_LAYER_PARTITION": partition}
    if plan.engine == "vllm_v0":
        env["VLLM_USE_V1"] = "0"
    model_ref = model_reference(ctx.model, env)
    args = instance_args(
        model_ref,
        inst,
        workload,
        node_gpus=par.tensor,  # each stage on its own nodes: the Ray executor
        port=8000,
        engine=plan.engine,
        engine_options=plan.engine_options,
        model=ctx.model,
    )
    check_args(args, ctx.model)
    layout = "; ".join(
        f"stage {j}: {n} layers on {g}"
        for j, (g, n) in enumerate(zip(inst.stage_groups, inst.stage_layers, strict=True))
    )
    content = (
        "#!/usr/bin/env bash\n"
        f"# vLLM serving of meshplan plan {ctx.plan_id or ''}: one instance over node groups\n"
        f"# ({layout}). Start a Ray cluster on the nodes of every group first, then run this\n"
        f"# on a node of {inst.stage_groups[0]} (vLLM's Ray executor ranks the workers of the\n"
        "# node it starts on first, the others by IP).\n"
        "set -euo pipefail\n\n"
        + "".join(f"export {k}={v}\n" for k, v in env.items() if v)
        + shell_command(["vllm", "serve", *args])
        + "\n"
    )
    notes = [
        f"args are one instance's command; run `count` ({inst.count}) replicas",
        f"pipeline stages across node groups: {layout}; VLLM_PP_LAYER_PARTITION={partition}",
        "vLLM does not pin a pipeline rank to a kind of GPU: ranks follow its Ray worker "
        f"order (the starting node first, then by IP), so start on {inst.stage_groups[0]} and "
        "check each stage's GPUs in the log before serving",
    ]
    return ExportResult(
        format=FORMAT,
        filename="serve_vllm.sh",
        content=content,
        args=["vllm", "serve", *args],
        env=env,
        notes=notes,
    )


def _per_host(hosts: list[list[str]]) -> str:
    """The replicas' commands by host: the script runs those of host `HOST_INDEX` (each
    replica on its own GPUs, `CUDA_VISIBLE_DEVICES`, and its own port), then waits."""
    last = len(hosts) - 1
    lines = [
        f'HOST_INDEX="${{HOST_INDEX:-0}}"  # which of the plan\'s {len(hosts)} host(s) this is',
        'case "$HOST_INDEX" in',
    ]
    for h, commands in enumerate(hosts):
        lines.append(f"{h})")
        lines.extend("".join(commands).rstrip("\n").splitlines())
        lines.append(";;")
    lines.append(f'*) echo "HOST_INDEX must be 0..{last}" >&2; exit 2 ;;')
    lines.append("esac")
    lines.append("wait")
    return "\n".join(lines) + "\n"


def export(ctx: ExportContext) -> ExportResult:
    plan, workload = ctx.serving_plan(FORMAT)
    staged = [i for i in plan.instances if i.stage_groups is not None]
    if staged:
        require(
            len(plan.instances) == 1,
            FORMAT,
            "serving-stages-across-groups",
            "an instance across node groups is exported alone (not beside other instances)",
        )
        return _staged(ctx, plan, staged[0], workload)
    env: dict[str, str] = {}
    if plan.engine == "vllm_v0":
        env["VLLM_USE_V1"] = "0"  # the V0 engine (vLLM 0.8-0.10)
    model_ref = model_reference(ctx.model, env)
    roles: dict[str, list[str]] = {}
    blocks: list[str] = []
    instances = sorted(plan.instances, key=lambda i: ROLE_ORDER.index(i.role))
    node_gpus = ctx.cluster.gpus_per_node
    shapes = [instance_shape(FORMAT, ctx.cluster, inst) for inst in instances]
    per_host = (
        all(shape.nodes == 1 for shape in shapes) and sum(inst.count for inst in instances) > 1
    )
    hosts: list[list[str]] = [[]]
    free = node_gpus  # GPUs left on the host being filled
    for n, inst in enumerate(instances):
        shape = shapes[n]
        args = instance_args(
            model_ref,
            inst,
            workload,
            node_gpus=node_gpus,
            port=8000 + 100 * n,
            engine=plan.engine,
            engine_options=plan.engine_options,
            model=ctx.model,
        )
        check_args(args, ctx.model)
        roles[inst.role] = ["vllm", "serve", *args]
        for r in range(inst.count if per_host else 0):
            if shape.gpus > free:  # a replica never straddles two hosts
                hosts.append([])
                free = node_gpus
            first_gpu = node_gpus - free
            devices = ",".join(str(first_gpu + i) for i in range(shape.gpus))
            replica = instance_args(
                model_ref,
                inst,
                workload,
                node_gpus=node_gpus,
                port=8000 + 100 * n + r,
                engine=plan.engine,
                engine_options=plan.engine_options,
                model=ctx.model,
                kv_port=(14579 if inst.role == "prefill" else 14580) + 2 * r,
            )
            hosts[-1].append(
                f"# {inst.role} replica {r}\nCUDA_VISIBLE_DEVICES={devices} "
                + shell_command(["vllm", "serve", *replica])
                + " &\n"
            )
            free -= shape.gpus
        blocks.append(
            f"# {inst.role} instance: {inst.count} replica(s) of {shape.gpus} GPU(s)"
            + (
                f" over {shape.nodes} nodes (start a Ray cluster on them first)"
                if shape.nodes > 1
                else ""
            )
            + "\n"
            + shell_command(["vllm", "serve", *args])
            + (" &" if len(instances) > 1 else "")
            + "\n"
        )
    first = roles[instances[0].role]
    head = (
        "#!/usr/bin/env bash\n"
        f"# vLLM serving of meshplan plan {ctx.plan_id or ''} ({plan.mode}).\n"
        "set -euo pipefail\n\n"
        + ("export VLLM_USE_V1=0  # priced as the V0 engine\n\n" if "VLLM_USE_V1" in env else "")
    )
    notes = ["args are one instance's command; run `count` replicas of each role"]
    if per_host:
        # each instance's header line, then its replicas by host (not its single command)
        content = head + "".join(b.splitlines(keepends=True)[0] for b in blocks) + "\n"
        content += _per_host(hosts)
        notes.append(
            f"the script starts every replica, each on its own GPUs and port, on "
            f"{len(hosts)} host(s): run it on each with HOST_INDEX = 0..{len(hosts) - 1}"
        )
    else:
        content = head + "\n".join(blocks) + ("wait\n" if len(instances) > 1 else "")
    if plan.mode == "disaggregated":
        notes.append(
            "prefill (kv_producer) and decode (kv_consumer) instances need a proxy "
            "that routes each request to both (vLLM's disaggregated proxy example)"
        )
    return ExportResult(
        format=FORMAT,
        filename="serve_vllm.sh",
        content=content,
        args=first,
        env=env,
        roles=roles if plan.mode == "disaggregated" else None,
        notes=notes,
    )
