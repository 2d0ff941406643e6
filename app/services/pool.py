"""Worker processes: how they are bounded, how their deaths are seen, and the small pool that
runs the solver work of single requests (expert placements, serving estimates, ...).

- `init_worker(...)`, called first by every worker's initializer: the worker ignores SIGINT
  (and, for search workers, SIGTERM), so a signal sent to the whole process group (Ctrl-C on
  `make serve`, systemd's default `KillMode=control-group`) reaches only the API process,
  whose shutdown stops the workers through the runner's stop event (drain, not crash). It
  also caps the worker's address space (`RLIMIT_AS`, setting `worker_max_memory_mb`), so a
  runaway solve ends in a `MemoryError` inside the worker instead of the OOM killer.
- `TrackedProcessPool`: a `ProcessPoolExecutor` that remembers every worker it spawned, so
  that after a `BrokenProcessPool` the runner can name the dead worker and its exit code
  (the standard library forgets both).
- `RequestPool`: a pebble process pool (per-task timeout: the worker running a task past
  its bound is killed and replaced; `max_tasks` recycles workers so their memory returns to
  the system). `await pool.run(fn, *args, timeout_s=...)` answers the result or raises
  `WorkerTimeout`, `WorkerDied` or `MemoryError`. With `in_process=True` (the service's
  `search_executor=thread`: tests, tiny deployments) the work runs on a thread of the API
  process instead; the timeout still answers, but the thread runs on to its end.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing
import os
import resource
import signal
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from pebble import ProcessExpired, ProcessPool

logger = logging.getLogger(__name__)


def init_worker(*, max_memory_mb: int, ignore_sigterm: bool, nice: int = 0) -> None:
    """Signal dispositions, the memory cap and the CPU priority of a fresh worker process.

    `nice` > 0 lowers the worker's priority below the API process's (Linux CFS weights
    CPU time by 1.25 per nice step: a nice-10 worker weighs 110 against the API's 1024), so
    the API keeps answering while searches fill every core; an idle API leaves the workers
    every core all the same."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if nice > 0:
        os.nice(nice)
    if ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if max_memory_mb > 0:
        limit = max_memory_mb * 1024 * 1024
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def describe_exit(exitcode: int | None) -> str:
    """`worker process died (signal 9)` / `(exit code 3)` / `(exit status unknown)`."""
    if exitcode is None:
        return "worker process died (exit status unknown)"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = ""
        return f"worker process died (signal {-exitcode}{', ' + name if name else ''})"
    return f"worker process died (exit code {exitcode})"


class TrackedProcessPool(ProcessPoolExecutor):
    """A `ProcessPoolExecutor` that keeps a handle on every worker process it started."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.spawned: dict[int, multiprocessing.process.BaseProcess] = {}
        super().__init__(*args, **kwargs)

    def _spawn_process(self) -> None:  # CPython's hook (3.9+), called for every new worker
        super()._spawn_process()  # type: ignore[misc]
        processes: dict[int, Any] = getattr(self, "_processes", {}) or {}
        self.spawned.update(processes)

    @property
    def broken(self) -> bool:
        return bool(getattr(self, "_broken", False))

    def exit_codes(self) -> dict[int, int | None]:
        """pid → exit code (None while alive) of every worker this pool started."""
        return {pid: p.exitcode for pid, p in list(self.spawned.items())}

    def dead_codes(self, settle_s: float = 1.0) -> dict[int, int | None]:
        """pid → exit code of the workers that died abnormally. A killed worker's pipes can
        close (which breaks the pool) a moment before its exit status can be reaped, so this
        polls for up to `settle_s`."""
        deadline = time.monotonic() + settle_s
        while True:
            codes: dict[int, int | None] = {
                pid: c for pid, c in self.exit_codes().items() if c not in (None, 0)
            }
            if codes or time.monotonic() >= deadline:
                return codes
            time.sleep(0.02)

    def alive_pids(self) -> list[int]:
        return sorted(pid for pid, p in list(self.spawned.items()) if p.exitcode is None)

    def alive(self) -> int:
        return len(self.alive_pids())

    def kill_all(self) -> None:
        """SIGKILL every worker still alive (they ignore SIGTERM), and reap them."""
        for process in list(self.spawned.values()):
            if process.exitcode is None:
                try:
                    process.kill()
                except (OSError, ValueError):
                    pass
        for process in list(self.spawned.values()):
            try:
                process.join(timeout=5)
            except (AssertionError, ValueError):
                pass


# ---- the request pool ----------------------------------------------------------------------
class WorkerTimeout(Exception):
    """A request's solver work passed its time bound (the worker was killed)."""


class WorkerDied(Exception):
    """The worker running a request's solver work died (signal or exit code in `reason`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _init_request_worker(
    max_memory_mb: int, plugin_allowlist: list[str], log_level: str, nice: int = 0
) -> None:
    # SIGTERM keeps its default here: pebble stops an over-time worker with SIGTERM first.
    init_worker(max_memory_mb=max_memory_mb, ignore_sigterm=False, nice=nice)
    logging.basicConfig(level=log_level)
    from app.services import planning

    planning.load_plugins(plugin_allowlist)
    planning.warm_up()
    gc.freeze()


def _noop() -> None:
    return None


class RequestPool:
    """Worker processes for the solver work of single requests."""

    def __init__(
        self,
        *,
        workers: int,
        max_tasks: int,
        max_memory_mb: int,
        plugin_allowlist: list[str],
        log_level: str,
        in_process: bool = False,
        nice: int = 0,
    ) -> None:
        self.in_process = in_process
        self._args = (workers, max_tasks, max_memory_mb, list(plugin_allowlist), log_level, nice)
        self._pool: ProcessPool | None = None
        self.timeouts = 0
        self.deaths = 0

    def start(self) -> None:
        if self.in_process:
            return
        workers, max_tasks, max_memory_mb, plugins, log_level, nice = self._args
        self._pool = ProcessPool(
            max_workers=workers,
            max_tasks=max_tasks,
            initializer=_init_request_worker,
            initargs=(max_memory_mb, plugins, log_level, nice),
            context=multiprocessing.get_context("spawn"),
        )
        for _ in range(workers):  # spawn and warm every worker before the first request
            self._pool.schedule(_noop)

    def stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()  # type: ignore[no-untyped-call]
            pool.join(timeout=10)

    def state(self) -> dict[str, Any]:
        return {
            "running": self.in_process or (self._pool is not None and self._pool.active),
            "timeouts": self.timeouts,
            "deaths": self.deaths,
        }

    async def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float) -> Any:
        """`fn(*args)` in a worker, at most `timeout_s` seconds."""
        if self.in_process:
            try:
                return await asyncio.wait_for(asyncio.to_thread(fn, *args), timeout_s)
            except TimeoutError as exc:
                self.timeouts += 1
                raise WorkerTimeout(f"the work took longer than {timeout_s:g} s") from exc
        pool = self._pool
        if pool is None:
            raise WorkerDied("the worker pool is not running")
        future = pool.schedule(fn, args=args, timeout=timeout_s)
        try:
            return await asyncio.wrap_future(future)
        except FutureTimeout as exc:
            self.timeouts += 1
            raise WorkerTimeout(f"the work took longer than {timeout_s:g} s") from exc
        except ProcessExpired as exc:
            self.deaths += 1
            raise WorkerDied(describe_exit(exc.exitcode)) from exc
        except asyncio.CancelledError:
            future.cancel()  # type: ignore[no-untyped-call]  # the client went away: pebble stops the worker
            raise
