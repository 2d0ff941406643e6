"""Everything the analytical training model derives from one problem, once: the device
models (GEMM roofline, attention core, collectives), the model's layer kinds, the FLOPs of
a step, and the caches of every part a plan is assembled from (each keyed by the named
projection of the plan it depends on, `shapes.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cost_models.analytical.attention import AttentionCoreModel
from cost_models.analytical.collectives import AlphaBetaCollectives, TwoTierNetwork
from cost_models.analytical.flops import model_flops_per_step
from cost_models.analytical.gemm import RooflineGemm
from cost_models.analytical.moe import ExpertLoad
from cost_models.analytical.placement import ExpertGroups, ParallelGroups
from cost_models.analytical.training.config import (
    AnalyticalConfig,
    attention_efficiency,
    gemm_k_overhead_for,
)
from cost_models.analytical.training.layer_sequence import LayerSeq
from cost_models.analytical.training.shapes import LayerShape, StateShape
from cost_models.base import TrainingProblem
from specs.model import ModelSpec
from specs.plan import PlanKey, Violation

if TYPE_CHECKING:
    from cost_models.analytical.training.bounds import BoundTerms
    from cost_models.analytical.training.extras import Extra, ExtraTimes
    from cost_models.analytical.training.layer_costs import LayerCore, LayerCost
    from cost_models.analytical.training.model_states import LayerState
    from cost_models.analytical.training.profile import Profiled
    from cost_models.analytical.training.rules import Degrees

GB = 1e9


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
    num_gpus: int
    usable_bytes: float
    is_homogeneous: bool
    gemm: RooflineGemm
    attention: AttentionCoreModel
    comm: AlphaBetaCollectives
    hbm_bytes_per_s: float
    peak_flops: float
    model_flops: float
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
    degree_checks: dict[Degrees, tuple[list[Violation], list[Violation]]] = field(
        default_factory=dict
    )
    """(rules before, rules after the per-step rules) per degrees."""
    degrees_clear: dict[Degrees, bool] = field(default_factory=dict)
    """Per degrees: no degree rule fails (`check_key`'s fast path)."""
    groups: dict[tuple[int, int, int, int], ParallelGroups] = field(default_factory=dict)
    """Group placements per (tensor, context, data, pipeline)."""
    expert_groups: dict[tuple[int, int, int], ExpertGroups] = field(default_factory=dict)
    """Expert group placements per (expert, expert_tensor, data·context·tensor)."""
    expert_loads: dict[int, ExpertLoad] = field(default_factory=dict)
    """The busiest EP rank's routed load per expert degree (`moe.busiest_rank_load`)."""
    p2p: dict[tuple[LayerShape, str], float] = field(default_factory=dict)
    inflight: dict[tuple[bool, int, int, int], tuple[tuple[int, ...], ...]] = field(
        default_factory=dict
    )
    group_memory: dict[tuple[StateShape, int], float] = field(default_factory=dict)
    bound_terms: dict[tuple[LayerShape, int, int], BoundTerms] = field(default_factory=dict)
    """Step-time bound terms per (layer shape, data, pipeline)."""
    bound_layer_sums: dict[LayerShape, tuple[float, float, float, float]] = field(
        default_factory=dict
    )
    """The layer terms of `bound_terms` per layer shape: (Σ layers + extras, largest layer,
    smallest layer, larger extra), per micro-batch."""
    bound_optimizer: dict[tuple[StateShape, int], float] = field(default_factory=dict)
    """Adam-step time of the bound per (state shape, pipeline)."""
    profiles: dict[PlanKey, Profiled] = field(default_factory=dict)
    recompute_flops: dict[str, float] = field(default_factory=dict)


def build_context(config: AnalyticalConfig, problem: TrainingProblem) -> ProblemContext:
    """Derive the device models and fixed figures of one problem."""
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
        alpha_intra_s=config.alpha_intra_s,
        alpha_inter_s=config.alpha_inter_s,
    )
    moe_flags = tuple(model.is_moe_layer(i) for i in range(model.num_layers))
    return ProblemContext(
        config=config,
        problem=problem,
        model=model,
        moe_flags=moe_flags,
        kinds=tuple(sorted(set(moe_flags))),
        num_layers=model.num_layers,
        seq=work.sequence_length,
        global_batch=work.global_batch_size,
        gpus_per_node=cluster.gpus_per_node,
        num_gpus=problem.num_gpus,
        usable_bytes=problem.usable_memory_bytes,
        is_homogeneous=cluster.is_homogeneous,
        gemm=RooflineGemm(
            peak,
            gemm_eff,
            hbm,
            elem_bytes,
            config.kernel_launch_s,
            gemm_k_overhead_for(config, acc),
        ),
        attention=AttentionCoreModel(
            bf16_peak,
            attention_efficiency(config, acc),
            acc.gemm_efficiency,
            hbm,
            config.attention_backward_ratio,
            config.kernel_launch_s,
        ),
        comm=AlphaBetaCollectives(net),
        hbm_bytes_per_s=hbm,
        peak_flops=peak,
        model_flops=model_flops_per_step(model, work.global_batch_size, work.sequence_length),
    )
