"""App-level fixtures: one local Ray for the whole session (`ray.init` takes seconds), and a
cost-model plug-in installed for it (`plugin_dir`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

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
