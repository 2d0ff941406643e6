"""The frameworks' own parsers on generated exports (optional: needs the `exports-check`
extra, i.e. torch on the CPU, DeepSpeed and torchtitan 0.2.x; skipped without them).

One process-wide fake process group of 64 ranks (`torch.testing._internal.distributed.
fake_pg`) stands in for the cluster, so DeepSpeed's `DeepSpeedConfig` checks the batch triple
against the real data-parallel size and torchtitan's `ParallelDims.build_mesh` lays the real
device meshes out on the CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("deepspeed")
pytest.importorskip("torchtitan")

pytestmark = [pytest.mark.exports_real, pytest.mark.filterwarnings("ignore")]

WORLD = 64


@pytest.fixture(scope="module")
def fake_world() -> int:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
    import deepspeed

    deepspeed.init_distributed(dist_backend="fake")
    return WORLD


def _problem(preset: str) -> dict[str, Any]:
    import hardware_catalog
    from specs.cluster import ClusterSpec
    from specs.presets import get_preset

    cluster = hardware_catalog.resolve_cluster(
        ClusterSpec.model_validate(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8, "gpus_per_node": 8}]}
        )
    )
    return {
        "model": get_preset(preset).model_dump(mode="json"),
        "cluster": cluster.model_dump(mode="json"),
        "workload": {"kind": "training", "global_batch_size": 1024, "sequence_length": 4096},
    }


def _row(**par: Any) -> dict[str, Any]:
    plan = par.pop("plan")
    parallelism = {
        "tensor": 1,
        "pipeline": 1,
        "virtual_pipeline": 1,
        "context": 1,
        "expert": 1,
        "expert_tensor": 1,
        "sequence_parallel": par.get("tensor", 1) > 1,
        **par,
    }
    vpp = parallelism["virtual_pipeline"]
    return {
        "id": "real",
        "plan": {
            "parallelism": parallelism,
            "pipeline_schedule": "interleaved_1f1b" if vpp > 1 else "1f1b",
            **plan,
        },
    }


TORCHTITAN_CASES = [
    (
        "llama3-70b",
        _row(
            data=4,
            tensor=2,
            pipeline=8,
            plan={
                "micro_batch_size": 1,
                "zero_stage": 1,
                "stage_layers": [8, 10, 10, 10, 11, 11, 11, 9],
            },
        ),
    ),
    (
        "llama3-70b",
        _row(
            data=2,
            tensor=4,
            pipeline=8,
            virtual_pipeline=2,
            plan={
                "micro_batch_size": 1,
                "zero_stage": 3,
                "recompute": "full",
                "stage_layers": [5] * 16,
            },
        ),
    ),
    (
        "mixtral-8x22b",
        _row(
            data=4,
            pipeline=8,
            context=2,
            expert=8,
            plan={"micro_batch_size": 1, "zero_stage": 1, "stage_layers": [7] * 8},
        ),
    ),
]


@pytest.mark.parametrize(("preset", "row"), TORCHTITAN_CASES)
def test_torchtitan_parses_the_toml_and_builds_the_mesh(
    fake_world: int, tmp_path: Path, preset: str, row: dict[str, Any]
) -> None:
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims

    from app.exports import export_plan

    result = export_plan(row, _problem(preset), "torchtitan")
    path = tmp_path / result.filename
    path.write_text(result.content)
    cfg = ConfigManager().parse_args(["--job.config_file", str(path)])
    p = cfg.parallelism
    dims = ParallelDims(
        dp_replicate=p.data_parallel_replicate_degree,
        dp_shard=p.data_parallel_shard_degree,
        cp=p.context_parallel_degree,
        tp=p.tensor_parallel_degree,
        pp=p.pipeline_parallel_degree,
        ep=p.expert_parallel_degree,
        etp=p.expert_tensor_parallel_degree,
        world_size=fake_world,
    )
    dims.build_mesh()
    par = row["plan"]["parallelism"]
    assert dims.get_mesh("pp").size() == par["pipeline"]
    assert dims.get_mesh("batch").size() == par["data"]
    assert cfg.training.global_batch_size == 1024
    schedule = get_schedule_class(p.pipeline_parallel_schedule)
    stages_per_rank = len(p.module_fqns_per_model_part) // p.pipeline_parallel_degree
    assert (stages_per_rank == 1) == issubclass(schedule, PipelineScheduleSingle)


def test_torchtitan_rejects_what_the_checker_rejects(fake_world: int) -> None:
    from torchtitan.distributed.parallel_dims import ParallelDims

    with pytest.raises(AssertionError):  # ETP must be 1 or TP (our torchtitan.expert-tensor-degree)
        ParallelDims(
            dp_replicate=1, dp_shard=8, cp=1, tp=2, pp=4, ep=4, etp=4, world_size=fake_world
        )
    with pytest.raises(AssertionError):  # the degree product (our torchtitan.degree-product)
        ParallelDims(
            dp_replicate=1, dp_shard=4, cp=1, tp=2, pp=4, ep=1, etp=1, world_size=fake_world
        )


DEEPSPEED_CASES = [
    (
        "llama3-70b",
        _row(
            data=16,
            tensor=4,
            plan={
                "micro_batch_size": 8,
                "zero_stage": 2,
                "recompute": "full",
                "stage_layers": [80],
            },
        ),
    ),
    (
        "mixtral-8x22b",
        _row(
            data=8,
            pipeline=8,
            expert=8,
            plan={
                "micro_batch_size": 2,
                "zero_stage": 1,
                "recompute": "full",
                "stage_layers": [7] * 8,
            },
        ),
    ),
    (
        "llama3-70b",
        _row(data=64, plan={"micro_batch_size": 2, "zero_stage": 3, "stage_layers": [80]}),
    ),
]


@pytest.mark.parametrize(("preset", "row"), DEEPSPEED_CASES)
def test_deepspeed_config_parses_and_holds_the_batch_triple(
    fake_world: int, preset: str, row: dict[str, Any]
) -> None:
    from deepspeed.module_inject.auto_ep_config import parse_autoep_config, validate_autoep_config
    from deepspeed.runtime.config import DeepSpeedConfig

    from app.exports import export_plan

    cfg = json.loads(export_plan(row, _problem(preset), "deepspeed").content)
    par = row["plan"]["parallelism"]

    class DataParallelGroups:
        """The `mpu` DeepSpeed asks for the data-parallel size."""

        def get_data_parallel_world_size(self) -> int:
            return int(par["data"])

    config = DeepSpeedConfig(cfg, mpu=DataParallelGroups())
    assert config.world_size == par["data"]
    assert config.train_batch_size == 1024
    assert config.zero_optimization_stage == row["plan"]["zero_stage"]
    assert config.tensor_parallel_config.autotp_size in (0, 1, par["tensor"])
    if "expert_parallel" in cfg:
        validate_autoep_config(
            parse_autoep_config(cfg["expert_parallel"]),
            world_size=fake_world,
            pp_size=par["pipeline"],
            tp_size=par["tensor"],
            sp_size=1,
            zero_stage=row["plan"]["zero_stage"],
        )

    # the same config on a different data-parallel size fails DeepSpeed's triple check
    class HalfGroups:
        def get_data_parallel_world_size(self) -> int:
            return int(par["data"]) // 2

    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        DeepSpeedConfig(cfg, mpu=HalfGroups())


def test_deepspeed_parses_the_offload_settings(fake_world: int) -> None:
    """ZeRO-Infinity: optimizer states on NVMe, parameters in host memory, the checkpoints
    of full recompute in host memory (`cpu_checkpointing`), as DeepSpeed's own config
    models read them."""
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum

    from app.exports import export_plan

    row = _row(
        data=64,
        plan={
            "micro_batch_size": 2,
            "zero_stage": 3,
            "recompute": "full",
            "stage_layers": [80],
            "framework": "deepspeed",
            "offload": {"optimizer": "nvme", "parameters": "cpu", "activations": 1.0},
        },
    )
    cfg = json.loads(export_plan(row, _problem("llama3-70b"), "deepspeed").content)

    class DataParallelGroups:
        def get_data_parallel_world_size(self) -> int:
            return 64

    config = DeepSpeedConfig(cfg, mpu=DataParallelGroups())
    zero = config.zero_config
    assert zero.offload_optimizer.device == OffloadDeviceEnum.nvme
    assert str(zero.offload_optimizer.nvme_path) == "/local_nvme"
    assert zero.offload_optimizer.pin_memory is True
    assert zero.offload_param.device == OffloadDeviceEnum.cpu
    assert config.activation_checkpointing_config.cpu_checkpointing is True


def test_torchtitan_parses_the_cpu_offload(fake_world: int, tmp_path: Path) -> None:
    """FSDP2 CPU offload (`training.enable_cpu_offload`) as torchtitan's ConfigManager
    reads it."""
    from torchtitan.config.manager import ConfigManager

    from app.exports import export_plan

    row = _row(
        data=64,
        plan={
            "micro_batch_size": 1,
            "zero_stage": 3,
            "stage_layers": [80],
            "framework": "torchtitan",
            "offload": {"optimizer": "cpu", "parameters": "cpu"},
        },
    )
    result = export_plan(row, _problem("llama3-70b"), "torchtitan")
    path = tmp_path / result.filename
    path.write_text(result.content)
    cfg = ConfigManager().parse_args(["--job.config_file", str(path)])
    assert cfg.training.enable_cpu_offload is True
