"""The analytical serving cost model against hand-derived figures, closed forms, brute force
and AIConfigurator's measured-kernel estimates."""

from __future__ import annotations

import itertools
import math

import pytest

from cost_models.serving import (
    AnalyticalInstanceCost,
    AnalyticalServingCostModel,
    InstanceCost,
    IterationBatch,
    ServingAnalyticalConfig,
    build_instance_cost,
    build_serving_cost_model,
    list_serving_cost_models,
    touched_experts,
)
from cost_models.serving.analytical import stage_layer_counts
from hardware_catalog import resolve_cluster
from hardware_catalog.schema import ResolvedCluster
from specs.cluster import ClusterSpec
from specs.errors import InfeasiblePlan, PluginNotFound, SpecError
from specs.model import ModelSpec
from specs.presets import get_preset

GIB = 1024**3
H100_BW = 3.35e12
H100_BF16 = 989.4e12

# Everything fixed set to zero: what is left is bytes / bandwidth and FLOPs / peak.
BARE = ServingAnalyticalConfig(
    kernel_latency_s=0,
    attention_kernel_s=0,
    attention_block_s=0,
    allreduce_latency_s=0,
    a2a_latency_s=0,
    alpha_intra_s=0,
    alpha_inter_s=0,
    iteration_overhead_s=0,
)


def cluster(acc: str = "h100-sxm", nodes: int = 1) -> ResolvedCluster:
    return resolve_cluster(ClusterSpec(node_groups=[{"accelerator": acc, "num_nodes": nodes}]))


def llama8b() -> ModelSpec:
    return get_preset("llama3-8b")


def llama70b() -> ModelSpec:
    return get_preset("llama3-70b")


def moe_toy() -> ModelSpec:
    """A small MoE (E = 16, top-2, no shared experts) whose numbers are easy to follow."""
    return ModelSpec(
        name="moe-toy",
        num_layers=8,
        hidden_size=2048,
        num_attention_heads=16,
        num_kv_heads=4,
        ffn_hidden_size=8192,
        vocab_size=32000,
        moe={"num_experts": 16, "top_k": 2, "expert_ffn_hidden_size": 4096},
    )


# ---- KV cache -------------------------------------------------------------------------------
def test_kv_bytes_per_token_gqa_and_mla() -> None:
    # 2 (K and V) · L · g · d · bytes
    c8 = build_instance_cost(llama8b(), cluster(), 1, 1, 1, "bf16", "bf16")
    assert c8.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072
    c70 = build_instance_cost(llama70b(), cluster(), 8, 1, 1, "bf16", "bf16")
    assert c70.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327680
    assert c70.kv_bytes_per_token_per_gpu == 327680 / 8  # one KV head per rank
    # DeepSeek-V3 MLA: (kv_lora_rank + rope dim) · L · bytes, the same on every TP rank
    ds = build_instance_cost(get_preset("deepseek-v3"), cluster("h200"), 8, 1, 1, "fp8", "fp8")
    assert ds.kv_bytes_per_token == (512 + 64) * 61 * 1 == 35136
    assert ds.kv_bytes_per_token_per_gpu == 35136


def test_kv_heads_replicated_not_split_below_one_per_rank() -> None:
    # 16 ranks, 8 KV heads: every rank still holds one whole KV head (vLLM replicates)
    c = build_instance_cost(llama70b(), cluster(nodes=2), 16, 1, 1, "bf16", "bf16")
    assert c.kv_bytes_per_token_per_gpu == 2 * 80 * 1 * 128 * 2


def test_kv_capacity_by_hand_llama8b_h100() -> None:
    m = llama8b()
    c = build_instance_cost(m, cluster(), 1, 1, 1, "bf16", "bf16")
    weights = 2 * m.num_parameters()  # bf16, nothing split or replicated at t = 1
    assert c.weights_bytes_per_gpu == pytest.approx(weights)
    assert weights == pytest.approx(16.06e9, rel=1e-3)
    usable = 0.9 * 79.6474609375 * GIB
    h, f, v = 4096, 14336, 128256
    qkv = 32 * 256 + 2 * 8 * 128  # q (a·2d counts q and the output width) + k, v
    activation = 8192 * (2 * h + qkv + 3 * f) * 2 + 256 * v * 4
    free = usable - weights - 1.5 * GIB - activation
    assert c.kv_capacity_tokens == math.floor(free / 131072)
    assert 440_000 < c.kv_capacity_tokens < 450_000  # ≈ 54 GiB / 128 KiB
    assert c.kv_cache_gib == pytest.approx(c.kv_capacity_tokens * 131072 / GIB)


