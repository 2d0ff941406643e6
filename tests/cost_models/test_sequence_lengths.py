"""Document-length mixes in the training workload (issue 15 point 5,
`cost_models/analytical/sequence_lengths.py`): hand-worked attention work, padding waste,
model FLOPs and per-bucket context-parallel degrees; a Monte Carlo check of the `concat`
formula; and a mix that is one document of sequence_length per sequence prices exactly as a
workload without `sequence_lengths`."""

from __future__ import annotations

import random

import pytest
from cm_support import llama3_70b, make_cluster, make_h100

from cost_models.analytical.sequence_lengths import LengthMix
from cost_models.analytical.training import AnalyticalTrainingCostModel
from cost_models.analytical.training.config import AnalyticalConfig
from cost_models.analytical.training.context import build_context
from cost_models.analytical.training.layer_costs import layer_core
from cost_models.analytical.training.shapes import LayerShape
from cost_models.base import TrainingProblem
from specs.model import ModelSpec
from specs.plan import TrainingPlan
from specs.workload import TrainingWorkload

K = 1024
S = 8 * K
HALF_1K_8K = {"histogram": [{"length": 1 * K, "count": 1}, {"length": 8 * K, "count": 1}]}
"""50/50 by document count: 1k and 8k documents."""


def _llama8b() -> ModelSpec:
    # Llama-3-8B dimensions: 32 layers, h 4096, 32 heads of 128, 8 KV heads, f 14336
    return ModelSpec(
        name="llama3-8b",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        ffn_hidden_size=14336,
        vocab_size=128256,
    )


def _workload(lengths: dict | None, packing: str = "pack", gbs: int = 64) -> TrainingWorkload:
    return TrainingWorkload(
        global_batch_size=gbs,
        sequence_length=S,
        sequence_lengths=None if lengths is None else {**lengths, "packing": packing},
    )


def _problem(model: ModelSpec, workload: TrainingWorkload) -> TrainingProblem:
    return TrainingProblem(model=model, cluster=make_cluster(make_h100(), 4), workload=workload)


def test_packed_half_1k_half_8k_attention_by_hand() -> None:
    """Per 9 packed 8k sequences of a 50/50 mix by count (N docs: N/2 of 8k fill N/2
    sequences, N/2 of 1k fill N/16): 8 of 9 hold one 8k document (Σs² = 64 k²), 1 of 9 holds
    eight 1k documents (Σs² = 8 k²); mean Σs² = (8·64 + 8)/9 k² = 520/9 k², i.e. 65/72 of
    the all-8k sequence's 64 k²."""
    mix = LengthMix.of(_workload(HALF_1K_8K))
    assert mix is not None
    assert mix.attention_factor == pytest.approx(65 / 72, rel=1e-15)
    assert mix.real_token_fraction == 1.0 and mix.useful_attention_factor == mix.attention_factor
    assert mix.documents_per_sequence == pytest.approx(8192 / 4608)  # 16/9 documents
    assert mix.token_fractions() == pytest.approx([1 / 9, 8 / 9])

    # attention-core model FLOPs per step from the model dims: 2·s²·a·(d_qk + d_v) per
    # document and layer forward, × 3 for forward + backward
    model = _llama8b()
    a, d, L, B = 32, 128, 32, 64
    fixed_attn = 3 * B * L * 2 * S * S * a * (d + d)
    mixed_attn = fixed_attn * (8 * 64 + 8) / 9 / 64
    cfg = AnalyticalConfig()
    ctx_fixed = build_context(cfg, _problem(model, _workload(None)))
    ctx_mix = build_context(cfg, _problem(model, _workload(HALF_1K_8K)))
    assert ctx_fixed.model_flops - ctx_mix.model_flops == pytest.approx(
        fixed_attn - mixed_attn, rel=1e-9
    )
    assert ctx_mix.processed_flops == ctx_mix.model_flops  # packed: no padding

    # the flash kernel's time: half the full FLOPs (causal) at 0.6 of the bf16 peak per
    # GPU, plus its launch; one layer, tensor 1, one 8k sequence
    shape = LayerShape(1, 1, 1, "none", False, True, 1, 1, "megatron_core")
    peak, eff, launch = 989.4e12, 0.6, 5e-6
    per_layer_fwd = 2 * S * S * a * (d + d)
    core_fixed = layer_core(ctx_fixed, False, shape)
    core_mix = layer_core(ctx_mix, False, shape)
    assert core_fixed.attention_forward_s == pytest.approx(
        0.5 * per_layer_fwd / (peak * eff) + launch, rel=1e-12
    )
    assert core_mix.attention_forward_s == pytest.approx(
        0.5 * per_layer_fwd * 65 / 72 / (peak * eff) + launch, rel=1e-12
    )
    assert core_mix.attention_backward_s == pytest.approx(2.5 * core_mix.attention_forward_s)
    # the linear parts follow tokens: unchanged
    assert core_mix.forward_s == core_fixed.forward_s
    assert core_mix.tp_forward_s == core_fixed.tp_forward_s


