"""The `ray` executor plug-in (`MESHPLAN_EXECUTOR=ray`): searches run as Ray tasks.

The runner (`app.services.runner`) claims a search (lease) and hands it to an executor; the
`local` executor is its own process or thread pool, this one submits a Ray task that runs the
same worker entry (`runner.execute_search`, with the replica's lease owner, so every write
is conditional on the lease) against the same database. Ray is joined at `RAY_ADDRESS`
(`ray.init(address=...)`); unset or `local` starts a local Ray with `ray_num_cpus` CPUs.

A training search on one node group with at least `shard_min_candidates` candidates is
split into `search_shards` shards (0: the Ray cluster's CPUs), each a Ray task running the
branch-and-bound over its part (`solver.search.shards`); the search's task waits for them
(Ray lends its CPU to the shards while it waits in `ray.wait`), merges them into exactly the
single search's top-k, and stores the result. While they run the shards share the k-th
best step time over all their plans through the job's `BoundBoard` actor
(`app.services.shared_bounds`), so each prunes with every shard's plans, not only its own.
Cancelling the search (or losing its lease) cancels the shards still running.

Every task (search and shard) first loads the allow-listed cost-model plug-ins
(`Settings.plugin_allowlist`), as the local pool's worker initializer does: Ray starts
workers of its own (one per task blocked waiting for its shards, one after a crash), which
no warm-up reached.

A clean shutdown cancels the tasks (the runner then releases its leases, which puts their
searches back in the queue for any replica).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from app.core.config import Settings

logger = logging.getLogger(__name__)

_WAIT_S = 0.2
"""Time between two cancellation checks while a sharded search waits for its shards."""


class SearchExecutor(Protocol):
    """What the runner needs from an executor plug-in."""

    def submit_search(self, search_id: str, owner: str) -> Future[str | None]: ...

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...


_ENGINES: dict[str, Any] = {}


def _engine(database_url: str) -> Any:
    from app.db.session import make_engine

    engine = _ENGINES.get(database_url)
    if engine is None:
        engine = _ENGINES[database_url] = make_engine(database_url)
    return engine


def run_search_task(
    search_id: str,
    database_url: str,
    progress_interval_s: float,
    owner: str,
    shards: int,
    shard_min_candidates: int,
    plugin_allowlist: Sequence[str] = (),
) -> str | None:
    """The body of a search's Ray task (module-level so Ray pickles it by reference)."""
    from app.services import planning
    from app.services.runner import execute_search

    planning.load_plugins(plugin_allowlist)

    def run(problem: dict[str, Any], **kwargs: Any) -> Any:
        sharded = functools.partial(
            _sharded,
            stored=problem,
            shards=shards,
            shard_min_candidates=shard_min_candidates,
            plugin_allowlist=plugin_allowlist,
        )
        return planning.run_problem(problem, homogeneous_search=sharded, **kwargs)

    return execute_search(
        search_id,
        engine=_engine(database_url),
        stop_event=threading.Event(),  # a shutdown cancels the task instead
        progress_interval_s=progress_interval_s,
        run=run,
        owner=owner,
    )


def warm_worker(plugin_allowlist: list[str]) -> None:
    """Load the allowed cost-model plug-ins and warm the solver up in a Ray worker."""
    from app.services import planning

    planning.load_plugins(plugin_allowlist)
    planning.warm_up()


def run_shard_task(
    stored: dict[str, Any],
    index: int,
    count: int,
    plugin_allowlist: Sequence[str] = (),
    board: Any = None,
    token: str = "",
) -> Any:
    """One shard of a stored training problem (a Ray task), sharing its bound on `board`
    (a `BoundBoard` actor) under `token` when given."""
    from app.services import planning
    from app.services.shared_bounds import RayBound
    from solver.search.shards import Shard, run_shard

    planning.load_plugins(plugin_allowlist)
    training, cost_model, constraints = planning.training_inputs(stored)
    top_k = int(stored.get("top_k", 10))
    shared = RayBound(board, token, top_k) if board is not None else None
    return run_shard(
        training, cost_model, constraints, Shard(index, count), top_k=top_k, shared_bound=shared
    )


