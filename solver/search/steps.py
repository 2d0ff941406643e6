"""Steps shared by the search drivers: enumerate and screen candidates, bound them,
evaluate one, keep a deterministic top-k.

Screening (per candidate, no costing beyond the profile): the space generator, the cost
model's `check()` (rejections counted as `rule:<kind>`), `profile()`, the memory lower bound
(`memory_bound`) and the step-time lower bound. Cost models offering the optional protocols
of `cost_models.base` are screened through `check_key` / `profile_key` (no TrainingPlan is
built until evaluation), with the group memory bound (one call per group of candidates that
differ only in micro-batch, recompute, virtual pipeline and schedule) and the cost model's own
step-time bound (the larger of the two bounds is used); `screen_light` / `refine` /
`split_screened` / `evaluate_split` serve the lazy best-first driver of `branch_and_bound`
(`screen_light` walks the space block by block and queues (bound, key) pairs only). Evaluation: the partition program (no split
fits: `memory`), the plan with `stage_layers`, `cost_model.evaluate` (infeasible: counted by
the first violation's kind).

Step-time lower bound (why it is a true bound): every pipeline rank runs its chunks' forward
and backward once per micro-batch, so any schedule takes at least m · max_j W_j
(Narayanan et al. 2021 §2.2: the ideal time of 1F1B and interleaved 1F1B is m·W before the
bubble is added); max_j W_j ≥ `balanced_lower_bound` for every split, and for a given split
m · max_j W_j is the bound itself (`split_lower_bound_s`). Data-parallel communication, the
optimizer and the bubble only add to it.
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from cost_models.base import (
    BoundedTrainingCostModel,
    KeyedTrainingCostModel,
    LayerProfile,
    TrainingCostModel,
    TrainingEstimate,
    TrainingProblem,
)
from cost_models.economics import with_economics
from solver.base import RankedPlan, SearchResult, SearchStats, SolveStatus
from solver.explain import describe, explain
from solver.formulations.stage_partition import (
    PartitionSolver,
    balanced_lower_bound,
    memory_lower_bound_bytes,
    rank_times_s,
)
from solver.search.diverse import (
    MAX_FOLDED,
    FoldedEntry,
    Profile,
    dominance_reason,
    profile_dominates,
)
from solver.space import Block, block_keys, candidates, count_candidates
from solver.warnings import ordered, training_estimate_warnings, training_problem_warnings
from specs.constraints import SearchConstraints
from specs.errors import InfeasiblePlan
from specs.plan import PlanKey, TrainingPlan
from specs.warnings import PlanWarning

BOUND_SAFETY = 1e-9
"""Relative slack on the bounds: floating-point summation order must not turn a true bound
into a cut of the optimum."""
_POLL_EVERY = 256
"""Candidates between two progress/cancel checks while screening."""


@dataclass(slots=True)
class Screened:
    """A candidate that passed the cheap screens."""

    key: PlanKey
    profile: LayerProfile
    step_lower_bound_s: float


@contextmanager
def collection_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a search runs: a search allocates hundreds of
    thousands of small tuples that reference counting frees, and the collector's passes over
    the long-lived caches cost about a tenth of its time (callgrind, Llama-3-70B on 64 H100).
    The search builds no reference cycles. The collector is turned back on at the end when
    it was on at the start (overlapping searches in threads leave it on once the first
    caller that found it on is done)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Stopped(Exception):
    """Raised inside a driver when the time limit passes or the caller cancels."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


class Monitor:
    """Deadline, cancellation and progress reporting of one search."""

    def __init__(
        self,
        time_limit_s: float,
        progress: Callable[[int, int], None] | None,
        should_stop: Callable[[], bool] | None,
        total: int,
    ) -> None:
        self.start = time.perf_counter()
        self.deadline = self.start + time_limit_s
        self.progress = progress
        self.should_stop = should_stop
        self.total = total
        self.done = 0

    def remaining_s(self) -> float:
        return self.deadline - time.perf_counter()

    def poll(self, *, report: bool = True) -> None:
        """Raise Stopped when the limit passed or the caller cancelled; report progress."""
        if report and self.progress is not None:
            self.progress(min(self.done, self.total), self.total)
        if time.perf_counter() > self.deadline:
            raise Stopped("time_limit")
        if self.should_stop is not None and self.should_stop():
            raise Stopped("cancelled")