def test_padding_waste_and_real_tokens_of_pad() -> None:
    """Padded to 8k: the mean document is (1k + 8k)/2 = 4.5k tokens, so 1 − 4.5/8 = 43.75 %
    of the tokens are padding; the step costs the full 8k work of every sequence."""
    model = llama3_70b()
    plan = TrainingPlan.model_validate(
        {
            "parallelism": {"data": 1, "tensor": 8, "pipeline": 2, "context": 2},
            "micro_batch_size": 1,
            "recompute": "selective",
            "stage_layers": [40, 40],
        }
    )
    cm = AnalyticalTrainingCostModel()
    fixed = cm.evaluate(_problem(model, _workload(None)), plan)
    pad = cm.evaluate(_problem(model, _workload(HALF_1K_8K, "pad")), plan)
    assert pad.metrics.step_time_s == fixed.metrics.step_time_s
    assert pad.metrics.peak_memory_gib == fixed.metrics.peak_memory_gib
    report = pad.details["sequence_lengths"]
    assert report["padding_waste_fraction"] == pytest.approx(0.4375, rel=1e-15)
    assert report["real_tokens_per_step"] == 64 * 4608
    assert pad.metrics.tokens_per_s == pytest.approx(64 * 4608 / fixed.metrics.step_time_s)
    # useful attention: E[s²]/S² = (1 + 64)/2 / 64 = 65/128 of the 8k document's
    assert report["useful_attention_factor"] == pytest.approx(65 / 128, rel=1e-15)
    # MFU counts the documents' FLOPs only: below the fixed-length MFU, and the hardware
    # rate (padding computed) equals the fixed-length one
    assert pad.metrics.mfu < fixed.metrics.mfu
    assert pad.metrics.hardware_tflops_per_gpu == pytest.approx(
        fixed.metrics.hardware_tflops_per_gpu, rel=1e-12
    )
    assert "per_bucket_context_parallel" not in report  # one document per sequence


def test_concat_by_hand_and_by_simulation() -> None:
    """concat (documents split at the sequence boundary): E[Σ pieces²] = (S·E[s²] −
    E[s³]/3)/μ. One bucket of S: S²·(1 − 1/3) = 2/3 S². The 50/50 1k/8k mix in k units:
    (8·32.5 − 256.5/3)/4.5 = 38.78 k² of 64 k², 0.60590."""
    one = LengthMix.of(_workload({"samples": [S]}, "concat"))
    assert one is not None and one.attention_factor == pytest.approx(2 / 3, rel=1e-15)
    mix = LengthMix.of(_workload(HALF_1K_8K, "concat"))
    assert mix is not None
    expected = (8 * 32.5 - 256.5 / 3) / 4.5 / 64
    assert mix.attention_factor == pytest.approx(expected, rel=1e-12)
    # an independent check: a long random stream of 1k / 8k documents cut every 8k tokens
    rng = random.Random(7)
    total = count = 0.0
    carry = 0  # tokens of the current document left over from the previous window
    for _ in range(40_000):
        room, squares = S, 0
        while room > 0:
            if carry == 0:
                carry = rng.choice((1 * K, 8 * K))
            piece = min(carry, room)
            squares += piece * piece
            carry -= piece
            room -= piece
        total += squares
        count += 1
    assert total / count / S**2 == pytest.approx(expected, rel=0.01)