def _sharded(
    training: Any,
    cost_model: Any,
    constraints: Any,
    *,
    top_k: int,
    progress: Callable[[int, int | None], None],
    should_stop: Callable[[], bool],
    stored: dict[str, Any],
    shards: int,
    shard_min_candidates: int,
    plugin_allowlist: Sequence[str] = (),
    share_bound: bool = True,
) -> Any:
    import ray

    import solver
    from app.services.shared_bounds import board
    from solver.search.shards import Shard, ShardResult, sharded_search
    from solver.space import count_candidates

    total = count_candidates(training, constraints)
    count = shards or int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
    if count < 2 or total < shard_min_candidates:
        return solver.search(
            training,
            cost_model,
            constraints,
            top_k=top_k,
            progress=progress,
            should_stop=should_stop,
        )
    remote = ray.remote(num_cpus=1, max_retries=1)(run_shard_task)
    shared = board() if share_bound else None
    token = uuid.uuid4().hex
    allowed = list(plugin_allowlist)

    def map_shards(parts: list[Shard]) -> Iterable[ShardResult]:
        refs = {remote.remote(stored, p.index, p.count, allowed, shared, token): p for p in parts}
        pending, results = list(refs), []
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=_WAIT_S)
            results.extend(ray.get(done))
            progress(sum(r.total for r in results), total)
            if pending and should_stop():
                for ref in pending:
                    ray.cancel(ref)
                results.extend(_stopped(refs[ref]) for ref in pending)
                break
        return results

    try:
        return sharded_search(
            training, cost_model, constraints, shards=count, top_k=top_k, map_shards=map_shards
        )
    finally:
        if shared is not None:
            shared.close.remote(token)


def _stopped(shard: Any) -> Any:
    from solver.base import SearchStats
    from solver.search.shards import ShardResult

    stats = SearchStats()
    stats.status = "cancelled"
    return ShardResult(shard, [], stats, float("inf"), 0)


def init_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Join the Ray cluster at `address`, or start a local one (None, "" or "local"). The
    workers import this checkout's packages (its root goes first on their PYTHONPATH)."""
    import ray

    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    runtime_env = {"env_vars": {"PYTHONPATH": path}}
    if address in (None, "", "local"):
        ray.init(
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env=runtime_env,
        )
    else:
        ray.init(address=address, log_to_driver=False, runtime_env=runtime_env)


class RayExecutor:
    """Searches as Ray tasks (module docstring)."""

    def __init__(self, settings: Settings) -> None:
        import ray

        self.settings = settings
        self._started_ray = False
        if not ray.is_initialized():
            address = settings.ray_address
            init_ray(address, settings.ray_num_cpus)
            self._started_ray = True
        self._task = ray.remote(num_cpus=1, max_retries=0)(run_search_task)
        from app.services.shared_bounds import board

        self._board = board()  # started with the executor, so its worker starts now
        # import the project and warm its caches in the workers now, not in the first search
        cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
        warm = ray.remote(num_cpus=1)(warm_worker)
        self._warming = [warm.remote(settings.plugin_allowlist) for _ in range(cpus)]
        self._refs: dict[Any, Future[str | None]] = {}
        self._lock = threading.Lock()

    def submit_search(self, search_id: str, owner: str) -> Future[str | None]:
        """A Ray task for the search; the future ends with the task (a worker that dies
        makes it raise, as a dead pool worker does)."""
        s = self.settings
        ref = self._task.remote(  # type: ignore[call-arg]  # Ray types at most 5 arguments
            search_id,
            s.database_url,
            s.progress_interval_s,
            owner,
            s.search_shards,
            s.shard_min_candidates,
            list(s.plugin_allowlist),
        )
        future: Future[str | None] = Future()
        future.set_running_or_notify_cancel()  # a Ray task cannot be taken back from Future
        with self._lock:
            self._refs[ref] = future

        def copy(done: Future[Any]) -> None:
            with self._lock:
                self._refs.pop(ref, None)
            error = done.exception()
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(done.result())

        ref.future().add_done_callback(copy)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        import ray

        with self._lock:
            refs = list(self._refs)
        if cancel_futures:
            for ref in refs:
                ray.cancel(ref, recursive=True)
        if wait and refs:
            ray.wait(refs, num_returns=len(refs), timeout=10)
        if self._started_ray:
            ray.shutdown()
