"""What switching a running training job to a new plan costs after its cluster changed
(issue 16, point 4): the model state each GPU of the new layout must fetch, from surviving
peers or from the checkpoint, the time that takes, and when switching pays off against the
best plan that keeps today's degrees.

**Ranks and GPUs.** GPU g of the old cluster (node groups in order, nodes in order) ran old
rank g. After the change the surviving GPUs keep their order and the added ones follow; new
rank r runs on the r-th of them. Ranks are laid out as Megatron-LM does by default
(`--rank-order` tp-cp-dp-pp, tensor fastest): r = tp + t·(cp + c·(dp + d·pp)).

**State.** What a checkpoint holds and a restart must place: bf16 weights (2 bytes per
parameter) and fp32 master weights with Adam's two moments (12 bytes per parameter,
Rajbhandari et al. 2020, ZeRO §3.1); gradients are recomputed by the next step. A layer's
state is cut along its parameters: tensor rank j holds the slice [j/t, (j+1)/t). The
weights of that slice are replicated over the data and context ranks of the stage (sharded
over them with ZeRO-3); the optimizer state is sharded over the t-slice's d·c data × context
ranks with ZeRO ≥ 1 (Megatron's distributed optimizer, DeepSpeed ZeRO), sub-slice
q = dp·c + cp, and replicated with ZeRO 0. Layers sit on the pipeline rank of their chunk
(`stage_layers`, chunk k on rank k mod p); the input embedding on the first pipeline rank,
the output layer on the last (`ModelSpec.tie_embeddings`: one copy, on the first).

**Bytes.** New rank r needs its slices of the layers it holds. What its GPU held under the
old layout (a surviving GPU) it keeps; the rest comes from a surviving GPU that held it
(`peer_bytes`, over the scale-out fabric at the receiving GPU's NIC rate, ranks in
parallel) or, when no surviving GPU held it (an optimizer shard of a lost GPU, a stage all
of whose replicas were lost), from the checkpoint (`reload_bytes`, at the storage's read
rate). Layers with the same old and new chunk are handled together, so the work is ranks ×
chunk pairs, not ranks × layers.

**Restart time** = `restart_overhead_s` (relaunch, NCCL set-up; an input) + the slowest
rank's peer transfer + the checkpoint reload.

**Break-even.** After the failure, a plan that restarts in R and then trains at X tokens/s
has trained X·(t − R) tokens at time t. Against the best plan that keeps today's degrees
(R₀, X₀): the switch is ahead from t* = (X·R − X₀·R₀) / (X − X₀) on, when X > X₀; never
when it is not faster (null).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cost_models.base import TrainingEstimate, TrainingProblem
from cost_models.mixed import pool_problem
from solver.base import RankedPlan, SearchResult
from solver.objectives import candidate_sizes
from specs.errors import SpecError
from specs.model import ModelSpec
from specs.plan import TrainingPlan

WEIGHT_BYTES = 2.0
"""bf16 weights per parameter."""
OPTIMIZER_BYTES = 12.0
"""fp32 master weights and Adam's two moments per parameter (ZeRO §3.1: 12Ψ of 16Ψ)."""

