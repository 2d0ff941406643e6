"""The registered "analytical" training cost model: FLOPs × achieved GEMM efficiency,
alpha-beta collectives on a two-tier topology, tensor-counted memory and 1F1B schedules.

Per layer and micro-batch (one GPU): GEMMs forward + backward (+ recompute) on the roofline
of `gemm.py`, the attention core of `attention.py`, exposed tensor-parallel communication
(Megatron with SP: 2 all-gathers + 2 reduce-scatters of s·b·h bf16 elements forward and the
same backward; without SP 2 all-reduces each way; Korthikanti et al. 2022 §4.2.2) and the
exposed context-parallel ring exchange (c−1 K/V block transfers forward, twice that backward,
overlapped with the attention core). The step adds the pipeline schedule (`schedule.py`),
the exposed data-parallel communication, the memory-bound Adam step and a fixed overhead.

Hot path: a search screens tens of thousands of plans, so everything derived from the
problem is computed once per problem object and every part of a profile once per the fields
it depends on: per-layer costs per (layer kind, t, c, b, recompute, SP, flash, etp), the
per-layer tuples (`(x,) * L` for identical layers) per the same key without the kind, state
bytes per (t, data·context, ZeRO, expert degrees), embedding/head extras, p2p time, group
placement and in-flight counts per their own keys; prefix sums (only evaluate() needs them)
are built on first use per layer sequence. Layer costs share their recompute-independent core
per (kind, t, c, b, SP, flash, etp); embedding / LM-head times and states are cached apart.
The degree rules of check() are cached per degrees; `check_key` answers valid keys from that
cache and a few integer tests. The step-time bound caches its v-independent terms per
(t, c, d, p, etp, SP, b, recompute, flash), built from layer terms per (t, c, b, recompute,
SP, flash, etp), and its Adam-step term per (t, c, d, p, e, etp, ZeRO); every cached number
is computed by the same expression as before, so the results are bit-identical.
The keyed entry points (`check_key`, `profile_key`) and the search bounds
(`group_memory_lower_bound_bytes`, `step_time_lower_bound_s`) implement the optional
`KeyedTrainingCostModel` / `BoundedTrainingCostModel` protocols of `cost_models.base`; no
pydantic object is built before the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cost_models.analytical.attention import AttentionCoreModel
from cost_models.analytical.collectives import AlphaBetaCollectives, TwoTierNetwork
from cost_models.analytical.elementwise import (
    BACKWARD_BYTES_RATIO,
    layer_elementwise_bytes,
    mlp_width,
)
from cost_models.analytical.flops import (
    attention_dims,
    layer_gemms,
    model_flops_per_step,
    recompute_flops_per_step,
    split_gemm,
)
from cost_models.analytical.gemm import MEMORY_EFFICIENCY, RooflineGemm
from cost_models.analytical.memory import (
    GIB,
    grad_bucket_bytes,
    inflight_1f1b,
    inflight_interleaved,
    layer_activation_bytes,
    logits_bytes,
    state_bytes_per_param,
)
from cost_models.analytical.moe import (
    ExpertLoad,
    busiest_rank_load,
    grouped_expert_gemm_s,
    moe_comm_s,
    permute_bytes,
)
from cost_models.analytical.placement import (
    ExpertGroups,
    ParallelGroups,
    flat_group,
    place_expert_groups,
    place_groups,
)
from cost_models.analytical.schedule import pipeline_step
from cost_models.base import LayerProfile, PlanKey, TrainingEstimate, TrainingProblem
from cost_models.error_bars import stored_quantiles
from cost_models.registry import register_cost_model
from hardware_catalog.schema import AcceleratorSpec
from specs.errors import InfeasiblePlan
from specs.model import ModelSpec
from specs.plan import (
    MemoryReport,
    StageMemory,
    TimeBreakdown,
    TrainingMetrics,
    TrainingPlan,
    Violation,
)

GB = 1e9
CROSS_ENTROPY_FORWARD_PASSES = 9.5
"""fp32-sized HBM passes over the logits in the forward of Megatron's vocab-parallel cross
entropy on `logits.float()`: the bf16→fp32 cast (read 2 + write 4 bytes = 1.5 passes), the
max (1), subtracting it (2), exp (2), the sum (1) and the normalisation kept for backward (2)."""
CROSS_ENTROPY_BACKWARD_PASSES = 5.5
"""Backward: subtract the one-hot target (2), scale by the incoming gradient (2) and the
fp32→bf16 cast for the LM-head GEMMs (1.5)."""


class AnalyticalConfig(BaseModel):
    """Options of the analytical cost model (few, physical, calibratable)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    attention_efficiency: float | None = Field(default=None, gt=0, le=1)
    """Flash-attention achieved fraction of the dense bf16 peak; null takes the accelerator's
    catalog value, else DEFAULT_ATTENTION_EFFICIENCY."""
    attention_backward_ratio: float = Field(default=2.5, gt=0, le=10)
    """Flash backward time / forward time (5 vs 2 matmuls, Dao 2023 §3.1.2)."""
    kernel_launch_s: float = Field(default=5e-6, ge=0, le=1e-3)
    """Per-kernel launch and tail latency added to every GEMM and attention kernel."""
    gemm_k_overhead: float = Field(default=384.0, ge=0, le=65536)
    """GEMM tile pipeline fill + epilogue in elements of k on an A100-class SM (gemm.py:
    efficiency × k/(k+K0)); scaled per accelerator by gemm_k_overhead_for()."""
    alpha_intra_s: float = Field(default=10e-6, ge=0, le=1e-2)
    """Latency per collective step on the scale-up fabric."""
    alpha_inter_s: float = Field(default=30e-6, ge=0, le=1e-2)
    """Latency per collective step across nodes."""
    tp_comm_overlap: float = Field(default=0.0, ge=0, le=1)
    """Fraction of tensor-parallel communication hidden behind GEMMs (TE comm overlap)."""
    grad_reduce_bytes: float = Field(default=4.0, gt=0, le=8)
    """Bytes per gradient element reduced over data parallelism (fp32 default; 2 = bf16)."""
    dp_overlap_efficiency: float = Field(default=0.8, ge=0, le=1)
    """Fraction of the overlapping compute that can hide data-parallel communication."""
    zero3_grad_reduce_bytes: float = Field(default=2.0, gt=0, le=8)
    """Bytes per gradient element reduce-scattered under ZeRO-3: DeepSpeed and FSDP reduce in
    the parameter dtype (bf16/fp16) by default, unlike Megatron's fp32 gradient reduce."""
    zero3_overlap: float = Field(default=0.0, ge=0, le=1)
    """Fraction of the overlapping compute that hides ZeRO-3 parameter gathers and gradient
    reduce-scatters. 0 by default: DeepSpeed ZeRO-3's measured step times (Narayanan et al.
    2021, Table 2: GPT-3 175B at 384–1536 and 530B at 640–2240 A100s) equal the compute plus
    the full flat-ring gather and reduce-scatter times, with nothing hidden."""
    zero3_flat_ring: bool = True
    """ZeRO-3 gathers and reduce-scatters priced as one flat ring over NICs (each GPU's own
    NIC carries (n−1)/n of the full buffer, whatever the group's members per node):
    DeepSpeed ZeRO-3 as measured by Narayanan et al. 2021, Table 2. False: the same
    hierarchical placement as every other collective (NCCL builds one ring per NIC, so a
    group with g members per node crosses the network with g NICs in parallel)."""
    dp_non_overlapped_fraction: float = Field(default=0.05, ge=0, le=1)
    """Share of each data-parallel collective that is always exposed (the last bucket)."""
    runtime_context_gib: float = Field(default=1.0, ge=0, le=64)
    """CUDA context, NCCL and framework buffers per GPU."""
    fragmentation_fraction: float = Field(default=0.05, ge=0, le=1)
    """Allocator fragmentation as a fraction of activation memory."""
    optimizer_bytes_per_param: float = Field(default=30.0, gt=0, le=100)
    """HBM bytes moved per parameter by the Adam step: read master, m, v, grad (4 each),
    write master, m, v (4 each) and the bf16 parameter (2)."""
    step_overhead_s: float = Field(default=0.0, ge=0, le=3600)
    """Fixed per-step overhead (data loading, logging, synchronisation)."""


# ---- internal records (plain dataclasses: no validation in the hot path) -------------------


@dataclass(frozen=True, slots=True)
class _LayerCost:
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

    @property
    def total_s(self) -> float:
        return self.compute_s + self.recompute_s + self.tp_s + self.cp_s + self.ep_s


@dataclass(frozen=True, slots=True)
class _LayerState:
    """Per-GPU parameters of one layer kind and their state bytes."""

    params: float
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    shard_params: float
    """Parameters whose optimizer state this GPU updates (for the Adam step)."""
    expert_params: float = 0.0
    """Of `params`, the routed-expert ones (reduced over the expert-data-parallel group)."""

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes


@dataclass(frozen=True, slots=True)
class _Extra:
    """Embedding (first chunk) or LM head (last chunk) costs."""

    compute_s: float
    tp_s: float
    forward_s: float
    state: _LayerState
    activation_bytes: float


