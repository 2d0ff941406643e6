"""Time and activation memory of one transformer layer per micro-batch on one GPU.

Per layer and micro-batch: GEMMs forward + backward (+ recompute) on the roofline of
`gemm.py`, the attention core of `attention.py`, the memory-bound elementwise kernels of
`elementwise.py`, exposed tensor-parallel communication (Megatron with SP: 2 all-gathers + 2
reduce-scatters of s·b·h bf16 elements forward and the same backward; without SP 2
all-reduces each way; Korthikanti et al. 2022 §4.2.2) and the exposed context-parallel
exchange of the plan's algorithm (`context_parallel.py`: the ring's K/V blocks overlapped
with the attention steps, Ulysses' all-to-alls, the all-gather of K/V, or the hybrid of
the first two). MoE layers add the routed experts as grouped GEMMs on the busiest expert-parallel rank
with their all-to-alls and expert-tensor collectives (`moe.py`).

A layer's cost is its recompute-independent core (`LayerCore`, cached per layer kind and
shape without recompute) plus what the recompute mode adds (`LayerCost`).

Backward split for the zero-bubble schedules (Qi et al., "Zero Bubble Pipeline
Parallelism", ICLR 2024, §2: B computes the input gradient and is on the critical path, W the
weight gradient and can wait): W is the weight-gradient GEMM of every linear (`wgrad` of
`gemm.backward_parts_s`, ≈ the forward GEMM's FLOPs) and half of the routed experts' grouped
GEMM backward (their data- and weight-gradient GEMMs have equal FLOPs); everything else of
the backward is B — the data-gradient GEMMs, the attention core's backward (it has no
weights), the elementwise backward, recomputation (it precedes B) and the backward's exposed
communication (each collective follows the operation whose tensor it carries: the input
gradients' reduce-scatters / all-reduces and all-to-alls are B's).
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.analytical.context_parallel import (
    CPExchange,
    CPShape,
    all_gather_exchange,
    attention_launches,
    attention_steps,
    comm_launches,
    hybrid_exchange,
    ring_exchange,
    ulysses_exchange,
)
from cost_models.analytical.elementwise import (
    BACKWARD_BYTES_RATIO,
    layer_elementwise_bytes,
    mlp_width,
)
from cost_models.analytical.flops import attention_dims, layer_gemms, split_gemm
from cost_models.analytical.gemm import MEMORY_EFFICIENCY
from cost_models.analytical.memory import layer_activation_bytes
from cost_models.analytical.moe import grouped_expert_gemm_s, moe_comm_s, permute_bytes
from cost_models.analytical.placement import ParallelGroups, place_group
from cost_models.analytical.training.context import ProblemContext
from cost_models.analytical.training.layer_sequence import LayerSeq, per_layer
from cost_models.analytical.training.placements import (
    expert_groups,
    expert_load,
    parallel_groups,
)
from cost_models.analytical.training.shapes import LayerShape


@dataclass(frozen=True, slots=True)
class LayerCore:
    """The parts of a layer's cost that recompute does not change (one direction each)."""

    forward_s: float
    """GEMMs + elementwise kernels (+ MoE permutation) forward."""
    backward_s: float
    """Their backward."""
    wgrad_s: float
    """Of which the weight-gradient GEMMs (W of the zero-bubble schedules)."""
    attention_forward_s: float
    attention_backward_s: float
    tp_forward_s: float
    """Exposed tensor-parallel communication of the forward."""
    tp_backward_s: float
    """Exposed tensor-parallel communication of the backward."""
    cp_forward_s: float
    """Exposed context-parallel exchange, forward."""
    cp_backward_s: float
    working_bytes: float
    """Activation bytes of the layer without recomputation (full recompute working set)."""
    ep_s: float
    """Expert-parallel communication per direction."""
    cp_working_bytes: float
    """Transient bytes of the context-parallel exchange (`context_parallel.py`)."""
    a2a_s: float
    """Of which the dispatch / combine all-to-alls."""
    forward_kernels: int
    """Kernels one forward pass launches (host overhead)."""
    backward_kernels: int
    """Kernels one backward pass launches."""
    attention_kernels: int
    """Kernels of the attention core's forward (what selective recompute re-runs)."""


