"""The shared bound of a sharded search (`solver.search.shared_bound.SharedBound`) across
processes: `ProcessBound` for shards in local processes (one multiprocessing shared
array), `RayBound` for shards as Ray tasks (one small actor, `BoundBoard`, per Ray job).

Both keep what `KBestTimes` keeps (the k fastest distinct keys offered, each at its
smallest offered time, their k-th time answered) and count a re-offered key once; the solver module's docstring has why the
shards may prune strictly above that time and still merge into the single search's top-k.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
from collections import deque
from collections.abc import Sequence
from typing import Any

from solver.search.shared_bound import Entry, KBestTimes
from specs.plan import PlanKey

FIRST_WAIT_S = 0.05
"""How long a Ray shard waits, once, for the bound before it starts: a warm actor answers in
about a millisecond; a shard that starts late then prunes from its first step."""

BOARD_NAME = "meshplan-shared-bounds"
"""The Ray name of the `BoundBoard` actor (one per Ray job and namespace)."""


def plan_digest(key: PlanKey) -> int:
    """A 64-bit digest of a plan key that is the same in every process (`hash()` of a
    string is not: it is salted per process). Two plans with one digest count as one
    plan, which can only make the bound larger (fewer distinct plans), never wrong."""
    raw = hashlib.blake2b(repr(tuple(key)).encode(), digest_size=8).digest()
    return int.from_bytes(raw, "little", signed=True)


class ProcessBound:
    """The k fastest distinct plans offered by the local processes of one search, in shared
    memory: k times (sorted, infinity when empty) and their plans' digests, under one lock.
    Pass it to the processes when they start (a `Process` argument, a pool's `initargs`):
    multiprocessing shares such memory by inheritance only."""

    def __init__(self, k: int, context: Any = None) -> None:
        if k < 1:
            raise ValueError("k must be at least 1")
        ctx = context or multiprocessing.get_context("spawn")
        self.k = k
        self._times = ctx.RawArray("d", [math.inf] * k)
        self._digests = ctx.RawArray("q", k)
        self._lock = ctx.Lock()

    def get(self) -> float:
        with self._lock:
            return float(self._times[self.k - 1])

    def offer(self, entries: Sequence[Entry]) -> None:
        k = self.k
        with self._lock:
            times, digests = list(self._times), list(self._digests)
            kept = sum(1 for t in times if t != math.inf)
            changed = False
            for step_s, key in entries:
                digest = plan_digest(key)
                if step_s >= times[-1]:
                    continue  # no faster than the k-th
                if digest in digests[:kept]:  # counted once, at its smallest time
                    at = digests[:kept].index(digest)
                    if step_s >= times[at]:
                        continue
                    del times[at], digests[at]
                    times.append(math.inf)
                    digests.append(0)
                    kept -= 1
                at = next(i for i, t in enumerate(times) if t > step_s)
                times.insert(at, float(step_s))
                digests.insert(at, digest)
                del times[k:], digests[k:]
                kept = min(kept + 1, k)
                changed = True
            if changed:
                self._times[:] = times
                self._digests[:] = digests


class BoundBoard:
    """The Ray actor's state: one `KBestTimes` per running sharded search (by token)."""

    def __init__(self) -> None:
        self._bounds: dict[str, KBestTimes] = {}
        self._closed: deque[str] = deque(maxlen=1024)

    def exchange(self, token: str, k: int, entries: Sequence[Entry]) -> float:
        """Offer `entries` to search `token` (opened on first use: calls from different
        shards arrive in any order) and answer its bound."""
        if token in self._closed:
            return math.inf
        bound = self._bounds.get(token)
        if bound is None:
            bound = self._bounds[token] = KBestTimes(k)
        if entries:
            bound.offer(entries)
        return bound.get()

    def close(self, token: str) -> None:
        self._bounds.pop(token, None)
        self._closed.append(token)

    def open_count(self) -> int:
        return len(self._bounds)


_BOARDS: dict[str, Any] = {}
"""Ray job id → this process's handle on the job's board. Ray ends a named actor that is
not detached once no handle to it is left, so a process that looks the board up keeps
its handle for as long as it lives (the `ray` executor's API process first)."""


def board() -> Any:
    """The job's `BoundBoard` actor (started on first use; it takes no CPU)."""
    import ray

    job = ray.get_runtime_context().get_job_id()
    handle = _BOARDS.get(job)
    if handle is None:
        actor = ray.remote(num_cpus=0, max_restarts=-1)(BoundBoard)
        handle = actor.options(name=BOARD_NAME, get_if_exists=True).remote()
        _BOARDS.clear()  # handles of an earlier Ray session are dead
        _BOARDS[job] = handle
    return handle


class RayBound:
    """A shard task's `SharedBound` on the board: `offer` sends its plans at once (no
    wait), `get` answers the bound of the last answered call and starts a new query when
    none is under way, so a shard never waits for the actor (but once, up to
    `first_wait_s`, for the first answer)."""

    def __init__(self, board: Any, token: str, k: int, first_wait_s: float = FIRST_WAIT_S) -> None:
        import ray

        self._board, self._token, self._k = board, token, k
        self._value = math.inf
        self._call: Any = board.exchange.remote(token, k, [])
        ray.wait([self._call], timeout=first_wait_s)  # start from the other shards' plans

    def offer(self, entries: Sequence[Entry]) -> None:
        if entries:
            self._call = self._board.exchange.remote(self._token, self._k, list(entries))

    def get(self) -> float:
        import ray

        if self._call is not None:
            ready, _ = ray.wait([self._call], timeout=0)
            if not ready:
                return self._value
            try:
                self._value = min(self._value, float(ray.get(ready[0])))
            except Exception:  # a lost actor: keep the bound read so far (still valid)
                pass
        self._call = self._board.exchange.remote(self._token, self._k, [])
        return self._value