def step_lower_bound_s(profile: LayerProfile, candidate: PlanKey) -> float:
    """m · (lower bound on the slowest rank's time per micro-batch), seconds (module doc)."""
    p, v = candidate.pipeline, candidate.virtual_pipeline
    if candidate.stage_layers:
        per_mb = max(rank_times_s(profile, p, candidate.stage_layers))
    else:
        per_mb = balanced_lower_bound(profile, p, v)
    return profile.num_microbatches * per_mb * (1.0 - BOUND_SAFETY)


def screen(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    stats: SearchStats,
    monitor: Monitor,
    *,
    memory_bound: bool,
    blocks: Iterable[Block] | None = None,
) -> list[Screened]:
    """Every candidate that passes check(), profile() and (if `memory_bound`) the memory
    lower bound, with its step-time lower bound. Counts go to `stats`. `blocks` limits the
    candidates to those blocks' (default: the whole space)."""
    out: list[Screened] = []
    ext: Any = cost_model  # the optional protocols' methods, used only when offered
    keyed = isinstance(cost_model, KeyedTrainingCostModel)
    bounded = isinstance(cost_model, BoundedTrainingCostModel)
    grouped = memory_bound and bounded
    group_fits: dict[tuple[Any, ...], bool] = {}
    usable = problem.usable_memory_bytes * (1.0 + BOUND_SAFETY)
    keys = (
        candidates(problem, constraints)
        if blocks is None
        else (key for blk in blocks for slot in blk.slots for key in block_keys(blk, slot))
    )
    for i, cand in enumerate(keys):
        stats.enumerated += 1
        if i % _POLL_EVERY == 0:
            monitor.poll(report=i > 0)
        free_split = not cand.stage_layers
        if keyed:
            violations = ext.check_key(problem, cand)
        else:
            plan = cand.to_plan()
            violations = cost_model.check(problem, plan)
        if violations:
            stats.rule_rejected += 1
            stats.add_pruned(f"rule:{violations[0].kind}")
            monitor.done += 1
            continue
        if grouped and free_split:
            # one bound per group of candidates differing only in micro-batch, recompute,
            # virtual pipeline and schedule (the cost model guarantees it for all of them)
            gkey = _memory_group(cand)
            fits = group_fits.get(gkey)
            if fits is None:
                fits = group_fits[gkey] = (
                    ext.group_memory_lower_bound_bytes(problem, cand) <= usable
                )
            if not fits:
                stats.add_pruned("memory_bound")
                monitor.done += 1
                continue
        try:
            if keyed:
                profile = ext.profile_key(problem, cand)
            else:
                profile = cost_model.profile(problem, plan)
        except InfeasiblePlan as exc:
            stats.rule_rejected += 1
            stats.add_pruned(f"rule:{exc.kind}")
            monitor.done += 1
            continue
        if (
            memory_bound
            and free_split
            and memory_lower_bound_bytes(profile, cand.pipeline, cand.virtual_pipeline)
            > profile.usable_bytes * (1.0 + BOUND_SAFETY)
        ):
            stats.add_pruned("memory_bound")
            monitor.done += 1
            continue
        bound = step_lower_bound_s(profile, cand)
        if bounded and free_split:
            bound = max(bound, ext.step_time_lower_bound_s(problem, cand) * (1.0 - BOUND_SAFETY))
        out.append(Screened(cand, profile, bound))
    return out


Pending = tuple[float, PlanKey]
"""A queued candidate of the lazy branch-and-bound (`solver.search.branch_and_bound`):
(step-time bound, its key). A candidate whose
profile or split raises its bound is queued again with what it has so far: (bound, key,
profile) or (bound, key, profile, split). Keys are unique, so the heap never compares past
them. (Two small objects per queued candidate: thousands stay queued until the end.)"""
Queued = tuple[Any, ...]
"""A `Pending` entry or one of its longer forms."""


def is_lazy_capable(cost_model: TrainingCostModel) -> bool:
    """True when the cost model offers the keyed entry points and the bounds that let the
    search profile candidates only when their turn comes."""
    return isinstance(cost_model, KeyedTrainingCostModel) and isinstance(
        cost_model, BoundedTrainingCostModel
    )


