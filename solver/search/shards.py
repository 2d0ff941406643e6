"""One search split into shards that run apart (other processes, other machines) and merge
into exactly the single search's top-k.

Split: the space's blocks (`solver.space.candidate_blocks`, one per degree tuple) are grouped
by their (tensor, pipeline) degree pair — the outer loop of the enumeration — and the pairs
are dealt to `count` shards, largest pair first to the shard with the fewest candidates so far
(longest-processing-time-first list scheduling, Graham 1969), ties to the lower shard index.
Every shard computes the same deal from the same problem, so shards are disjoint and together
cover the space without talking to each other.

Each shard runs the branch-and-bound (`search_top`) over its blocks only: its top-k is exact
over its part, and its bound is its k-th best step time (infinity while it has fewer than k
plans): no plan it left out is faster than that. Merge: the union of the shards' top-k lists
ranked by (step time, canonical plan key) — the single search's order (`steps.TopK`) — cut to
k. Any plan of the global top-k is in its own shard's top-k (at most k-1 plans of the whole
space, hence of its shard, rank before it), so the merge is the single search's top-k, ties
included. Counts add up (`SearchStats.merge`); a shard that stopped early makes the whole
result stop with its status.

Shared bound: shards may also share their plans while they run (`shared_bound`, a
`solver.search.shared_bound.SharedBound` every shard of the search reaches) and prune with
the k-th best step time over all shards' plans; the merge stays exact (that module's
docstring has the argument), and a shard's bound is then only an upper bound on the global
k-th best, not a statement about what it left out.

This module runs no shard itself: `sharded_search` takes a `map_shards` function (a Ray
pool's map, a process pool's, or the builtin `map`) so the solver stays free of any
execution engine.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cost_models.base import TrainingCostModel, TrainingEstimate, TrainingProblem
from solver.base import SearchResult, SearchStats
from solver.search.branch_and_bound import search_top
from solver.search.shared_bound import KBestTimes, SharedBound
from solver.search.steps import Monitor, TopK, finish
from solver.space import Block
from specs.constraints import SearchConstraints
from specs.plan import PlanKey


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0 ≤ index < count)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"bad shard {self.index} of {self.count}")

    def select(self, blocks: list[Block]) -> list[Block]:
        """This shard's blocks, in enumeration order (module docstring: the deal)."""
        owner = deal_pairs(blocks, self.count)
        return [blk for blk in blocks if owner[_pair(blk)] == self.index]


def _pair(block: Block) -> tuple[int, int]:
    return block.base.tensor, block.base.pipeline


def deal_pairs(blocks: Iterable[Block], count: int) -> dict[tuple[int, int], int]:
    """(tensor, pipeline) pair → shard index, balancing candidates per shard."""
    sizes: dict[tuple[int, int], int] = {}
    for blk in blocks:
        sizes[_pair(blk)] = sizes.get(_pair(blk), 0) + blk.size
    loads = [0] * count
    owner: dict[tuple[int, int], int] = {}
    for pair, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        target = min(range(count), key=lambda i: (loads[i], i))
        owner[pair] = target
        loads[target] += size
    return owner


@dataclass(frozen=True)
class ShardResult:
    """What one shard sends back: its top-k as (step time, key, estimate), best first, its
    counts, and its bound (its k-th best step time, or infinity)."""

    shard: Shard
    entries: list[tuple[float, PlanKey, TrainingEstimate]]
    stats: SearchStats
    bound_s: float
    total: int
    """Candidates in the shard."""


def run_shard(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    shard: Shard,
    *,
    top_k: int = 10,
    should_stop: Callable[[], bool] | None = None,
    shared_bound: SharedBound | None = None,
) -> ShardResult:
    """The branch-and-bound over one shard's blocks (pruning also against `shared_bound`,
    which every shard of the search shares, when given)."""
    top, stats, monitor = search_top(
        problem,
        cost_model,
        constraints,
        top_k=top_k,
        should_stop=should_stop,
        select_blocks=shard.select,
        shared_bound=shared_bound,
    )
    entries = top.ranked_entries()
    bound = top.worst()[0] if top.full else math.inf
    return ShardResult(shard, entries, stats, bound, monitor.total)


def merge(
    results: Sequence[ShardResult],
    problem: TrainingProblem,
    *,
    top_k: int,
    started: float | None = None,
) -> SearchResult:
    """The global top-k of the shards' results, ranked and explained as `search` does."""
    top = TopK(top_k)
    stats = SearchStats()
    for result in sorted(results, key=lambda r: r.shard.index):
        for _step, key, est in result.entries:
            top.push(key, est)
        stats.merge(result.stats)
    total = sum(r.total for r in results)
    monitor = Monitor(math.inf, None, None, total)
    if started is not None:
        monitor.start = started
    monitor.done = total
    return finish(top, stats, monitor, problem=problem)


def sharded_search(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    *,
    shards: int,
    top_k: int = 10,
    map_shards: Callable[[list[Shard]], Iterable[ShardResult]] | None = None,
    share_bound: bool = True,
) -> SearchResult:
    """Split into `shards`, run them with `map_shards` (default: one after another here,
    sharing one `KBestTimes` unless `share_bound` is False; a `map_shards` shares a bound
    or not as it runs them), merge. The result's plans are `search`'s."""
    started = time.perf_counter()
    parts = [Shard(i, shards) for i in range(shards)]
    if map_shards is None:
        shared = KBestTimes(top_k) if share_bound else None
        results = [
            run_shard(problem, cost_model, constraints, part, top_k=top_k, shared_bound=shared)
            for part in parts
        ]
    else:
        results = list(map_shards(parts))
    return merge(results, problem, top_k=top_k, started=started)