@dataclass(frozen=True, slots=True)
class LayerCost:
    """One layer kind under one set of degrees, per micro-batch, one GPU."""

    compute_s: float
    """Forward + backward GEMMs and attention core (no recompute)."""
    recompute_s: float
    tp_s: float
    """Exposed tensor-parallel communication (forward, backward and recomputed forward)."""
    cp_s: float
    """Exposed context-parallel communication."""
    ep_s: float
    """Exposed expert-parallel communication (all-to-alls and expert-tensor collectives of
    the forward, backward and recomputed forward)."""
    a2a_s: float
    """Of which the dispatch / combine all-to-alls."""
    forward_s: float
    backward_s: float
    """Everything but the forward: backward, recompute, their exposed communication."""
    activation_bytes: float
    """Raw activation bytes per in-flight micro-batch (no fragmentation)."""
    working_bytes: float
    """Activation bytes of the layer without recomputation (full recompute working set)."""
    host_s: float = 0.0
    """Host time by which issuing the layer's kernels exceeds their GPU time (the GPU waits
    for the CPU; 0 when the GPU work is longer)."""
    wgrad_s: float = 0.0
    """Of `backward_s`, the weight-gradient GEMMs (W; module docstring)."""
    cp_working_bytes: float = 0.0
    """Transient bytes the context-parallel exchange holds while attention runs (the
    all-gather's whole-sequence K/V and their gradients, Ulysses' re-split Q/K/V/O)."""

    @property
    def total_s(self) -> float:
        return self.compute_s + self.recompute_s + self.tp_s + self.cp_s + self.ep_s + self.host_s


def tp_exchange_s(
    ctx: ProblemContext,
    size_bytes: float,
    groups: ParallelGroups,
    sp: bool,
    hidden: float = 0.0,
    gather_bytes: float | None = None,
) -> float:
    """One tensor-parallel exchange of an activation of `size_bytes` (Korthikanti et al.
    2022 §4.2.2): an all-gather (of `gather_bytes` when the gathered tensor is already
    quantised to FP8) plus a reduce-scatter with sequence parallelism, an all-reduce without;
    the `hidden` share (the framework's `tp_comm_overlap`) removed. 0 without TP."""
    group = groups.tensor
    if group.size <= 1:
        return 0.0
    if sp:
        gathered = size_bytes if gather_bytes is None else gather_bytes
        raw = ctx.comm.all_gather(gathered, group) + ctx.comm.reduce_scatter(size_bytes, group)
    else:
        raw = ctx.comm.all_reduce(size_bytes, group)
    return raw * (1.0 - hidden)


def _tp_backward_s(
    ctx: ProblemContext,
    size_bytes: float,
    groups: ParallelGroups,
    sp: bool,
    hidden: float,
    pairs: list[tuple[float, float]],
    gather_bytes: float,
) -> float:
    """Exposed backward tensor-parallel communication when column-parallel linears overlap
    their backward collectives with their GEMMs (Megatron's
    `LinearWithGradAccumulationAndAsyncCommunication`, Korthikanti et al. 2022 §4.2.2 for the
    collectives): per (column-parallel, row-parallel) pair with sequence parallelism, the
    row-parallel backward all-gathers its output gradient (exposed), the column-parallel
    backward re-gathers its input while the dgrad GEMM runs and reduce-scatters the input
    gradient while the wgrad GEMM runs; without sequence parallelism only the input
    gradient's all-reduce remains, behind the wgrad GEMM. `pairs`: (dgrad s, wgrad s) of
    each pair's column-parallel GEMMs."""
    group = groups.tensor
    if group.size <= 1:
        return 0.0
    keep = 1.0 - hidden
    if sp:
        ag = ctx.comm.all_gather(gather_bytes, group) * keep
        rs = ctx.comm.reduce_scatter(size_bytes, group) * keep
        return sum(ag + max(0.0, ag - dgrad) + max(0.0, rs - wgrad) for dgrad, wgrad in pairs)
    ar = ctx.comm.all_reduce(size_bytes, group) * keep
    return sum(max(0.0, ar - wgrad) for _dgrad, wgrad in pairs)