def screen_light(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    blocks: Iterable[Block],
    stats: SearchStats,
    monitor: Monitor,
) -> list[Pending]:
    """Every candidate that passes `check_key` and the group memory bound, with the cost
    model's step-time bound (no profile yet), as `Pending` entries. Needs
    `is_lazy_capable(cost_model)`.

    Walks the space's blocks (one degree tuple each, `solver.space.candidate_blocks`)
    and builds only the plan key and the canonical key of each point; the group memory bound
    is asked once per (block, ZeRO stage), the first time a member passes the check."""
    cm: Any = cost_model
    check_key = cm.check_key
    group_bound = cm.group_memory_lower_bound_bytes
    step_bound = cm.step_time_lower_bound_s
    out: list[Pending] = []
    append = out.append
    usable = problem.usable_memory_bytes * (1.0 + BOUND_SAFETY)
    slack = 1.0 - BOUND_SAFETY
    n = 0  # candidates enumerated so far
    counted = 0  # of which already added to stats.enumerated / monitor.done
    memory_bound = done = 0
    next_poll = 0
    for blk in blocks:
        free_split = not blk.base.stage_layers
        fits_by_group: dict[tuple[int, str, tuple[float, str, str]], bool] = {}
        for slot in blk.slots:
            if n >= next_poll:
                stats.enumerated += n - counted
                counted = n
                stats.add_pruned("memory_bound", memory_bound)
                monitor.done += done + memory_bound
                memory_bound = done = 0
                monitor.poll(report=n > 0)
                next_poll = n - n % _POLL_EVERY + _POLL_EVERY
            keys = block_keys(blk, slot)
            n += len(keys)
            for key in keys:
                violations = check_key(problem, key)
                if violations:
                    stats.rule_rejected += 1
                    stats.add_pruned(f"rule:{violations[0].kind}")
                    done += 1
                    continue
                if free_split:
                    group = (slot.zero_stage, key.framework, slot.offload)
                    fits = fits_by_group.get(group)
                    if fits is None:
                        fits = fits_by_group[group] = group_bound(problem, key) <= usable
                    if not fits:
                        memory_bound += 1
                        continue
                append((step_bound(problem, key) * slack, key))
    stats.enumerated += n - counted
    if memory_bound:
        stats.add_pruned("memory_bound", memory_bound)
    monitor.done += done + memory_bound
    return out


def refine(
    problem: TrainingProblem, cost_model: TrainingCostModel, key: PlanKey
) -> tuple[str | None, LayerProfile | None, float]:
    """Profile a pending candidate: (prune reason or None, its profile, the solver's own
    step-time bound from the profile)."""
    try:
        profile = cast(KeyedTrainingCostModel, cost_model).profile_key(problem, key)
    except InfeasiblePlan as exc:
        return f"rule:{exc.kind}", None, 0.0
    pp, v = key.pipeline, key.virtual_pipeline
    if not key.stage_layers and memory_lower_bound_bytes(profile, pp, v) > profile.usable_bytes * (
        1.0 + BOUND_SAFETY
    ):
        return "memory_bound", profile, 0.0
    if key.stage_layers:
        per_mb = max(rank_times_s(profile, pp, key.stage_layers))
    else:
        per_mb = balanced_lower_bound(profile, pp, v)
    return None, profile, profile.num_microbatches * per_mb * (1.0 - BOUND_SAFETY)


def _memory_group(key: PlanKey) -> tuple[Any, ...]:
    """The fields a `group_memory_lower_bound_bytes` group shares (all but micro-batch,
    recompute, virtual pipeline and schedule)."""
    return (
        key.data,
        key.tensor,
        key.pipeline,
        key.context,
        key.expert,
        key.expert_tensor,
        key.sequence_parallel,
        key.zero_stage,
        key.flash_attention,
        key.framework,
        key.vocab_parallel,
        key.offload_optimizer,
        key.offload_parameters,
    )


def evaluate_screened(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    item: Screened,
    solver: PartitionSolver,
    stats: SearchStats,
    monitor: Monitor,
) -> TrainingEstimate | None:
    """Split, build and evaluate one candidate; the feasible estimate or None (counted)."""
    layers, _ = split_screened(item, solver, stats, monitor)
    if layers is None:
        return None
    return evaluate_split(problem, cost_model, item, layers, stats)