def test_memory_utilization_moves_capacity_by_its_share() -> None:
    m = llama8b()
    hi = build_instance_cost(m, cluster(), 1, 1, 1, "bf16", "bf16", memory_utilization=0.9)
    lo = build_instance_cost(m, cluster(), 1, 1, 1, "bf16", "bf16", memory_utilization=0.8)
    delta = 0.1 * 79.6474609375 * GIB / 131072
    assert hi.kv_capacity_tokens - lo.kv_capacity_tokens == pytest.approx(delta, abs=1)


def test_tensor_parallel_splits_weights_but_not_norms() -> None:
    m = llama70b()
    c = build_instance_cost(m, cluster(), 8, 1, 1, "bf16", "bf16")
    norms = m.num_layers * 2 * m.hidden_size + m.hidden_size  # replicated on every rank
    expected = 2 * ((m.num_parameters() - norms) / 8 + norms)
    assert c.weights_bytes_per_gpu == pytest.approx(expected, rel=1e-12)
    c4 = build_instance_cost(m, cluster(), 4, 1, 1, "bf16", "bf16")
    assert c4.weights_bytes_per_gpu == pytest.approx(2 * ((m.num_parameters() - norms) / 4 + norms))


def test_int4_and_fp8_weights_keep_embedding_and_head_bf16() -> None:
    m = llama8b()
    vh = m.vocab_size * m.hidden_size
    norms = m.num_layers * 2 * m.hidden_size + m.hidden_size
    linear = m.num_parameters() - 2 * vh - norms
    for fmt, per in (("int4", 0.5), ("fp8", 1.0)):
        c = build_instance_cost(m, cluster(), 1, 1, 1, fmt, "bf16")  # type: ignore[arg-type]
        assert c.weights_bytes_per_gpu == pytest.approx(per * linear + 2 * (2 * vh + norms))


def test_pipeline_stages_hold_their_layers_and_the_heavier_end() -> None:
    m = llama8b()
    assert stage_layer_counts(32, 3) == [11, 11, 10]
    c1 = build_instance_cost(m, cluster(), 1, 1, 1, "bf16", "bf16")
    c2 = build_instance_cost(m, cluster(), 1, 2, 1, "bf16", "bf16")
    vh = m.vocab_size * m.hidden_size
    layers = c1.weights_bytes_per_gpu - 2 * (2 * vh + m.hidden_size)
    # stage 1: 16 layers + LM head + final norm (stage 0 has the embedding, h elements fewer)
    assert c2.weights_bytes_per_gpu == pytest.approx(layers / 2 + 2 * (vh + m.hidden_size))
    assert c2.kv_bytes_per_token_per_gpu == 131072 / 2


# ---- decode -----------------------------------------------------------------------------
def test_decode_step_is_the_weight_and_kv_read() -> None:
    """Batch 1, fixed latencies zeroed: weights read once (all but the input embedding, of
    which one row is read) at 0.8 × 3.35 TB/s plus the KV cache at 0.9 × 3.35 TB/s; the
    activation and elementwise traffic of one token adds < 0.1 %."""
    m = llama8b()
    c = build_instance_cost(m, cluster(), 1, 1, 1, "bf16", "bf16", config=BARE)
    read = 2 * (m.num_parameters() - m.vocab_size * m.hidden_size)  # 15.01 GB
    ctx = 1024
    expected = read / (0.8 * H100_BW) + ctx * 131072 / (0.9 * H100_BW)
    assert expected == pytest.approx(5.65e-3, rel=0.01)
    assert c.decode_step_time_s(1, ctx) == pytest.approx(expected, rel=0.002)


def test_decode_defaults_near_the_brief_sanity_figure() -> None:
    # 16.06e9 / (3.35e12 · 0.8) ≈ 6.0 ms, plus per-kernel and attention overheads
    c = build_instance_cost(llama8b(), cluster(), 1, 1, 1, "bf16", "bf16")
    assert 6.0e-3 < c.decode_step_time_s(1, 1024) < 7.5e-3


