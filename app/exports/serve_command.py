"""The serve command of one serving instance, for the launchers that wrap it (slurm,
kubernetes): `vllm serve …`, SGLang's launcher or `trtllm-serve …`, checked against the
framework's rules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.exports import sglang, trtllm, vllm
from hardware_catalog.schema import ResolvedCluster
from specs.model import ModelSpec
from specs.serving import ServingInstance, ServingWorkload


def serve_args(
    framework: str,
    model: ModelSpec,
    model_ref: str,
    inst: ServingInstance,
    workload: ServingWorkload,
    cluster: ResolvedCluster,
    port: int,
    engine: str | None = None,
    engine_options: Mapping[str, Any] | None = None,
    options_path: str = trtllm.OPTIONS_FILE,
) -> list[str]:
    """The whole argument list of `inst` under `framework` (`vllm`, `sglang` or `trtllm`),
    after the framework's own consistency checks (`vllm.check_args`, `sglang.check_args`).
    `options_path` is where TensorRT-LLM's options file (`trtllm.options_yaml`) is found."""
    if framework == "trtllm":
        trtllm.check_model(model)
        return [
            "trtllm-serve",
            *trtllm.instance_args(model_ref, inst, workload, port=port, options_path=options_path),
        ]
    if framework == "vllm":
        args = [
            "vllm",
            "serve",
            *vllm.instance_args(
                model_ref,
                inst,
                workload,
                node_gpus=cluster.gpus_per_node,
                port=port,
                engine=engine,
                engine_options=engine_options,
                model=model,
            ),
        ]
        vllm.check_args(args[2:], model)
        return args
    args = [
        *sglang.LAUNCH,
        *sglang.instance_args(
            model_ref,
            inst,
            workload,
            cluster=cluster,
            port=port,
            engine_options=engine_options,
            model=model,
        ),
    ]
    sglang.check_args(args[len(sglang.LAUNCH) :], model)
    return args
