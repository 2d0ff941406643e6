"""App-level fixtures: one local Ray for the whole session (`ray.init` takes seconds)."""

from __future__ import annotations

from collections.abc import Iterator

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