def test_decode_grows_with_batch_and_context() -> None:
    c = build_instance_cost(llama8b(), cluster(), 1, 1, 1, "bf16", "bf16")
    t = [c.decode_step_time_s(b, 1024) for b in (1, 16, 64, 256)]
    assert t == sorted(t) and t[-1] > 2 * t[0]
    # KV read per extra context token across the batch: 131072 B at 0.9 × 3.35 TB/s
    slope = (c.decode_step_time_s(16, 2048) - c.decode_step_time_s(16, 1024)) / (16 * 1024)
    assert slope == pytest.approx(131072 / (0.9 * H100_BW), rel=1e-9)


def test_tensor_parallel_allreduce_count() -> None:
    """2 all-reduces per layer + 1 for the vocab-parallel embedding: raising the one-shot
    latency by 10 µs adds (2·80 + 1) · 10 µs to a decode step."""
    m = llama70b()
    base = build_instance_cost(m, cluster(), 8, 1, 1, "bf16", "bf16")
    slow = build_instance_cost(
        m,
        cluster(),
        8,
        1,
        1,
        "bf16",
        "bf16",
        config=ServingAnalyticalConfig(allreduce_latency_s=13.5e-6),
    )
    delta = slow.decode_step_time_s(1, 1024) - base.decode_step_time_s(1, 1024)
    assert delta == pytest.approx(161 * 10e-6, rel=1e-9)


def test_pipeline_adds_one_handoff_per_boundary() -> None:
    m = llama8b()
    c1 = build_instance_cost(m, cluster(), 1, 1, 1, "bf16", "bf16")
    c2 = build_instance_cost(m, cluster(), 1, 2, 1, "bf16", "bf16")
    # send/recv of b·h bf16 on NVLink: α 3 µs + bytes / (450 GB/s × 0.8222)
    for b in (1, 64):
        hop = 3e-6 + b * 4096 * 2 / (450e9 * 0.8222)
        assert c2.decode_step_time_s(b, 512) - c1.decode_step_time_s(b, 512) == pytest.approx(
            hop, rel=1e-6
        )


# ---- prefill ----------------------------------------------------------------------------
def test_prefill_is_compute_bound_flops() -> None:
    """Prefill of 4096 tokens: 2·N·T FLOPs of the linear layers (N without embedding and LM
    head) at the catalog GEMM efficiency (H100 0.803 of 989.4 TFLOP/s), the causal attention
    2·pairs·a·(d_qk + d_v)·L at the flash efficiency (0.34), and the elementwise traffic per
    token and layer, 2 bytes × (two norms 4h + two residual adds 6h + RoPE 2(a+g)d + SwiGLU
    3f), at 0.8 × 3.35 TB/s; within the GEMM k-overhead 128/(k+128) (≤ 3 %)."""
    m = llama8b()
    c = build_instance_cost(m, cluster(), 1, 1, 1, "bf16", "bf16", config=BARE)
    n_tok, h, f = 4096, 4096, 14336
    vh = m.vocab_size * h
    linear = m.num_parameters() - 2 * vh - (m.num_layers * 2 + 1) * h
    pairs = n_tok * (n_tok + 1) / 2
    attn = 2 * pairs * 32 * 256 * 32
    elementwise = n_tok * 32 * 2 * (4 * h + 6 * h + 2 * (32 + 8) * 128 + 3 * f)
    expected = (
        2 * linear * n_tok / (H100_BF16 * 0.803)
        + attn / (H100_BF16 * 0.34)
        + elementwise / (0.8 * H100_BW)
    )
    assert expected == pytest.approx(71.97e-3 + 13.08e-3 + 9.22e-3, rel=1e-3)
    ratio = c.prefill_time_s(n_tok) / expected
    assert 1.0 < ratio < 1.03


def test_prefill_scales_linearly_plus_quadratic_attention() -> None:
    c = build_instance_cost(llama8b(), cluster(), 1, 1, 1, "bf16", "bf16")
    r = c.prefill_time_s(4096) / c.prefill_time_s(2048)
    assert 2.0 < r < 2.3