def split_screened(
    item: Screened, solver: PartitionSolver, stats: SearchStats, monitor: Monitor
) -> tuple[tuple[int, ...] | list[int] | None, float | None]:
    """The candidate's pipeline split, its fixed `stage_layers` or the partition program's
    optimum (None, counted as `memory` or `partition_timeout`, when there is none), and
    the split's slowest rank time per micro-batch (`rank_times_s`; None for a fixed split)."""
    key = item.key
    if key.stage_layers:
        return key.stage_layers, None
    res = solver.solve(
        item.profile,
        key.pipeline,
        key.virtual_pipeline,
        time_limit_s=max(0.05, min(10.0, monitor.remaining_s())),
    )
    if res.from_cache:
        stats.solver_cache_hits += 1
    else:
        stats.solver_calls += 1
    if res.status == SolveStatus.INFEASIBLE:
        stats.add_pruned("memory")
        return None, None
    if res.stage_layers is None:
        stats.add_pruned("partition_timeout")
        return None, None
    return res.stage_layers, res.max_rank_time_s


def evaluate_split(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    item: Screened,
    layers: tuple[int, ...] | list[int],
    stats: SearchStats,
) -> TrainingEstimate | None:
    """Build the plan with split `layers` and evaluate it; the feasible estimate or None
    (counted by the first violation's kind)."""
    plan = item.key.to_plan(layers)
    try:
        est = cost_model.evaluate(problem, plan)
    except InfeasiblePlan as exc:
        stats.add_pruned(exc.kind)
        return None
    stats.evaluated += 1
    if not est.feasible:
        stats.add_pruned(est.violations[0].kind if est.violations else "infeasible")
        return None
    stats.feasible += 1
    return with_economics(problem, est)


def split_lower_bound_s(profile: LayerProfile, max_rank_time_s: float) -> float:
    """m · (the slowest rank's time per micro-batch under a split, `rank_times_s`), with
    the bound slack: a lower bound on the step time of the candidate with that split
    (module doc)."""
    return profile.num_microbatches * max_rank_time_s * (1.0 - BOUND_SAFETY)