Interval = tuple[float, float]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one plan keeps the model state: its degrees, ZeRO stage and chunks."""

    tensor: int
    context: int
    data: int
    pipeline: int
    zero_stage: int
    chunk_layers: tuple[int, ...]
    """Layers per chunk in pipeline order (chunk k on pipeline rank k mod pipeline)."""

    @classmethod
    def of(cls, plan: TrainingPlan, num_layers: int) -> Layout:
        p = plan.parallelism
        chunks = p.pipeline * p.virtual_pipeline
        layers = plan.stage_layers or _even(num_layers, chunks)
        return cls(p.tensor, p.context, p.data, p.pipeline, plan.zero_stage, tuple(layers))

    @property
    def world(self) -> int:
        return self.tensor * self.context * self.data * self.pipeline

    def coords(self, rank: int) -> tuple[int, int, int, int]:
        """(tensor, context, data, pipeline) index of a rank (tp-cp-dp-pp order)."""
        t, c, d = self.tensor, self.context, self.data
        return rank % t, (rank // t) % c, (rank // (t * c)) % d, rank // (t * c * d)

    def weight_slice(self, rank: int) -> Interval:
        j, cp, dp, _ = self.coords(rank)
        if self.zero_stage >= 3:
            return self._sub(j, dp * self.context + cp)
        return (j / self.tensor, (j + 1) / self.tensor)

    def optimizer_slice(self, rank: int) -> Interval:
        j, cp, dp, _ = self.coords(rank)
        if self.zero_stage >= 1:
            return self._sub(j, dp * self.context + cp)
        return (j / self.tensor, (j + 1) / self.tensor)

    def _sub(self, j: int, q: int) -> Interval:
        n = self.data * self.context
        lo = j / self.tensor
        return (lo + q / (self.tensor * n), lo + (q + 1) / (self.tensor * n))

    def stage_of_layers(self) -> list[int]:
        """Pipeline rank of every layer."""
        out: list[int] = []
        for k, count in enumerate(self.chunk_layers):
            out += [k % self.pipeline] * count
        return out


def _even(num_layers: int, chunks: int) -> list[int]:
    base, extra = divmod(num_layers, chunks)
    return [base + (1 if k < extra else 0) for k in range(chunks)]


def _length(intervals: Sequence[Interval]) -> float:
    return sum(b - a for a, b in intervals)


def _minus(a: Interval, held: Sequence[Interval]) -> list[Interval]:
    """`a` minus the union of `held`."""
    parts = [a]
    for lo, hi in held:
        nxt: list[Interval] = []
        for x, y in parts:
            if hi <= x or lo >= y:
                nxt.append((x, y))
                continue
            if lo > x:
                nxt.append((x, lo))
            if hi < y:
                nxt.append((hi, y))
        parts = nxt
    return parts


@dataclasses.dataclass(frozen=True)
class Reshard:
    """The state the new layout's ranks fetch."""

    peer_bytes: float
    """Fetched from surviving GPUs that held it, bytes (all ranks)."""
    reload_bytes: float
    """Read from the checkpoint (no surviving GPU held it), bytes (all ranks)."""
    max_rank_peer_bytes: float
    """The most one rank fetches from peers, bytes."""
    kept_bytes: float
    """Already on the GPU that needs it, bytes (all ranks)."""


def _layer_units(
    model: ModelSpec, layout_old: Layout, layout_new: Layout
) -> list[tuple[int, int, float]]:
    """(old pipeline rank, new pipeline rank, parameters) per group of layers that sit on the
    same pipeline ranks in both layouts, embedding and output layer included."""
    per_layer = (model.num_parameters() - _embedding_parameters(model)) / model.num_layers
    old_stages = layout_old.stage_of_layers()
    new_stages = layout_new.stage_of_layers()
    groups: dict[tuple[int, int], float] = {}
    for a, b in zip(old_stages, new_stages, strict=True):
        groups[(a, b)] = groups.get((a, b), 0.0) + per_layer
    vocab = model.vocab_size * model.hidden_size
    groups[(0, 0)] = groups.get((0, 0), 0.0) + vocab  # input embedding: first rank
    if not model.tie_embeddings:
        last = (layout_old.pipeline - 1, layout_new.pipeline - 1)
        groups[last] = groups.get(last, 0.0) + vocab  # output layer: last rank
    return [(a, b, n) for (a, b), n in groups.items()]


def _embedding_parameters(model: ModelSpec) -> float:
    vocab = model.vocab_size * model.hidden_size
    return vocab if model.tie_embeddings else 2 * vocab


