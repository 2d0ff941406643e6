"""TensorRT-LLM export: the `trtllm-serve` command (PyTorch backend) of a colocated serving
plan, with the LLM-API options file it reads (`--extra_llm_api_options`).

Flags follow NVIDIA/TensorRT-LLM `tensorrt_llm/commands/serve.py` (`--backend`, `--tp_size`,
`--pp_size`, `--ep_size`, `--max_batch_size`, `--max_num_tokens`, `--max_seq_len`,
`--kv_cache_free_gpu_memory_fraction`, `--extra_llm_api_options`); the options file carries
what has no flag: `enable_chunked_prefill`, `disable_overlap_scheduler`,
`kv_cache_config.enable_block_reuse` and `kv_cache_config.dtype`, and `enable_attention_dp`
for an instance with attention data parallelism (`expert` > 1: `--tp_size t·e --ep_size
t·e`, attention replicated over `e`).

Plan → command: `max_batch_size` → `--max_batch_size`; `chunk_size` → `--max_num_tokens`
(the token budget of an iteration; 8192, TensorRT-LLM's default, when the plan has none);
the engine options the plan was priced with → the options file. FP8 weights are not a flag:
TensorRT-LLM serves an FP8 checkpoint (ModelOpt) as it is, which the notes say. Disaggregated
plans are refused (TensorRT-LLM's disaggregated serving runs from its own configuration of
context and generation servers; export such plans with vllm or sglang).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from app.exports.base import (
    ExportContext,
    ExportResult,
    model_reference,
    require,
    shell_command,
)
from app.exports.serving_common import (
    checkpoint_overrides,
    instance_shape,
    kv_format,
    max_model_len,
    refuse_stages_across_groups,
    weight_format,
)
from hardware_catalog.schema import ResolvedCluster
from specs.model import ModelSpec
from specs.serving import ServingInstance, ServingPlan, ServingWorkload

FORMAT = "trtllm"
DEFAULT_MAX_NUM_TOKENS = 8192
"""TensorRT-LLM's `max_num_tokens` default (LLM API `BuildConfig`)."""
OPTIONS_FILE = "extra_llm_api_options.yaml"


def llm_api_options(
    inst: ServingInstance, workload: ServingWorkload, engine_options: Mapping[str, Any]
) -> dict[str, Any]:
    """What the options file sets for one instance (module docstring)."""
    kv_cache: dict[str, Any] = {
        "enable_block_reuse": bool(engine_options.get("enable_block_reuse", True)),
    }
    if kv_format(inst, workload) == "fp8":
        kv_cache["dtype"] = "fp8"
    options: dict[str, Any] = {
        "enable_chunked_prefill": bool(engine_options.get("enable_chunked_prefill", False)),
        "disable_overlap_scheduler": bool(engine_options.get("disable_overlap_scheduler", False)),
        "kv_cache_config": kv_cache,
    }
    if inst.parallelism.expert > 1:
        options["enable_attention_dp"] = True
    return options


def check_model(model: ModelSpec) -> None:
    """`trtllm-serve` builds the model from the checkpoint's config.json and takes no
    override of its keys: a model that differs from the checkpoint its name loads in an
    architecture field (`serving_common.checkpoint_overrides`) is refused."""
    overrides = checkpoint_overrides(model)
    require(
        not overrides,
        FORMAT,
        "trtllm.checkpoint-architecture",
        f"the model differs from the checkpoint's config.json in {', '.join(sorted(overrides))}; "
        "trtllm-serve has no override for them (export with vllm or sglang)",
    )