class TopK:
    """The k best feasible non-dominated estimates by (step time, canonical plan key), each
    with the plans folded under it (`solver.search.diverse`: same layout, no better on any
    reported metric, ranked after it; under its best-ranked dominator). A folded plan never
    takes one of the k slots.

    Kept while the search runs: every plan pushed so far that ranks no later than U, the
    k-th best of the layouts' best pushed plans (U's time is `safe_worst`); the
    non-dominated ones as roots, each dominated one under its best-ranked dominator. Why
    nothing else is needed: the best pushed plan of a layout ranks at or after the best
    plan of that layout in the whole space, which no plan dominates (a dominator shares the
    layout); k layouts give k non-dominated plans of the space ranked no later than U, so
    the final k-th non-dominated plan ranks no later than U, and a plan ranked after U is
    neither in the top-k nor folded under one of it (folded plans shown rank before the
    k-th) nor the dominator of one (a dominator ranks first). Only plans of at most k
    layouts rank no later than U. A dominated plan stays dominated as plans arrive, and
    its best-ranked dominator is a root (transitivity: a plan dominating that dominator
    would rank first and dominate the plan too), so a new plan is checked against the
    roots of its layout; a new root takes over the roots it dominates with their folded
    plans, and the folded plans of later roots that it dominates. The `max_folded` cap is
    applied to what is shown (`entries`), not while plans arrive: a plan past the cap
    under one root may be among the first under a root that arrives later.

    `worst()` is the k-th non-dominated plan among those pushed. Unlike the k-th plan of a
    plain top-k it can move later, when a new plan folds two of them; the drivers that
    prune against it (`branch_and_bound`) push plans in the order of a lower bound, so that
    when they compare a candidate's (bound, key) with it, every plan ranked before it has
    been pushed and it is final (`branch_and_bound` module docstring). `safe_worst()` only
    moves earlier: a driver pushing in another order prunes against it (`mixed`).

    `fold=False`: no plan dominates another (the plain top-k of the k fastest plans)."""

    def __init__(self, k: int, *, fold: bool = True, max_folded: int = MAX_FOLDED) -> None:
        self.k = k
        self.fold = fold
        self.max_folded = max_folded
        self._roots: list[_Root] = []
        self._by_layout: dict[Any, list[_Root]] = {}
        self._seq = 0
        self._bound: Rank | None = None  # U, once k layouts were seen

    def __len__(self) -> int:
        return min(len(self._roots), self.k)

    @property
    def full(self) -> bool:
        return len(self._roots) >= self.k

    def worst(self) -> tuple[float, PlanKey]:
        """(step time, key) of the k-th non-dominated plan (needs `full`)."""
        rank = self._roots[self.k - 1].rank
        return rank[0], rank[1]

    def safe_worst(self) -> float:
        """U's step time (class docstring), infinity while fewer than k layouts were seen:
        no plan slower than it can enter the top-k, whatever is pushed later."""
        return self._bound[0] if self._bound is not None else math.inf

    def push(self, key: PlanKey, est: TrainingEstimate) -> None:
        self._seq += 1
        rank: Rank = (est.metrics.step_time_s, key, self._seq)
        if self._bound is not None and rank > self._bound:
            return
        prof = Profile.of(est) if self.fold else Profile((self._seq,), {})
        same = self._by_layout.get(prof.layout, [])
        for root in same:  # best-ranked first: the first that dominates is the best one
            if root.rank >= rank:
                break
            if profile_dominates(root.profile, prof):
                bisect.insort(root.folded, _Folded(rank, est, prof))
                return
        new = _Root(rank, est, prof)
        kept: list[_Root] = []
        for root in same:
            if root.rank < rank:
                kept.append(root)
            elif profile_dominates(prof, root.profile):  # and so all folded under it
                new.folded.append(_Folded(root.rank, root.estimate, root.profile))
                new.folded.extend(root.folded)
                self._roots.remove(root)
            else:
                stay: list[_Folded] = []
                for item in root.folded:
                    (new.folded if profile_dominates(prof, item.profile) else stay).append(item)
                root.folded = stay
                kept.append(root)
        new.folded.sort()
        bisect.insort(kept, new)
        self._by_layout[prof.layout] = kept
        bisect.insort(self._roots, new)
        self._cut()

    def _cut(self) -> None:
        """Recompute U and drop the plans ranked after it."""
        if len(self._by_layout) < self.k:
            return
        bests = sorted(roots[0].rank for roots in self._by_layout.values())
        bound = bests[self.k - 1]
        if bound == self._bound:
            return
        self._bound = bound
        while self._roots[-1].rank > bound:
            gone = self._roots.pop()
            same = self._by_layout[gone.profile.layout]
            same.remove(gone)
            if not same:
                del self._by_layout[gone.profile.layout]
        for root in self._roots:
            if root.folded and root.folded[-1].rank > bound:
                del root.folded[bisect.bisect_right(root.folded, _Folded(bound, None, None)) :]

    def _shown(self) -> list[tuple[Rank, TrainingEstimate, _Root | None]]:
        """(rank, estimate, the root it is folded under or None) of the diverse top-k, in
        rank order: the k roots, and under each the first `max_folded` plans folded under
        it that rank before the k-th root."""
        roots = self._roots[: self.k]
        last = roots[-1].rank if len(roots) == self.k else None
        items: list[tuple[Rank, TrainingEstimate, _Root | None]] = []
        for root in roots:
            items.append((root.rank, root.estimate, None))
            shown = [f for f in root.folded if last is None or f.rank < last]
            items.extend((f.rank, f.estimate, root) for f in shown[: self.max_folded])
        items.sort(key=lambda item: item[0])
        return items

    def estimates(self) -> list[TrainingEstimate]:
        """The k non-dominated estimates, best first."""
        return [root.estimate for root in self._roots[: self.k]]

    def keys(self) -> list[PlanKey]:
        return [root.rank[1] for root in self._roots[: self.k]]

    def entries(self) -> list[FoldedEntry]:
        """The diverse top-k in rank order (what `diverse.fold_ranked` answers for the same
        plans): the k non-dominated plans and the plans folded under them that rank before
        the k-th, each with the index of its dominator."""
        items = self._shown()
        position = {id(est): n for n, (_, est, under) in enumerate(items) if under is None}
        return [
            FoldedEntry(est)
            if under is None
            else FoldedEntry(
                est, position[id(under.estimate)], dominance_reason(under.estimate, est)
            )
            for _, est, under in items
        ]

    def ranked_entries(self) -> list[tuple[float, PlanKey, TrainingEstimate]]:
        """(step time, key, estimate) of `entries()`' plans in rank order: what a shard
        sends to the merge (pushed again, they rebuild the same diverse top-k)."""
        return [(rank[0], rank[1], est) for rank, est, _ in self._shown()]