def test_fp8_gemms_run_at_the_fp8_peak() -> None:
    m = llama8b()
    bf = build_instance_cost(m, cluster(), 1, 1, 1, "bf16", "bf16", config=BARE)
    f8 = build_instance_cost(m, cluster(), 1, 1, 1, "fp8", "fp8", config=BARE)
    # GEMM rate ratio (1978.9·0.7088)/(989.4·0.803) = 1.765; attention and elementwise
    # kernels keep their bf16 time, so the whole prefill gains less
    ratio = bf.prefill_time_s(4096) / f8.prefill_time_s(4096)
    assert 1.45 < ratio < 1.765
    # decode reads half the linear-layer bytes (embedding/head stay bf16) and half the KV
    d = bf.decode_step_time_s(1, 1024) / f8.decode_step_time_s(1, 1024)
    assert 1.8 < d < 2.0


def test_iteration_parts_add_up() -> None:
    c = build_instance_cost(llama8b(), cluster(), 1, 1, 1, "bf16", "bf16")
    assert c.iteration_time_s(IterationBatch()) == 0.0
    mixed = IterationBatch(
        decode_seqs=8,
        decode_context_tokens=8000,
        prefill_tokens=512,
        prefill_attention_pairs=512 * 513 / 2,
        prefill_seqs=1,
    )
    t = c.iteration_time_s(mixed)
    assert t > c.prefill_time_s(512) and t > c.decode_step_time_s(8, 1000)
    assert t < c.prefill_time_s(512) + c.decode_step_time_s(8, 1000)


# ---- MoE --------------------------------------------------------------------------------
def test_touched_experts_limits_and_brute_force() -> None:
    assert touched_experts(256, 8, 1) == pytest.approx(8)
    assert touched_experts(256, 8, 10_000) == pytest.approx(256)
    assert touched_experts(256, 8, 0) == 0.0
    # brute force: E = 5 experts, top-2, 3 tokens, every routing equally likely
    choices = list(itertools.combinations(range(5), 2))
    total = sum(len(set(a) | set(b) | set(c)) for a, b, c in itertools.product(choices, repeat=3))
    assert touched_experts(5, 2, 3) == pytest.approx(total / len(choices) ** 3)


def test_moe_decode_reads_only_touched_experts() -> None:
    m = moe_toy()
    c = build_instance_cost(m, cluster(), 1, 1, 1, "bf16", "bf16", config=BARE)
    expert_bytes = 3 * 2048 * 4096 * 2
    non_expert = 2 * (m.num_parameters() - m.vocab_size * 2048) - 8 * 16 * expert_bytes
    one = c.decode_step_time_s(1, 100)
    kv = 100 * 2 * 8 * 4 * 128 * 2 / (0.9 * H100_BW)
    assert one == pytest.approx(
        (non_expert + 8 * 2 * expert_bytes) / (0.8 * H100_BW) + kv, rel=0.01
    )
    # 64 sequences touch 16·(1 − (7/8)^64) ≈ 16 experts per layer
    many = c.decode_step_time_s(64, 100)
    assert many - one == pytest.approx(
        8 * (touched_experts(16, 2, 64) - 2) * expert_bytes / (0.8 * H100_BW) + 63 * kv, rel=0.05
    )


def test_expert_parallel_spreads_experts_and_keeps_one_cache_per_replica() -> None:
    m = get_preset("qwen3-235b-a22b")
    tp = build_instance_cost(m, cluster("h200"), 8, 1, 1, "bf16", "bf16")
    ep = build_instance_cost(m, cluster("h200"), 1, 1, 8, "bf16", "bf16")
    assert tp.num_gpus == ep.num_gpus == 8
    # the routed experts: 94 layers · 128 · 3·4096·1536 params, /8 GPUs, either way
    experts = 94 * 128 * 3 * 4096 * 1536 * 2 / 8
    assert ep.weights_bytes_per_gpu - experts > tp.weights_bytes_per_gpu - experts  # attention
    # eight attention replicas, each a whole cache of 94·2·4·128·2 bytes per token
    per_token = 94 * 2 * 4 * 128 * 2
    assert ep.kv_bytes_per_token_per_gpu == per_token
    assert ep.kv_capacity_tokens == pytest.approx(8 * ep.kv_cache_gib * GIB / per_token, abs=8)


