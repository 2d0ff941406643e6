"""FP8 training by recipe (`cost_models/analytical/fp8.py`): what runs in FP8, quantisation
costs, weight copies in memory, rules, and MFU against both peaks."""

from __future__ import annotations

import pytest
from cm_support import llama3_70b

from cost_models.analytical.fp8 import recipe
from cost_models.analytical.training import AnalyticalTrainingCostModel
from cost_models.base import TrainingProblem
from hardware_catalog import get_accelerator, resolve_cluster
from specs.cluster import ClusterSpec
from specs.plan import PlanKey
from specs.workload import TrainingWorkload

KEY = PlanKey(data=2, tensor=4, sequence_parallel=True, zero_stage=1, framework="megatron_core")


def _estimate(accelerator: str, precision: str, recipe_name: str | None = None, **cfg: object):
    cluster = {"node_groups": [{"accelerator": accelerator, "num_nodes": 1, "gpus_per_node": 8}]}
    problem = TrainingProblem(
        model=llama3_70b(),
        cluster=resolve_cluster(ClusterSpec.model_validate(cluster)),
        workload=TrainingWorkload(
            global_batch_size=16,
            sequence_length=4096,
            precision=precision,  # type: ignore[arg-type]
            fp8_recipe=recipe_name,  # type: ignore[arg-type]
        ),
        memory_headroom_gib=0.0,
    )
    cm = AnalyticalTrainingCostModel(AnalyticalTrainingCostModel.Config.model_validate(cfg))
    return cm.evaluate(problem, KEY._replace(recompute="full").to_plan([80]))


def _layer_params_per_gpu(est) -> float:  # noqa: ANN001
    return sum(est.details["rank_params"]) - (128256 * 8192 * 2) / 4  # minus embedding + head


@pytest.mark.parametrize(
    ("accelerator", "name", "copy_bytes"),
    [
        ("h100-sxm", "delayed", 2.0),  # FP8 weight + its transpose (TN-only GEMMs)
        ("h100-sxm", "tensorwise", 2.0),
        ("b200", "tensorwise", 1.0),  # every layout: one copy
        ("b200", "mxfp8", 2.0 * (1 + 1 / 32)),  # row- and column-wise with E8M0 scales
    ],
)
def test_fp8_weight_copies_add_to_memory_by_recipe(
    accelerator: str, name: str, copy_bytes: float
) -> None:
    assert recipe(name, get_accelerator(accelerator)).weight_copy_bytes_per_param == pytest.approx(  # type: ignore[arg-type]
        copy_bytes
    )
    bf16 = _estimate(accelerator, "bf16")
    fp8 = _estimate(accelerator, "fp8", name)
    extra_gib = fp8.memory.by_stage[0].weights_gib - bf16.memory.by_stage[0].weights_gib
    layer_params = _layer_params_per_gpu(bf16)
    assert extra_gib * 1024**3 == pytest.approx(copy_bytes * layer_params, rel=0.02)


def test_fp8_param_gather_keeps_fp8_primary_weights() -> None:
    base = _estimate("h100-sxm", "bf16")
    gathered = _estimate(
        "h100-sxm", "fp8", "delayed", frameworks={"megatron_core": {"fp8_param_gather": True}}
    )
    # FP8 weight (1 B) + transpose (1 B) in place of the BF16 weight (2 B): no extra memory
    delta = gathered.memory.by_stage[0].weights_gib - base.memory.by_stage[0].weights_gib
    assert abs(delta) < 0.01


def test_fp8_is_faster_and_current_scaling_pays_its_amax_pass() -> None:
    bf16 = _estimate("h100-sxm", "bf16").metrics
    delayed = _estimate("h100-sxm", "fp8", "delayed").metrics
    current = _estimate("h100-sxm", "fp8", "tensorwise").metrics
    assert delayed.step_time_s < bf16.step_time_s
    # attention, norms and the LM head stay in BF16 and quantisation costs HBM passes: far
    # from the 2x of the FP8 peak
    assert bf16.step_time_s / delayed.step_time_s < 1.8
    assert current.step_time_s > delayed.step_time_s


def test_mfu_is_reported_against_both_peaks() -> None:
    m = _estimate("h100-sxm", "fp8", "delayed").metrics
    # `mfu` on the workload precision's own peak (the HTTP contract), the BF16 basis beside
    assert m.mfu == pytest.approx(m.mfu_fp8_peak)
    assert m.mfu_bf16_peak == pytest.approx(m.mfu * 1978.9 / 989.4)
    assert m.mfu_bf16_peak == pytest.approx(m.model_tflops_per_gpu / 989.4)


def test_mxfp8_needs_mx_hardware() -> None:
    est = _estimate("h100-sxm", "fp8", "mxfp8")
    assert not est.feasible
    assert any(v.kind == "precision" and "mxfp8" in v.detail for v in est.violations)
    assert _estimate("b200", "fp8").plan is not None  # default recipe on Blackwell: mxfp8
