"""Exact branch-and-bound search over the declared plan space (no sampling).

1. Screen every candidate of `solver.space` (check, profile, memory lower bound) and compute
   its step-time lower bound (`solver.search.steps`).
2. Sort by (lower bound, canonical plan key) and evaluate in that order: partition program →
   plan with `stage_layers` → `cost_model.evaluate`, keeping the k best feasible plans by
   (step time, key).
3. Stop when the next lower bound exceeds the k-th best step time (everything after it is
   counted as `throughput_bound`); a candidate whose bound equals the k-th time is skipped
   only if its key sorts after the k-th plan's, so ties resolve exactly as in the exhaustive
   search. The result is the exhaustive search's top-k whenever the bounds are true bounds.

The top-k is diverse (`solver.search.diverse`, `steps.TopK`): "the k-th best" is the k-th
non-dominated plan found so far, x, and plans folded under a better-ranked plan of their
layout take no slot. Why pruning against x stays exact although x can move later (a new
plan may fold two plans before it): candidates are taken in (bound, key) order, and a
candidate's bound is at most its step time, so when the candidate (b, key) comes up, every
plan ranked before (b, key) in the (step time, key) order has been evaluated. A candidate
is pruned only when (b, key) ranks after x; then every plan ranked up to x has been
pushed, whether a plan is dominated depends only on the plans ranked before it, so x is
the k-th non-dominated plan of the whole space, and the pruned candidate and all that
remain (their (bound, key) is no smaller) rank after it: they are neither in the top-k nor
folded under it (folded plans shown rank before the k-th). The lazy driver keeps the same
order (a re-queued candidate goes back with a larger bound, still at most its time).

With a cost model that offers the keyed entry points and bounds of `cost_models.base`
(`KeyedTrainingCostModel`, `BoundedTrainingCostModel`) the same search runs lazily
(best-first): screening only checks rules, applies the cost model's group memory bound (one
per group of candidates differing in micro-batch, recompute and virtual pipeline) and its
step-time bound, with no profile. Candidates are popped from a heap by (bound, key); a popped
candidate is profiled, dropped if the profile's memory bound exceeds the limit, and pushed
back when the profile's step-time bound is larger than the one it was queued with; otherwise
it is split by the partition program and pushed back once more when m × (its split's slowest
rank time per micro-batch), again a lower bound on its step time (`steps` module doc), is
larger than its bound; when it comes up with its split, the cost model's bound of the plan
with that split (`step_time_lower_bound_s` of the key with `stage_layers`, about the price of
an evaluation, so only computed for a candidate at the front) pushes it back once more when
larger; otherwise it is evaluated. A candidate leaves the queue unevaluated
only when its bound, a true lower bound on its step time, proves it cannot enter the top-k,
so the result is the same. Only the reason a candidate is counted under may differ from the
eager order (a candidate never profiled is counted as `throughput_bound`, not
`memory_bound`), and fewer candidates are evaluated.

On a cost model that bounds a candidate under every context-parallel algorithm at once
(`context_free_step_lower_bound_s`), the lazy search queues a candidate's algorithms as one
entry and expands it when it reaches the front (`solver.search.cp_groups`: why that stays
exact); with `relaxed_step_lower_bound_s` too, all the groups of one degree tuple wait as a
single family entry, bounded over everything but the degrees, and become groups only when
the family reaches the front (most never do: DeepSeek-V3 on 2048 H800, 13.9 → 5.2 s).

A shard of a larger search (`solver.search.shards`) may also get a `SharedBound`
(`solver.search.shared_bound`): every few steps it offers the plans it found, under their
layout keys (`diverse.layout_key`: one entry per layout), and reads the k-th best step time
B over all shards' layouts; a candidate whose bound is strictly above B
is dropped like one above the shard's own k-th best (that module's docstring: why the
merged top-k stays exact).

Time limit and cancellation stop the search with the best plans so far (`status`
`time_limit` / `cancelled`); unreached candidates are counted as `not_reached`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import cast

from cost_models.base import BoundedTrainingCostModel, TrainingCostModel, TrainingProblem
from solver.base import SearchResult, SearchStats
from solver.formulations.stage_partition import (
    PartitionSolver,
    clear_bound_memo,
    default_solver,
)
from solver.search.cp_groups import (
    drop,
    entry_size,
    expand,
    expand_family,
    families_capable,
    groups_capable,
    refine_group,
    screen_grouped,
    splits_capable,
)
from solver.search.diverse import layout_key
from solver.search.shared_bound import BoundPoller, SharedBound
from solver.search.steps import (
    BOUND_SAFETY,
    Monitor,
    Queued,
    Screened,
    Stopped,
    TopK,
    collection_paused,
    evaluate_screened,
    evaluate_split,
    finish,
    is_lazy_capable,
    refine,
    screen,
    screen_light,
    split_lower_bound_s,
    split_screened,
)
from solver.space import Block, candidate_blocks
from specs.constraints import SearchConstraints
from specs.errors import SpecError
from specs.plan import PlanKey


def clear_caches() -> None:
    """Forget every cached partition and remembered bound statistic (benchmarks measure
    cold searches; cost-model caches live in the cost model object: build a fresh one)."""
    default_solver().clear()
    clear_bound_memo()


@collection_paused()
def search(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    *,
    top_k: int = 10,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    solver: PartitionSolver | None = None,
) -> SearchResult:
    """The `top_k` fastest feasible plans, exact over the declared space.

    Args:
        problem: the resolved problem (its `memory_headroom_gib` sets the memory limit).
        cost_model: prices plans (`check`, `profile`, `evaluate`).
        constraints: the space (fixed fields, micro-batch sizes, max virtual pipeline,
            tensor across nodes) and `time_limit_s`.
        top_k: plans to return (≥ 1).
        progress: called with (candidates done, candidates total) now and then.
        should_stop: polled; True cancels the search (status `cancelled`).
        solver: partition solver and cache (default: the process-wide one).
    Returns:
        SearchResult with plans best first (empty when nothing fits; see `stats.pruned`).
    """
    top, stats, monitor = search_top(
        problem,
        cost_model,
        constraints,
        top_k=top_k,
        progress=progress,
        should_stop=should_stop,
        solver=solver,
    )
    return finish(top, stats, monitor, problem=problem)


def search_top(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    *,
    top_k: int = 10,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    solver: PartitionSolver | None = None,
    select_blocks: Callable[[list[Block]], list[Block]] | None = None,
    shared_bound: SharedBound | None = None,
) -> tuple[TopK, SearchStats, Monitor]:
    """`search` before ranking: the top-k, the counts and the monitor. `select_blocks`
    keeps a part of the space's blocks (a shard, `solver.search.shards`); the top-k is then
    exact over that part, or, with a `shared_bound`, holds every plan of that part that is
    in the whole space's top-k (module docstring)."""
    if top_k < 1:
        raise SpecError("top_k", "must be at least 1", top_k)
    solver = solver or default_solver()
    stats = SearchStats()
    blocks = list(candidate_blocks(problem, constraints))
    if select_blocks is not None:
        blocks = select_blocks(blocks)
    monitor = Monitor(
        constraints.time_limit_s, progress, should_stop, sum(blk.size for blk in blocks)
    )
    top = TopK(top_k)
    poller = BoundPoller(shared_bound) if shared_bound is not None else None
    try:
        if is_lazy_capable(cost_model):
            _lazy(problem, cost_model, blocks, stats, monitor, top, solver, poller)
        else:
            screened = screen(
                problem,
                cost_model,
                constraints,
                stats,
                monitor,
                memory_bound=True,
                blocks=blocks if select_blocks is not None else None,
            )
            screened.sort(key=lambda s: (s.step_lower_bound_s, s.key))
            for i, item in enumerate(screened):
                monitor.poll(report=True)
                if poller is not None and item.step_lower_bound_s > poller.step():
                    stats.add_pruned("throughput_bound", len(screened) - i)
                    monitor.done += len(screened) - i
                    break
                if top.full:
                    worst_time, worst_key = top.worst()
                    if item.step_lower_bound_s > worst_time:
                        stats.add_pruned("throughput_bound", len(screened) - i)
                        monitor.done += len(screened) - i
                        break
                    if item.step_lower_bound_s == worst_time and item.key > worst_key:
                        stats.add_pruned("throughput_bound")
                        monitor.done += 1
                        continue
                est = evaluate_screened(problem, cost_model, item, solver, stats, monitor)
                monitor.done += 1
                if est is not None:
                    top.push(item.key, est)
                    if poller is not None:
                        poller.found(est.metrics.step_time_s, layout_key(item.key))
    except Stopped as stop:
        stats.status = "time_limit" if stop.status == "time_limit" else "cancelled"
        stats.add_pruned("not_reached", monitor.total - monitor.done)
    if poller is not None:  # the shards still running prune with this shard's last plans
        poller.exchange()
    return top, stats, monitor