# ---- KV transfer ---------------------------------------------------------------------------
def test_kv_transfer_time_by_hand() -> None:
    m = llama70b()
    inter = build_instance_cost(m, cluster(), 8, 1, 1, "bf16", "bf16")
    intra = build_instance_cost(m, cluster(), 8, 1, 1, "bf16", "bf16", kv_transfer_tier="intra")
    per_gpu = 2048 * 327680 / 8
    assert inter.kv_transfer_time_s(2048) == pytest.approx(30e-6 + per_gpu / (50e9 * 0.97))
    assert intra.kv_transfer_time_s(2048) == pytest.approx(3e-6 + per_gpu / (450e9 * 0.8222))
    assert inter.kv_transfer_time_s(0) == 0.0


# ---- published comparison ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "tensor", "batch", "tpot_ms", "ttft_ms"),
    [
        ("llama3-8b", 1, 1, 6.582, 23.510),
        ("llama3-8b", 1, 16, 7.887, 337.664),
        ("llama3-70b", 8, 1, 9.947, 53.061),
        ("llama3-70b", 8, 64, 15.141, 2411.369),
        ("llama3-70b", 4, 1, 15.808, 72.051),
    ],
)
def test_within_15pct_of_aiconfigurator(
    model: str, tensor: int, batch: int, tpot_ms: float, ttft_ms: float
) -> None:
    """AIConfigurator 0.12.0 (TensorRT-LLM 1.3.0rc20 measured-kernel database, h100_sxm):
    `aiconfigurator cli estimate --model-path meta-llama/Meta-Llama-3.1-{8B,70B} --system
    h100_sxm --backend trtllm --isl 1024 --osl 256 --estimate-mode static --batch-size B
    --tp-size T`. Its static TPOT averages the 256 steps (context 1025…1280, mean 1152); its
    static TTFT prefills the whole batch of 1024-token prompts at once."""
    c = build_instance_cost(get_preset(model), cluster(), tensor, 1, 1, "bf16", "bf16")
    assert c.decode_step_time_s(batch, 1152) * 1e3 == pytest.approx(tpot_ms, rel=0.15)
    assert c.prefill_time_s(1024, batch) * 1e3 == pytest.approx(ttft_ms, rel=0.15)


# ---- infeasible layouts ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "kind"),
    [
        ((llama70b(), "h100-sxm", 1, 1, 1, "bf16"), "memory"),
        ((llama8b(), "h100-sxm", 3, 1, 1, "bf16"), "divisibility"),
        ((llama8b(), "h100-sxm", 1, 1, 2, "bf16"), "divisibility"),
        ((llama8b(), "a100-80gb", 1, 1, 1, "fp8"), "precision"),
        ((llama8b(), "h100-sxm", 8, 2, 1, "bf16"), "topology"),
    ],
)
def test_infeasible_plans_say_why(args: tuple[object, ...], kind: str) -> None:
    model, acc, t, p, e, fmt = args
    with pytest.raises(InfeasiblePlan) as err:
        build_instance_cost(model, cluster(acc), t, p, e, fmt, "bf16")  # type: ignore[arg-type]
    assert err.value.kind == kind


def test_pipeline_deeper_than_layers_is_refused() -> None:
    tiny = ModelSpec(
        num_layers=2, hidden_size=256, num_attention_heads=8, ffn_hidden_size=512, vocab_size=1000
    )
    with pytest.raises(InfeasiblePlan, match="exceeds the 2 layers"):
        build_instance_cost(tiny, cluster(), 1, 4, 1, "bf16", "bf16")


# ---- registry and protocol ----------------------------------------------------------------
def test_registry_builds_the_analytical_model() -> None:
    assert "analytical" in list_serving_cost_models()
    cm = build_serving_cost_model("analytical", {"iteration_overhead_s": 0.001})
    assert isinstance(cm, AnalyticalServingCostModel)
    cost = cm.instance_cost(llama8b(), cluster(), 1, 1, 1, "bf16", "bf16")
    assert isinstance(cost, AnalyticalInstanceCost) and isinstance(cost, InstanceCost)
    default = build_instance_cost(llama8b(), cluster(), 1, 1, 1, "bf16", "bf16")
    gap = cost.decode_step_time_s(1, 10) - default.decode_step_time_s(1, 10)
    assert gap == pytest.approx(0.001 - 40e-6)
    with pytest.raises(PluginNotFound, match="registered: analytical"):
        build_serving_cost_model("nope")
    with pytest.raises(SpecError) as err:
        build_serving_cost_model("analytical", {"kernel_latency_s": -1})
    assert err.value.field == "cost_model.config.kernel_latency_s"
