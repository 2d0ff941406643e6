"""App-level fixtures shared by a whole session: one local Ray (`ray.init` takes seconds) and
one live service for the fault tests (`fault_server`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    """A local Ray with 2 CPUs (what CI has), shut down at the end of the session."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[dev]')")
    from app.services.executors import init_ray

    init_ray(None, num_cpus=2)
    from app.services.executors import warm_worker

    warm = ray.remote(num_cpus=1)(warm_worker)
    ray.get([warm.remote([]) for _ in range(2)])  # workers import the project once, here
    try:
        yield
    finally:
        ray.shutdown()


FAULT_SERVER_ENV = {
    "MESHPLAN_SEARCH_WORKERS": "1",
    "MESHPLAN_MAX_ATTEMPTS": "2",
    "MESHPLAN_PROGRESS_INTERVAL_S": "0.1",
    "MESHPLAN_REQUEST_TIMEOUT_S": "1.0",
}
"""The shared fault server: one search worker, two runs per search, progress every 0.1 s,
and request work bounded at 1 s (the fault tests' expert placements take about 0.2 s in a
warm worker, their heavy serving estimate about 5 s)."""


@pytest.fixture(scope="session")
def fault_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One live service (`uvicorn`, process pools, its own SQLite file) shared by the fault
    tests that leave it whole: a worker they kill is replaced, a request worker past its
    bound too. Starting a service costs about 7 s of the two cores, warming its workers as
    much again, so the tests share one instead of starting one each."""
    from bench.live_service import LiveServer

    tmp = tmp_path_factory.mktemp("fault-server")
    env = {"MESHPLAN_DATABASE_URL": f"sqlite:///{tmp / 'faults.db'}", **FAULT_SERVER_ENV}
    server = LiveServer(env, tmp / "server.log").start()
    try:
        yield server
    finally:
        server.stop()
