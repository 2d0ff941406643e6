"""The analytical serving cost model: per-iteration latency and KV capacity of one engine
instance (tensor t × pipeline p × expert e GPUs) of one model on one catalog accelerator.

One iteration of continuous batching (Orca, Yu et al., OSDI'22) with chunked prefill
(Sarathi-Serve, Agrawal et al., OSDI'24) runs every linear layer once over the batch's
T = decode sequences + prefill tokens, the attention of the decode sequences (KV cache read
once) and of the prefill chunks (flash attention over the chunk's causal pairs), the tensor-
parallel all-reduces, the pipeline hand-offs and the LM head of the sequences that emit a
token. On one GPU, summed over every layer of every pipeline stage (the iteration's
latency is the whole pipeline's):

- linear layers: the roofline GEMM of `cost_models/analytical/gemm.py` at the per-GPU shape
  (m = tokens, k, n split by tensor parallelism, Shoeybi et al. 2019 §3): weight-read bound
  at decode batch sizes, compute bound in prefill (Williams et al. 2009). Bytes per weight by
  format: bf16/fp16 2, fp8 1 (W8A8: fp8 GEMMs at the fp8 peak and `gemm_efficiency_fp8`, each
  after two activation-quantisation kernels, FP8_QUANT_KERNELS),
  int4 0.5 (W4A16: GEMMs computed at the bf16 peak, as Marlin/AWQ kernels dequantise to
  bf16; group scales, ~3 % more bytes, are ignored). Embedding and LM head stay bf16
  (vLLM and TensorRT-LLM leave them unquantised by default).
- attention, decode: per layer `attention_kernel_s` + (sequence, KV-head) blocks ×
  `attention_block_s` / compute units + context tokens × KV bytes per token /
  (HBM × `kv_memory_efficiency`) (or the attention FLOPs at the flash efficiency when they
  take longer, as MLA's 128 heads sharing one latent can); prefill: the causal pairs
  (`IterationBatch.prefill_attention_pairs`) × 2·heads·(d_qk + d_v) FLOPs at the
  accelerator's flash-attention efficiency (FlashAttention-2, Dao 2023, §4.1).
- elementwise kernels (norms, activation, residual adds): bytes moved per token
  (`cost_models/analytical/elementwise.py`) at the streaming bandwidth plus a launch each.
- tensor parallelism: 2 all-reduces of T·h bf16 per layer (Megatron, Shoeybi et al. 2019
  §3); inside a node the engines' one-shot custom all-reduce (vLLM `custom_all_reduce`,
  TensorRT-LLM): `allreduce_latency_s` + (t−1)·S / B_intra, or the NCCL ring of
  `collectives.all_reduce_time_s` when that is faster (large S) or the group spans nodes.
- pipeline parallelism: p−1 send/recv of T·h bf16 (`collectives.send_recv_time_s`).
- MoE layers: the experts touched by T routed tokens, E·(1 − (1 − k/E)^T) in expectation
  under uniform routing, are read once; a grouped GEMM runs them at T·k/E_touched tokens
  each. With e = 1 every expert is split over the t GPUs (vLLM's default MoE tensor
  parallelism); with e > 1 the instance runs e attention data-parallel replicas of t GPUs
  (SGLang DP attention, vLLM DP+EP: EP size = t·e) and each GPU holds E/(t·e) whole experts,
  with a dispatch and a combine all-to-all over the t·e GPUs (`a2a_latency_s` +
  `collectives.all_to_all_time_s`), and every attention replica handles 1/e of the batch.
- the sampler: `SAMPLER_PASSES` memory-bound passes over the batch's fp32 logits
  (seqs × vocabulary × 4 bytes), and a fixed `iteration_overhead_s` (the sampling kernels'
  launches and input preparation).

Pipeline parallelism and throughput: the model reports an iteration's latency through all
p stages (Σ stages + hand-offs). Engines keep up to p micro-batches in flight (vLLM virtual
engines), so the simulator runs a p-stage instance as p schedulers with 1/p of the KV cache
each (`pipeline_stages`, `cost_models.serving.base.pipeline_engines`).

Memory per GPU (the heaviest pipeline stage): weights of its layers (KV heads replicated
when t exceeds them, as vLLM does) plus the embedding on the first and the LM head on the
last stage; KV cache = memory × `memory_utilization` (vLLM `gpu_memory_utilization`, default
0.9) − weights − runtime reserve − activation peak. KV bytes per token and layer: GQA
2·max(1, g/t)·d·bytes; MLA (DeepSeek-V2/V3) (kv_lora_rank + qk_rope_head_dim)·bytes,
replicated on every tensor rank. The instance holds e × (per-GPU KV bytes / bytes per token)
tokens (each attention replica has its own cache).

Calibration: the GEMM constants (`kernel_latency_s` 4 µs, `gemm_k_overhead` 128 and the
0.8 streaming efficiency of gemm.py) reproduce the measured H100 SXM bf16 GEMM table shipped
with NVIDIA AIConfigurator (ai-dynamo/aiconfigurator, TensorRT-LLM 1.3.0rc20,
`h100_sxm/gemm/trtllm/1.3.0rc20`): for 1024 ≤ n, k ≤ 16384 the mean log-error is +4 % at
m ≤ 128, −3 % at 128 < m ≤ 1024 and +2 % above (H200: 0 %, 0 %, +4 %). A least-squares fit
of the m = 1 rows gives 2.67 TB/s (0.80 of 3.35) plus 2.5–4 µs per GEMM. The attention and
all-reduce constants are read off the same database's measured decode-attention (XQA) and
custom all-reduce tables (see each field). End to end, Llama-3.1-8B (TP1) and -70B (TP2/4/8)
on H100 at batch 1–128 with 1024/256 tokens land within 12 % of AIConfigurator's static
TPOT and TTFT (`tests/cost_models/test_serving_cost.py`). Known gaps: MoE experts split by
tensor parallelism into slices of k or n ≤ 384 run well below the roofline in TensorRT-LLM
(Qwen3-235B, t = 8: ~25 % of peak at 8192 tokens), so prefill of such layouts is optimistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cost_models.analytical.collectives import (
    TwoTierNetwork,
    all_reduce_time_s,
    all_to_all_time_s,
    send_recv_time_s,
)
from cost_models.analytical.elementwise import layer_elementwise_bytes, mlp_width
from cost_models.analytical.flops import attention_dims, layer_gemms, split_gemm
from cost_models.analytical.gemm import MEMORY_EFFICIENCY, RooflineGemm
from cost_models.analytical.placement import GroupPlacement, Tier, place_group
from cost_models.analytical.training import DEFAULT_ATTENTION_EFFICIENCY
from cost_models.serving.base import IterationBatch
from cost_models.serving.kernel_tables import MeasuredGemm, stacks, table_for
from cost_models.serving.registry import register_serving_cost_model
from hardware_catalog.schema import AcceleratorSpec, ResolvedCluster
from specs.errors import InfeasiblePlan
from specs.model import ModelSpec

GB = 1e9
GIB = 1024**3
WeightFormat = Literal["bf16", "fp16", "fp8", "int4"]
KVFormat = Literal["bf16", "fp16", "fp8"]

BYTES_PER_WEIGHT: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4": 0.5}
"""Stored bytes per linear-layer weight by format (int4: W4A16, scales ignored)."""
BYTES_PER_KV: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
ACT_BYTES = 2.0
"""bf16 activations (hidden states, all-reduce and hand-off payloads)."""
ELEMENTWISE_KERNELS_PER_LAYER = 3
"""Fused residual-add + RMSNorm twice and the SwiGLU/GeLU activation (RoPE and the KV-cache
append run inside the attention kernel's fixed time)."""
MOE_EXTRA_KERNELS = 4
"""Kernels of an MoE layer besides its two grouped GEMMs: top-k routing, token permutation,
activation and the weighted un-permute (TensorRT-LLM / vLLM fused-MoE pipelines). With the
GEMMs' launches they put ~24 µs under one MoE layer at one token, against 33–41 µs measured
for Qwen3-235B's MoE (E = 128, k = 8, t = 8) on H200 (AIConfigurator `moe_perf`)."""
FP8_QUANT_KERNELS = 2
"""Kernels before each W8A8 fp8 GEMM: the activation scale (amax) and the cast to fp8. The
measured H100 fp8 GEMMs of AIConfigurator (TensorRT-LLM torch flow) take ≈ 12 µs plus the
bytes at m = 1 whatever their size (8.4–59 MB of weights: 14.8–34 µs), three kernel
latencies, against one for bf16."""
SAMPLER_LOGIT_BYTES = 4.0
"""fp32 logits held for sampling."""
SAMPLER_PASSES = 3
"""HBM passes of the sampler over the fp32 logits of the batch: the gathered logits are
written, read by the softmax (temperature, top-p/top-k masks fused, as FlashInfer's and
vLLM's sampling kernels do) which writes the probabilities, and read once more to draw the
token: a memory-bound cost that grows with batch × vocabulary (128k for Llama-3)."""


class ServingAnalyticalConfig(BaseModel):
    """Options of the analytical serving cost model (few, physical, each with its source)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    kernel_latency_s: float = Field(default=4e-6, ge=0, le=1e-3)
    """Fixed time per GEMM or elementwise kernel inside a CUDA graph: the fit of the measured
    H100 bf16 GEMM table of AIConfigurator (module docstring; 2.5–4 µs at m = 1)."""
    gemm_k_overhead: float = Field(default=128.0, ge=0, le=65536)
    """GEMM pipeline fill + epilogue in elements of k (gemm.py). Serving kernels (cuBLASLt /
    CUTLASS chosen per shape by TensorRT-LLM and vLLM) lose far less than the training
    model's A100-referenced 384 scaled per SM: the H100 table reaches 0.76–0.82 of the peak
    at k = 4096–8192 and 0.64–0.72 at k = 1024 for m ≥ 1024, fitted by 128."""
    kv_memory_efficiency: float = Field(default=0.9, gt=0, le=1)
    """Achieved HBM fraction streaming the KV cache in decode attention: the H100 XQA table
    of AIConfigurator reaches 2.9–3.0 TB/s (0.87–0.90 of 3.35) at large batch × context."""
    attention_kernel_s: float = Field(default=9e-6, ge=0, le=1e-3)
    """Fixed time of one layer's attention kernel (RoPE, KV append, attention): 8.4–9.1 µs
    for a decode step at 1–2 tokens of context and batch ≤ 32 in the H100 XQA table."""
    attention_block_s: float = Field(default=5e-6, ge=0, le=1e-3)
    """Time of one (sequence, KV head) thread block's prologue/epilogue; blocks run on all
    compute units at once, so each adds attention_block_s / units (H100: 38 ns). Fitted to
    the same table: 2048 (sequence, KV-head) pairs at 2 tokens of context take 83 µs, 1024
    take 44 µs, on 132 SMs."""
    allreduce_latency_s: float = Field(default=3.5e-6, ge=0, le=1e-3)
    """Latency of the engines' one-shot custom all-reduce on NVLink at small messages:
    TensorRT-LLM 2.7–3.2 µs on 2–8 H100s, vLLM's graph-captured kernel 4.3 µs (AIConfigurator
    `custom_allreduce_perf`, H100 SXM)."""
    a2a_latency_s: float = Field(default=12e-6, ge=0, le=1e-2)
    """Latency of one MoE dispatch or combine (DeepEP low-latency kernels on 8 H100s:
    10–16 µs for a few tokens, AIConfigurator `wideep_deepep_ll_perf`)."""
    alpha_intra_s: float = Field(default=3e-6, ge=0, le=1e-2)
    """Latency per ring step of an intra-node all-reduce too large for the one-shot kernel:
    AIConfigurator's H100 table gives 122, 197, 322 µs for 17, 34, 67 MB on 8 GPUs, i.e.
    ≈ 40 µs (14 steps × 3 µs) plus 2·7/8·S at the catalog's 370 GB/s NVLink bus bandwidth.
    (The training model's 10 µs per step describes NCCL under training traffic.)"""
    alpha_inter_s: float = Field(default=30e-6, ge=0, le=1e-2)
    """NCCL latency per step across nodes (same default as the training model)."""
    iteration_overhead_s: float = Field(default=40e-6, ge=0, le=1.0)
    """Per-iteration work outside the layers: sampling kernels and input/position copies,
    about eight small kernels. The CPU scheduler itself runs overlapped with the GPU
    (TensorRT-LLM's overlap scheduler, SGLang v0.4 'zero-overhead batch scheduler', vLLM V1
    async scheduling), and the decode step is one CUDA graph."""
    attention_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Flash-attention fraction of the dense bf16 peak in prefill; null takes the catalog
    value (H100: 0.34, FlashAttention-2), else 0.6."""
    runtime_reserve_gib: float = Field(default=1.5, ge=0, le=64)
    """Memory per GPU outside weights, KV cache and activations: CUDA context, cuBLAS
    workspace and NCCL buffers (~1 GiB, as in the training model) plus captured CUDA graphs
    (vLLM logs ~0.5 GiB for an 8B model)."""
    activation_tokens: int = Field(default=8192, ge=1, le=1_048_576)
    """Tokens of the activation peak the engine reserves (vLLM profiles a forward pass of
    max_num_batched_tokens, 8192 by default with chunked prefill)."""
    sampler_sequences: int = Field(default=256, ge=1, le=65536)
    """Sequences whose fp32 logits the sampler holds (vLLM max_num_seqs default 256)."""
    gemm_stack: str | None = None
    """Measured GEMM kernel table to price linear layers with where one exists for the
    accelerator and weight format (`cost_models/serving/kernel_tables.py`): null takes the
    default table (MI300X FP8: `aiter_ck`, untuned), `aiter_tuned` the shape-tuned aiter
    kernels, `roofline` none."""

    @field_validator("gemm_stack")
    @classmethod
    def _known_stack(cls, value: str | None) -> str | None:
        if value is not None and value not in stacks():
            raise ValueError(f"gemm_stack must be one of {stacks()} (got {value!r})")
        return value


def touched_experts(num_experts: int, top_k: int, tokens: float) -> float:
    """Expected experts that receive at least one of `tokens` tokens, each routed to top_k
    distinct experts uniformly at random: E·(1 − (1 − k/E)^T) (each expert is missed by a
    token with probability 1 − k/E, independently over tokens). T = 1 gives k; T → ∞ gives E.
    """
    if tokens <= 0:
        return 0.0
    missed: float = (1.0 - top_k / num_experts) ** tokens
    return num_experts * (1.0 - missed)


def stage_layer_counts(num_layers: int, pipeline: int) -> list[int]:
    """Layers per pipeline stage, as even as possible, the first L mod p stages one more."""
    base, extra = divmod(num_layers, pipeline)
    return [base + (1 if s < extra else 0) for s in range(pipeline)]


@dataclass(frozen=True, slots=True)
class _Linear:
    """One linear layer on one GPU: (m×k)·(k×n) per token row, `count` of them per
    iteration (layers × occurrences)."""

    k: float
    n: float
    count: int


class AnalyticalInstanceCost:
    """Costs of one engine instance (implements `cost_models.serving.base.InstanceCost`).

    `iteration_time_s` is closed form with the token-count dependent part (every linear
    layer, collective and elementwise kernel) cached per T.

    `layers` = (start, stop): the instance is one pipeline stage of a longer pipeline
    holding only those layers (pipeline 1): the embedding is priced and stored only when it
    starts at layer 0, the LM head, sampler and per-iteration overhead only when it ends at
    the last layer, and it has no hand-offs of its own (`cost_models.serving.pipeline`
    composes stages). A pipeline of p such stages on one accelerator adds up to the p-stage
    instance's iteration time plus its hand-offs (`hand_off_s`).

    Raises:
        InfeasiblePlan: `divisibility` (heads, KV heads, FFN or experts not divisible, expert
            parallelism on a dense model), `precision` (fp8 without fp8 tensor cores),
            `memory` (weights and reserve do not fit, or `memory_utilization` outside
            (0, 1]), `topology` (mixed accelerators, more GPUs than the cluster has).
    """

    def __init__(
        self,
        model: ModelSpec,
        cluster: ResolvedCluster,
        tensor: int,
        pipeline: int,
        expert: int,
        weight_precision: WeightFormat,
        kv_precision: KVFormat,
        *,
        memory_utilization: float = 0.9,
        kv_transfer_tier: Tier = "inter",
        config: ServingAnalyticalConfig | None = None,
        layers: tuple[int, int] | None = None,
    ) -> None:
        if not 0.0 < memory_utilization <= 1.0:
            raise InfeasiblePlan(
                "memory", f"memory_utilization must be in (0, 1] (got {memory_utilization})"
            )
        cfg = config or ServingAnalyticalConfig()
        self.config = cfg
        self.model = model
        self.tensor, self.pipeline, self.expert = tensor, pipeline, expert
        self.weight_precision: WeightFormat = weight_precision
        self.kv_precision: KVFormat = kv_precision
        self.memory_utilization = memory_utilization
        self.kv_transfer_tier: Tier = kv_transfer_tier
        start, stop = (0, model.num_layers) if layers is None else layers
        if not 0 <= start < stop <= model.num_layers or (layers is not None and pipeline != 1):
            raise InfeasiblePlan(
                "divisibility",
                f"a pipeline stage holds layers [{start}, {stop}) of the {model.num_layers} as "
                f"one stage (pipeline 1; got pipeline={pipeline})",
            )
        self.layers = (start, stop)
        self._first, self._last = start == 0, stop == model.num_layers
        acc = cluster.accelerator
        self.accelerator: AcceleratorSpec = acc
        self._check(model, cluster, acc)

        t, p, e = tensor, pipeline, expert
        self._gpus_per_node = cluster.gpus_per_node
        self._hbm = acc.memory_bandwidth_bytes_per_s
        bf16_peak = acc.peak_flops("bf16")
        wb = BYTES_PER_WEIGHT[weight_precision]
        if weight_precision == "fp8":
            peak, eff = acc.peak_flops("fp8"), acc.gemm_efficiency_fp8 or acc.gemm_efficiency
        else:
            peak, eff = bf16_peak, acc.gemm_efficiency
        launch = cfg.kernel_latency_s
        gemm_launch = launch * (1 + (FP8_QUANT_KERNELS if weight_precision == "fp8" else 0))
        roofline = RooflineGemm(peak, eff, self._hbm, wb, gemm_launch, cfg.gemm_k_overhead)
        table = table_for(acc.id, weight_precision, cfg.gemm_stack)
        self._gemm: RooflineGemm | MeasuredGemm = (
            roofline if table is None else MeasuredGemm(roofline, table)
        )
        self._gemm_bf16 = RooflineGemm(
            bf16_peak, acc.gemm_efficiency, self._hbm, ACT_BYTES, launch, cfg.gemm_k_overhead
        )
        peer = acc.scale_up_peer_bandwidth_gb_s
        self._net = TwoTierNetwork(
            intra_bytes_per_s=cluster.intra_node_bandwidth_gb_s * GB * acc.scale_up_efficiency,
            inter_bytes_per_s=cluster.inter_node_bandwidth_gb_s * GB * acc.scale_out_efficiency,
            intra_peer_bytes_per_s=peer * GB * acc.scale_up_efficiency if peer else None,
            alpha_intra_s=cfg.alpha_intra_s,
            alpha_inter_s=cfg.alpha_inter_s,
        )
        self._net_no_alpha = TwoTierNetwork(
            self._net.intra_bytes_per_s,
            self._net.inter_bytes_per_s,
            self._net.intra_peer_bytes_per_s,
            0.0,
            0.0,
        )
        self._tp_group = place_group(t, 1, self._gpus_per_node)
        self._ep_group = place_group(t * e, 1, self._gpus_per_node)

        # ---- per-GPU linear layers and weights --------------------------------------------
        h = model.hidden_size
        kinds = [model.is_moe_layer(i) for i in range(start, stop)]
        self._num_moe_layers = sum(kinds)
        self._num_dense_layers = len(kinds) - self._num_moe_layers
        empty: tuple[list[_Linear], float, float] = ([], 0.0, 0.0)
        dense_lin, dense_w, dense_other = (
            self._layer_linears(False) if self._num_dense_layers else empty
        )
        moe_lin, moe_w, moe_other = self._layer_linears(True) if self._num_moe_layers else empty
        self._linears = [_Linear(x.k, x.n, x.count * self._num_dense_layers) for x in dense_lin] + [
            _Linear(x.k, x.n, x.count * self._num_moe_layers) for x in moe_lin
        ]
        self._linears = [x for x in self._linears if x.count > 0]
        expert_bytes = self._expert_bytes_per_gpu()
        layer_bytes = {
            False: dense_w * wb + dense_other * ACT_BYTES,
            True: moe_w * wb + moe_other * ACT_BYTES + expert_bytes,
        }
        vocab_share = model.vocab_size * h / t
        embed_bytes = (vocab_share + self._learned_positions() * h) * ACT_BYTES
        tied = model.tie_embeddings and p == 1 and self._first  # one copy serves both
        head_bytes = (0.0 if tied else vocab_share) * ACT_BYTES
        head_bytes += model.norm_parameters() * ACT_BYTES

        # ---- KV bytes per token (per GPU per layer, and for the whole model) ---------------
        kvb = BYTES_PER_KV[kv_precision]
        if model.mla is not None:
            latent = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
            self._kv_layer_gpu = latent * kvb
            self._kv_layer_model = latent * kvb
            self._kv_heads_gpu = 1.0
        else:
            g_local = max(1.0, model.kv_heads / t)
            self._kv_layer_gpu = 2.0 * g_local * model.head_size * kvb
            self._kv_layer_model = 2.0 * model.kv_heads * model.head_size * kvb
            self._kv_heads_gpu = g_local

        # ---- memory per stage ---------------------------------------------------------------
        counts = stage_layer_counts(len(kinds), p)
        usable = acc.memory_bytes * memory_utilization
        reserve = cfg.runtime_reserve_gib * GIB + self._activation_bytes()
        self._budget_bytes = usable - reserve
        start = 0
        stage_weights: list[float] = []
        stage_tokens: list[float] = []
        for s, n_layers in enumerate(counts):
            wbytes = sum(layer_bytes[kinds[i]] for i in range(start, start + n_layers))
            if s == 0 and self._first:
                wbytes += embed_bytes
            if s == p - 1 and self._last:
                wbytes += head_bytes
            start += n_layers
            free = usable - wbytes - reserve
            if free <= 0:
                raise InfeasiblePlan(
                    "memory",
                    f"{model.name} ({weight_precision}) needs {wbytes / GIB:.2f} GiB of weights "
                    f"+ {reserve / GIB:.2f} GiB reserve per GPU on pipeline stage {s} with "
                    f"tensor={t}, pipeline={p}, expert={e}; {acc.id} offers "
                    f"{usable / GIB:.2f} GiB at memory_utilization {memory_utilization}",
                    stage=s,
                    weights_gib=wbytes / GIB,
                    usable_gib=usable / GIB,
                )
            stage_weights.append(wbytes)
            stage_tokens.append(free / (n_layers * self._kv_layer_gpu) if n_layers else math.inf)
        rank_tokens = math.floor(min(stage_tokens))
        if rank_tokens < 1:
            raise InfeasiblePlan(
                "memory",
                f"no room for a KV cache on {acc.id} with tensor={t}, pipeline={p}",
            )
        self._weights_bytes = max(stage_weights)
        self._kv_capacity = int(rank_tokens * e)
        self._kv_bytes_gpu = rank_tokens * max(counts) * self._kv_layer_gpu
        self._stage_layers = counts

        # ---- attention coefficients (summed over all layers of the instance) ----------------
        L = len(kinds)
        heads_gpu = model.num_attention_heads / t
        qk, v = attention_dims(model)
        attn_eff = (
            cfg.attention_efficiency or acc.attention_efficiency or DEFAULT_ATTENTION_EFFICIENCY
        )
        self._attn_peak = bf16_peak * attn_eff
        if model.mla is not None:  # absorbed decode: scores over latent + rope, values latent
            decode_flops = (
                2.0 * heads_gpu * (2 * model.mla.kv_lora_rank + model.mla.qk_rope_head_dim)
            )
        else:
            decode_flops = 2.0 * heads_gpu * (qk + v)
        decode_per_ctx = max(
            self._kv_layer_gpu / (self._hbm * cfg.kv_memory_efficiency),
            decode_flops / self._attn_peak,
        )
        self._decode_ctx_coef = L * decode_per_ctx
        units = acc.num_compute_units or 108
        self._decode_seq_coef = L * self._kv_heads_gpu * cfg.attention_block_s / units
        self._prefill_pair_coef = L * 2.0 * heads_gpu * (qk + v) / self._attn_peak
        self._attn_fixed = L * cfg.attention_kernel_s

        # ---- pipeline hand-offs --------------------------------------------------------------
        # Stage s occupies ranks [s·t·e, (s+1)·t·e): a hand-off stays on NVLink when the two
        # stages start on the same node (and so, with t·e dividing the node, share it).
        stride, per_node = t * e, self._gpus_per_node
        self._p2p_tiers: list[Tier] = [
            "intra" if (s * stride) // per_node == ((s - 1) * stride) // per_node else "inter"
            for s in range(1, p)
        ]
        self._token_cache: dict[int, float] = {}
        self._logits_cache: dict[int, float] = {}

    # ---- construction helpers -------------------------------------------------------------
    def _check(self, model: ModelSpec, cluster: ResolvedCluster, acc: AcceleratorSpec) -> None:
        t, p, e = self.tensor, self.pipeline, self.expert
        if min(t, p, e) < 1:
            raise InfeasiblePlan("divisibility", "parallel degrees must be >= 1")
        if any(g.accelerator.id != acc.id for g in cluster.groups):
            raise InfeasiblePlan(
                "topology",
                "a serving instance needs one accelerator type; "
                "the cluster mixes "
                + ", ".join(sorted({g.accelerator.id for g in cluster.groups})),
            )
        if t * p * e > cluster.num_gpus:
            raise InfeasiblePlan(
                "topology",
                f"the instance needs {t * p * e} GPUs; the cluster has {cluster.num_gpus}",
            )
        a = model.num_attention_heads
        if a % t:
            raise InfeasiblePlan("divisibility", f"tensor={t} must divide the {a} attention heads")
        g = model.kv_heads
        if model.mla is None and g % t and t % g:
            raise InfeasiblePlan(
                "divisibility",
                f"tensor={t} and the {g} KV heads must divide "
                "one another (KV heads are split or replicated)",
            )
        if p > model.num_layers:
            raise InfeasiblePlan(
                "divisibility", f"pipeline={p} exceeds the {model.num_layers} layers"
            )
        if self._num_dense_layers_of(model) and model.ffn_hidden_size % t:
            raise InfeasiblePlan(
                "divisibility", f"tensor={t} must divide ffn_hidden_size ({model.ffn_hidden_size})"
            )
        if model.moe is None:
            if e > 1:
                raise InfeasiblePlan(
                    "divisibility", f"expert={e} needs an MoE model; {model.name} is dense"
                )
        elif e == 1:
            if model.moe.expert_ffn_hidden_size % t:
                raise InfeasiblePlan(
                    "divisibility",
                    f"tensor={t} must divide "
                    f"expert_ffn_hidden_size ({model.moe.expert_ffn_hidden_size})",
                )
        elif model.moe.num_experts % (t * e):
            raise InfeasiblePlan(
                "divisibility",
                f"tensor × expert = {t * e} must divide the {model.moe.num_experts} experts",
            )
        if self.weight_precision == "fp8" and not acc.peak_tflops.get("fp8"):
            raise InfeasiblePlan(
                "precision",
                f"{acc.id} has no fp8 tensor cores; fp8 (W8A8) "
                "weights need them (use bf16 or int4)",
            )
        if self.weight_precision not in BYTES_PER_WEIGHT:
            raise InfeasiblePlan("precision", f"unknown weight format {self.weight_precision!r}")
        if self.kv_precision not in BYTES_PER_KV:
            raise InfeasiblePlan("precision", f"unknown KV-cache format {self.kv_precision!r}")

    @staticmethod
    def _num_dense_layers_of(model: ModelSpec) -> int:
        return model.num_layers - model.num_moe_layers

    def _learned_positions(self) -> int:
        m = self.model
        return (m.max_position_embeddings or 0) if m.position_embedding == "learned" else 0

    def _layer_linears(self, is_moe: bool) -> tuple[list[_Linear], float, float]:
        """Non-expert linear layers of one layer on one GPU, their weight elements, and the
        layer's other parameters (norms, biases, router bias; replicated, bf16)."""
        m, t = self.model, self.tensor
        shapes = [g for g in layer_gemms(m, is_moe, 1.0) if not g.split.startswith("expert")]
        out: list[_Linear] = []
        weights = 0.0
        for g in shapes:
            if g.name == "qkv":  # KV heads split over t, replicated when t > g (vLLM)
                g_local = max(1.0, m.kv_heads / t)
                k, n = g.k, (m.num_attention_heads / t + 2 * g_local) * m.head_size
            else:
                _, k, n = split_gemm(g, t, 1)
            out.append(_Linear(k, n, 1))
            weights += k * n
        unsplit = sum(g.k * g.n for g in shapes)
        if is_moe:
            assert m.moe is not None
            expert_shapes = [g for g in layer_gemms(m, True, 1.0) if g.split.startswith("expert")]
            unsplit += m.moe.num_experts * sum(g.k * g.n for g in expert_shapes)
        index = next(i for i in range(m.num_layers) if m.is_moe_layer(i) == is_moe)
        other = max(0.0, m.layer_parameters(index) - unsplit)
        return out, weights, other

    def _expert_shape(self) -> tuple[float, float, float, float]:
        """(local experts, split, up n, down k) of the routed experts on one GPU: e = 1
        splits every expert over t; e > 1 holds E/(t·e) whole experts."""
        moe = self.model.moe
        assert moe is not None
        up = (2 if self.model.gated_mlp else 1) * moe.expert_ffn_hidden_size
        f = moe.expert_ffn_hidden_size
        if self.expert == 1:
            return float(moe.num_experts), float(self.tensor), up / self.tensor, f / self.tensor
        return moe.num_experts / (self.tensor * self.expert), 1.0, float(up), float(f)

    def _expert_bytes_per_gpu(self) -> float:
        if self.model.moe is None:
            return 0.0
        local, split, _, _ = self._expert_shape()
        return (
            local * self.model.expert_parameters() / split * BYTES_PER_WEIGHT[self.weight_precision]
        )

    def _activation_bytes(self) -> float:
        """Peak activation memory reserved: `activation_tokens` tokens of hidden states,
        QKV and MLP intermediates on one GPU, plus the sampler's fp32 logits."""
        m, t, cfg = self.model, self.tensor, self.config
        is_moe = m.num_moe_layers > 0
        width = mlp_width(m, is_moe)
        qk, v = attention_dims(m)
        qkv = (m.num_attention_heads * (qk + v) + 2 * m.kv_heads * m.head_size) / t
        per_token = (2 * m.hidden_size + qkv + 3 * width / t) * ACT_BYTES
        logits = cfg.sampler_sequences * m.vocab_size * SAMPLER_LOGIT_BYTES
        return cfg.activation_tokens * per_token + logits

    # ---- InstanceCost ----------------------------------------------------------------------
    @property
    def num_gpus(self) -> int:
        return self.tensor * self.pipeline * self.expert

    @property
    def pipeline_stages(self) -> int:
        """Pipeline stages: the instance runs this many batches at once
        (`cost_models.serving.base.pipeline_engines`)."""
        return self.pipeline

    @property
    def kv_capacity_tokens(self) -> int:
        return self._kv_capacity

    @property
    def kv_cache_gib(self) -> float:
        return self._kv_bytes_gpu / GIB

    @property
    def weights_gib(self) -> float:
        return self._weights_bytes / GIB

    def iteration_time_s(self, batch: IterationBatch) -> float:
        """Latency of one forward pass through every pipeline stage (module docstring)."""
        tokens = batch.decode_seqs + batch.prefill_tokens
        if tokens <= 0:
            return 0.0
        hit = self._token_cache.get(tokens)
        if hit is None:
            if len(self._token_cache) > 200_000:
                self._token_cache.clear()
            hit = self._token_cache[tokens] = self._token_time_s(tokens)
        time = hit
        logit_seqs = batch.decode_seqs + batch.prefill_seqs if self._last else 0
        if self._last:
            time += self.config.iteration_overhead_s
        if logit_seqs > 0:
            head = self._logits_cache.get(logit_seqs)
            if head is None:
                head = self._logits_cache[logit_seqs] = self._logits_time_s(logit_seqs)
            time += head
        e = self.expert
        if batch.decode_seqs > 0:
            time += (
                self._attn_fixed
                + self._decode_seq_coef * batch.decode_seqs / e
                + self._decode_ctx_coef * batch.decode_context_tokens / e
            )
        if batch.prefill_tokens > 0:
            time += self._attn_fixed + self._prefill_pair_coef * batch.prefill_attention_pairs / e
        return time

    def kv_transfer_time_s(self, tokens: int) -> float:
        """Move the KV cache of `tokens` tokens to another instance: every GPU sends its own
        shard (its stage's layers, its KV heads) in parallel, α + bytes / bandwidth over the
        NIC (`kv_transfer_tier` "inter") or NVLink ("intra")."""
        if tokens <= 0:
            return 0.0
        per_gpu = tokens * max(self._stage_layers) * self._kv_layer_gpu
        return send_recv_time_s(self._net, per_gpu, self.kv_transfer_tier)

    # ---- parts -----------------------------------------------------------------------------
    def _allreduce_s(self, size_bytes: float, group: GroupPlacement) -> float:
        """TP all-reduce: the one-shot custom kernel inside a node, NCCL otherwise or when
        its ring is faster (large messages)."""
        if group.size <= 1 or size_bytes <= 0:
            return 0.0
        ring = all_reduce_time_s(self._net, size_bytes, group)
        if group.domains > 1:
            return ring
        one_shot = self.config.allreduce_latency_s + (group.size - 1) * size_bytes / (
            self._net.group_intra_bytes_per_s(group.size)
        )
        return min(one_shot, ring)

    def _token_time_s(self, tokens: int) -> float:
        """Everything whose cost depends on the batch's token count T alone."""
        m, cfg, e = self.model, self.config, self.expert
        h = m.hidden_size
        ta = tokens / e  # tokens per attention data-parallel replica
        gemm = self._gemm
        time = sum(x.count * gemm.time_s(ta, x.k, x.n) for x in self._linears)
        stream = self._hbm * MEMORY_EFFICIENCY
        act = ta * h * ACT_BYTES
        for is_moe, layers in ((False, self._num_dense_layers), (True, self._num_moe_layers)):
            if not layers:
                continue
            elem = layer_elementwise_bytes(
                m,
                ta,
                tensor=self.tensor,
                sequence_parallel=False,
                ffn_hidden_size=mlp_width(m, is_moe),
                gated=m.gated_mlp,
            )
            per_layer = elem / stream + ELEMENTWISE_KERNELS_PER_LAYER * cfg.kernel_latency_s
            if is_moe and e > 1:
                assert m.moe is not None
                per_layer += self._allreduce_s(act, self._tp_group)
                a2a = (tokens / (self.tensor * e)) * m.moe.top_k * h * ACT_BYTES
                per_layer += 2 * (
                    cfg.a2a_latency_s + all_to_all_time_s(self._net_no_alpha, a2a, self._ep_group)
                )
            else:
                per_layer += 2 * self._allreduce_s(act, self._tp_group)
            if is_moe:
                per_layer += self._experts_s(tokens)
            time += layers * per_layer
        # embedding lookup (vocab-parallel: an all-reduce over t) and pipeline hand-offs
        if self._first:
            time += cfg.kernel_latency_s + 2 * act / stream
            time += self._allreduce_s(act, self._tp_group)
        time += sum(send_recv_time_s(self._net, act, tier) for tier in self._p2p_tiers)
        return time

    def hand_off_s(self, tokens: int, tier: Tier) -> float:
        """One pipeline send / receive of the hidden states of `tokens` tokens (bf16, each
        attention replica its share) over the instance's own fabric, as `_token_time_s`
        prices the hand-offs between its stages."""
        act = tokens / self.expert * self.model.hidden_size * ACT_BYTES
        return send_recv_time_s(self._net, act, tier) if tokens > 0 else 0.0

    def _experts_s(self, tokens: int) -> float:
        """Grouped expert GEMMs of one MoE layer on one GPU: the touched local experts each
        read once, at T·k/E_touched tokens each, one launch per grouped GEMM."""
        moe = self.model.moe
        assert moe is not None
        touched_frac = touched_experts(moe.num_experts, moe.top_k, tokens) / moe.num_experts
        local, _, up_n, down_k = self._expert_shape()
        n_touched = local * touched_frac
        if n_touched <= 0:
            return 0.0
        per_expert = tokens * moe.top_k / (moe.num_experts * touched_frac)
        h, g = self.model.hidden_size, self._gemm
        up = g.time_s(per_expert, h, up_n) - g.launch_s
        down = g.time_s(per_expert, down_k, h) - g.launch_s
        extra = MOE_EXTRA_KERNELS * self.config.kernel_latency_s
        return n_touched * (up + down) + 2 * g.launch_s + extra

    def _logits_time_s(self, seqs: int) -> float:
        """LM head (bf16, vocab split over t) for the sequences that emit a token, and the
        sampler over their fp32 logits (`SAMPLER_PASSES` streams of seqs × vocab × 4 bytes
        on one GPU: the engines gather the vocabulary shards before sampling)."""
        m = self.model
        rows = seqs / self.expert
        head = self._gemm_bf16.time_s(rows, m.hidden_size, m.vocab_size / self.tensor)
        sampler = (
            SAMPLER_PASSES
            * rows
            * m.vocab_size
            * SAMPLER_LOGIT_BYTES
            / (self._hbm * MEMORY_EFFICIENCY)
        )
        return head + sampler

    # ---- conveniences for explanations and benchmarks ----------------------------------
    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes of one token for the whole model (all layers and KV heads)."""
        return self.model.num_layers * self._kv_layer_model

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """KV bytes of one token on one GPU of the largest pipeline stage."""
        return max(self._stage_layers) * self._kv_layer_gpu

    @property
    def weights_bytes_per_gpu(self) -> float:
        return self._weights_bytes

    @property
    def memory_budget_bytes_per_gpu(self) -> float:
        """What weights and KV cache may take on one GPU: usable memory less the runtime
        reserve and the activation peak (the KV cache is what the weights leave of it)."""
        return self._budget_bytes

    def decode_step_time_s(self, batch_size: int, context_tokens: int) -> float:
        """One decode iteration of `batch_size` sequences of `context_tokens` tokens each."""
        return self.iteration_time_s(
            IterationBatch(
                decode_seqs=batch_size, decode_context_tokens=batch_size * context_tokens
            )
        )

    def prefill_time_s(self, prompt_tokens: int, sequences: int = 1) -> float:
        """One iteration prefilling `sequences` whole prompts of `prompt_tokens` tokens."""
        n = prompt_tokens
        return self.iteration_time_s(
            IterationBatch(
                prefill_tokens=n * sequences,
                prefill_attention_pairs=sequences * n * (n + 1) / 2,
                prefill_seqs=sequences,
            )
        )


build_instance_cost = AnalyticalInstanceCost
"""The analytical costs of one tensor × pipeline × expert instance of `model` on the
cluster's accelerator (the class's constructor; see its `Raises`)."""


@register_serving_cost_model("analytical")
class AnalyticalServingCostModel:
    """The registered "analytical" serving cost model (`build_instance_cost` with a config)."""

    name = "analytical"
    version = "1"
    Config = ServingAnalyticalConfig

    def __init__(self, config: ServingAnalyticalConfig | None = None) -> None:
        self.config = config or ServingAnalyticalConfig()

    def instance_cost(
        self,
        model: ModelSpec,
        cluster: ResolvedCluster,
        tensor: int,
        pipeline: int,
        expert: int,
        weight_precision: WeightFormat,
        kv_precision: KVFormat,
        *,
        memory_utilization: float = 0.9,
        kv_transfer_tier: Tier = "inter",
        layers: tuple[int, int] | None = None,
    ) -> AnalyticalInstanceCost:
        return AnalyticalInstanceCost(
            model,
            cluster,
            tensor,
            pipeline,
            expert,
            weight_precision,
            kv_precision,
            memory_utilization=memory_utilization,
            kv_transfer_tier=kv_transfer_tier,
            config=self.config,
            layers=layers,
        )


__all__ = [
    "BYTES_PER_KV",
    "BYTES_PER_WEIGHT",
    "AnalyticalInstanceCost",
    "AnalyticalServingCostModel",
    "ServingAnalyticalConfig",
    "build_instance_cost",
    "stage_layer_counts",
    "touched_experts",
]