def reshard(
    model: ModelSpec,
    old: TrainingPlan,
    new: TrainingPlan,
    survivors: Sequence[int],
    added_gpus: int = 0,
) -> Reshard:
    """The bytes new plan `new` fetches after old plan `old` ran on GPUs 0..old world − 1,
    of which `survivors` (old ranks, in order) remain, `added_gpus` new ones following
    (module docstring)."""
    lo, ln = Layout.of(old, model.num_layers), Layout.of(new, model.num_layers)
    alive = {g for g in survivors if g < lo.world}  # GPUs the old plan left idle held nothing
    gpu_of_new = [g if g < lo.world else -1 for g in survivors] + [-1] * added_gpus
    if ln.world > len(gpu_of_new):
        raise ValueError(f"the new plan needs {ln.world} GPUs; {len(gpu_of_new)} remain")
    units = _layer_units(model, lo, ln)
    # per old pipeline rank: the slices surviving GPUs hold (weights, optimizer)
    held_w: dict[int, list[Interval]] = {}
    held_o: dict[int, list[Interval]] = {}
    for g in alive:
        stage = lo.coords(g)[3]
        held_w.setdefault(stage, []).append(lo.weight_slice(g))
        held_o.setdefault(stage, []).append(lo.optimizer_slice(g))
    peer = reload = kept = most = 0.0
    for r in range(ln.world):
        g = gpu_of_new[r]
        stage_new = ln.coords(r)[3]
        need_w, need_o = ln.weight_slice(r), ln.optimizer_slice(r)
        mine = 0.0
        for stage_old, stage_n, params in units:
            if stage_n != stage_new:
                continue
            for need, bytes_per, held_all, slice_old in (
                (need_w, WEIGHT_BYTES, held_w, lo.weight_slice),
                (need_o, OPTIMIZER_BYTES, held_o, lo.optimizer_slice),
            ):
                own = [slice_old(g)] if g >= 0 and lo.coords(g)[3] == stage_old else []
                missing = _minus(need, own)
                kept += (_length([need]) - _length(missing)) * params * bytes_per
                lost = _length(
                    [piece for m in missing for piece in _minus(m, held_all.get(stage_old, []))]
                )
                fetched = _length(missing)
                reload += lost * params * bytes_per
                mine += (fetched - lost) * params * bytes_per
        peer += mine
        most = max(most, mine)
    return Reshard(peer, reload, most, kept)


def restart_seconds(
    shard: Reshard,
    *,
    nic_bytes_per_s: float,
    storage_bytes_per_s: float,
    overhead_s: float,
) -> float:
    """Relaunch overhead + the slowest rank's peer transfer + the checkpoint reload."""
    return (
        overhead_s
        + shard.max_rank_peer_bytes / nic_bytes_per_s
        + (shard.reload_bytes / storage_bytes_per_s)
    )


def break_even_s(
    tokens_per_s: float, restart_s: float, keep_tokens_per_s: float, keep_restart_s: float
) -> float | None:
    """Seconds after the change from which the plan has trained more tokens than the plan
    keeping today's degrees; None when it never does (module docstring)."""
    if tokens_per_s <= keep_tokens_per_s:
        return None
    t = (tokens_per_s * restart_s - keep_tokens_per_s * keep_restart_s) / (
        tokens_per_s - keep_tokens_per_s
    )
    return max(t, restart_s)


# ---- a re-planned search's plans ---------------------------------------------------------
KEPT_DEGREES = (
    "tensor",
    "pipeline",
    "virtual_pipeline",
    "context",
    "expert",
    "expert_tensor",
)
"""The degrees the baseline keeps (`keep_constraints`): everything but the data degree,
which elastic restarts (TorchElastic, Megatron's in-job restarts) shrink with the cluster."""


def keep_constraints(old: TrainingPlan, constraints: Any) -> Any:
    """The search constraints of the baseline: the old plan's degrees but data, and its
    schedule, pinned."""
    p = old.parallelism
    fixed = dict(constraints.fixed)
    fixed.update({name: getattr(p, name) for name in KEPT_DEGREES})
    fixed["pipeline_schedule"] = old.pipeline_schedule
    return constraints.model_copy(update={"fixed": fixed})