_PREFIX_FIELDS = {
    "time": "total_s",
    "forward": "forward_s",
    "backward": "backward_s",
    "compute": "compute_s",
    "recompute": "recompute_s",
    "tp": "tp_s",
    "cp": "cp_s",
    "ep": "ep_s",
    "a2a": "a2a_s",
    "act": "activation_bytes",
    "params": "params",
    "expert_params": "expert_params",
    "shard_params": "shard_params",
    "weights": "weights_bytes",
    "grads": "grads_bytes",
    "optimizer": "optimizer_bytes",
}
"""Prefix-sum arrays evaluate() may ask for, and the per-layer record field of each."""


@dataclass(frozen=True, slots=True)
class _TimeStats:
    total: float
    smallest: float
    largest: float


@dataclass(slots=True)
class _LayerSeq:
    """Per-layer records of every layer (one `_LayerCost` or `_LayerState` per layer) under
    one set of degrees, shared by every plan that has them. Prefix sums are built on first
    use (only evaluate() needs them), once per sequence rather than once per plan."""

    items: tuple[Any, ...]
    public: dict[str, tuple[float, ...]]
    """The LayerProfile tuples built from these records."""
    max_working_bytes: float
    """Largest `working_bytes` over layer kinds (cost sequences)."""
    max_params: float
    """Largest per-GPU parameter count over layer kinds (state sequences)."""
    params_sum: float
    """Σ_l params_l (state sequences), summed in layer order."""
    uniform: bool = False
    """Every layer has the same record (one layer kind)."""
    prefixes: dict[str, tuple[float, ...]] = field(default_factory=dict)
    _stats: _TimeStats | None = None

    def stats(self) -> _TimeStats:
        """Sum, smallest and largest per-layer time (cost sequences), computed once."""
        if self._stats is None:
            times = self.public["time"]
            self._stats = _TimeStats(self.prefix("time")[-1], min(times), max(times))
        return self._stats

    def prefix(self, name: str) -> tuple[float, ...]:
        arr = self.prefixes.get(name)
        if arr is None:
            attr = _PREFIX_FIELDS[name]
            items = self.items
            if self.uniform:  # one record repeated: read the field once
                values: Any = (getattr(items[0], attr),) * len(items)
            else:
                values = [getattr(x, attr) for x in items]
            arr = tuple(accumulate(values, initial=0.0))
            self.prefixes[name] = arr
        return arr


def _per_layer(by_kind: dict[bool, Any], flags: tuple[bool, ...]) -> tuple[Any, ...]:
    """The per-layer tuple of a value given per layer kind (`(x,) * L` when uniform)."""
    if len(by_kind) == 1:
        (only,) = by_kind.values()
        return (only,) * len(flags)
    return tuple(by_kind[f] for f in flags)


_STATE_PREFIXES = frozenset(
    {"params", "expert_params", "shard_params", "weights", "grads", "optimizer"}
)


@dataclass(slots=True)
class _Profiled:
    """A profile with the components evaluate() needs (per-layer prefix sums on demand)."""

    public: LayerProfile
    groups: ParallelGroups
    costs: _LayerSeq
    states: _LayerSeq
    first: _Extra
    last: _Extra
    p2p_s: float
    runtime_bytes: float
    bucket_bytes: float
    zero3_working_bytes: float
    recompute_working_bytes: float

    def prefix(self, name: str) -> tuple[float, ...]:
        seq = self.states if name in _STATE_PREFIXES else self.costs
        return seq.prefix(name)


