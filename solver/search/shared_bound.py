"""A bound the shards of one search share while they run (`solver.search.shards`): the k-th
best step time over the plans all shards have found so far.

Protocol. `SharedBound.offer(entries)` hands over (step time, key) of feasible plans a
shard evaluated; `get()` answers a step time B with B ≥ the k-th smallest step time among
the distinct keys offered so far by all shards, each key at the smallest time offered with
it (infinity while fewer than k distinct keys were offered). A key may be offered more
than once (a retried shard offers its plans again; the branch-and-bound offers a plan
under its *layout key*, `solver.search.diverse.layout_key`, shared by every plan of its
layout): an implementation counts a key once, at the smallest time offered with it or a
larger one, or answers something larger (a stale or coarser value is always allowed: it
only prunes less). Implementations live above the
solver (a multiprocessing shared array, a Ray actor: `app.services.shared_bounds`); this
module has the protocol, `KBestTimes` (one process: shards run one after another, and the
state a Ray actor holds) and `BoundPoller`, the shard's cheap view of it.

Why pruning against B keeps the merge exact. Let T be the step time of the k-th
non-dominated plan of the whole space in the single search's order (step time, plan key;
the diverse top-k, `solver.search.diverse`), infinity if there are fewer than k.
1. B ≥ T at every moment: B is at least the k-th smallest of k times offered under k
   distinct layout keys, each the time of a feasible plan of that layout; the fastest plan
   of a layout in the whole space is non-dominated (a dominator shares the layout and
   ranks first) and no slower than any offered plan of it, so k distinct layouts give k
   distinct non-dominated plans no slower than B. Offers only add plans or lower a key's
   time, so B only decreases; a stale B (read before the latest offers) is larger, hence
   still ≥ T. (Offered under plan keys, k plans of one layout could be counted k times
   while only one of them is non-dominated: B could fall below T.)
2. A shard drops a candidate only when its step-time lower bound is strictly above B: its
   step time is then > B ≥ T, so at least k non-dominated plans rank before it and it is
   neither in the global top-k nor folded under one of them (folded plans rank before the
   k-th), and a plan ranked after another never decides whether that one is dominated. A candidate whose bound equals B is not dropped by the shared bound: its
   time may equal T and its key sort before the k-th plan's; that tie is decided by the
   shard's own top-k (the key rule of `branch_and_bound`), which is unchanged.
3. So every plan p of the global top-k (time ≤ T ≤ B, bound ≤ time) is evaluated by its
   shard and, with at most k-1 non-dominated plans of the space ranked before it (a layout
   lies in one shard, so a plan is dominated in its shard exactly when it is in the whole
   space), stays in its shard's top-k, with the plans folded under it: the merge (`shards` module docstring) returns the single search's top-k, ties
   included. A shard's own top-k is no longer exact over its part (it lacks plans slower
   than T), which the merge never needed.
The minimum over shards of each shard's own k-th best is also ≥ T (each is the k-th
smallest of a subset), but weaker: the k-th smallest of the union is at most that
minimum. What would not be valid: pruning at B with ≥ (point 2), counting a re-offered plan
twice (B could fall below T), or reading a shard's k-th best as a lower bound on the plans
it left out (true only when that shard prunes against its own bound alone).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Sequence
from typing import Protocol

from specs.plan import PlanKey

Entry = tuple[float, PlanKey]
"""(step time in seconds, plan key) of one feasible plan."""

POLL_EVERY = 16
"""Search steps between two exchanges with the shared bound (`BoundPoller`): a step
costs about a millisecond (a partition solve or an evaluation), an exchange a few
microseconds locally and one non-blocking Ray call remotely."""


class SharedBound(Protocol):
    """The bound the shards of one search share (module docstring)."""

    def get(self) -> float:
        """A step time ≥ the k-th smallest of the distinct offered plans (inf: fewer)."""
        ...

    def offer(self, entries: Sequence[Entry]) -> None:
        """Feasible plans a shard evaluated, as (step time, key)."""
        ...


class KBestTimes:
    """The k fastest distinct plans offered, in one process (thread-safe)."""

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError("k must be at least 1")
        self.k = k
        self._best: list[Entry] = []
        self._keys: set[PlanKey] = set()
        self._lock = threading.Lock()

    def get(self) -> float:
        best = self._best
        return best[-1][0] if len(best) >= self.k else math.inf

    def offer(self, entries: Sequence[Entry]) -> None:
        with self._lock:
            best, keys = self._best, self._keys
            for step_s, key in entries:
                # a plan evicted earlier ranks after the k kept ones and cannot re-enter
                if len(best) >= self.k and (step_s, key) >= best[-1]:
                    continue
                if key in keys:  # counted once, at the smaller of its offered times
                    at = next(i for i, entry in enumerate(best) if entry[1] == key)
                    if step_s >= best[at][0]:
                        continue
                    del best[at]
                    keys.discard(key)
                bisect.insort(best, (float(step_s), key))
                keys.add(key)
                if len(best) > self.k:
                    keys.discard(best.pop()[1])


class BoundPoller:
    """A shard's view of a `SharedBound`: the bound it last read (`bound_s`), plans found
    since the last exchange, and an exchange every `every` steps."""

    def __init__(self, shared: SharedBound, every: int = POLL_EVERY) -> None:
        self.shared = shared
        self.every = max(1, every)
        self.bound_s = shared.get()
        self._found: list[Entry] = []
        self._steps = 0

    def found(self, step_s: float, key: PlanKey) -> None:
        """A feasible plan of this shard; offered at the next exchange unless it is no
        faster than the bound already read (it could not lower it)."""
        if step_s < self.bound_s:
            self._found.append((step_s, key))

    def step(self) -> float:
        """Count one search step; exchange every `every` steps. Returns `bound_s`."""
        self._steps += 1
        if self._steps >= self.every:
            self.exchange()
        return self.bound_s

    def exchange(self) -> None:
        """Offer the plans found since the last exchange, then read the shared bound."""
        self._steps = 0
        if self._found:
            found, self._found = self._found, []
            self.shared.offer(found)
        self.bound_s = min(self.bound_s, self.shared.get())