def _fastest_keeping(
    problem: TrainingProblem, cost_model: Any, constraints: Any, run: Callable[..., SearchResult]
) -> TrainingEstimate | None:
    """The fastest plan with the old degrees but data on the new cluster, leaving GPUs idle
    where the data degree cannot fill them (the global batch must divide): every size of a
    homogeneous cluster (`solver.objectives.candidate_sizes`), else the whole cluster."""
    cluster = problem.cluster
    if cluster.is_homogeneous:
        sizes = [
            problem if g == cluster.num_gpus else pool_problem(problem, cluster, g)
            for g in candidate_sizes(cluster.gpus_per_node, cluster.num_nodes)
        ]
    else:
        sizes = [problem]
    best: TrainingEstimate | None = None
    for sub in sizes:
        try:
            found = run(sub, cost_model, constraints, top_k=1)
        except SpecError:
            continue
        if found.plans:
            est = found.plans[0].estimate
            if best is None or est.metrics.step_time_s < best.metrics.step_time_s:
                best = est
    return best


def annotate(
    result: SearchResult,
    problem: TrainingProblem,
    cost_model: Any,
    constraints: Any,
    info: Mapping[str, Any],
    run: Callable[..., SearchResult],
) -> SearchResult:
    """The re-planned search's plans with their restart figures and break-even against the
    best plan keeping the old degrees (searched here, on the new cluster), and
    `stats.replan` describing that baseline."""
    old = TrainingPlan.model_validate(info["plan"])
    survivors = list(info["survivors"])
    added = int(info.get("added_gpus", 0))
    gpn = problem.cluster.groups[0].gpus_per_node
    nic = problem.cluster.groups[0].inter_node_bandwidth_gb_s * 1e9
    storage_per_node = float(info["storage_read_gb_s"]) * 1e9
    overhead = float(info["restart_overhead_s"])

    def restart(plan: TrainingPlan) -> tuple[Reshard, float] | None:
        try:
            shard = reshard(problem.model, old, plan, survivors, added)
        except ValueError:
            return None
        nodes = max(1, -(-plan.num_gpus // gpn))
        seconds = restart_seconds(
            shard,
            nic_bytes_per_s=nic,
            storage_bytes_per_s=storage_per_node * nodes,
            overhead_s=overhead,
        )
        return shard, seconds

    keep_figures: dict[str, Any] | None = None
    keep_rate = keep_restart = None
    est = _fastest_keeping(problem, cost_model, keep_constraints(old, constraints), run)
    if est is not None:
        found = restart(est.plan)
        if found is not None:
            keep_rate, keep_restart = est.metrics.tokens_per_s, found[1]
            keep_figures = {
                "plan": est.plan.model_dump(mode="json"),
                "tokens_per_s": keep_rate,
                "restart_s": keep_restart,
                "restart_peer_bytes": found[0].peer_bytes,
                "restart_reload_bytes": found[0].reload_bytes,
            }

    def figures(ranked: RankedPlan) -> RankedPlan:
        est = ranked.estimate
        found = restart(est.plan)
        if found is None:
            return ranked
        shard, seconds = found
        update: dict[str, Any] = {
            "restart_peer_bytes": shard.peer_bytes,
            "restart_reload_bytes": shard.reload_bytes,
            "restart_s": seconds,
        }
        if keep_rate is not None and keep_restart is not None:
            update["break_even_s"] = break_even_s(
                est.metrics.tokens_per_s, seconds, keep_rate, keep_restart
            )
        metrics = est.metrics.model_copy(update=update)
        return dataclasses.replace(ranked, estimate=dataclasses.replace(est, metrics=metrics))

    plans = [figures(p) for p in result.plans]
    every = [figures(p) for p in result.all_plans] if result.all_plans is not None else None
    stats = dataclasses.replace(result.stats)
    stats.replan = {"replan_of": info.get("plan_id"), "keep": keep_figures}
    return SearchResult(plans=plans, stats=stats, all_plans=every)