def test_one_document_of_sequence_length_prices_as_no_mix() -> None:
    """A mix whose every document is sequence_length long is the fixed-length workload:
    pack and pad price it bit for bit as a workload without `sequence_lengths` (ρ = S²/(S·S)
    = 1), for context parallelism, full recompute and the unfused kernel alike."""
    model = llama3_70b()
    cm = AnalyticalTrainingCostModel()
    plans = [
        {
            "parallelism": {"data": 1, "tensor": 8, "pipeline": 2, "context": 2},
            "recompute": "selective",
        },
        {"parallelism": {"data": 2, "tensor": 4, "pipeline": 4}, "recompute": "full"},
        {"parallelism": {"data": 4, "tensor": 8}, "recompute": "none", "flash_attention": False},
    ]
    for raw in plans:
        pp = raw["parallelism"].get("pipeline", 1)
        plan = TrainingPlan.model_validate({**raw, "stage_layers": [80 // pp] * pp})
        fixed = cm.evaluate(_problem(model, _workload(None)), plan)
        for packing in ("pack", "pad"):
            same = cm.evaluate(_problem(model, _workload({"samples": [S] * 3}, packing)), plan)
            assert same.metrics == fixed.metrics, (raw, packing)
            assert same.memory == fixed.memory


def test_unfused_attention_gets_no_varlen_saving() -> None:
    model = llama3_70b()
    plan = TrainingPlan.model_validate(
        {"parallelism": {"data": 4, "tensor": 8}, "flash_attention": False, "stage_layers": [80]}
    )
    cm = AnalyticalTrainingCostModel()
    fixed = cm.evaluate(_problem(model, _workload(None)), plan)
    pack = cm.evaluate(_problem(model, _workload(HALF_1K_8K)), plan)
    assert pack.metrics.step_time_s == fixed.metrics.step_time_s
    assert pack.details["sequence_lengths"]["priced_attention_factor"] == 1.0


def test_packing_speeds_up_and_reports_per_bucket_context_parallel() -> None:
    """Packed 1k/8k documents on context 2 with micro-batch 1: a rank holds 8k/2 = 4k
    tokens, so the 1k documents need no context parallelism (Megatron-Core
    `gpus_needed(1k) = max(1, 2^⌈log₂ 0.25⌉) = 1`) and the 8k ones 2: the ring volume falls
    to the 8k documents' token share, 8/9."""
    model = llama3_70b()
    plan = TrainingPlan.model_validate(
        {
            "parallelism": {"data": 1, "tensor": 8, "pipeline": 2, "context": 2},
            "recompute": "selective",
            "stage_layers": [40, 40],
        }
    )
    cm = AnalyticalTrainingCostModel()
    fixed = cm.evaluate(_problem(model, _workload(None)), plan)
    pack = cm.evaluate(_problem(model, _workload(HALF_1K_8K)), plan)
    assert pack.metrics.step_time_s < fixed.metrics.step_time_s
    assert pack.metrics.peak_memory_gib == fixed.metrics.peak_memory_gib
    assert pack.metrics.tokens_per_s == pytest.approx(64 * S / pack.metrics.step_time_s)
    per_bucket = pack.details["sequence_lengths"]["per_bucket_context_parallel"]
    assert per_bucket["max_seqlen_per_dp_cp_rank"] == 4096
    assert [r["context_parallel"] for r in per_bucket["degrees"]] == [1, 2]
    assert per_bucket["volume_fraction"] == pytest.approx(8 / 9)
    cp = pack.metrics.time_breakdown_s.context_parallel_comm
    assert per_bucket["context_parallel_comm_s"] == pytest.approx(cp * 8 / 9)
    assert per_bucket["step_time_s"] == pytest.approx(pack.metrics.step_time_s - cp / 9)


def test_real_tokens_per_step_excludes_padding_only() -> None:
    assert _workload(None).real_tokens_per_step == 64 * S
    assert _workload(HALF_1K_8K, "pack").real_tokens_per_step == 64 * S
    assert _workload(HALF_1K_8K, "concat").real_tokens_per_step == 64 * S
    assert _workload(HALF_1K_8K, "pad").real_tokens_per_step == 64 * 4608


def test_economics_count_real_tokens() -> None:
    """Energy and cost per token of a padded mix are per document token: the same step over
    4608 instead of 8192 tokens per sequence costs 8192/4608 = 16/9 as much per token."""
    from cost_models.economics import economics

    model = llama3_70b()
    plan = TrainingPlan.model_validate(
        {"parallelism": {"data": 4, "tensor": 8}, "stage_layers": [80]}
    )
    acc = make_h100().model_copy(update={"tdp_w": 700.0})

    def problem(workload: TrainingWorkload) -> TrainingProblem:
        return TrainingProblem(model=model, cluster=make_cluster(acc, 4), workload=workload)

    fixed = economics(problem(_workload(None)), plan, 10.0, 0.5)
    pad = economics(problem(_workload(HALF_1K_8K, "pad")), plan, 10.0, 0.5)
    assert fixed.energy_per_token_j is not None and pad.energy_per_token_j is not None
    assert pad.energy_per_token_j == pytest.approx(fixed.energy_per_token_j * 16 / 9, rel=1e-12)