def _activation_bytes(ctx: ProblemContext, is_moe: bool, shape: LayerShape) -> float:
    """Activation bytes one layer of this kind stores per in-flight micro-batch."""
    load = expert_load(ctx, shape.expert).load_factor if is_moe else 1.0
    return layer_activation_bytes(
        ctx.model,
        is_moe,
        shape.micro_batch_size,
        ctx.seq,
        shape.tensor,
        shape.context,
        shape.sequence_parallel,
        shape.flash_attention,
        shape.recompute,  # type: ignore[arg-type]
        shape.expert_tensor if is_moe else 1,
        load,
        ctx.fp8.saved_input_bytes_per_element if ctx.fp8 else 2.0,
    )


def layer_cost(ctx: ProblemContext, is_moe: bool, shape: LayerShape) -> LayerCost:
    """The cost of one layer of kind `is_moe` under `shape` (cached)."""
    key = (is_moe, shape)
    hit = ctx.layer_costs.get(key)
    if hit is not None:
        return hit
    core_shape = shape.without_recompute()
    core = ctx.layer_cores.get((is_moe, core_shape))
    if core is None:
        core = ctx.layer_cores[(is_moe, core_shape)] = layer_core(ctx, is_moe, core_shape)
    rc = shape.recompute
    kernels = core.forward_kernels + core.backward_kernels
    if rc == "full":  # the whole forward again, collectives included
        rc_s = core.forward_s + core.attention_forward_s
        tp_rc, cp_rc, ep_rc, a2a_rc = core.tp_forward_s, core.cp_forward_s, core.ep_s, core.a2a_s
        kernels += core.forward_kernels
    elif rc == "selective":
        # Megatron's selective recompute re-runs the core attention module, and the
        # context-parallel exchange runs inside it (Transformer Engine's attention with CP)
        rc_s, tp_rc, cp_rc, ep_rc, a2a_rc = (
            core.attention_forward_s,
            0.0,
            core.cp_forward_s,
            0.0,
            0.0,
        )
        kernels += core.attention_kernels
    else:
        rc_s, tp_rc, cp_rc, ep_rc, a2a_rc = 0.0, 0.0, 0.0, 0.0, 0.0
    compute = (
        core.forward_s + core.backward_s + core.attention_forward_s + core.attention_backward_s
    )
    tp = core.tp_forward_s + core.tp_backward_s + tp_rc
    cp = core.cp_forward_s + core.cp_backward_s + cp_rc
    ep = 2 * core.ep_s + ep_rc
    # The GPU waits when issuing the kernels takes the host longer than running them.
    host = kernels * ctx.framework(shape.framework).config.host_overhead_per_kernel_s
    host_excess = max(0.0, host - (compute + rc_s + tp + cp + ep))
    if shape.context_parallel_algorithm == NO_EXCHANGE:
        host_excess = 0.0  # a lower bound of every algorithm's layer (`NO_EXCHANGE`)
    forward_share = core.forward_kernels / kernels
    forward = (
        core.forward_s
        + core.attention_forward_s
        + core.tp_forward_s
        + core.cp_forward_s
        + core.ep_s
        + host_excess * forward_share
    )
    cost = LayerCost(
        compute_s=compute,
        recompute_s=rc_s,
        tp_s=tp,
        cp_s=cp,
        ep_s=ep,
        a2a_s=2 * core.a2a_s + a2a_rc,
        forward_s=forward,
        backward_s=core.backward_s
        + core.attention_backward_s
        + rc_s
        + core.tp_backward_s
        + tp_rc
        + core.cp_backward_s
        + cp_rc
        + core.ep_s
        + ep_rc
        + host_excess * (1.0 - forward_share),
        activation_bytes=_activation_bytes(ctx, is_moe, shape),
        working_bytes=core.working_bytes,
        host_s=host_excess,
        wgrad_s=core.wgrad_s,
        cp_working_bytes=core.cp_working_bytes,
    )
    ctx.layer_costs[key] = cost
    return cost


