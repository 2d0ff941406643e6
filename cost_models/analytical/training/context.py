"""Everything the analytical training model derives from one problem, once: the device
models (GEMM roofline, attention core, collectives), the model's layer kinds, the FLOPs of
a step, and the caches of every part a plan is assembled from (each keyed by the named
projection of the plan it depends on, `shapes.py`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cost_models.analytical.attention import AttentionCoreModel
from cost_models.analytical.flops import mixed_model_flops_per_step, model_flops_per_step
from cost_models.analytical.fp8 import Fp8Recipe, default_recipe, recipe
from cost_models.analytical.gemm import RooflineGemm
from cost_models.analytical.moe import ExpertLoad
from cost_models.analytical.network import NetworkModel, network_for
from cost_models.analytical.placement import ExpertGroups, ParallelGroups
from cost_models.analytical.sequence_lengths import LengthMix
from cost_models.analytical.training.config import (
    FP8_K_OVERHEAD_RATIO,
    AnalyticalConfig,
    attention_efficiency,
    gemm_k_overhead_for,
)
from cost_models.analytical.training.layer_sequence import LayerSeq
from cost_models.analytical.training.shapes import LayerShape, StateShape
from cost_models.base import TrainingProblem
from cost_models.frameworks import (
    DEFAULT_PREFERENCE,
    FrameworkProfile,
    build_framework,
    first_that_runs,
)
from specs.model import ModelSpec
from specs.plan import PlanKey, Violation

if TYPE_CHECKING:
    from cost_models.analytical.training.bounds import BoundTerms
    from cost_models.analytical.training.extras import Extra, ExtraTimes
    from cost_models.analytical.training.layer_costs import LayerCore, LayerCost
    from cost_models.analytical.training.model_states import LayerState
    from cost_models.analytical.training.profile import Profiled
    from cost_models.analytical.training.rules import Degrees
    from cost_models.analytical.training.vocab_parallel import VocabExtras


@dataclass(slots=True)
class ProblemContext:
    """Everything derived from one TrainingProblem, with the caches of its plans' parts."""

    config: AnalyticalConfig
    problem: TrainingProblem
    model: ModelSpec
    moe_flags: tuple[bool, ...]
    """Per layer: is it an MoE layer."""
    kinds: tuple[bool, ...]
    """Distinct layer kinds (is MoE), sorted."""
    num_layers: int
    seq: int
    global_batch: int
    gpus_per_node: int
    domain_gpus: int
    """GPUs per scale-up domain (the node, or the NVL72 rack of 4-GPU trays)."""
    leaf_gpus: int
    """GPUs under one scale-out leaf (a scalable unit)."""
    num_gpus: int
    straggler: float
    """`straggler_factor` of this problem's GPU count."""
    usable_bytes: float
    is_homogeneous: bool
    gemm: RooflineGemm
    """GEMMs in the training precision's high-precision format (BF16 under FP8: attention
    core, router, LM head)."""
    linear_gemm: RooflineGemm
    """The transformer layers' linear GEMMs (FP8 under FP8 training)."""
    fp8: Fp8Recipe | None
    """The FP8 recipe in force (None without FP8)."""
    attention: AttentionCoreModel
    comm: NetworkModel
    hbm_bytes_per_s: float
    interference: float
    """Fraction of compute throughput an overlapped collective takes (`nccl_channels` /
    SMs; 0.15 where the SM count is unknown)."""
    peak_flops: float
    """The MFU basis: the dense peak of the workload precision."""
    model_flops: float
    """Model FLOPs of a step over the real (non-padding) tokens and, under a document mix,
    the per-document attention (`sequence_lengths.py`)."""
    processed_flops: float
    """Model FLOPs of the work the GPUs do in a step (padding included): model_flops without
    a document mix."""
    lengths: LengthMix | None
    """The workload's document-length mix (None: one document of sequence_length per
    sequence)."""
    attention_factor: float
    """What the flash attention core's time is scaled by (`LengthMix.attention_factor`; 1
    without a mix)."""
    # ---- caches, each keyed by what its part depends on ---------------------------------
    layer_cores: dict[tuple[bool, LayerShape], LayerCore] = field(default_factory=dict)
    layer_costs: dict[tuple[bool, LayerShape], LayerCost] = field(default_factory=dict)
    cost_seqs: dict[LayerShape, LayerSeq] = field(default_factory=dict)
    state_seqs: dict[StateShape, LayerSeq] = field(default_factory=dict)
    extra_times: dict[LayerShape, tuple[ExtraTimes, ExtraTimes]] = field(default_factory=dict)
    extra_states: dict[tuple[StateShape, bool], tuple[LayerState, LayerState]] = field(
        default_factory=dict
    )
    extras: dict[tuple[LayerShape, StateShape, bool], tuple[Extra, Extra]] = field(
        default_factory=dict
    )
    vocab_times: dict[tuple[LayerShape, int], ExtraTimes] = field(default_factory=dict)
    """Every rank's vocabulary-parallel share per (layer shape, pipeline)."""
    vocab_states: dict[tuple[StateShape, int], tuple[LayerState, LayerState, LayerState]] = field(
        default_factory=dict
    )
    """Vocabulary-parallel (first, last, every-rank) states per (state shape, pipeline)."""
    vocab_extras: dict[tuple[LayerShape, StateShape, int], VocabExtras] = field(
        default_factory=dict
    )
    """Vocabulary-parallel extras per (layer shape, state shape, pipeline)."""
    vocab_comm: dict[tuple[Any, ...], float] = field(default_factory=dict)
    """Vocabulary-parallel collectives per micro-batch per (tensor, context, micro-batch,
    sequence parallel, pipeline group placement)."""
    degree_checks: dict[Degrees, tuple[list[Violation], list[Violation]]] = field(
        default_factory=dict
    )
    """(rules before, rules after the per-step rules) per degrees."""
    degrees_clear: dict[Degrees, bool] = field(default_factory=dict)
    """Per degrees: no degree rule fails."""
    combinations_clear: dict[tuple[Any, ...], bool] = field(default_factory=dict)
    """Per (degrees, zero stage, virtual pipeline, schedule, framework): every rule that
    does not read the micro-batch size passes (`rules.check_key`'s fast path)."""
    framework_checks: dict[tuple[Any, ...], list[Violation]] = field(default_factory=dict)
    """The framework's rule violations per (framework, zero, t, pp, v, c, e, schedule,
    context-parallel algorithm)."""
    cp_checks: dict[tuple[str, int, int, int], list[Violation]] = field(default_factory=dict)
    """The context-parallel algorithm's rule violations per (algorithm, head degree, t, c)."""
    groups: dict[tuple[int, int, int, int], ParallelGroups] = field(default_factory=dict)
    """Group placements per (tensor, context, data, pipeline)."""
    expert_groups: dict[tuple[int, int, int], ExpertGroups] = field(default_factory=dict)
    """Expert group placements per (expert, expert_tensor, data·context·tensor)."""
    expert_loads: dict[int, ExpertLoad] = field(default_factory=dict)
    """The busiest EP rank's routed load per expert degree (`moe.busiest_rank_load`)."""
    p2p: dict[tuple[LayerShape, str], float] = field(default_factory=dict)
    inflight: dict[tuple[str, int, int, int, bool], tuple[tuple[int, ...], ...]] = field(
        default_factory=dict
    )
    group_memory: dict[tuple[Any, ...], float] = field(default_factory=dict)
    zero3_working: dict[StateShape, float] = field(default_factory=dict)
    """ZeRO-3's gathered working bytes per state shape (`model_states.zero3_working_bytes`)."""
    bound_terms: dict[tuple[Any, int, int, bool], BoundTerms] = field(default_factory=dict)
    """Step-time bound terms per (layer shape, data, pipeline); the shape is a `LayerShape`
    or the equal plain tuple the bound builds."""
    bound_layer_sums: dict[LayerShape, tuple[float, float, float, float, float, float]] = field(
        default_factory=dict
    )
    """The layer terms of `bound_terms` per layer shape: (Σ layers + extras, largest layer,
    smallest layer, larger extra), per micro-batch."""
    bound_optimizer: dict[tuple[Any, int, bool], float] = field(default_factory=dict)
    """Adam-step time of the bound per (state shape, pipeline); the shape is a `StateShape`
    or the equal plain tuple the bound builds."""
    bound_gathers: dict[tuple[Any, int], float] = field(default_factory=dict)
    """Per-micro-batch ZeRO-2/3 gathers of the bound per (state shape, pipeline), keyed
    likewise."""
    bound_monotone: dict[tuple[str, int, int, int], bool] = field(default_factory=dict)
    """Whether the schedule's own bound may take the no-exchange terms, per (schedule,
    micro-batches, pipeline, virtual) (`bounds._monotone_bound`)."""
    profiles: dict[PlanKey, Profiled] = field(default_factory=dict)
    recompute_flops: dict[str, float] = field(default_factory=dict)
    frameworks: dict[str, FrameworkProfile] = field(default_factory=dict)
    """Framework profiles by name, with the config's overrides (`framework()`)."""
    preference: tuple[FrameworkProfile, ...] = ()
    """The default preference order's profiles (`resolve()`)."""

    def framework(self, name: str) -> FrameworkProfile:
        """The profile `name` with this model's overrides (built once per problem)."""
        hit = self.frameworks.get(name)
        if hit is None:
            hit = self.frameworks[name] = build_framework(name, self.config.frameworks.get(name))
        return hit

    def resolve(self, key: PlanKey) -> PlanKey:
        """`key` with its framework named: the key itself when it names one, else the
        first framework of the default preference that can run it (the first of the order
        when none can: the rule check then says why)."""
        if key.framework:
            return key
        if not self.preference:
            self.preference = tuple(self.framework(n) for n in DEFAULT_PREFERENCE)
        chosen = first_that_runs(self.model, key, self.preference) or self.preference[0]
        return key._replace(framework=chosen.name)