def _lazy(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    blocks: list[Block],
    stats: SearchStats,
    monitor: Monitor,
    top: TopK,
    solver: PartitionSolver,
    poller: BoundPoller | None = None,
) -> None:
    """Best-first branch-and-bound (module docstring); fills `top` and `stats`."""
    step_bound = cast(BoundedTrainingCostModel, cost_model).step_time_lower_bound_s
    grouped = groups_capable(cost_model)
    splits = grouped and splits_capable(cost_model)
    if grouped:  # a candidate's context-parallel algorithms as one entry (`cp_groups`)
        heap: list[Queued] = screen_grouped(
            problem, cost_model, blocks, stats, monitor, families=families_capable(cost_model)
        )
    else:
        heap = screen_light(problem, cost_model, blocks, stats, monitor)
    heapq.heapify(heap)
    heappop, heappush = heapq.heappop, heapq.heappush

    split_bounded: set[PlanKey] = set()  # queued with the cost model's bound of their split

    def queued() -> int:
        return sum(entry_size(e) for e in heap) if grouped else len(heap)

    while heap:
        monitor.poll(report=True)
        entry = heap[0]
        bound, key = entry[0], entry[1]
        if poller is not None and bound > poller.step():  # every queued bound is ≥ this one
            left = queued()
            stats.add_pruned("throughput_bound", left)
            monitor.done += left
            return
        if top.full:
            worst_time, worst_key = top.worst()
            if bound > worst_time:  # every queued bound is at least this one
                left = queued()
                stats.add_pruned("throughput_bound", left)
                monitor.done += left
                return
            if bound == worst_time and key > worst_key:
                heappop(heap)
                stats.add_pruned("throughput_bound", entry_size(entry))
                monitor.done += entry_size(entry)
                continue
        heappop(heap)
        if len(entry) == 6:  # a family of groups (`cp_groups.FamilyEntry`)
            for member in expand_family(problem, cost_model, entry, stats, monitor):
                heappush(heap, member)
            continue
        if len(entry) == 5:  # a group of context-parallel variants
            if splits and entry[2] is None:  # its split first (`cp_groups.refine_group`)
                reason, refined = refine_group(problem, cost_model, entry, solver, stats, monitor)
                if reason is not None:  # no variant has a split
                    drop(problem, cost_model, entry, reason, stats, monitor)
                    continue
                if refined is not None and refined > bound:
                    heappush(heap, (refined, key, True, None, entry[4]))
                    continue
            for variant in expand(problem, cost_model, entry, stats, monitor):  # queue each
                heappush(heap, variant)
            continue
        if len(entry) == 2:
            reason, profile, refined = refine(problem, cost_model, key)
            if reason is not None:
                if reason.startswith("rule:"):
                    stats.rule_rejected += 1
                stats.add_pruned(reason)
                monitor.done += 1
                continue
            assert profile is not None
            if refined > bound:  # not the smallest bound any more: queue it again
                heappush(heap, (refined, key, profile))
                continue
        else:
            profile = entry[2]
        item = Screened(key, profile, bound)
        if len(entry) == 4:
            layers, bound_split = entry[3], key not in split_bounded
        else:
            layers, max_rank_time_s = split_screened(item, solver, stats, monitor)
            if layers is None:
                monitor.done += 1
                continue
            bound_split = max_rank_time_s is not None
            if max_rank_time_s is not None:
                split_bound = split_lower_bound_s(profile, max_rank_time_s)
                if split_bound > bound:  # the split is lumpier than the bound assumed
                    heappush(heap, (split_bound, key, profile, layers))
                    continue
        if bound_split:  # the cost model's bound of the split, when it comes up
            split_bound = step_bound(problem, key._replace(stage_layers=tuple(layers))) * (
                1.0 - BOUND_SAFETY
            )
            if split_bound > bound:
                split_bounded.add(key)
                heappush(heap, (split_bound, key, profile, layers))
                continue
        est = evaluate_split(problem, cost_model, item, layers, stats)
        monitor.done += 1
        if est is not None:
            top.push(key, est)
            if poller is not None:
                poller.found(est.metrics.step_time_s, layout_key(key))