def layer_core(ctx: ProblemContext, is_moe: bool, shape: LayerShape) -> LayerCore:
    """The recompute-independent parts of a layer's cost (`shape.recompute` is ignored).

    MoE layers (`moe.py`): the routed experts run as grouped GEMMs at their per-expert
    shapes on the busiest EP rank, with the dispatch / combine all-to-alls and the ETP
    collectives; their tensor-parallel collectives are the attention's pair plus the
    shared experts' pair (the routed experts need none: tokens stay sequence-split)."""
    model, s = ctx.model, ctx.seq
    t, c, b = shape.tensor, shape.context, shape.micro_batch_size
    etp, e, sp, flash = (
        shape.expert_tensor,
        shape.expert,
        shape.sequence_parallel,
        shape.flash_attention,
    )
    groups = parallel_groups(ctx, t, c, 1, 1)
    framework = ctx.framework(shape.framework).config
    h = model.hidden_size
    tokens = b * s / c
    fwd = bwd = wgrad_total = 0.0
    # (dgrad, wgrad) of the column-parallel GEMMs of the attention and of the MLP pair
    hiding = {"attention": [0.0, 0.0], "mlp": [0.0, 0.0]}
    gemm_kernels = 0
    fp8 = ctx.fp8
    # FP8 quantisation (`fp8.py`): bytes moved forward / backward, kernels
    quant_f = quant_b = 0.0
    quant_kernels = 0
    for gm in layer_gemms(model, is_moe, tokens):
        if is_moe and gm.split.startswith("expert"):
            continue  # priced per expert below
        m_, k_, n_ = split_gemm(gm, t, etp)
        quantized = fp8 is not None and gm.name != "router"
        gemm = ctx.linear_gemm if quantized else ctx.gemm
        f = gemm.time_s(m_, k_, n_)
        dgrad, wgrad = gemm.backward_parts_s(m_, k_, n_)
        fwd += f
        bwd += dgrad + wgrad
        wgrad_total += wgrad
        gemm_kernels += 1
        if quantized:
            assert fp8 is not None
            if gm.name in NORM_FED_LINEARS:  # the norm writes the FP8 copies (its shard)
                quant_f += m_ * k_ / (t if sp else 1) * fp8.fused_quantize_bytes_per_element
            else:
                quant_f += m_ * k_ * fp8.quantize_bytes_per_element
            quant_b += m_ * n_ * fp8.quantize_bytes_per_element
            quant_kernels += fp8.kernels_per_quantization
        if gm.split == "col":
            side = hiding["mlp" if gm.name.startswith(("mlp", "shared")) else "attention"]
            side[0] += dgrad
            side[1] += wgrad
    ep_dir = a2a_dir = 0.0
    load = 1.0
    tp_pairs = 2.0
    if is_moe:
        moe = model.moe
        assert moe is not None
        busiest = expert_load(ctx, e)
        load = busiest.load_factor
        tokens_gpu = tokens / t
        # Balanced tokens per local expert after the ETP all-gather: e·etp·(T/t)·k/E.
        balanced = e * etp * tokens_gpu * moe.top_k / moe.num_experts
        ef, eb = grouped_expert_gemm_s(
            ctx.linear_gemm,
            tuple(x * balanced for x in busiest.local_factors),
            h,
            moe.expert_ffn_hidden_size,
            etp,
            model.gated_mlp,
        )
        perm = permute_bytes(load * tokens_gpu * moe.top_k * etp, h) / (
            ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY
        )
        fwd += ef + perm
        bwd += eb + BACKWARD_BYTES_RATIO * perm
        wgrad_total += eb / 2.0  # data- and weight-gradient grouped GEMMs: equal FLOPs
        gemm_kernels += 2 * len(busiest.local_factors)
        if fp8 is not None:  # the dispatched tokens and the experts' output gradients
            routed = load * tokens_gpu * moe.top_k * etp
            up = (2 if model.gated_mlp else 1) * moe.expert_ffn_hidden_size / etp
            down = moe.expert_ffn_hidden_size / etp
            quant_f += routed * (h + down) * fp8.quantize_bytes_per_element
            quant_b += routed * (up + h) * fp8.quantize_bytes_per_element
            quant_kernels += 2 * fp8.kernels_per_quantization
        egroups = expert_groups(ctx, e, etp, e * etp)
        routing = ctx.problem.workload.moe_routing
        mcomm = moe_comm_s(
            ctx.comm,
            egroups,
            tokens_gpu,
            moe.top_k,
            h,
            load,
            routing.max_nodes_per_token if routing is not None else None,
        )
        ep_dir, a2a_dir = mcomm.total_s, mcomm.all_to_all_s
        tp_pairs = 2.0 if moe.num_shared_experts else 1.0
    qk, vd = attention_dims(model)
    heads = model.num_attention_heads / t
    algorithm, head_degree = shape.context_parallel_algorithm, shape.context_parallel_heads
    launches = attention_launches(algorithm, c, head_degree)
    # documents masked within a packed sequence: the flash kernel's Σ sᵢ² share
    work = ctx.attention_factor
    att_f = ctx.attention.forward_time_s(b, s, heads, qk, vd, c, flash, launches, work)
    att_b = ctx.attention.backward_time_s(b, s, heads, qk, vd, c, flash, launches, work)
    # Tensor parallel (Korthikanti et al. 2022 §4.2.2): s·b·h bf16 elements per collective;
    # under FP8 the sequence-parallel all-gathers move the quantised FP8 shards.
    size = tokens * h * 2.0
    gathered = size / 2.0 * (fp8.saved_input_bytes_per_element if fp8 else 2.0)
    hidden = framework.tp_comm_overlap
    tp_fwd = tp_pairs * tp_exchange_s(ctx, size, groups, sp, hidden, gathered)
    if framework.tp_backward_overlap:
        pairs = [(hiding["attention"][0], hiding["attention"][1])]
        if tp_pairs > 1:
            pairs.append((hiding["mlp"][0], hiding["mlp"][1]))
        tp_bwd = _tp_backward_s(ctx, size, groups, sp, hidden, pairs, gathered)
        # what the GEMMs hid still took SMs from them
        tp_bwd += ctx.interference * max(0.0, tp_fwd - tp_bwd)
    else:
        tp_bwd = tp_fwd
    if fp8 is not None and fp8.amax_reductions and t > 1 and sp:
        # current scaling: each gathered input and gathered output gradient first
        # all-reduces its amax (one FP32 scalar) over the tensor group
        amax = ctx.comm.all_reduce(4.0, groups.tensor)
        tp_fwd += tp_pairs * amax
        tp_bwd += tp_pairs * amax
    if fp8 is not None:
        hbm = ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY
        fwd += quant_f / hbm
        bwd += quant_b / hbm
    # Context parallel exchange of the plan's algorithm (`context_parallel.py`).
    cp_f = cp_b = cp_work = 0.0
    if c > 1 and algorithm != NO_EXCHANGE:
        kv_heads = model.num_attention_heads if model.mla is not None else model.kv_heads
        cpx = cp_exchange(ctx, shape, CPShape(tokens, heads, kv_heads / t, qk, vd, c), att_f, att_b)
        cp_f, cp_b, cp_work = cpx.forward_s, cpx.backward_s, cpx.working_bytes
    # Memory-bound elementwise kernels (norms, rotary, activation, residual adds).
    width = mlp_width(model, is_moe)
    if is_moe and load != 1.0:  # the busiest rank's routed share of the activation work
        assert model.moe is not None
        routed = model.moe.top_k * model.moe.expert_ffn_hidden_size
        width += (load - 1.0) * routed
    elem_f = (
        layer_elementwise_bytes(
            model,
            tokens,
            tensor=t,
            sequence_parallel=sp,
            ffn_hidden_size=width,
            gated=model.gated_mlp,
        )
        * framework.elementwise_traffic
        / (ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY)
    )
    fwd += elem_f
    bwd += BACKWARD_BYTES_RATIO * elem_f
    fwd_kernels, bwd_kernels, att_kernels = _kernel_counts(
        is_moe,
        gemm_kernels,
        flash,
        t > 1,
        sp,
        attention_steps(algorithm, c, head_degree),
        tp_pairs,
        framework.elementwise_traffic,
        launches,
    )
    cp_kernels_f, cp_kernels_b = comm_launches(algorithm, c)
    fwd_kernels += cp_kernels_f
    bwd_kernels += cp_kernels_b
    fwd_kernels += quant_kernels
    bwd_kernels += quant_kernels
    if framework.ep_comm_overlap and ep_dir > 0.0:
        # Another micro-batch's computation runs while this one's all-to-all is on the wire
        # (DeepSeek-V3's DualPipe, arXiv 2412.19437 §3.2.1; Megatron-Core's 1F1B
        # all-to-all overlap): exposed is what outlasts the layer's forward computation,
        # and the hidden part still takes SMs from it.
        window = fwd + att_f
        ep_dir = max(0.0, ep_dir - window) + ctx.interference * min(ep_dir, window)
    return LayerCore(
        forward_s=fwd,
        backward_s=bwd,
        wgrad_s=wgrad_total,
        attention_forward_s=att_f,
        attention_backward_s=att_b,
        tp_forward_s=tp_fwd,
        tp_backward_s=tp_bwd,
        cp_forward_s=cp_f,
        cp_backward_s=cp_b,
        working_bytes=_activation_bytes(ctx, is_moe, shape),
        ep_s=ep_dir,
        a2a_s=a2a_dir,
        cp_working_bytes=cp_work,
        forward_kernels=fwd_kernels,
        backward_kernels=bwd_kernels,
        attention_kernels=att_kernels,
    )


