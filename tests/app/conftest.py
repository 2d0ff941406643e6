"""App-level fixtures shared by a whole session: one local Ray (`ray.init` takes seconds)
with a cost-model plug-in installed for it (`plugin_dir`), and one live service for the fault
tests (`fault_server`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PLUGIN_NAME = "ray_test_analytical"
"""The entry-point name of the test plug-in (`plugin_dir`)."""

_PLUGIN_MODULE = '''"""A cost-model plug-in for the tests: the analytical model under another name."""

from cost_models.analytical.training.model import AnalyticalTrainingCostModel


class RayTestAnalytical(AnalyticalTrainingCostModel):
    name = "ray_test_analytical"
'''


@pytest.fixture(scope="session")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding an installed distribution whose `meshplan.cost_models` entry
    point `ray_test_analytical` is the analytical model under another name; on a process's
    path it is loaded only where allow-listed."""
    root = tmp_path_factory.mktemp("plugins")
    (root / "meshplan_ray_test_plugin.py").write_text(_PLUGIN_MODULE)
    dist = root / "meshplan_ray_test_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: meshplan-ray-test-plugin\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[meshplan.cost_models]\n{PLUGIN_NAME} = meshplan_ray_test_plugin:RayTestAnalytical\n"
    )
    return root


@pytest.fixture(scope="session")
def local_ray(plugin_dir: Path) -> Iterator[None]:
    """A local Ray with 2 CPUs (what CI has), shut down at the end of the session; its
    workers have `plugin_dir` on their path."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[dev]')")
    from app.services.executors import init_ray

    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (before, str(plugin_dir)) if p)
    try:
        init_ray(None, num_cpus=2)
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
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
warm worker, their heavy capacity question 5 s or more)."""


class FaultServers:
    """The live service the fault tests share (`uvicorn`, process pools, a SQLite file of its
    own), started on first use. Starting one costs about 7 s of the two cores and warming
    its workers as much again, so the tests that leave it whole (a worker they kill is
    replaced, a request worker past its bound too) share it, and the signal test, which
    stops services, `take`s it and hands back (`adopt`) the service it restarted last. Its
    database holds what earlier tests left: they create searches with `?dedupe=false`."""

    def __init__(self, tmp: Path) -> None:
        self._tmp = tmp
        self._count = 0
        self._server: Any = None

    def get(self) -> Any:
        """The shared service, started (on a fresh database) if none is running."""
        from bench.live_service import LiveServer

        server = self._server
        if server is None or server.proc is None or server.proc.poll() is not None:
            self._count += 1
            db = self._tmp / f"faults{self._count}.db"
            env = {"MESHPLAN_DATABASE_URL": f"sqlite:///{db}", **FAULT_SERVER_ENV}
            server = LiveServer(env, self._tmp / f"server{self._count}.log").start()
            self._server = server
        return server

    def take(self) -> Any:
        """The shared service, for a test that stops it (the next `get` starts another)."""
        server, self._server = self.get(), None
        return server

    def adopt(self, server: Any) -> None:
        """Share `server` (started with `FAULT_SERVER_ENV`) from here on."""
        self.stop()
        self._server = server

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()


@pytest.fixture(scope="session")
def fault_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultServers]:
    servers = FaultServers(tmp_path_factory.mktemp("fault-servers"))
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def fault_server(fault_servers: FaultServers) -> Any:
    """The shared live service (`FaultServers`)."""
    return fault_servers.get()
