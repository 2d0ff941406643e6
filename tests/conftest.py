"""Shared fixtures: `settings_factory`, `client` (TestClient over `create_app` with a
temporary SQLite file and a thread-pool runner) and the `tiny` inputs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import TINY_CLUSTER, TINY_MODEL, TINY_WORKLOAD, TestClient


@pytest.fixture
def tiny() -> dict[str, Any]:
    """A 4-layer model on 4 H100s: small enough that a search finishes in well under 1 s."""
    return {
        "model": dict(TINY_MODEL),
        "cluster": {"node_groups": [dict(g) for g in TINY_CLUSTER["node_groups"]]},
        "workload": dict(TINY_WORKLOAD),
    }


@pytest.fixture
def settings_factory(tmp_path: Path) -> Callable[..., Any]:
    """Settings on a temporary SQLite file (same file for every call of one test)."""
    from app.core.config import Settings

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "database_url": f"sqlite:///{tmp_path / 'meshplan.db'}",
            "search_executor": "thread",
            "search_workers": 2,
            "default_search_time_limit_s": 20.0,
            "progress_interval_s": 0.05,
        }
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
def client(settings_factory: Callable[..., Any]) -> Iterator[Any]:
    """A TestClient over a fresh app (lifespan run: migrations, runner, recovery)."""
    from app.main import create_app

    with TestClient(create_app(settings_factory())) as test_client:
        yield test_client


@pytest.fixture
def slow_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real search is far too fast to catch running: wrap it so that it first waits
    (up to 10 s) for a stop request, then runs and returns what the real search returns
    when stopped before it starts."""
    from app.services import planning

    real_search = planning.solver.search

    def waiting_search(*args: Any, should_stop: Any = None, **kwargs: Any) -> Any:
        deadline = time.monotonic() + 10
        while should_stop is not None and not should_stop() and time.monotonic() < deadline:
            time.sleep(0.01)
        return real_search(*args, should_stop=should_stop, **kwargs)

    monkeypatch.setattr(planning.solver, "search", waiting_search)