Rank = tuple[float, PlanKey, int]
"""(step time, key, push sequence) of a `TopK` plan: its rank (keys are unique in one
search; the sequence keeps the order total when a merge pushes a key twice)."""


@dataclass(slots=True, eq=False)
class _Folded:
    """A dominated plan of a `TopK`."""

    rank: Rank
    estimate: Any
    profile: Any

    def __lt__(self, other: _Folded) -> bool:
        return self.rank < other.rank


@dataclass(slots=True, eq=False)
class _Root:
    """A non-dominated plan of a `TopK` and the plans folded under it (rank order)."""

    rank: Rank
    estimate: TrainingEstimate
    profile: Profile
    folded: list[_Folded] = field(default_factory=list)

    def __lt__(self, other: _Root) -> bool:
        return self.rank < other.rank


def _validated(est: TrainingEstimate) -> TrainingEstimate:
    if not isinstance(est.plan, TrainingPlan):  # a plug-in returned something else
        est = dataclasses.replace(est, plan=TrainingPlan.model_validate(est.plan))
    return est


def validated_estimates(top: TopK) -> list[TrainingEstimate]:
    """The top-k (non-dominated) estimates, their plans checked to be `TrainingPlan`s."""
    return [_validated(est) for est in top.estimates()]


def total_candidates(problem: TrainingProblem, constraints: SearchConstraints) -> int:
    return count_candidates(problem, constraints)


def finish(
    top: TopK, stats: SearchStats, monitor: Monitor, *, problem: TrainingProblem
) -> SearchResult:
    """Rank, explain, warn (`solver.warnings`, after ranking: warnings never reorder) and
    time the result: `plans` the non-dominated top-k, `all_plans` with the folded plans
    (`solver.search.diverse`) between them. Non-dominated plans are explained against
    their neighbours among the non-dominated plans (the numbers of the default list);
    a folded plan by what it is and why it is folded."""
    entries = [dataclasses.replace(e, estimate=_validated(e.estimate)) for e in top.entries()]
    estimates = [e.estimate for e in entries if e.dominated_by is None]
    sentences = explain(estimates)
    common = training_problem_warnings(problem) if estimates else []

    def warnings_of(est: TrainingEstimate) -> tuple[PlanWarning, ...]:
        return tuple(ordered([*common, *training_estimate_warnings(problem, est)]))

    plans = [
        RankedPlan(rank=i + 1, estimate=est, explanation=sentences[i], warnings=warnings_of(est))
        for i, est in enumerate(estimates)
    ]
    all_plans: list[RankedPlan] = []
    roots = iter(plans)
    for n, entry in enumerate(entries):
        if entry.dominated_by is None:
            all_plans.append(dataclasses.replace(next(roots), rank=n + 1))
        else:
            all_plans.append(
                RankedPlan(
                    rank=n + 1,
                    estimate=entry.estimate,
                    explanation=(
                        f"{describe(entry.estimate)} Folded under a better-ranked plan of the "
                        f"same layout: {entry.reason}."
                    ),
                    warnings=warnings_of(entry.estimate),
                    dominated_by=entry.dominated_by + 1,
                    dominated_reason=entry.reason,
                )
            )
    stats.best_step_time_s = estimates[0].metrics.step_time_s if estimates else None
    stats.wall_time_s = time.perf_counter() - monitor.start
    if monitor.progress is not None:
        monitor.progress(monitor.total if stats.complete else monitor.done, monitor.total)
    return SearchResult(plans=plans, stats=stats, all_plans=all_plans)
