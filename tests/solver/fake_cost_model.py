"""A small deterministic cost model with closed-form costs, for solver tests.

Not physics: just enough structure (compute shrinking with tensor/context, a tensor-parallel
communication term, ZeRO sharding, recompute trading time for memory, a 1F1B bubble,
data-parallel all-reduce) that different plans win on different clusters. Per-layer costs can
be made non-uniform with `layer_scale` (cycled over the layers) to exercise the general
partition program. Its `evaluate` recomputes rank times and memory with its own loops (not
the solver's helpers), so the tests compare two independent implementations.
"""

from __future__ import annotations

from collections.abc import Sequence

from cost_models.base import LayerProfile, TrainingEstimate, TrainingProblem
from hardware_catalog.schema import (
    AcceleratorSpec,
    ResolvedCluster,
    ResolvedNodeGroup,
    Source,
)
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
from specs.workload import TrainingWorkload

GIB = 1024**3
_RECOMPUTE_TIME = {"none": 1.0, "selective": 1.1, "full": 1.33}
_RECOMPUTE_ACT = {"none": 1.0, "selective": 0.6, "full": 0.1}


def make_accelerator(memory_gib: float = 80.0) -> AcceleratorSpec:
    return AcceleratorSpec(
        id="fake-gpu",
        name="Fake GPU",
        vendor="test",
        memory_gib=memory_gib,
        memory_bandwidth_gb_s=2000.0,
        peak_tflops={"bf16": 400.0},
        scale_up_bandwidth_gb_s=300.0,
        scale_out_bandwidth_gb_s=25.0,
        scale_up_domain_size=8,
        gpus_per_node=8,
        gemm_efficiency=0.8,
        scale_up_efficiency=0.8,
        scale_out_efficiency=0.9,
        sources=[Source(ref="test", supports="made up for tests")],
    )


def make_cluster(
    num_nodes: int, gpus_per_node: int = 8, memory_gib: float = 80.0
) -> ResolvedCluster:
    return ResolvedCluster(
        groups=[
            ResolvedNodeGroup(
                accelerator=make_accelerator(memory_gib),
                num_nodes=num_nodes,
                gpus_per_node=gpus_per_node,
                intra_node_bandwidth_gb_s=300.0,
                inter_node_bandwidth_gb_s=25.0,
            )
        ]
    )


def tiny_model(
    num_layers: int = 8,
    hidden: int = 1024,
    heads: int = 16,
    kv: int = 8,
    ffn: int = 4096,
    vocab: int = 32000,
) -> ModelSpec:
    return ModelSpec(
        name="tiny",
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv,
        ffn_hidden_size=ffn,
        vocab_size=vocab,
    )


def make_problem(
    model: ModelSpec,
    num_nodes: int,
    *,
    gpus_per_node: int = 8,
    memory_gib: float = 80.0,
    global_batch: int = 64,
    seq: int = 2048,
    headroom_gib: float = 2.0,
) -> TrainingProblem:
    return TrainingProblem(
        model=model,
        cluster=make_cluster(num_nodes, gpus_per_node, memory_gib),
        workload=TrainingWorkload(global_batch_size=global_batch, sequence_length=seq),
        memory_headroom_gib=headroom_gib,
    )


