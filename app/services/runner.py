"""Runs searches off the request path; every bit of a search's state lives in the database.

Life cycle: `queued` → `running` → `succeeded` | `failed` | `cancelled`.

- `SearchRunner.submit(id)` hands a stored, queued search to a pool of
  `settings.search_workers` workers: a spawn-context `ProcessPoolExecutor` by default (the
  solver is CPU-bound Python; in separate processes it does not contend with the API for
  the GIL), or a `ThreadPoolExecutor` (`MESHPLAN_SEARCH_EXECUTOR=thread`).
- A worker (`execute_search`) re-reads the search, moves it queued → running with a
  conditional update (attempts + 1), rebuilds the problem from the stored resolved JSON,
  and runs the solver. Progress is written at most every `progress_interval_s`;
  `should_stop` re-reads the status at most every `_STOP_CHECK_S`, so `DELETE` (which only
  flips the stored status to cancelled) stops the solver from any replica or process.
- The plans and the final status are written in one transaction. A search cancelled while
  it ran stays cancelled and keeps the plans found so far. Domain errors are stored as
  their problem JSON; anything else is logged and stored as a generic problem.
- A clean shutdown sets a stop event: running searches stop and go back to `queued`
  (their attempt is not counted), queued futures are dropped; both resume at next start.
- Several replicas may share one database: a replica claims a search with a lease before
  its pool gets it (`app.db.leases`), a heartbeat renews the leases it holds and a scan
  claims searches nobody holds (`app.services.leases`); a worker writes progress and its
  outcome only while its replica holds the lease, so a replica that lost it (another took
  the search over) stops at its next progress write and writes nothing.
- `recover()` at startup is that scan: `queued` searches nobody holds are claimed and
  submitted; `running` ones whose lease passed (their replica died) are re-queued while
  attempts < `max_attempts`, else marked failed with "interrupted by a service restart";
  another replica's live searches are left alone. Nothing is lost.
- Where workers run is a plug-in (`settings.executor`): `local` is the pool above, `ray`
  runs searches as Ray tasks (`app.services.executors`).
- Warm-up (issue 13): a spawned worker imports the solver (about 3.5 s on 2 cores) before
  its first search. `start()` has every worker run a no-op after its initializer;
  `pool_state()["warm"]` turns true when all have, and readiness reports it. Until then a
  submitted search runs on a thread of the API process (which has the solver imported
  already), so it starts at once rather than after the imports.
- Signals: workers ignore SIGINT and SIGTERM (`pool.init_worker`), so a signal to the whole
  process group drains like a signal to the API process alone: uvicorn's shutdown calls
  `shutdown()`, which sets the stop event.
- A dead worker (OOM killer, `kill -9`) breaks a process pool: the first callback that sees
  `BrokenProcessPool` kills the old pool's other workers, builds a new pool and re-submits
  what the old one held. The search whose worker died is retried while attempts <
  `max_attempts`, then failed with the reason (`worker process died (signal 9)`); searches
  that only shared the pool go back to `queued` without losing an attempt.
  `pool_state()` reports the pool (broken until rebuilt) for the health endpoint.
- Listeners (`add_listener`, e.g. the webhook dispatcher's `notify`) are called with the
  search id whenever a search may have reached its end in this process: a worker returned
  or crashed, a cancel finished a search that never ran, recovery failed one. They must be
  quick and must not raise (they run on worker callback threads).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.core.config import Settings
from app.core.problems import make_problem, problem_from_error
from app.db import crud, leases
from app.db.models import TERMINAL_STATUSES, PlanRecord, SearchStatus
from app.db.session import make_engine
from app.services.leases import LeaseKeeper
from app.services.pool import TrackedProcessPool, describe_exit, init_worker
from specs.errors import PlannerError

logger = logging.getLogger(__name__)

_STOP_CHECK_S = 0.2
"""Least time between two status reads of `should_stop` (cancellation latency)."""
_WAIT_POLL_S = 0.05


class _StopEvent(Protocol):
    def is_set(self) -> bool: ...

    def set(self) -> None: ...


# ---- the worker --------------------------------------------------------------------------
def search_instance(search_id: str) -> str:
    return f"/v1/searches/{search_id}"


def interrupted_problem(search_id: str, attempts: int) -> dict[str, Any]:
    """The stored error of a search abandoned after too many interrupted runs."""
    return make_problem(
        status=500,
        slug="search-interrupted",
        title="Search interrupted",
        detail=f"interrupted by a service restart ({attempts} attempts)",
        instance=search_instance(search_id),
        reason="interrupted by a service restart",
        attempts=attempts,
    )


def worker_died_problem(search_id: str, reason: str, attempts: int) -> dict[str, Any]:
    """The stored error of a search whose worker process died on its last attempt."""
    return make_problem(
        status=500,
        slug="worker-died",
        title="Worker process died",
        detail=f"{reason} while running the search ({attempts} attempts)",
        instance=search_instance(search_id),
        reason=reason,
        attempts=attempts,
    )


def unexpected_problem(search_id: str) -> dict[str, Any]:
    return make_problem(
        status=500,
        slug="internal-error",
        title="Internal error",
        detail="the search failed unexpectedly; the error is in the service log",
        instance=search_instance(search_id),
    )


def execute_search(
    search_id: str,
    *,
    engine: Engine,
    stop_event: _StopEvent,
    progress_interval_s: float,
    run: Callable[..., Any] | None = None,
    owner: str | None = None,
) -> str | None:
    """Run one stored search to its end; returns the final status (never raises). With an
    `owner`, every write is conditional on that replica still holding the lease."""
    from app.services import planning

    run_problem = run or planning.run_problem
    with Session(engine, expire_on_commit=False) as session:
        if stop_event.is_set():
            return crud.current_status(session=session, search_id=search_id)
        if not crud.start_search(session=session, search_id=search_id, owner=owner):
            status = crud.current_status(session=session, search_id=search_id)
            if status == SearchStatus.CANCELLED.value:
                crud.mark_cancelled_finished(session=session, search_id=search_id)
            return status
        record = crud.get_search(session=session, search_id=search_id)
        assert record is not None
        problem = dict(record.problem)

    state = _WorkerState(search_id, engine, stop_event, progress_interval_s, owner)
    try:
        outcome = run_problem(problem, progress=state.progress, should_stop=state.should_stop)
    except PlannerError as exc:
        return state.fail(problem_from_error(exc, instance=search_instance(search_id)))
    except Exception:
        logger.exception("search %s failed unexpectedly", search_id)
        return state.fail(unexpected_problem(search_id))
    if stop_event.is_set() and not state.cancelled:
        # a clean shutdown interrupted the search: it runs again at the next start
        with Session(engine) as session:
            crud.requeue_search(
                session=session, search_id=search_id, forget_attempt=True, owner=owner
            )
            return crud.current_status(session=session, search_id=search_id)
    plans = [
        PlanRecord(
            search_id=search_id,
            rank=p["rank"],
            plan=p["plan"],
            metrics=p["metrics"],
            memory=p["memory"],
            explanation=p.get("explanation", ""),
            feasible=p.get("feasible", True),
            violations=p.get("violations", []),
            warnings=p.get("warnings", []),
            dominated_reason=p.get("dominated_reason"),
        )
        for p in outcome.plans
    ]
    by_rank = {record.rank: record.id for record in plans}
    for row, p in zip(plans, outcome.plans, strict=True):
        if p.get("dominated_by") is not None:  # a rank in the outcome → that plan's id
            row.dominated_by = by_rank[p["dominated_by"]]
    with Session(engine, expire_on_commit=False) as session:
        return crud.finish_search(
            session=session,
            search_id=search_id,
            status=SearchStatus.SUCCEEDED,
            stats=outcome.stats,
            plans=plans,
            progress_evaluated=state.evaluated,
            progress_total=state.total,
            owner=owner,
        )


@dataclass
class _WorkerState:
    search_id: str
    engine: Engine
    stop_event: _StopEvent
    progress_interval_s: float
    owner: str | None = None
    evaluated: int = 0
    total: int | None = None
    cancelled: bool = False
    _last_write: float = field(default_factory=time.monotonic)
    _last_check: float = field(default_factory=time.monotonic)

    def progress(self, evaluated: int, total: int | None) -> None:
        self.evaluated = evaluated
        if total is not None:
            self.total = total
        now = time.monotonic()
        if now - self._last_write >= self.progress_interval_s:
            self._last_write = now
            self._last_check = now
            with Session(self.engine) as session:
                status = crud.update_progress(
                    session=session,
                    search_id=self.search_id,
                    evaluated=evaluated,
                    total=total,
                    owner=self.owner,
                )
            self.cancelled = status != SearchStatus.RUNNING.value

    def should_stop(self) -> bool:
        if self.stop_event.is_set() or self.cancelled:
            return True
        now = time.monotonic()
        if now - self._last_check >= _STOP_CHECK_S:
            self._last_check = now
            with Session(self.engine) as session:
                status = crud.current_status(
                    session=session, search_id=self.search_id, owner=self.owner
                )
            self.cancelled = status != SearchStatus.RUNNING.value
        return self.cancelled

    def fail(self, problem: dict[str, Any]) -> str | None:
        with Session(self.engine, expire_on_commit=False) as session:
            return crud.finish_search(
                session=session,
                search_id=self.search_id,
                status=SearchStatus.FAILED,
                stats=None,
                error=problem,
                progress_evaluated=self.evaluated,
                progress_total=self.total,
                owner=self.owner,
            )


# ---- process-pool plumbing ---------------------------------------------------------------
_PROCESS_STOP: Any = None
_PROCESS_STARTS: Any = None
_PROCESS_ENGINES: dict[str, Engine] = {}


def _init_process(
    stop_event: Any,
    plugin_allowlist: list[str],
    log_level: str,
    starts: Any = None,
    max_memory_mb: int = 0,
    nice: int = 0,
) -> None:
    global _PROCESS_STOP, _PROCESS_STARTS
    init_worker(max_memory_mb=max_memory_mb, ignore_sigterm=True, nice=nice)
    _PROCESS_STOP = stop_event
    _PROCESS_STARTS = starts
    logging.basicConfig(level=log_level)
    from app.services import planning

    planning.load_plugins(plugin_allowlist)
    planning.warm_up()
    # Move everything loaded so far out of the collector's generations: a full collection
    # over the catalogs and solver caches costs ~40 ms inside a search otherwise.
    gc.freeze()


def _warm_worker(hold_s: float) -> int:
    """A no-op that keeps one worker busy briefly, so that `start()` spawns every worker
    (and runs its initializer) before the first search arrives; returns the worker's pid."""
    time.sleep(hold_s)
    return os.getpid()