def instance_args(
    model_ref: str,
    inst: ServingInstance,
    workload: ServingWorkload,
    port: int = 8000,
    options_path: str = OPTIONS_FILE,
) -> list[str]:
    """`trtllm-serve` arguments of one instance (after `trtllm-serve`)."""
    par = inst.parallelism
    world = par.tensor * par.expert
    args = [
        model_ref,
        "--backend",
        "pytorch",
        "--tp_size",
        str(world),
        "--pp_size",
        str(par.pipeline),
    ]
    if par.expert > 1:
        args += ["--ep_size", str(world)]
    args += [
        "--max_batch_size",
        str(inst.max_batch_size),
        "--max_num_tokens",
        str(max(inst.chunk_size or DEFAULT_MAX_NUM_TOKENS, inst.max_batch_size)),
        "--max_seq_len",
        str(max_model_len(workload)),
        "--kv_cache_free_gpu_memory_fraction",
        "0.9",
        "--extra_llm_api_options",
        options_path,
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
    ]
    return args


def _yaml(value: Any, indent: int = 0) -> list[str]:
    """A small YAML writer for the options file (mappings of scalars and mappings)."""
    lines = []
    for key, item in value.items():
        if isinstance(item, dict):
            lines.append(" " * indent + f"{key}:")
            lines += _yaml(item, indent + 2)
        else:
            lines.append(" " * indent + f"{key}: {json.dumps(item)}")
    return lines


def options_yaml(
    inst: ServingInstance, workload: ServingWorkload, engine_options: Mapping[str, Any]
) -> str:
    """The options file (`--extra_llm_api_options`) of one instance, as YAML text."""
    return "\n".join(_yaml(llm_api_options(inst, workload, engine_options))) + "\n"


def check_plan(fmt: str, plan: ServingPlan, cluster: ResolvedCluster) -> None:
    """What this export and the launchers wrapping it run: colocated plans whose instances
    each fit on one node (module docstring)."""
    require(
        plan.mode == "colocated",
        fmt,
        "trtllm.disaggregated",
        "TensorRT-LLM's disaggregated serving runs from its own configuration of context and "
        "generation servers; export a disaggregated plan with vllm or sglang",
    )
    for inst in plan.instances:
        shape = instance_shape(fmt, cluster, inst)
        require(
            shape.nodes == 1,
            fmt,
            "trtllm.single-node",
            f"an instance of {shape.gpus} GPUs spans {shape.nodes} nodes; the TensorRT-LLM "
            "export launches single-node instances (trtllm-serve over MPI across nodes is "
            "not generated)",
        )


def export(ctx: ExportContext) -> ExportResult:
    plan, workload = ctx.serving_plan(FORMAT)
    refuse_stages_across_groups(
        FORMAT,
        plan,
        "trtllm-serve runs one engine on one kind of node with even pipeline stages (export it as vllm, which takes VLLM_PP_LAYER_PARTITION)",
    )
    check_plan(FORMAT, plan, ctx.cluster)
    check_model(ctx.model)
    inst = plan.instances[0]
    shape = instance_shape(FORMAT, ctx.cluster, inst)
    env: dict[str, str] = {}
    model_ref = model_reference(ctx.model, env)
    args = instance_args(model_ref, inst, workload)
    command = ["trtllm-serve", *args]
    content = (
        "#!/usr/bin/env bash\n"
        f"# TensorRT-LLM serving of meshplan plan {ctx.plan_id or ''} (colocated).\n"
        "set -euo pipefail\n\n"
        f"cat > {OPTIONS_FILE} <<'EOF'\n"
        + options_yaml(inst, workload, plan.engine_options)
        + "EOF\n\n"
        f"# one instance of {shape.gpus} GPU(s); run {inst.count} replica(s)\n"
        + shell_command(command)
        + "\n"
    )
    notes = ["args are one instance's command; run `count` replicas behind a router"]
    if weight_format(inst, workload) == "fp8":
        notes.append("fp8 weights: serve an FP8 checkpoint (TensorRT-LLM ModelOpt quantized)")
    return ExportResult(
        format=FORMAT,
        filename="serve_trtllm.sh",
        content=content,
        args=command,
        env=env,
        roles=None,
        notes=notes,
    )