NO_EXCHANGE = ""
"""The context-parallel "algorithm" of a bound, not of a plan: no exchange, one attention
launch and step, no host excess. Each part of its layer cost (forward, backward, weight
gradients, total) is at most that of the same layer under any algorithm (each adds its
exchange, its launches and kernels; max(host, GPU) is at least the GPU time), so bounds built
from it hold for every algorithm (`bounds.context_free_step_lower_bound_s`)."""

NORM_FED_LINEARS = frozenset({"qkv", "q", "q_down", "kv_down", "mlp_up", "shared_up"})
"""Linears whose input is a norm's output: Transformer Engine's LayerNormLinear /
LayerNormMLP quantise it in the norm kernel (`fp8.py`)."""
ELEMENTWISE_KERNELS_FORWARD = 6
"""Fused elementwise kernels of a layer's forward (Megatron / Transformer Engine fusions): two
norms, rotary embedding, the activation and two bias-dropout-add residuals."""
ELEMENTWISE_KERNELS_BACKWARD = 9
"""Their backward: the same kernels plus gradient accumulation of the norm weights and the
residual branches."""
MOE_ROUTING_KERNELS = 10
"""Router softmax / top-k, auxiliary loss, token permutation and unpermutation (forward;
as many backward)."""


def cp_exchange(
    ctx: ProblemContext,
    shape: LayerShape,
    cp: CPShape,
    attention_forward_s: float,
    attention_backward_s: float,
) -> CPExchange:
    """The context-parallel exchange of one layer under `shape`'s algorithm
    (`context_parallel.py`). Groups, Megatron-Core order: the context group's ranks are
    `tensor` apart; a hybrid's head groups are its `context_parallel_heads` consecutive
    context ranks (`--hierarchical-context-parallel-sizes`: the first level is adjacent
    GPUs), its ring the ranks `tensor × heads` apart."""
    t, c = shape.tensor, shape.context
    algorithm = shape.context_parallel_algorithm
    group = parallel_groups(ctx, t, c, 1, 1).context
    iota = ctx.interference
    if algorithm == "ulysses":
        return ulysses_exchange(ctx.comm, cp, group)
    if algorithm == "all_gather":
        return all_gather_exchange(ctx.comm, cp, group)
    if algorithm == "hybrid":
        u = shape.context_parallel_heads
        heads = place_group(u, t, ctx.domain_gpus, ctx.leaf_gpus)
        ring = place_group(c // u, t * u, ctx.domain_gpus, ctx.leaf_gpus)
        return hybrid_exchange(
            ctx.comm, cp, heads, ring, attention_forward_s, attention_backward_s, iota
        )
    return ring_exchange(ctx.comm, cp, group, attention_forward_s, attention_backward_s, iota)


def _kernel_counts(
    is_moe: bool,
    gemm_kernels: int,
    flash: bool,
    tensor_parallel: bool,
    sp: bool,
    context: int,
    tp_pairs: float,
    elementwise_traffic: float = 1.0,
    attention_launches: int | None = None,
) -> tuple[int, int, int]:
    """(forward, backward, attention-core forward) kernels of one layer per micro-batch: the
    GEMMs (2 per GEMM backward: dgrad and wgrad), the attention core (flash: 1 forward, 3
    backward: preprocess, main, postprocess — FlashAttention-2's backward; unfused: 2 batched
    GEMMs, softmax and dropout), the fused elementwise kernels, the tensor-parallel
    collectives (2 per pair with sequence parallelism, 1 without), context-parallel
    attention steps (`context`: 2 kernels per ring step forward, or `attention_launches`)
    and MoE routing."""
    if attention_launches is None:
        attention_launches = 2 * context if context > 1 else 1
    attention = (1 if flash else 4) * max(1, attention_launches)
    comm = int(tp_pairs * (2 if sp else 1)) if tensor_parallel else 0
    routing = MOE_ROUTING_KERNELS if is_moe else 0
    elementwise_f = round(ELEMENTWISE_KERNELS_FORWARD * elementwise_traffic)
    elementwise_b = round(ELEMENTWISE_KERNELS_BACKWARD * elementwise_traffic)
    forward = gemm_kernels + attention + elementwise_f + comm + routing
    backward = (
        2 * gemm_kernels + (3 if flash else 8) * max(1, context) + elementwise_b + comm + routing
    )
    return forward, backward, attention


def cost_seq(ctx: ProblemContext, shape: LayerShape) -> LayerSeq:
    """Per-layer costs of every layer (shared by every plan with this layer shape)."""
    hit = ctx.cost_seqs.get(shape)
    if hit is not None:
        return hit
    frag = 1.0 + ctx.config.fragmentation_fraction
    costs = {k: layer_cost(ctx, k, shape) for k in ctx.kinds}
    flags = ctx.moe_flags
    hit = ctx.cost_seqs[shape] = LayerSeq(
        items=per_layer(costs, flags),
        public={
            "time": per_layer({k: x.total_s for k, x in costs.items()}, flags),
            "forward": per_layer({k: x.forward_s for k, x in costs.items()}, flags),
            "wgrad": per_layer({k: x.wgrad_s for k, x in costs.items()}, flags),
            "act": per_layer({k: x.activation_bytes * frag for k, x in costs.items()}, flags),
        },
        max_working_bytes=max(x.working_bytes for x in costs.values()),
        max_params=0.0,
        params_sum=0.0,
        uniform=len(costs) == 1,
        max_cp_working_bytes=max(x.cp_working_bytes for x in costs.values()),
    )
    return hit