def _process_entry(
    search_id: str, database_url: str, progress_interval_s: float, owner: str | None = None
) -> str | None:
    if _PROCESS_STARTS is not None:  # tell the parent which worker holds this search
        _PROCESS_STARTS.put((search_id, os.getpid()))
    engine = _PROCESS_ENGINES.get(database_url)
    if engine is None:
        engine = _PROCESS_ENGINES[database_url] = make_engine(database_url)
    return execute_search(
        search_id,
        engine=engine,
        stop_event=_PROCESS_STOP,
        progress_interval_s=progress_interval_s,
        owner=owner,
    )


# ---- the runner --------------------------------------------------------------------------
@dataclass(frozen=True)
class RecoveryReport:
    requeued: list[str]
    failed: list[str]


class SearchRunner:
    """The worker pool of one service process."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        self._futures: dict[str, Future[str | None]] = {}
        self._lock = threading.Lock()
        self._executor: Executor | None = None
        self._stop_event: _StopEvent = threading.Event()
        self._listeners: list[Callable[[str], None]] = []
        self.replica_id = settings.replica_id or leases.new_replica_id()
        self._plugin: Any = None  # the Ray executor when settings.executor == "ray"
        self._keeper = LeaseKeeper(
            heartbeat=self.heartbeat,
            scan=self.scan,
            heartbeat_interval_s=settings.heartbeat_interval_s,
            scan_interval_s=settings.lease_scan_interval_s,
        )
        self._warm_futures: list[Future[int]] = []
        self._warming_threads: ThreadPoolExecutor | None = None
        self._starts: Any = None
        self._worker_of: dict[str, int] = {}
        self._dead_codes: dict[int, dict[int, int | None]] = {}
        self._restarts = 0
        self._deaths = 0

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call `listener(search_id)` whenever a search may have finished."""
        self._listeners.append(listener)

    def _notify(self, search_id: str) -> None:
        for listener in list(self._listeners):
            try:
                listener(search_id)
            except Exception:
                logger.exception("search %s: a completion listener failed", search_id)

    @property
    def kind(self) -> str:
        return self.settings.search_executor

    def start(self) -> None:
        """Create the pool (process pools start their workers lazily)."""
        if self.settings.executor == "ray":
            from app.services.executors import RayExecutor

            self._stop_event = threading.Event()
            self._plugin = RayExecutor(self.settings)
            self._executor = self._plugin
        elif self.kind == "process":
            context = multiprocessing.get_context("spawn")
            self._stop_event = context.Event()
            self._starts = context.SimpleQueue()
            self._executor = self._new_process_pool()
            self._warming_threads = ThreadPoolExecutor(
                max_workers=self.settings.search_workers,
                thread_name_prefix="meshplan-warmup-search",
            )
        else:
            self._stop_event = threading.Event()
            self._executor = ThreadPoolExecutor(
                max_workers=self.settings.search_workers, thread_name_prefix="meshplan-search"
            )

    def _new_process_pool(self) -> TrackedProcessPool:
        workers = self.settings.search_workers
        executor = TrackedProcessPool(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_process,
            initargs=(
                self._stop_event,
                list(self.settings.plugin_allowlist),
                self.settings.log_level,
                self._starts,
                self.settings.worker_max_memory_mb,
                self.settings.worker_nice,
            ),
        )
        # Spawn and initialise every worker now: a first search must not pay for
        # interpreter start-up and imports (about 0.7 s).
        self._warm_futures = [executor.submit(_warm_worker, 0.2) for _ in range(workers)]
        return executor

    def pool_state(self) -> dict[str, Any]:
        """`{kind, executor, state: ok | broken | stopped, workers, warm_workers, warm,
        active, stopping, alive, worker_pids, restarts, worker_deaths}` (`alive` and
        `worker_pids` are None / empty for a thread pool); no database access."""
        executor = self._executor
        if executor is None:
            state = "stopped"
        elif isinstance(executor, TrackedProcessPool) and executor.broken:
            state = "broken"
        else:
            state = "ok"
        tracked = executor if isinstance(executor, TrackedProcessPool) else None
        alive = tracked.alive() if tracked is not None else None
        pids = tracked.alive_pids() if tracked is not None else []
        warm_workers = (
            sum(1 for f in self._warm_futures if f.done())
            if self._warm_futures
            else self.settings.search_workers
        )
        with self._lock:
            active = len(self._futures)
        return {
            "kind": self.kind,
            "executor": self.kind,
            "state": state,
            "workers": self.settings.search_workers,
            "warm_workers": warm_workers,
            "warm": self.warm,
            "active": active,
            "stopping": self._stop_event.is_set(),
            "alive": alive,
            "worker_pids": pids,
            "restarts": self._restarts,
            "worker_deaths": self._deaths,
        }

    def _drain_starts(self) -> None:
        """Read the (search id, worker pid) notes the workers left (caller holds the lock)."""
        queue = self._starts
        while queue is not None and not queue.empty():
            search_id, pid = queue.get()
            self._worker_of[search_id] = pid

    def _repair(self, broken: Executor) -> dict[int, int | None]:
        """Replace `broken` (once, whoever calls first); returns its workers' exit codes."""
        with self._lock:
            self._drain_starts()
            if self._executor is not broken or self._stop_event.is_set():
                return self._dead_codes.get(id(broken), {})
            assert isinstance(broken, TrackedProcessPool)
            codes = broken.dead_codes()
            broken.kill_all()  # its other workers ignore the SIGTERM the stdlib sends them
            self._dead_codes[id(broken)] = codes
            self._deaths += len(codes)
            try:
                self._executor = self._new_process_pool()
                self._restarts += 1
            except Exception:
                logger.exception("could not rebuild the search worker pool")
            logger.error("a search worker died (%s); the pool was rebuilt", codes)
            return codes

    def _after_worker_death(self, search_id: str, broken: Executor) -> None:
        """Re-queue (or fail) a search whose pool broke under it, and submit it again."""
        codes = self._repair(broken)
        with self._lock:
            pid = self._worker_of.pop(search_id, None)
        # the dead worker's search, or every running one when the dead worker is unknown
        culprit = pid is None or pid in codes or not codes
        resubmit = False
        with Session(self.engine) as session:
            record = crud.get_search(session=session, search_id=search_id)
            if record is None:
                return
            if record.status == SearchStatus.QUEUED.value:
                resubmit = True
            elif record.status == SearchStatus.RUNNING.value:
                if not culprit:
                    # a bystander: its worker was stopped because another one died
                    resubmit = crud.requeue_search(
                        session=session, search_id=search_id, forget_attempt=True
                    )
                elif record.attempts < self.settings.max_attempts:
                    resubmit = crud.requeue_search(session=session, search_id=search_id)
                else:
                    reason = describe_exit(codes.get(pid) if pid is not None else None)
                    crud.fail_search(
                        session=session,
                        search_id=search_id,
                        error=worker_died_problem(search_id, reason, record.attempts),
                    )
                    logger.error("search %s failed: %s", search_id, reason)
        if resubmit:
            self.submit(search_id)

    def submit(self, search_id: str) -> None:
        """Queue a stored search for a worker (a no-op once shutting down). A pool found
        broken (a worker died and its callback has not run yet) is rebuilt first. The search
        is claimed with this replica's lease first: another replica's search is left alone."""
        with self._lock:
            if self._executor is None or self._stop_event.is_set() or search_id in self._futures:
                return
            with Session(self.engine) as session:
                if not leases.claim(
                    session=session,
                    search_id=search_id,
                    owner=self.replica_id,
                    lease_s=self.settings.lease_s,
                ):
                    return  # another replica holds it, or it is no longer queued
        for _ in range(2):
            with self._lock:
                executor = self._executor
                if executor is None or self._stop_event.is_set() or search_id in self._futures:
                    return
                if not (isinstance(executor, TrackedProcessPool) and executor.broken):
                    try:
                        future = self._submit_to(executor, search_id)
                    except BrokenProcessPool:
                        pass
                    else:
                        self._futures[search_id] = future
                        break
            self._repair(executor)
        else:
            logger.error("search %s stays queued: the worker pool cannot be rebuilt", search_id)
            return
        future.add_done_callback(functools.partial(self._done, search_id, executor))

    def _submit_to(self, executor: Executor, search_id: str) -> Future[str | None]:
        if self._plugin is not None:
            future: Future[str | None] = self._plugin.submit_search(search_id, self.replica_id)
            return future
        if (
            self.kind == "process"
            and not self.warm
            and self._warming_threads is not None
            and self._restarts == 0
        ):
            # the first workers are still importing: run on a thread of this process (after
            # a rebuild the search waits for the new workers: a retry of a search whose
            # worker died must stay out of the API process)
            executor = self._warming_threads
        elif self.kind == "process":
            return executor.submit(
                _process_entry,
                search_id,
                self.settings.database_url,
                self.settings.progress_interval_s,
                self.replica_id,
            )
        return executor.submit(
            execute_search,
            search_id,
            engine=self.engine,
            stop_event=self._stop_event,
            progress_interval_s=self.settings.progress_interval_s,
            owner=self.replica_id,
        )

    def _done(self, search_id: str, executor: Executor, future: Future[str | None]) -> None:
        with self._lock:
            if self._futures.get(search_id) is future:
                del self._futures[search_id]
        if future.cancelled():
            return
        error = future.exception()
        if isinstance(error, BrokenProcessPool) and not self._stop_event.is_set():
            try:
                self._after_worker_death(search_id, executor)
            except Exception:
                logger.exception("search %s: recovery after a worker death failed", search_id)
            self._notify(search_id)
            return
        with self._lock:
            self._worker_of.pop(search_id, None)
        if error is not None:
            logger.error("search worker for %s crashed", search_id, exc_info=error)
            if not self._stop_event.is_set():
                with Session(self.engine) as session:
                    crud.fail_search(
                        session=session, search_id=search_id, error=unexpected_problem(search_id)
                    )
        self._notify(search_id)

    def cancel(self, search_id: str) -> bool:
        """Flag a queued or running search cancelled; False if it had already finished."""
        with Session(self.engine) as session:
            if not crud.cancel_search(session=session, search_id=search_id):
                return False
        with self._lock:
            future = self._futures.get(search_id)
        if future is not None and future.cancel():
            with Session(self.engine) as session:
                crud.mark_cancelled_finished(session=session, search_id=search_id)
            self._notify(search_id)
        elif future is None:
            with Session(self.engine) as session:
                status = crud.current_status(session=session, search_id=search_id)
                if status == SearchStatus.CANCELLED.value:
                    record = crud.get_search(session=session, search_id=search_id)
                    if record is not None and record.started_at is None:
                        crud.mark_cancelled_finished(session=session, search_id=search_id)
            self._notify(search_id)
        return True

    def recover(self) -> RecoveryReport:
        """Resume what dead replicas (or this one's previous process) left, then keep doing
        so: the first scan now, the lease keeper's from here on."""
        report = self.scan()
        self._keeper.start()
        return report

    def heartbeat(self) -> int:
        """Renew the leases of the searches this replica runs or has queued."""
        with Session(self.engine) as session:
            return leases.renew(
                session=session,
                owner=self.replica_id,
                search_ids=self.active(),
                lease_s=self.settings.lease_s,
            )

    def scan(self) -> RecoveryReport:
        """Claim searches nobody holds (as many as the pool has room for: two per worker)
        and submit them; fail taken-over ones that have had `max_attempts` runs."""
        if self._stop_event.is_set():
            return RecoveryReport(requeued=[], failed=[])
        active = self.active()
        with Session(self.engine) as session:
            found = leases.claim_available(
                session=session,
                owner=self.replica_id,
                lease_s=self.settings.lease_s,
                limit=2 * self.settings.search_workers - len(active),
                max_attempts=self.settings.max_attempts,
                exclude=active,
            )
            failed = []
            for search_id, attempts in found.exhausted:
                if crud.fail_search(
                    session=session,
                    search_id=search_id,
                    error=interrupted_problem(search_id, attempts),
                ):
                    failed.append(search_id)
                    logger.warning("search %s failed: interrupted %d times", search_id, attempts)
        for search_id in found.claimed:
            self.submit(search_id)
        for search_id in failed:
            self._notify(search_id)
        if found.claimed or failed:
            logger.info("claimed %d searches, failed %d", len(found.claimed), len(failed))
        return RecoveryReport(requeued=found.claimed, failed=failed)

    def _current_status(self, search_id: str) -> str | None:
        with Session(self.engine) as session:
            return crud.current_status(session=session, search_id=search_id)

    async def wait(self, search_id: str, timeout_s: float) -> str | None:
        """Wait up to `timeout_s` for the search to finish; returns its status."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = await asyncio.to_thread(self._current_status, search_id)
            if status is None or status in TERMINAL_STATUSES:
                return status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return status
            await asyncio.sleep(min(_WAIT_POLL_S, remaining))

    @property
    def warm(self) -> bool:
        """Every worker has started and run its initializer (always true for threads)."""
        return all(f.done() for f in self._warm_futures)

    def active(self) -> list[str]:
        with self._lock:
            return list(self._futures)

    def shutdown(self) -> None:
        """Stop running searches (they return to `queued`) and drop queued futures."""
        self._stop_event.set()
        self._keeper.stop()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        warming, self._warming_threads = self._warming_threads, None
        if warming is not None:
            warming.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._futures.clear()
        try:
            with Session(self.engine) as session:
                leases.release(session=session, owner=self.replica_id)
        except Exception:  # the database is gone: the leases expire by themselves
            logger.warning("could not give back this replica's leases", exc_info=True)