@dataclass(slots=True)
class _Context:
    """Everything derived from one TrainingProblem."""

    problem: TrainingProblem
    model: ModelSpec
    moe_flags: tuple[bool, ...]
    seq: int
    global_batch: int
    gpus_per_node: int
    gemm: RooflineGemm
    attention: AttentionCoreModel
    comm: AlphaBetaCollectives
    hbm_bytes_per_s: float
    peak_flops: float
    model_flops: float
    kinds: tuple[bool, ...]
    """Distinct layer kinds (is MoE), sorted."""
    num_layers: int
    usable_bytes: float
    num_gpus: int
    is_homogeneous: bool
    layer_costs: dict[tuple[Any, ...], _LayerCost] = field(default_factory=dict)
    layer_cores: dict[tuple[Any, ...], tuple[float, ...]] = field(default_factory=dict)
    """The recompute-independent parts of `layer_costs` (see `_layer_core`)."""
    degree_checks: dict[tuple[Any, ...], tuple[list[Violation], list[Violation]]] = field(
        default_factory=dict
    )
    """(rules before, rules after the per-step rules) per (t, c, d, pp, e, etp)."""
    degrees_clear: dict[tuple[Any, ...], bool] = field(default_factory=dict)
    """Per (t, c, d, pp, e, etp): no degree rule fails (`check_key`'s fast path)."""
    cost_seqs: dict[tuple[Any, ...], _LayerSeq] = field(default_factory=dict)
    state_seqs: dict[tuple[Any, ...], _LayerSeq] = field(default_factory=dict)
    extras: dict[tuple[Any, ...], tuple[_Extra, _Extra]] = field(default_factory=dict)
    extra_times: dict[
        tuple[Any, ...], tuple[tuple[float, float, float, float], tuple[float, float, float, float]]
    ] = field(default_factory=dict)
    extra_states: dict[tuple[Any, ...], tuple[_LayerState, _LayerState]] = field(
        default_factory=dict
    )
    groups: dict[tuple[int, int, int, int], ParallelGroups] = field(default_factory=dict)
    p2p: dict[tuple[Any, ...], float] = field(default_factory=dict)
    inflight: dict[tuple[Any, ...], tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    group_memory: dict[tuple[Any, ...], float] = field(default_factory=dict)
    bound_times: dict[tuple[Any, ...], tuple[float, float, float, float, float, int]] = field(
        default_factory=dict
    )
    """Step-time bound terms per (t, c, d, pp, etp, sp, b, rc, flash, e): (layers + extras,
    largest layer, smallest layer, larger extra, p2p s, micro-batches)."""
    bound_layer_terms: dict[tuple[Any, ...], tuple[float, float, float, float]] = field(
        default_factory=dict
    )
    """The layer and extra terms of `bound_times` per (t, c, b, rc, sp, flash, etp, e)."""
    bound_optimizer: dict[tuple[Any, ...], float] = field(default_factory=dict)
    """Adam-step time of the bound per (t, c, d, pp, e, etp, zero)."""
    profiles: dict[tuple[Any, ...], _Profiled] = field(default_factory=dict)
    recompute_flops: dict[str, float] = field(default_factory=dict)
    expert_loads: dict[int, ExpertLoad] = field(default_factory=dict)
    """The busiest EP rank's routed load per expert degree (`moe.busiest_rank_load`)."""
    expert_groups: dict[tuple[int, int, int], ExpertGroups] = field(default_factory=dict)
    """Expert group placements per (e, etp, d·c·t)."""


_MAX_CONTEXTS = 32
_MAX_PROFILES = 200_000


def _plan_key(plan: TrainingPlan) -> tuple[Any, ...]:
    p = plan.parallelism
    return (
        p.tensor,
        p.context,
        p.data,
        p.pipeline,
        p.virtual_pipeline,
        p.expert,
        p.expert_tensor,
        p.sequence_parallel,
        plan.micro_batch_size,
        plan.zero_stage,
        plan.recompute,
        plan.pipeline_schedule,
        plan.flash_attention,
    )


A100_BF16_FLOPS_PER_SM = 312e12 / 108
"""The reference compute unit gemm_k_overhead is stated for (A100: 312 TFLOP/s over 108 SMs)."""


def gemm_k_overhead_for(config: AnalyticalConfig, accelerator: AcceleratorSpec) -> float:
    """K0 for an accelerator. The pipeline fill and epilogue of a tile take a roughly fixed
    time (loading the first k-slices from HBM, writing the output tile), while a k-slice of the
    main loop takes less time the faster one compute unit's tensor cores are; in elements of k
    the overhead therefore grows with the dense bf16 rate per SM/CU (H100 SXM: 7.5 TFLOP/s per
    SM, 2.6× an A100 SM, so K0 ≈ 1000). Without a unit count the reference value applies."""
    if accelerator.num_compute_units is None:
        return config.gemm_k_overhead
    per_unit = accelerator.peak_flops("bf16") / accelerator.num_compute_units
    return config.gemm_k_overhead * per_unit / A100_BF16_FLOPS_PER_SM


DEFAULT_ATTENTION_EFFICIENCY = 0.6
"""FlashAttention-2 forward+backward on A100: 50–73 % of the dense peak forward, ~60 %
overall (Dao 2023, arXiv 2307.08691, §4.1), used when the catalog has no figure."""


def attention_efficiency(config: AnalyticalConfig, accelerator: AcceleratorSpec) -> float:
    """The flash-attention efficiency in force: the config's override, else the catalog's
    per-accelerator value, else the default."""
    if config.attention_efficiency is not None:
        return config.attention_efficiency
    return accelerator.attention_efficiency or DEFAULT_ATTENTION_EFFICIENCY


ZERO3_LIVE_MODULES = 2
"""Gathered modules resident at once under ZeRO-3: the one computing and the one prefetched."""


def zero3_working_bytes(model: ModelSpec, tensor: int, expert: int, expert_tensor: int) -> float:
    """bf16 bytes of the parameters ZeRO-3 holds gathered at once on one GPU.

    ZeRO-3 gathers parameters module by module (each linear layer) just before use and frees
    them after, prefetching the next (Rajbhandari et al. 2020 §5.3; DeepSpeed
    `stage3_prefetch_bucket_size`), so the working copy is about two of the largest modules,
    not two transformer layers. A module's weights are split over the tensor group (routed
    experts: the GPU's num_experts / expert experts, each split over expert_tensor).
    """
    largest = 0.0
    kinds = {model.is_moe_layer(i) for i in range(model.num_layers)}
    for is_moe in kinds:
        for gemm in layer_gemms(model, is_moe, 1.0):
            weights = gemm.k * gemm.n
            if gemm.split in ("col", "row"):
                weights /= tensor
            elif gemm.split.startswith("expert"):
                assert model.moe is not None
                weights *= model.moe.num_experts / expert / expert_tensor
            largest = max(largest, weights)
    return ZERO3_LIVE_MODULES * 2.0 * largest


def _error_bars(step_time_s: float) -> dict[str, float]:
    """step_time_s_low / _high from the residuals on the published runs (error_bars.py)."""
    quantiles = stored_quantiles("analytical")
    if quantiles is None:
        return {}
    low, high = quantiles.interval(step_time_s)
    return {"step_time_s_low": low, "step_time_s_high": high}


def _gib(x: float) -> float:
    return x / GIB


@register_cost_model("analytical")
class AnalyticalTrainingCostModel:
    """FLOPs × achieved efficiency, alpha-beta comm, tensor-counted memory, 1F1B schedules."""

    name = "analytical"
    version = "1"
    Config = AnalyticalConfig

    def __init__(self, config: AnalyticalConfig | None = None) -> None:
        self.config = config or AnalyticalConfig()
        self._contexts: dict[int, _Context] = {}
        self._last: _Context | None = None
        """The context asked for last (one attribute: a search asks for the same problem
        tens of thousands of times)."""

    # ---- problem context ---------------------------------------------------------------
    def _context(self, problem: TrainingProblem) -> _Context:
        ctx = self._last
        if ctx is not None and ctx.problem is problem:
            return ctx
        ctx = self._contexts.get(id(problem))
        if ctx is not None and ctx.problem is problem:
            self._last = ctx
            return ctx
        if len(self._contexts) >= _MAX_CONTEXTS:
            self._contexts.clear()
        ctx = self._build_context(problem)
        self._contexts[id(problem)] = ctx
        self._last = ctx
        return ctx

    def _build_context(self, problem: TrainingProblem) -> _Context:
        cfg = self.config
        cluster, model, work = problem.cluster, problem.model, problem.workload
        acc = cluster.accelerator
        precision = work.precision
        try:
            bf16_peak = acc.peak_flops("bf16")
        except KeyError:
            bf16_peak = acc.peak_flops("fp32")
        try:
            peak = acc.peak_flops(precision)
        except KeyError:  # check() reports the missing precision; price at bf16
            peak = bf16_peak
        if precision == "fp8":
            gemm_eff = acc.gemm_efficiency_fp8 or acc.gemm_efficiency
            elem_bytes = 1.0
        else:
            gemm_eff = acc.gemm_efficiency
            elem_bytes = 4.0 if precision == "fp32" else 2.0
        hbm = acc.memory_bandwidth_bytes_per_s
        peer = acc.scale_up_peer_bandwidth_gb_s
        net = TwoTierNetwork(
            intra_bytes_per_s=cluster.intra_node_bandwidth_gb_s * GB * acc.scale_up_efficiency,
            inter_bytes_per_s=cluster.inter_node_bandwidth_gb_s * GB * acc.scale_out_efficiency,
            intra_peer_bytes_per_s=peer * GB * acc.scale_up_efficiency if peer else None,
            alpha_intra_s=cfg.alpha_intra_s,
            alpha_inter_s=cfg.alpha_inter_s,
        )
        moe_flags = tuple(model.is_moe_layer(i) for i in range(model.num_layers))
        return _Context(
            problem=problem,
            model=model,
            moe_flags=moe_flags,
            kinds=tuple(sorted(set(moe_flags))),
            num_layers=model.num_layers,
            usable_bytes=problem.usable_memory_bytes,
            num_gpus=problem.num_gpus,
            is_homogeneous=cluster.is_homogeneous,
            seq=work.sequence_length,
            global_batch=work.global_batch_size,
            gpus_per_node=cluster.gpus_per_node,
            gemm=RooflineGemm(
                peak,
                gemm_eff,
                hbm,
                elem_bytes,
                cfg.kernel_launch_s,
                gemm_k_overhead_for(cfg, acc),
            ),
            attention=AttentionCoreModel(
                bf16_peak,
                attention_efficiency(cfg, acc),
                acc.gemm_efficiency,
                hbm,
                cfg.attention_backward_ratio,
                cfg.kernel_launch_s,
            ),
            comm=AlphaBetaCollectives(net),
            hbm_bytes_per_s=hbm,
            peak_flops=peak,
            model_flops=model_flops_per_step(model, work.global_batch_size, work.sequence_length),
        )

    # ---- check -------------------------------------------------------------------------
    def check(self, problem: TrainingProblem, plan: TrainingPlan) -> list[Violation]:
        """Structural rules (no costs); see the module docstring of each rule's source."""
        p = plan.parallelism
        return self._check(
            problem,
            p.tensor,
            p.context,
            p.data,
            p.pipeline,
            p.virtual_pipeline,
            p.expert,
            p.expert_tensor,
            plan.micro_batch_size,
            plan.zero_stage,
            plan.pipeline_schedule,
        )

    def check_key(self, problem: TrainingProblem, key: PlanKey) -> list[Violation]:
        """`check()` of the plan `key` describes, without building the plan: the degree
        rules are cached per problem and degrees, the few per-step rules are evaluated
        directly (the full `_check` runs only when one of them fails)."""
        ctx = self._last
        if ctx is None or ctx.problem is not problem:
            ctx = self._context(problem)
        t, c, d, pp, v, e, et, _sp, b, zero, _rc, schedule, _flash = key
        gbs = ctx.global_batch
        if (
            ctx.degrees_clear.get((t, c, d, pp, e, et))
            and not gbs % (b * d)
            and pp * v <= ctx.num_layers
            and (
                schedule != "interleaved_1f1b"
                or (pp >= 2 and gbs // (b * d) >= pp and not (gbs // (b * d)) % pp)
            )
            and (zero < 2 or pp <= 1)
        ):
            return []
        return self._check(problem, t, c, d, pp, v, e, et, b, zero, schedule)

    def _check(
        self,
        problem: TrainingProblem,
        t: int,
        c: int,
        d: int,
        pp: int,
        v: int,
        e: int,
        et: int,
        b: int,
        zero: int,
        schedule: str,
    ) -> list[Violation]:
        """Every rule, in a fixed order: the degree rules (cached per degrees), then the
        micro-batch, virtual pipeline, schedule and ZeRO rules, then the expert and
        precision rules (cached per degrees)."""
        ctx = self._context(problem)
        dkey = (t, c, d, pp, e, et)
        before_after = ctx.degree_checks.get(dkey)
        if before_after is None:
            before_after = ctx.degree_checks[dkey] = self._degree_rules(ctx, t, c, d, pp, e, et)
            ctx.degrees_clear[dkey] = not before_after[0] and not before_after[1]
        before, after = before_after
        out = list(before)
        model, gbs = ctx.model, ctx.global_batch
        if gbs % (b * d):
            out.append(
                Violation(
                    kind="batch",
                    detail=(
                        f"global_batch_size ({gbs}) must be divisible by micro_batch_size × "
                        f"data = {b} × {d} = {b * d}"
                    ),
                )
            )
        if pp * v > model.num_layers:
            out.append(
                Violation(
                    kind="divisibility",
                    detail=(
                        f"pipeline × virtual_pipeline = {pp} × {v} = {pp * v} must not "
                        f"exceed num_layers ({model.num_layers})"
                    ),
                )
            )
        if schedule == "interleaved_1f1b":
            m = gbs // (b * d) if b * d else 0
            if pp < 2:
                out.append(
                    Violation(
                        kind="schedule", detail=(f"interleaved_1f1b needs pipeline >= 2 (got {pp})")
                    )
                )
            elif m < pp or m % pp:
                out.append(
                    Violation(
                        kind="schedule",
                        detail=(
                            f"interleaved_1f1b needs the number of micro-batches ({m}) to be "
                            f"a multiple of pipeline ({pp}) and at least pipeline"
                        ),
                    )
                )
        if zero >= 2 and pp > 1:
            out.append(
                Violation(
                    kind="zero",
                    detail=(
                        f"zero_stage {zero} cannot be combined with pipeline "
                        f"parallelism (pipeline = {pp}; DeepSpeed forbids ZeRO-2/3 with pipelining)"
                    ),
                )
            )
        out.extend(after)
        return out

    def _degree_rules(
        self, ctx: _Context, t: int, c: int, d: int, pp: int, e: int, et: int
    ) -> tuple[list[Violation], list[Violation]]:
        """The rules that read only the degrees: (those `_check` reports before the
        per-step rules, those it reports after them)."""
        problem = ctx.problem
        model, work, cluster = problem.model, problem.workload, problem.cluster
        world_size = d * t * pp * c
        out: list[Violation] = []

        def bad(kind: str, detail: str) -> None:
            out.append(Violation(kind=kind, detail=detail))

        if not ctx.is_homogeneous:
            bad(
                "heterogeneous",
                "the cluster mixes node types; only homogeneous clusters are priced for now",
            )
        if world_size != ctx.num_gpus:
            bad(
                "divisibility",
                f"data × tensor × pipeline × context = {d} × {t} × {pp} × {c} "
                f"= {world_size} must equal the cluster's {ctx.num_gpus} GPUs",
            )
        a = model.num_attention_heads
        if a % t:
            bad("divisibility", f"num_attention_heads ({a}) must be divisible by tensor ({t})")
        if model.mla is None and model.kv_heads % t:
            bad(
                "divisibility", f"num_kv_heads ({model.kv_heads}) must be divisible by tensor ({t})"
            )
        if model.ffn_hidden_size % t:
            bad(
                "divisibility",
                f"ffn_hidden_size ({model.ffn_hidden_size}) must be divisible by tensor ({t})",
            )
        gpn = cluster.gpus_per_node
        if t > gpn and not problem.allow_tensor_across_nodes:
            bad(
                "topology",
                f"tensor ({t}) must not exceed gpus_per_node ({gpn}) unless "
                "allow_tensor_across_nodes is set",
            )
        s = work.sequence_length
        if c > 1 and s % (2 * c):
            bad(
                "divisibility",
                f"sequence_length ({s}) must be divisible by 2 × context "
                f"= {2 * c} (load-balanced causal context parallelism)",
            )
        before = out
        out = []
        if model.moe is None:
            if e > 1 or et > 1:
                bad("expert", f"expert ({e}) and expert_tensor ({et}) must be 1 for a dense model")
        else:
            if model.moe.num_experts % e:
                bad(
                    "expert",
                    f"moe.num_experts ({model.moe.num_experts}) must be divisible by expert ({e})",
                )
            if (d * c * t) % (e * et):
                bad(
                    "expert",
                    f"expert × expert_tensor = {e} × {et} must divide data × context "
                    f"× tensor = {d} × {c} × {t} = {d * c * t}",
                )
            fe = model.moe.expert_ffn_hidden_size
            if fe % et:
                bad(
                    "divisibility",
                    f"moe.expert_ffn_hidden_size ({fe}) must be divisible by expert_tensor ({et})",
                )
            if et > gpn and not problem.allow_tensor_across_nodes:
                bad(
                    "topology",
                    f"expert_tensor ({et}) must not exceed gpus_per_node ({gpn}) "
                    "unless allow_tensor_across_nodes is set",
                )
            if model.moe.num_shared_experts:
                fs = model.moe.num_shared_experts * model.moe.shared_ffn
                if fs % t:
                    bad(
                        "divisibility",
                        f"shared expert width ({fs}) must be divisible by tensor ({t})",
                    )
            loads = work.moe_routing.expert_loads if work.moe_routing is not None else None
            if loads is not None and len(loads) != model.moe.num_experts:
                bad(
                    "expert",
                    f"moe_routing.expert_loads has {len(loads)} entries; the model "
                    f"has {model.moe.num_experts} routed experts",
                )
        if not cluster.accelerator.peak_tflops.get(work.precision) and not (
            work.precision in ("fp16", "bf16")
            and (
                cluster.accelerator.peak_tflops.get("bf16")
                or cluster.accelerator.peak_tflops.get("fp16")
            )
        ):
            bad(
                "precision",
                f"{cluster.accelerator.id} has no dense {work.precision} peak in the catalog",
            )
        return before, out

    # ---- profile -----------------------------------------------------------------------
    def profile(self, problem: TrainingProblem, plan: TrainingPlan) -> LayerProfile:
        """Per-layer costs independent of the pipeline split (stage_layers is ignored)."""
        return self._profiled(self._context(problem), _plan_key(plan)).public

    def profile_key(self, problem: TrainingProblem, key: PlanKey) -> LayerProfile:
        """`profile()` of the plan `key` describes, without building the plan (the fast
        entry point of `cost_models.base.KeyedTrainingCostModel`)."""
        return self._profiled(self._context(problem), key).public

    def _profiled(self, ctx: _Context, key: tuple[Any, ...]) -> _Profiled:
        hit = ctx.profiles.get(key)
        if hit is not None:
            return hit
        if len(ctx.profiles) >= _MAX_PROFILES:
            ctx.profiles.clear()
        result = self._build_profile(ctx, key)
        ctx.profiles[key] = result
        return result

    def _groups(self, ctx: _Context, t: int, c: int, d: int, pp: int) -> ParallelGroups:
        key = (t, c, d, pp)
        hit = ctx.groups.get(key)
        if hit is None:
            hit = ctx.groups[key] = place_groups(t, c, d, pp, ctx.gpus_per_node)
        return hit

    def _expert_load(self, ctx: _Context, e: int) -> ExpertLoad:
        """The busiest EP rank's routed load for expert degree `e` (cached per problem)."""
        hit = ctx.expert_loads.get(e)
        if hit is None:
            moe = ctx.model.moe
            assert moe is not None
            try:
                hit = busiest_rank_load(moe.num_experts, e, ctx.problem.workload.moe_routing)
            except ValueError as exc:  # a histogram of the wrong length (check() reports it)
                raise InfeasiblePlan("expert", str(exc)) from exc
            ctx.expert_loads[e] = hit
        return hit

    def _expert_groups(self, ctx: _Context, e: int, etp: int, dct: int) -> ExpertGroups:
        key = (e, etp, dct)
        hit = ctx.expert_groups.get(key)
        if hit is None:
            hit = ctx.expert_groups[key] = place_expert_groups(e, etp, dct, ctx.gpus_per_node)
        return hit

    def _tp_exchange_s(
        self, ctx: _Context, size_bytes: float, groups: ParallelGroups, sp: bool
    ) -> float:
        """One tensor-parallel exchange of an activation of `size_bytes` (Korthikanti et al.
        2022 §4.2.2): an all-gather plus a reduce-scatter with sequence parallelism, an
        all-reduce without; the hidden share `tp_comm_overlap` removed. 0 without TP."""
        group = groups.tensor
        if group.size <= 1:
            return 0.0
        if sp:
            raw = ctx.comm.all_gather(size_bytes, group) + ctx.comm.reduce_scatter(
                size_bytes, group
            )
        else:
            raw = ctx.comm.all_reduce(size_bytes, group)
        return raw * (1.0 - self.config.tp_comm_overlap)

    def _layer_cost(
        self,
        ctx: _Context,
        is_moe: bool,
        t: int,
        c: int,
        b: int,
        rc: str,
        sp: bool,
        flash: bool,
        etp: int,
        groups: ParallelGroups,
        e: int = 1,
    ) -> _LayerCost:
        # Only the tensor and context placements enter, and they depend on (t, c) alone;
        # the expert placements depend on (e, etp) alone (`place_expert_groups`).
        key = (is_moe, t, c, b, rc, sp, flash, etp, e)
        hit = ctx.layer_costs.get(key)
        if hit is not None:
            return hit
        core_key = (is_moe, t, c, b, sp, flash, etp, e)
        core = ctx.layer_cores.get(core_key)
        if core is None:
            core = ctx.layer_cores[core_key] = self._layer_core(
                ctx, is_moe, t, c, b, sp, flash, etp, groups, e
            )
        fwd, bwd, att_f, att_b, tp_dir, cp_f, cp_b, working, ep_dir, a2a_dir = core
        if rc == "full":  # the whole forward again, collectives included
            rc_s, tp_rc, cp_rc, ep_rc, a2a_rc = fwd + att_f, tp_dir, cp_f, ep_dir, a2a_dir
        elif rc == "selective":
            rc_s, tp_rc, cp_rc, ep_rc, a2a_rc = att_f, 0.0, 0.0, 0.0, 0.0
        else:
            rc_s, tp_rc, cp_rc, ep_rc, a2a_rc = 0.0, 0.0, 0.0, 0.0, 0.0
        if is_moe:
            load = self._expert_load(ctx, e).load_factor
            act = layer_activation_bytes(
                ctx.model,
                is_moe,
                b,
                ctx.seq,
                t,
                c,
                sp,
                flash,
                rc,  # type: ignore[arg-type]
                etp,
                load,
            )
        else:
            act = layer_activation_bytes(ctx.model, is_moe, b, ctx.seq, t, c, sp, flash, rc)  # type: ignore[arg-type]
        forward = fwd + att_f + tp_dir + cp_f + ep_dir
        cost = _LayerCost(
            compute_s=fwd + bwd + att_f + att_b,
            recompute_s=rc_s,
            tp_s=2 * tp_dir + tp_rc,
            cp_s=cp_f + cp_b + cp_rc,
            ep_s=2 * ep_dir + ep_rc,
            a2a_s=2 * a2a_dir + a2a_rc,
            forward_s=forward,
            backward_s=bwd + att_b + rc_s + tp_dir + tp_rc + cp_b + cp_rc + ep_dir + ep_rc,
            activation_bytes=act,
            working_bytes=working,
        )
        ctx.layer_costs[key] = cost
        return cost

    def _layer_core(
        self,
        ctx: _Context,
        is_moe: bool,
        t: int,
        c: int,
        b: int,
        sp: bool,
        flash: bool,
        etp: int,
        groups: ParallelGroups,
        e: int = 1,
    ) -> tuple[float, float, float, float, float, float, float, float, float, float]:
        """The parts of a layer's cost that recompute does not change: (GEMM + elementwise
        forward, their backward, attention core forward, its backward, TP communication per
        direction, exposed CP forward, exposed CP backward, activation bytes without
        recomputation, EP communication per direction, of which all-to-alls).

        MoE layers (`moe.py`): the routed experts run as grouped GEMMs at their per-expert
        shapes on the busiest EP rank, with the dispatch / combine all-to-alls and the ETP
        collectives; their tensor-parallel collectives are the attention's pair plus the
        shared experts' pair (the routed experts need none: tokens stay sequence-split)."""
        model, s = ctx.model, ctx.seq
        h = model.hidden_size
        tokens = b * s / c
        fwd = bwd = 0.0
        for gm in layer_gemms(model, is_moe, tokens):
            if is_moe and gm.split.startswith("expert"):
                continue  # priced per expert below
            f, bw = ctx.gemm.forward_backward_s(*split_gemm(gm, t, etp))
            fwd += f
            bwd += bw
        ep_dir = a2a_dir = 0.0
        load = 1.0
        tp_pairs = 2.0
        if is_moe:
            moe = model.moe
            assert moe is not None
            expert_load = self._expert_load(ctx, e)
            load = expert_load.load_factor
            tokens_gpu = tokens / t
            # Balanced tokens per local expert after the ETP all-gather: e·etp·(T/t)·k/E.
            balanced = e * etp * tokens_gpu * moe.top_k / moe.num_experts
            ef, eb = grouped_expert_gemm_s(
                ctx.gemm,
                tuple(x * balanced for x in expert_load.local_factors),
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
            egroups = self._expert_groups(ctx, e, etp, e * etp)
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
        att_f = ctx.attention.forward_time_s(b, s, heads, qk, vd, c, flash)
        att_b = ctx.attention.backward_time_s(b, s, heads, qk, vd, c, flash)
        # Tensor parallel (Korthikanti et al. 2022 §4.2.2): s·b·h bf16 elements per collective.
        tp_dir = tp_pairs * self._tp_exchange_s(ctx, tokens * h * 2.0, groups, sp)
        # Context parallel ring: c−1 K/V block transfers forward, K/V and their gradients
        # backward, overlapped with the attention core (Liu et al. 2023, ring attention).
        cp_f = cp_b = 0.0
        if c > 1:
            if model.mla is not None:
                kv_elems = model.num_attention_heads * (qk + vd) / t
            else:
                kv_elems = model.kv_heads * (qk + vd) / t
            block = tokens * kv_elems * 2.0
            ring = (c - 1) * ctx.comm.send_recv(block, groups.context.tier)
            cp_f = max(0.0, ring - att_f)
            cp_b = max(0.0, 2 * ring - att_b)
        # Memory-bound elementwise kernels (norms, rotary, activation, residual adds).
        width = mlp_width(model, is_moe)
        if is_moe and load != 1.0:  # the busiest rank's routed share of the activation work
            assert model.moe is not None
            routed = model.moe.top_k * model.moe.expert_ffn_hidden_size
            width += (load - 1.0) * routed
        elem_f = layer_elementwise_bytes(
            model,
            tokens,
            tensor=t,
            sequence_parallel=sp,
            ffn_hidden_size=width,
            gated=model.gated_mlp,
        ) / (ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY)
        elem_b = BACKWARD_BYTES_RATIO * elem_f
        fwd += elem_f
        bwd += elem_b
        if is_moe:
            working = layer_activation_bytes(
                model, is_moe, b, s, t, c, sp, flash, "none", etp, load
            )
        else:
            working = layer_activation_bytes(model, is_moe, b, s, t, c, sp, flash, "none")
        return fwd, bwd, att_f, att_b, tp_dir, cp_f, cp_b, working, ep_dir, a2a_dir

    def _cost_seq(
        self,
        ctx: _Context,
        t: int,
        c: int,
        b: int,
        rc: str,
        sp: bool,
        flash: bool,
        etp: int,
        groups: ParallelGroups,
        e: int = 1,
    ) -> _LayerSeq:
        """Per-layer costs of every layer (shared by every plan with these degrees)."""
        key = (t, c, b, rc, sp, flash, etp, e)
        hit = ctx.cost_seqs.get(key)
        if hit is not None:
            return hit
        frag = 1.0 + self.config.fragmentation_fraction
        costs = {
            k: self._layer_cost(ctx, k, t, c, b, rc, sp, flash, etp, groups, e) for k in ctx.kinds
        }
        per_layer = _per_layer(costs, ctx.moe_flags)
        hit = ctx.cost_seqs[key] = _LayerSeq(
            items=per_layer,
            public={
                "time": _per_layer({k: x.total_s for k, x in costs.items()}, ctx.moe_flags),
                "forward": _per_layer({k: x.forward_s for k, x in costs.items()}, ctx.moe_flags),
                "act": _per_layer(
                    {k: x.activation_bytes * frag for k, x in costs.items()}, ctx.moe_flags
                ),
            },
            max_working_bytes=max(x.working_bytes for x in costs.values()),
            max_params=0.0,
            params_sum=0.0,
            uniform=len(costs) == 1,
        )
        return hit

    def _state_seq(
        self, ctx: _Context, t: int, shards: int, zero: int, e: int, etp: int
    ) -> _LayerSeq:
        """Per-layer state bytes of every layer (shared by every plan with these degrees)."""
        key = (t, shards, zero, e, etp)
        hit = ctx.state_seqs.get(key)
        if hit is not None:
            return hit
        model = ctx.model
        states = {
            k: self._state(*self._layer_params(model, k, t, e, etp), t, shards, zero, e, etp)
            for k in ctx.kinds
        }
        per_layer = _per_layer(states, ctx.moe_flags)
        hit = ctx.state_seqs[key] = _LayerSeq(
            items=per_layer,
            public={
                "state": _per_layer({k: x.total_bytes for k, x in states.items()}, ctx.moe_flags),
            },
            max_working_bytes=0.0,
            max_params=max(st.params for st in states.values()),
            params_sum=sum(st.params for st in per_layer),
            uniform=len(states) == 1,
        )
        return hit

    def _state(
        self,
        dense_params: float,
        expert_params: float,
        t: int,
        shards: int,
        zero: int,
        e: int,
        etp: int,
    ) -> _LayerState:
        """State bytes of per-GPU parameters: dense ones sharded over data × context
        (`shards`), expert ones over the expert-data-parallel group
        data·context·tensor / (expert·expert_tensor)."""
        w, g, o = state_bytes_per_param(zero, shards)
        e_shards = max(1, shards * t // (e * etp))
        we, ge, oe = state_bytes_per_param(zero, e_shards)
        if zero == 0:  # every replica runs the full Adam step
            shard_params = dense_params + expert_params
        else:
            shard_params = dense_params / shards + expert_params / e_shards
        return _LayerState(
            params=dense_params + expert_params,
            weights_bytes=dense_params * w + expert_params * we,
            grads_bytes=dense_params * g + expert_params * ge,
            optimizer_bytes=dense_params * o + expert_params * oe,
            shard_params=shard_params,
            expert_params=expert_params,
        )

    def _layer_params(
        self, model: ModelSpec, is_moe: bool, t: int, e: int, etp: int
    ) -> tuple[float, float]:
        """(dense, expert) parameters of one layer on one GPU: matrices / tensor, norms
        replicated, routed experts / (expert × expert_tensor)."""
        norms = 2 * model.norm_parameters()
        if not is_moe:
            return (model.attention_parameters() + model.dense_mlp_parameters()) / t + norms, 0.0
        assert model.moe is not None
        routed = model.moe.num_experts * model.expert_parameters()
        rest = model.moe_block_parameters() - routed
        dense = (model.attention_parameters() + rest) / t + norms
        return dense, routed / (e * etp)

    def _extras(
        self,
        ctx: _Context,
        t: int,
        c: int,
        b: int,
        sp: bool,
        head_params_on: bool,
        shards: int,
        zero: int,
        e: int,
        etp: int,
        groups: ParallelGroups,
    ) -> tuple[_Extra, _Extra]:
        """(embedding on the first chunk, LM head + loss on the last chunk): their times
        (`_extra_times`) with their states (`_extra_states`)."""
        key = (t, c, b, sp, head_params_on, shards, zero, e, etp)
        hit = ctx.extras.get(key)
        if hit is not None:
            return hit
        (emb_s, emb_tp, emb_fwd, emb_act), (head_s, head_tp, head_fwd, head_act) = (
            self._extra_times(ctx, t, c, b, sp, groups)
        )
        first_state, last_state = self._extra_states(ctx, t, head_params_on, shards, zero, e, etp)
        first = _Extra(
            compute_s=emb_s,
            tp_s=emb_tp,
            forward_s=emb_fwd,
            state=first_state,
            activation_bytes=emb_act,
        )
        last = _Extra(
            compute_s=head_s,
            tp_s=head_tp,
            forward_s=head_fwd,
            state=last_state,
            activation_bytes=head_act,
        )
        hit = ctx.extras[key] = (first, last)
        return hit

    def _extra_times(
        self,
        ctx: _Context,
        t: int,
        c: int,
        b: int,
        sp: bool,
        groups: ParallelGroups,
    ) -> tuple[tuple[float, float, float, float], tuple[float, float, float, float]]:
        """(compute s, exposed TP s, forward s, activation bytes) of the embedding and of the
        LM head + loss, cached per (t, c, b, SP) (only the tensor placement enters, and it
        depends on t alone)."""
        key = (t, c, b, sp)
        hit = ctx.extra_times.get(key)
        if hit is not None:
            return hit
        model, s = ctx.model, ctx.seq
        h, vocab = model.hidden_size, model.vocab_size
        hbm = ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY
        tokens = b * s / c
        act_size = tokens * h * 2.0
        # Embedding: a memory-bound lookup (read + write T·h bf16) forward, scatter-add backward;
        # vocab-parallel output reduced over the tensor group (RS with SP, AR without).
        emb_s = 2 * 2 * act_size / hbm
        emb_tp = self._tp_exchange_s(ctx, act_size, groups, sp)
        first = (
            emb_s,
            emb_tp,
            emb_s / 2 + (emb_tp if not sp else emb_tp / 2),
            act_size / t if sp else act_size,
        )
        # LM head (vocab-parallel GEMM) and the fp32 cross entropy over the logits.
        head_f, head_b = ctx.gemm.forward_backward_s(tokens, h, vocab / t)
        ce_pass = tokens * vocab / t * 4.0 / hbm
        ce_f = CROSS_ENTROPY_FORWARD_PASSES * ce_pass
        ce_b = CROSS_ENTROPY_BACKWARD_PASSES * ce_pass
        head_tp = self._tp_exchange_s(ctx, act_size, groups, sp)
        last = (
            head_f + head_b + ce_f + ce_b,
            head_tp,
            head_f + ce_f + (head_tp / 2 if sp else 0.0),
            logits_bytes(b, s, vocab, t, c),
        )
        hit = ctx.extra_times[key] = (first, last)
        return hit

    def _extra_states(
        self,
        ctx: _Context,
        t: int,
        head_params_on: bool,
        shards: int,
        zero: int,
        e: int,
        etp: int,
    ) -> tuple[_LayerState, _LayerState]:
        """States of the embedding and of the LM head (when its parameters are on the last
        chunk) + final norm, cached per the fields they depend on."""
        key = (t, head_params_on, shards, zero, e, etp)
        hit = ctx.extra_states.get(key)
        if hit is not None:
            return hit
        model = ctx.model
        first = self._state(model.embedding_parameters() / t, 0.0, t, shards, zero, e, etp)
        head_params = model.vocab_size * model.hidden_size if head_params_on else 0
        last = self._state(head_params / t + model.norm_parameters(), 0.0, t, shards, zero, e, etp)
        hit = ctx.extra_states[key] = (first, last)
        return hit

    def group_memory_lower_bound_bytes(self, problem: TrainingProblem, key: PlanKey) -> float:
        """Model states and fixed bytes only: a peak-memory lower bound valid for every
        micro-batch size, recompute mode, virtual pipeline degree, schedule and split of the
        plan's degrees and ZeRO stage (`GroupMemoryBoundedCostModel`).

        Why it is a bound: evaluate() charges pipeline rank j its layers' weights, gradients
        and optimizer states, the embedding / LM-head states when it holds the first / last
        chunk, the ZeRO-3 working copy, the runtime context and the gradient bucket (none of
        which depends on micro-batch, recompute, v or the schedule), plus (1 + fragmentation)
        × activations ≥ 0. The busiest rank holds at least the mean over the p ranks (every
        layer's states once, both extras once) and at least what rank 0 holds: the
        embedding and ≥ 1 layer (every chunk has a layer; with p = 1 everything).
        """
        ctx = self._context(problem)
        t, c, d, pp = key[0], key[1], key[2], key[3]
        e, etp, zero = key[5], key[6], key[9]
        gkey = (t, c, d, pp, e, etp, zero)
        hit = ctx.group_memory.get(gkey)
        if hit is not None:
            return hit
        model = ctx.model
        shards = d * c
        states = self._state_seq(ctx, t, shards, zero, e, etp)
        first, last = self._extra_states(
            ctx, t, not model.tie_embeddings or pp > 1, shards, zero, e, etp
        )
        bucket = grad_bucket_bytes(shards, states.params_sum / pp) if zero < 3 else 0.0
        zero3 = zero3_working_bytes(model, t, e, etp) if zero == 3 and shards > 1 else 0.0
        fixed = self.config.runtime_context_gib * GIB + bucket + zero3
        layer_bytes = states.public["state"]
        mean = (sum(layer_bytes) + first.total_bytes + last.total_bytes) / pp
        rank0 = first.total_bytes + min(layer_bytes) + (last.total_bytes if pp == 1 else 0.0)
        hit = ctx.group_memory[gkey] = fixed + max(mean, rank0)
        return hit

    def step_time_lower_bound_s(self, problem: TrainingProblem, key: PlanKey) -> float:
        """Step time ≥ schedule(max_j W_j) + optimizer + overhead, for every split
        (`BoundedTrainingCostModel`).

        Why it is a bound: evaluate()'s rank work W_j (layers' compute, recompute, exposed TP
        and CP communication, the extras on the first / last rank, 2·v boundary transfers)
        sums over the ranks to ΣW, which no split changes. The busiest rank's W is at least
        ΣW / p, at least the largest layer plus the transfers (layers are not split) and at
        least an extra plus v smallest layers (every chunk has a layer). Both schedules grow
        with max W at fixed ΣW: 1F1B (m−1)·max W + ΣW, interleaved (m − 1/v)·max W + ΣW/v
        (Narayanan et al. 2021 §2.2.1-2.2.2, `schedule.py`). The Adam step takes the busiest
        rank's shard, at least the mean shard; data-parallel exposure is ≥ 0.
        """
        ctx = self._last
        if ctx is None or ctx.problem is not problem:
            ctx = self._context(problem)
        t, c, d, pp, v, e, etp, sp, b, zero, rc, schedule, flash = key
        tkey = (t, c, d, pp, etp, sp, b, rc, flash, e)
        terms = ctx.bound_times.get(tkey)
        okey = (t, c, d, pp, e, etp, zero)
        optimizer = ctx.bound_optimizer.get(okey)
        if terms is None or optimizer is None:
            terms, optimizer = self._bound_terms(ctx, key, tkey, okey)
        base, largest, smallest, larger_extra, p2p, m = terms
        p2p_rank = 2 * v * p2p if pp > 1 else 0.0
        total = base + pp * p2p_rank
        if pp == 1:
            w_max = total
        else:
            w_max = max(
                total / pp,
                largest + p2p_rank,
                larger_extra + v * smallest + p2p_rank,
            )
        if schedule == "interleaved_1f1b" and v > 1:
            sched = m * w_max + (total - w_max) / v
        else:
            sched = (m - 1) * w_max + total
        return sched + optimizer + self.config.step_overhead_s

    def _bound_terms(
        self,
        ctx: _Context,
        key: tuple[Any, ...],
        tkey: tuple[Any, ...],
        okey: tuple[Any, ...],
    ) -> tuple[tuple[float, float, float, float, float, int], float]:
        """The parts of `step_time_lower_bound_s` that do not depend on v and the schedule
        (cached per `tkey`) and its Adam-step time (cached per `okey`), from the same parts
        `_parts` assembles."""
        t, c, d, pp, _v, e, etp, sp, b, zero, rc, _schedule, flash = key
        terms = ctx.bound_times.get(tkey)
        if terms is None:
            groups = self._groups(ctx, t, c, d, pp)
            lkey = (t, c, b, rc, sp, flash, etp, e)
            layer_terms = ctx.bound_layer_terms.get(lkey)
            if layer_terms is None:
                times = self._cost_seq(ctx, t, c, b, rc, sp, flash, etp, groups, e).stats()
                first_t, last_t = self._extra_times(ctx, t, c, b, sp, groups)
                first_x = first_t[0] + first_t[1]
                last_x = last_t[0] + last_t[1]
                layer_terms = ctx.bound_layer_terms[lkey] = (
                    times.total + first_x + last_x,
                    times.largest,
                    times.smallest,
                    max(first_x, last_x),
                )
            p2p = self._p2p(ctx, t, c, b, sp, groups) if pp > 1 else 0.0
            terms = ctx.bound_times[tkey] = (*layer_terms, p2p, max(1, ctx.global_batch // (b * d)))
        optimizer = ctx.bound_optimizer.get(okey)
        if optimizer is None:
            shards = d * c
            states = self._state_seq(ctx, t, shards, zero, e, etp)
            first_s, last_s = self._extra_states(
                ctx, t, not ctx.model.tie_embeddings or pp > 1, shards, zero, e, etp
            )
            shard_total = (
                states.prefix("shard_params")[-1] + first_s.shard_params + last_s.shard_params
            )
            hbm = ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY
            optimizer = ctx.bound_optimizer[okey] = (
                shard_total / pp * self.config.optimizer_bytes_per_param / hbm
            )
        return terms, optimizer

    def _inflight(
        self, ctx: _Context, interleaved: bool, pp: int, v: int, m: int
    ) -> tuple[tuple[int, ...], ...]:
        key = (interleaved, pp, v, m)
        hit = ctx.inflight.get(key)
        if hit is None:
            hit = ctx.inflight[key] = (
                inflight_interleaved(pp, v, m) if interleaved else inflight_1f1b(pp, m)
            )
        return hit

    def _parts(
        self, ctx: _Context, key: tuple[Any, ...]
    ) -> tuple[ParallelGroups, _LayerSeq, _LayerSeq, _Extra, _Extra, float, int]:
        """(groups, layer costs, layer states, embedding, LM head, p2p s, micro-batches) of
        plan key `key`, each cached by the fields it depends on."""
        t, c, d, pp, _v, e, etp, sp, b, zero, rc, _schedule, flash = key
        model = ctx.model
        groups = self._groups(ctx, t, c, d, pp)
        m = max(1, ctx.global_batch // (b * d))
        shards = d * c
        cost_seq = self._cost_seq(ctx, t, c, b, rc, sp, flash, etp, groups, e)
        state_seq = self._state_seq(ctx, t, shards, zero, e, etp)
        head_params_on = not model.tie_embeddings or pp > 1
        first, last = self._extras(ctx, t, c, b, sp, head_params_on, shards, zero, e, etp, groups)
        p2p = self._p2p(ctx, t, c, b, sp, groups) if pp > 1 else 0.0
        return groups, cost_seq, state_seq, first, last, p2p, m

    def _p2p(
        self, ctx: _Context, t: int, c: int, b: int, sp: bool, groups: ParallelGroups
    ) -> float:
        """One boundary send/recv between pipeline chunks, seconds."""
        p2p_key = (t, c, b, sp, groups.pipeline.tier)
        p2p_hit = ctx.p2p.get(p2p_key)
        if p2p_hit is None:
            act_size = b * ctx.seq / c * ctx.model.hidden_size * 2.0
            p2p_bytes = act_size / t if sp else act_size
            p2p_hit = ctx.p2p[p2p_key] = ctx.comm.send_recv(p2p_bytes, groups.pipeline.tier)
        return p2p_hit

    def _build_profile(self, ctx: _Context, key: tuple[Any, ...]) -> _Profiled:
        """The profile of plan key `key` (see `_plan_key`), assembled from parts cached by
        the fields each depends on."""
        t, c, d, pp, v, e, etp, sp, b, zero, rc, schedule, flash = key
        cfg = self.config
        frag = 1.0 + cfg.fragmentation_fraction
        groups, cost_seq, state_seq, first, last, p2p, m = self._parts(ctx, key)

        # Fixed per GPU: runtime context, DP gradient buckets, ZeRO-3 gathered working copy
        # (zero3_working_bytes), full recompute's one-layer working set.
        total_params = state_seq.params_sum / pp
        bucket = grad_bucket_bytes(d * c, total_params) if zero < 3 else 0.0
        runtime = cfg.runtime_context_gib * GIB
        zero3 = zero3_working_bytes(ctx.model, t, e, etp) if zero == 3 and d * c > 1 else 0.0
        rc_work = cost_seq.max_working_bytes if rc == "full" else 0.0

        inflight = self._inflight(ctx, schedule == "interleaved_1f1b" and v > 1, pp, v, m)

        public = LayerProfile(
            layer_time_s=cost_seq.public["time"],
            layer_forward_time_s=cost_seq.public["forward"],
            layer_state_bytes=state_seq.public["state"],
            layer_activation_bytes=cost_seq.public["act"],
            first_extra_time_s=first.compute_s + first.tp_s,
            last_extra_time_s=last.compute_s + last.tp_s,
            first_extra_state_bytes=first.state.total_bytes,
            last_extra_state_bytes=last.state.total_bytes,
            first_extra_activation_bytes=first.activation_bytes * frag,
            last_extra_activation_bytes=last.activation_bytes * frag,
            p2p_time_s=p2p,
            fixed_bytes=runtime + bucket + zero3 + rc_work * frag,
            inflight_microbatches=inflight,
            num_microbatches=m,
            usable_bytes=ctx.usable_bytes,
        )
        return _Profiled(
            public=public,
            groups=groups,
            costs=cost_seq,
            states=state_seq,
            first=first,
            last=last,
            p2p_s=p2p,
            runtime_bytes=runtime,
            bucket_bytes=bucket,
            zero3_working_bytes=zero3,
            recompute_working_bytes=rc_work,
        )

    # ---- evaluate ----------------------------------------------------------------------
    def evaluate(self, problem: TrainingProblem, plan: TrainingPlan) -> TrainingEstimate:
        """Full estimate of a plan with stage_layers set.

        Raises:
            InfeasiblePlan: kind "divisibility" when the degrees do not multiply to the GPU
                count or stage_layers is missing or does not sum to num_layers.
        """
        violations = self.check_key(problem, PlanKey.of(plan))
        p = plan.parallelism
        if p.world_size != problem.num_gpus:
            raise InfeasiblePlan(
                "divisibility",
                violations[0].detail
                if violations
                else f"plan uses {p.world_size} GPUs, cluster has {problem.num_gpus}",
            )
        model = problem.model
        L, pp, v = model.num_layers, p.pipeline, p.virtual_pipeline
        stages = plan.stage_layers
        if stages is None:
            raise InfeasiblePlan(
                "divisibility",
                "stage_layers must be set to evaluate a plan "
                f"(pipeline × virtual_pipeline = {pp * v} entries summing to "
                f"num_layers = {L})",
            )
        if len(stages) != pp * v or sum(stages) != L or min(stages) < 1:
            raise InfeasiblePlan(
                "divisibility",
                f"stage_layers {stages} must have {pp * v} "
                f"positive entries summing to num_layers ({L}); "
                f"they sum to {sum(stages)}",
            )
        ctx = self._context(problem)
        prof = self._profiled(ctx, _plan_key(plan))
        cfg, pub = self.config, prof.public
        m = pub.num_microbatches
        bounds = list(accumulate(stages, initial=0))

        # [rank] -> [start, end) layer ranges of its chunks, in local order
        rank_ranges = [
            [(bounds[ci], bounds[ci + 1]) for ci in range(j, pp * v, pp)] for j in range(pp)
        ]

        arrays = {name: prof.prefix(name) for name in _PREFIX_FIELDS}

        if v == 1:  # one chunk per rank: sum([x]) is 0.0 + x, without building the list
            single = [ranges[0] for ranges in rank_ranges]

            def chunk_sum(name: str, rank: int) -> float:
                arr = arrays[name]
                lo, hi = single[rank]
                return 0.0 + (arr[hi] - arr[lo])
        else:

            def chunk_sum(name: str, rank: int) -> float:
                arr = arrays[name]
                return sum([arr[hi] - arr[lo] for lo, hi in rank_ranges[rank]])

        # Per-rank work per micro-batch and its components.
        p2p_rank = 2 * v * prof.p2p_s if pp > 1 else 0.0
        comp: list[dict[str, float]] = []
        work: list[float] = []
        fwd_rank: list[float] = []
        bwd_rank: list[float] = []
        for j in range(pp):
            parts = {
                "compute": chunk_sum("compute", j),
                "recompute": chunk_sum("recompute", j),
                "tp": chunk_sum("tp", j),
                "cp": chunk_sum("cp", j),
                "ep": chunk_sum("ep", j),
                "pp": p2p_rank,
            }
            fw = chunk_sum("forward", j)
            bw = chunk_sum("backward", j)
            if j == 0:
                parts["compute"] += prof.first.compute_s
                parts["tp"] += prof.first.tp_s
                fw += prof.first.forward_s
                bw += prof.first.compute_s + prof.first.tp_s - prof.first.forward_s
            if j == pp - 1:
                parts["compute"] += prof.last.compute_s
                parts["tp"] += prof.last.tp_s
                fw += prof.last.forward_s
                bw += prof.last.compute_s + prof.last.tp_s - prof.last.forward_s
            comp.append(parts)
            work.append(sum(parts.values()))
            fwd_rank.append(fw)
            bwd_rank.append(bw)
        sched = pipeline_step(work, m, v, plan.pipeline_schedule)
        crit = max(range(pp), key=lambda j: work[j])

        # Parameters per rank (for DP traffic and the optimizer step).
        params = [chunk_sum("params", j) for j in range(pp)]
        expert_params = [chunk_sum("expert_params", j) for j in range(pp)]
        shard_params = [chunk_sum("shard_params", j) for j in range(pp)]
        params[0] += prof.first.state.params
        shard_params[0] += prof.first.state.shard_params
        params[-1] += prof.last.state.params
        shard_params[-1] += prof.last.state.shard_params

        dp_exposed, dp_raw = self._data_parallel_s(
            ctx, prof, plan, params, fwd_rank, bwd_rank, m, expert_params
        )
        hbm = ctx.hbm_bytes_per_s * MEMORY_EFFICIENCY
        optimizer_s = max(sp_ * cfg.optimizer_bytes_per_param / hbm for sp_ in shard_params)
        step = sched.step_s + dp_exposed + optimizer_s + cfg.step_overhead_s

        cparts = comp[crit]
        breakdown = TimeBreakdown(
            compute=m * (cparts["compute"] + cparts["recompute"]),
            tensor_parallel_comm=m * cparts["tp"],
            data_parallel_comm=dp_exposed,
            pipeline_comm=m * cparts["pp"],
            context_parallel_comm=m * cparts["cp"],
            expert_parallel_comm=m * cparts["ep"],
            bubble=sched.bubble_s,
            optimizer=optimizer_s,
            recompute=m * cparts["recompute"],
            overhead=cfg.step_overhead_s,
        )

        # Memory per pipeline rank.
        frag = cfg.fragmentation_fraction
        by_stage: list[StageMemory] = []
        totals: list[float] = []
        usable = problem.usable_memory_bytes
        for j in range(pp):
            weights = chunk_sum("weights", j) + prof.zero3_working_bytes
            grads = chunk_sum("grads", j)
            opt = chunk_sum("optimizer", j)
            arr = arrays["act"]
            acts = prof.recompute_working_bytes
            infl_j = pub.inflight_microbatches[j]
            for lc_i, (lo, hi) in enumerate(rank_ranges[j]):
                acts += infl_j[lc_i] * (arr[hi] - arr[lo])
            if j == 0:
                weights += prof.first.state.weights_bytes
                grads += prof.first.state.grads_bytes
                opt += prof.first.state.optimizer_bytes
                acts += pub.inflight_microbatches[0][0] * prof.first.activation_bytes
            if j == pp - 1:
                weights += prof.last.state.weights_bytes
                grads += prof.last.state.grads_bytes
                opt += prof.last.state.optimizer_bytes
                acts += prof.last.activation_bytes
            other = prof.runtime_bytes + prof.bucket_bytes + frag * acts
            total = weights + grads + opt + acts + other
            totals.append(total)
            by_stage.append(
                StageMemory(
                    weights_gib=_gib(weights),
                    gradients_gib=_gib(grads),
                    optimizer_gib=_gib(opt),
                    activations_gib=_gib(acts),
                    other_gib=_gib(other),
                    total_gib=_gib(total),
                )
            )
            if total > usable:
                violations.append(
                    Violation(
                        kind="memory",
                        detail=(
                            f"pipeline rank {j} needs {_gib(total):.1f} GiB of {_gib(usable):.2f} GiB "
                            f"usable (weights {_gib(weights):.1f}, gradients {_gib(grads):.1f}, optimizer "
                            f"{_gib(opt):.1f}, activations {_gib(acts):.1f}, other {_gib(other):.1f})"
                        ),
                    )
                )
        peak = max(totals)
        acc = problem.cluster.accelerator
        memory = MemoryReport(
            peak_gib=_gib(peak),
            capacity_gib=acc.memory_gib,
            usable_gib=_gib(usable),
            by_stage=by_stage,
        )

        n = problem.num_gpus
        rc_flops = ctx.recompute_flops.get(plan.recompute)
        if rc_flops is None:
            rc_flops = recompute_flops_per_step(model, ctx.global_batch, ctx.seq, plan.recompute)
            ctx.recompute_flops[plan.recompute] = rc_flops
        metrics = TrainingMetrics(
            step_time_s=step,
            tokens_per_s=ctx.global_batch * ctx.seq / step,
            model_tflops_per_gpu=ctx.model_flops / step / n / 1e12,
            mfu=ctx.model_flops / step / n / ctx.peak_flops,
            peak_memory_gib=_gib(peak),
            bubble_fraction=sched.bubble_s / step,
            time_breakdown_s=breakdown,
            hardware_tflops_per_gpu=(ctx.model_flops + rc_flops) / step / n / 1e12,
            **_error_bars(step),
        )
        details: dict[str, Any] = {
            "num_microbatches": m,
            "rank_work_s": work,
            "rank_forward_s": fwd_rank,
            "critical_rank": crit,
            "group_tiers": prof.groups.tiers(),
            "p2p_time_s": prof.p2p_s,
            "data_parallel_comm_raw_s": dp_raw,
            "data_parallel_comm_exposed_s": dp_exposed,
            "rank_params": params,
            "memory_total_gib": [_gib(x) for x in totals],
        }
        if model.moe is not None:
            details["expert_parallel"] = self._moe_details(ctx, prof, plan, crit, chunk_sum, m)
        return TrainingEstimate(
            plan=plan,
            feasible=not violations,
            violations=violations,
            metrics=metrics,
            memory=memory,
            details=details,
        )

    def _moe_details(
        self,
        ctx: _Context,
        prof: _Profiled,
        plan: TrainingPlan,
        crit: int,
        chunk_sum: Any,
        m: int,
    ) -> dict[str, Any]:
        """Expert-parallel figures for explanations: the all-to-all time of one MoE layer per
        micro-batch (forward + backward + recomputed forward), the tiers its groups cross, the
        busiest EP rank's load factor and the critical rank's all-to-all seconds per step."""
        p = plan.parallelism
        moe_layer = next(i for i, f in enumerate(ctx.moe_flags) if f)
        cost = prof.costs.items[moe_layer]
        groups = self._expert_groups(ctx, p.expert, p.expert_tensor, p.data * p.context * p.tensor)
        return {
            "all_to_all_s_per_layer": cost.a2a_s,
            "expert_comm_s_per_layer": cost.ep_s,
            "all_to_all_tier": groups.expert.tier,
            "expert_tensor_tier": groups.expert_tensor.tier,
            "expert_data_tier": groups.expert_data.tier,
            "load_factor": self._expert_load(ctx, p.expert).load_factor,
            "all_to_all_s_per_step": m * chunk_sum("a2a", crit),
            "local_experts": ctx.model.moe.num_experts // p.expert if ctx.model.moe else 0,
        }

    def _data_parallel_s(
        self,
        ctx: _Context,
        prof: _Profiled,
        plan: TrainingPlan,
        params: list[float],
        fwd_rank: list[float],
        bwd_rank: list[float],
        m: int,
        expert_params: list[float] | None = None,
    ) -> tuple[float, float]:
        """(exposed, raw) data-parallel communication per step, worst pipeline rank.

        ZeRO 0: all-reduce of the gradients (grad_reduce_bytes per parameter); ZeRO 1
        (Megatron distributed optimizer): reduce-scatter of the gradients + all-gather of the
        bf16 parameters once per step; ZeRO 2: the gradient reduce-scatter every micro-batch
        (only a gradient shard is kept); ZeRO 3: reduce-scatter + parameter all-gathers in the
        forward and again in the backward, every micro-batch (Rajbhandari et al. 2020 §5).
        Gradient reduction overlaps the rank's backward of the last micro-batch, parameter
        gathers its forward; a `dp_non_overlapped_fraction` stays exposed.

        ZeRO-3 collectives run on one flat ring over NICs (`zero3_flat_ring`, the default)
        or on the group's hierarchical placement like every other collective.

        MoE: routed-expert parameters are reduced (and, under ZeRO, sharded and gathered)
        over the expert-data-parallel group, d·c·t / (e·etp) ranks of stride e·etp
        (Megatron-Core folding, Liu et al. 2025 §3), the rest over data × context; the two
        run one after the other and are exposed together.
        """
        cfg = self.config
        group = prof.groups.data_context
        p = plan.parallelism
        moe_states = expert_params is not None and any(expert_params)
        egroup = None
        if moe_states:
            egroup = self._expert_groups(
                ctx, p.expert, p.expert_tensor, p.data * p.context * p.tensor
            ).expert_data
            if egroup.size <= 1:
                egroup = None
        if group.size <= 1 and egroup is None:
            return 0.0, 0.0
        eff, frac = cfg.dp_overlap_efficiency, cfg.dp_non_overlapped_fraction

        def exposed(t: float, hide: float) -> float:
            return max(frac * t, t - eff * hide)

        comm = ctx.comm
        worst_exp = worst_raw = 0.0
        zero = plan.zero_stage
        for j, n_all in enumerate(params):
            n_exp = expert_params[j] if egroup is not None and expert_params is not None else 0.0
            n_params = n_all - n_exp
            if zero < 3:
                grad = n_params * cfg.grad_reduce_bytes
                if zero == 0:
                    ar = comm.all_reduce(grad, group)
                else:
                    rs, ag = (
                        comm.reduce_scatter(grad, group),
                        comm.all_gather(2.0 * n_params, group),
                    )
                if egroup is not None:
                    e_grad = n_exp * cfg.grad_reduce_bytes
                    if zero == 0:
                        ar += comm.all_reduce(e_grad, egroup)
                    else:
                        rs += comm.reduce_scatter(e_grad, egroup)
                        ag += comm.all_gather(2.0 * n_exp, egroup)
            if zero == 0:
                raw = ar
                exp = exposed(raw, bwd_rank[j])
            elif zero == 1:
                raw, exp = rs + ag, exposed(rs, bwd_rank[j]) + exposed(ag, fwd_rank[j])
            elif zero == 2:
                raw = m * rs + ag
                exp = m * exposed(rs, bwd_rank[j]) + exposed(ag, fwd_rank[j])
            else:
                # ZeRO-3 gathers and reduces every layer's shards over the whole data-parallel
                # group in a flat ring: across nodes each GPU's own NIC carries the (n−1)/n
                # share of the full buffer, the cross-node bottleneck ZeRO++ (Wang et al.
                # 2023, §3, hierarchical partitioning hpZ) was built to remove. Without
                # `zero3_flat_ring` (NCCL rings, one per NIC, as in 2025 FSDP stacks) a group
                # with g members per node crosses the network on g NICs at once.
                flat = flat_group(group) if cfg.zero3_flat_ring else group
                rs = comm.reduce_scatter(n_params * cfg.zero3_grad_reduce_bytes, flat)
                ag = comm.all_gather(2.0 * n_params, flat)
                if egroup is not None:
                    e_flat = flat_group(egroup) if cfg.zero3_flat_ring else egroup
                    rs += comm.reduce_scatter(n_exp * cfg.zero3_grad_reduce_bytes, e_flat)
                    ag += comm.all_gather(2.0 * n_exp, e_flat)
                raw = m * (rs + 2 * ag)
                hide = cfg.zero3_overlap
                exp = m * (
                    max(0.0, ag - hide * fwd_rank[j])
                    + max(0.0, ag - hide * bwd_rank[j])
                    + max(0.0, rs - hide * bwd_rank[j])
                )
            worst_exp, worst_raw = max(worst_exp, exp), max(worst_raw, raw)
        return worst_exp, worst_raw
