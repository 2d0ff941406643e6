"""Worker processes: signal dispositions and memory cap set by the initializer; a request
job past its memory cap or time bound, or whose worker dies, becomes a typed error."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import resource
import signal
from concurrent.futures import ProcessPoolExecutor

import pytest

from app.services.pool import RequestPool, WorkerDied, WorkerTimeout, describe_exit, init_worker


def _dispositions() -> tuple[object, object, int]:
    return (
        signal.getsignal(signal.SIGINT),
        signal.getsignal(signal.SIGTERM),
        resource.getrlimit(resource.RLIMIT_AS)[0],
    )


def _init(max_mb: int) -> None:
    init_worker(max_memory_mb=max_mb, ignore_sigterm=True)


def test_search_workers_ignore_group_signals_and_cap_their_memory() -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=_init, initargs=(900,)) as pool:
        sigint, sigterm, limit = pool.submit(_dispositions).result(timeout=60)
    assert sigint == signal.SIG_IGN and sigterm == signal.SIG_IGN
    assert limit == 900 * 1024 * 1024


def test_exit_descriptions() -> None:
    assert describe_exit(-9) == "worker process died (signal 9, SIGKILL)"
    assert describe_exit(3) == "worker process died (exit code 3)"
    assert describe_exit(None) == "worker process died (exit status unknown)"


def _allocate(mb: int) -> int:
    return len(bytearray(mb * 1024 * 1024))


def _sleep(seconds: float) -> float:
    import time

    time.sleep(seconds)
    return seconds


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _light_init(
    max_memory_mb: int, plugin_allowlist: list[str], log_level: str, nice: int = 0
) -> None:
    """The request workers' initializer without the solver warm-up (about 4 s a worker on 2
    cores, three workers here): the signal dispositions, memory cap and priority are the
    same."""
    init_worker(max_memory_mb=max_memory_mb, ignore_sigterm=False, nice=nice)


def test_request_jobs_are_bounded_in_memory_and_time_and_survive_deaths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import app.services.pool as pool_module

    monkeypatch.setattr(pool_module, "_init_request_worker", _light_init)
    pool = RequestPool(
        workers=1, max_tasks=5, max_memory_mb=1024, plugin_allowlist=[], log_level="WARNING"
    )
    pool.start()
    try:

        async def scenario() -> None:
            assert await pool.run(_allocate, 64, timeout_s=60) == 64 * 1024 * 1024
            with pytest.raises(MemoryError):
                await pool.run(_allocate, 4096, timeout_s=60)
            with pytest.raises(WorkerTimeout):
                await pool.run(_sleep, 30.0, timeout_s=0.5)
            with pytest.raises(WorkerDied) as died:
                await pool.run(_die, timeout_s=60)
            assert died.value.reason.startswith("worker process died (signal 9")
            assert await pool.run(_sleep, 0.01, timeout_s=60) == 0.01  # replaced

        asyncio.run(scenario())
    finally:
        pool.stop()