class FakeCostModel:
    """Closed-form costs; see the module docstring."""

    name = "fake"
    version = "1"

    def __init__(self, layer_scale: Sequence[float] = (1.0,), efficiency: float = 0.5) -> None:
        self.layer_scale = tuple(layer_scale)
        self.efficiency = efficiency
        self.profile_calls = 0
        self.evaluate_calls = 0

    # ---- contract ------------------------------------------------------------------------
    def check(self, problem: TrainingProblem, plan: TrainingPlan) -> list[Violation]:
        p = plan.parallelism
        out: list[Violation] = []
        if p.context > 1 and not plan.flash_attention:
            out.append(Violation(kind="attention", detail="context parallel needs flash"))
        if p.virtual_pipeline > 1 and problem.model.num_layers % (p.pipeline * p.virtual_pipeline):
            out.append(Violation(kind="schedule", detail="interleaving needs L % (p·v) == 0"))
        return out

    def _scale(self, index: int) -> float:
        return self.layer_scale[index % len(self.layer_scale)]

    def _parts(self, problem: TrainingProblem, plan: TrainingPlan) -> dict[str, float]:
        m, wl, p = problem.model, problem.workload, plan.parallelism
        b, s, h = plan.micro_batch_size, wl.sequence_length, m.hidden_size
        t, c, d = p.tensor, p.context, p.data
        peak = problem.cluster.accelerator.peak_flops("bf16") * self.efficiency
        tokens = b * s
        layer_params = m.layer_parameters(0)
        bytes_per_param = {0: 16.0, 1: 4.0 + 12.0 / d, 2: 2.0 + 14.0 / d, 3: 16.0 / d}
        zero = bytes_per_param[plan.zero_stage]
        tp_bw = (
            problem.cluster.intra_node_bandwidth_gb_s
            if t <= problem.cluster.gpus_per_node
            else problem.cluster.inter_node_bandwidth_gb_s
        ) * 1e9
        return {
            "layer_time": 6.0
            * layer_params
            * tokens
            / (t * c * peak)
            * _RECOMPUTE_TIME[plan.recompute]
            + (8.0 * tokens * h * 2 / tp_bw * (t - 1) / t if t > 1 else 0.0),
            "layer_fwd": 2.0 * layer_params * tokens / (t * c * peak),
            "layer_state": layer_params / t * zero,
            "layer_act": 34.0 * tokens * h / (t * c) * _RECOMPUTE_ACT[plan.recompute],
            "emb_time": 6.0 * m.vocab_size * h * tokens / (t * c * peak) * 0.1,
            "head_time": 6.0 * m.vocab_size * h * tokens / (t * c * peak),
            "emb_state": m.embedding_parameters() / t * zero,
            "head_state": m.head_parameters() / t * zero,
            "emb_act": 2.0 * tokens * h / (t * c),
            "head_act": 4.0 * tokens * m.vocab_size / (t * c),
            "p2p": 2.0 * tokens * h / (t * c) / 25e9 + 1e-5,
        }

    def _inflight(self, plan: TrainingPlan, m: int) -> tuple[tuple[int, ...], ...]:
        p, v = plan.parallelism.pipeline, plan.parallelism.virtual_pipeline
        return tuple(tuple(min(m, p - j + (v - 1 - k)) for k in range(v)) for j in range(p))

    def profile(self, problem: TrainingProblem, plan: TrainingPlan) -> LayerProfile:
        self.profile_calls += 1
        q = self._parts(problem, plan)
        num_layers = problem.model.num_layers
        mbs = problem.workload.global_batch_size // (plan.micro_batch_size * plan.parallelism.data)
        return LayerProfile(
            layer_time_s=tuple(q["layer_time"] * self._scale(i) for i in range(num_layers)),
            layer_forward_time_s=tuple(q["layer_fwd"] * self._scale(i) for i in range(num_layers)),
            layer_state_bytes=tuple(q["layer_state"] * self._scale(i) for i in range(num_layers)),
            layer_activation_bytes=tuple(q["layer_act"] for _ in range(num_layers)),
            first_extra_time_s=q["emb_time"],
            last_extra_time_s=q["head_time"],
            first_extra_state_bytes=q["emb_state"],
            last_extra_state_bytes=q["head_state"],
            first_extra_activation_bytes=q["emb_act"],
            last_extra_activation_bytes=q["head_act"],
            p2p_time_s=q["p2p"],
            fixed_bytes=1.0 * GIB,
            inflight_microbatches=self._inflight(plan, mbs),
            num_microbatches=mbs,
            usable_bytes=problem.usable_memory_bytes,
        )

    def evaluate(self, problem: TrainingProblem, plan: TrainingPlan) -> TrainingEstimate:
        self.evaluate_calls += 1
        par = plan.parallelism
        p, v = par.pipeline, par.virtual_pipeline
        if par.world_size != problem.num_gpus:
            raise InfeasiblePlan("divisibility", "GPU count mismatch")
        layers = plan.stage_layers
        if layers is None or sum(layers) != problem.model.num_layers or len(layers) != p * v:
            raise InfeasiblePlan("stage_layers", "stage_layers must cover every layer")
        prof = self.profile(problem, plan)
        self.profile_calls -= 1
        chunks = p * v
        times = [2.0 * prof.p2p_time_s if p > 1 else 0.0 for _ in range(p)]
        mem = [prof.fixed_bytes for _ in range(p)]
        state = [0.0] * p
        act = [0.0] * p
        start = 0
        for c, n in enumerate(layers):
            j, k = c % p, c // p
            for lyr in range(start, start + n):
                times[j] += prof.layer_time_s[lyr]
                state[j] += prof.layer_state_bytes[lyr]
                act[j] += prof.inflight_microbatches[j][k] * prof.layer_activation_bytes[lyr]
            start += n
        times[0] += prof.first_extra_time_s
        times[(chunks - 1) % p] += prof.last_extra_time_s
        state[0] += prof.first_extra_state_bytes
        act[0] += prof.inflight_microbatches[0][0] * prof.first_extra_activation_bytes
        state[(chunks - 1) % p] += prof.last_extra_state_bytes
        act[(chunks - 1) % p] += prof.last_extra_activation_bytes
        for j in range(p):
            mem[j] += state[j] + act[j]
        m = prof.num_microbatches
        slowest = max(times)
        compute = m * slowest
        bubble = (p - 1) / v * slowest
        params_per_gpu = problem.model.num_parameters() / (par.tensor * p)
        d = par.data
        dp = 2.0 * (d - 1) / d * params_per_gpu * 2 / 25e9 * 0.3 if d > 1 else 0.0
        optimizer = 1e-3
        step = compute + bubble + dp + optimizer
        peak = max(mem)
        usable = problem.usable_memory_bytes
        violations = []
        if peak > usable:
            violations.append(Violation(kind="memory", detail=f"{peak / GIB:.1f} GiB > usable"))
        tokens = problem.workload.tokens_per_step
        flops = 6.0 * problem.model.num_parameters() * tokens
        metrics = TrainingMetrics(
            step_time_s=step,
            tokens_per_s=tokens / step,
            model_tflops_per_gpu=flops / step / problem.num_gpus / 1e12,
            mfu=flops / step / problem.num_gpus / problem.cluster.accelerator.peak_flops("bf16"),
            peak_memory_gib=peak / GIB,
            bubble_fraction=bubble / step,
            time_breakdown_s=TimeBreakdown(
                compute=compute,
                data_parallel_comm=dp,
                bubble=bubble,
                optimizer=optimizer,
            ),
        )
        memory = MemoryReport(
            peak_gib=peak / GIB,
            capacity_gib=problem.cluster.accelerator.memory_gib,
            usable_gib=usable / GIB,
            by_stage=[
                StageMemory(
                    weights_gib=state[j] / 8 / GIB,
                    gradients_gib=state[j] / 8 / GIB,
                    optimizer_gib=state[j] * 0.75 / GIB,
                    activations_gib=act[j] / GIB,
                    other_gib=prof.fixed_bytes / GIB,
                    total_gib=mem[j] / GIB,
                )
                for j in range(p)
            ],
        )
        return TrainingEstimate(
            plan=plan,
            feasible=not violations,
            violations=violations,
            metrics=metrics,
            memory=memory,
            details={"rank_times_s": times, "comm_tiers": {"data_parallel": "scale_out"}},
        )