def straggler_z(num_gpus: int) -> float:
    """sqrt(2·ln N), the expected maximum of N standard normal variates (large-N limit)."""
    return math.sqrt(2.0 * math.log(num_gpus)) if num_gpus >= 2 else 0.0


def straggler_factor(sigma: float, num_gpus: int) -> float:
    """How much longer a synchronous step on `num_gpus` GPUs takes than a typical GPU's:
    1 + σ·z(N), the expected maximum of N normal variates (`AnalyticalConfig.
    straggler_sigma`)."""
    return 1.0 + max(0.0, sigma) * straggler_z(num_gpus)


def build_context(config: AnalyticalConfig, problem: TrainingProblem) -> ProblemContext:
    """Derive the device models and fixed figures of one problem."""
    cluster, model, work = problem.cluster, problem.model, problem.workload
    # a cluster of several pools gets a context only for `rules.check` to refuse it
    # ("heterogeneous"): the mixed cost model prices each pool as a problem of its own
    device = cluster.groups[0]
    acc = device.accelerator
    precision = work.precision
    try:
        bf16_peak = acc.peak_flops("bf16")
    except KeyError:
        bf16_peak = acc.peak_flops("fp32")
    hbm = acc.memory_bandwidth_bytes_per_s
    k0 = gemm_k_overhead_for(config, acc)
    fp8_recipe: Fp8Recipe | None = None
    if precision == "fp8":
        # BF16 for the attention core, router, embedding and LM head; FP8 for the layer
        # linears (`fp8.py`), at the FP8 peak and best-shape FP8 efficiency.
        gemm = RooflineGemm(bf16_peak, acc.gemm_efficiency, hbm, 2.0, config.kernel_launch_s, k0)
        fp8_recipe = recipe(work.fp8_recipe or default_recipe(acc), acc)
        try:
            fp8_peak = acc.peak_flops("fp8")
        except KeyError:  # check() reports the missing precision; price at bf16
            fp8_peak = bf16_peak
        linear = RooflineGemm(
            fp8_peak,
            acc.gemm_efficiency_fp8 or acc.gemm_efficiency,
            hbm,
            1.0,
            config.kernel_launch_s,
            k0 * FP8_K_OVERHEAD_RATIO,
        )
        peak = fp8_peak  # `mfu` on the precision's own peak; `mfu_bf16_peak` beside it
    else:
        try:
            peak = acc.peak_flops(precision)
        except KeyError:  # check() reports the missing precision; price at bf16
            peak = bf16_peak
        elem_bytes = 4.0 if precision == "fp32" else 2.0
        gemm = linear = RooflineGemm(
            peak, acc.gemm_efficiency, hbm, elem_bytes, config.kernel_launch_s, k0
        )
    group = cluster.groups[0]
    net = network_for(
        group.scale_up_fabric,
        group.intra_node_bandwidth_gb_s,
        group.scale_up_peer_bandwidth_gb_s,
        group.scale_out_fabric,
        group.inter_node_bandwidth_gb_s,
        cluster.fabric,
        group.gpus_per_node,
    )
    moe_flags = tuple(model.is_moe_layer(i) for i in range(model.num_layers))
    mix = LengthMix.of(work)
    model_flops = model_flops_per_step(model, work.global_batch_size, work.sequence_length)
    processed = model_flops
    if mix is not None:
        model_flops = mixed_model_flops_per_step(
            model,
            work.global_batch_size,
            work.sequence_length,
            mix.real_token_fraction,
            mix.useful_attention_factor,
        )
        processed = mixed_model_flops_per_step(
            model, work.global_batch_size, work.sequence_length, 1.0, mix.attention_factor
        )
    return ProblemContext(
        config=config,
        problem=problem,
        model=model,
        moe_flags=moe_flags,
        kinds=tuple(sorted(set(moe_flags))),
        num_layers=model.num_layers,
        seq=work.sequence_length,
        global_batch=work.global_batch_size,
        gpus_per_node=device.gpus_per_node,
        domain_gpus=min(group.scale_up_domain_gpus, problem.num_gpus),
        leaf_gpus=cluster.fabric.nodes_per_leaf * group.gpus_per_node,
        num_gpus=problem.num_gpus,
        straggler=straggler_factor(config.straggler_sigma, problem.num_gpus),
        usable_bytes=problem.usable_memory_bytes if cluster.is_homogeneous else 0.0,
        is_homogeneous=cluster.is_homogeneous,
        gemm=gemm,
        linear_gemm=linear,
        fp8=fp8_recipe,
        attention=AttentionCoreModel(
            bf16_peak,
            attention_efficiency(config, acc),
            acc.gemm_efficiency,
            hbm,
            config.attention_backward_ratio,
            config.kernel_launch_s,
        ),
        comm=net,
        hbm_bytes_per_s=hbm,
        interference=min(0.5, config.nccl_channels / acc.num_compute_units)
        if acc.num_compute_units
        else 0.15 * (config.nccl_channels > 0),
        peak_flops=peak,
        model_flops=model_flops,
        processed_flops=processed,
        lengths=mix,
        attention_factor=1.0 if mix is None else mix.attention_factor,
    )
