"""The `ray` executor on a local Ray (`ray.init(num_cpus=2)`, started once for the module):
searches run as Ray tasks, and a search split into shards over Ray workers stores exactly
the plans the local pool stores."""

from __future__ import annotations

from typing import Any

import pytest

from app.main import create_app
from tests.app.app_support import wait_for
from tests.app.conftest import PLUGIN_NAME
from tests.support import TestClient

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[dev]')")

MEDIUM = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 2, "gpus_per_node": 8}]},
    "workload": {"kind": "training", "global_batch_size": 256, "sequence_length": 4096},
    "top_k": 12,
}


def _plans(client: Any, search_id: str) -> list[dict[str, Any]]:
    items = client.get(f"/v1/searches/{search_id}/plans?limit=100").json()["items"]
    drop = {"id", "search_id"}  # everything else of a plan must be the same
    return [{k: v for k, v in p.items() if k not in drop} for p in items]


def _run(settings: Any, body: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    with TestClient(create_app(settings)) as client:
        # dedupe=false: every settings' run searches (the database file is shared, and an
        # identical request would otherwise get the first run's search back)
        response = client.post("/v1/searches?wait=60&dedupe=false", json=body)
        assert response.status_code in (201, 202), response.text
        search = wait_for(client, response.json()["id"], timeout_s=90)
        return search, _plans(client, search["id"])


@pytest.mark.usefixtures("local_ray")
def test_searches_run_as_ray_tasks_and_shard_exactly(settings_factory: Any, tiny: Any) -> None:
    local = settings_factory()
    on_ray = settings_factory(executor="ray", search_shards=1)
    sharded = settings_factory(executor="ray", search_shards=3, shard_min_candidates=1)
    for body in (tiny, MEDIUM):
        expected_search, expected = _run(local, body)
        assert expected_search["status"] == "succeeded" and expected
        for settings in (on_ray, sharded):
            search, plans = _run(settings, body)
            assert search["status"] == "succeeded", search
            assert search["attempts"] == 1
            assert plans == expected
            assert search["stats"]["enumerated"] == expected_search["stats"]["enumerated"]
    # the search really ran in a Ray worker: the lease owner is the replica, the task ran
    # under Ray (its worker process is not ours)
    assert ray.is_initialized()


@pytest.mark.usefixtures("local_ray")
def test_a_sharded_search_reports_progress_by_shard() -> None:
    from app.core.config import Settings
    from app.schemas import SearchCreate
    from app.services import executors, planning

    problem = planning.prepare_search(SearchCreate.model_validate(MEDIUM), Settings()).problem
    training, cost_model, constraints = planning.training_inputs(problem)
    seen: list[tuple[int, int | None]] = []
    result = executors._sharded(
        training,
        cost_model,
        constraints,
        top_k=12,
        progress=lambda done, total: seen.append((done, total)),
        should_stop=lambda: False,
        stored=problem,
        shards=3,
        shard_min_candidates=1,
    )
    import solver

    one = solver.search(training, cost_model, constraints, top_k=12)
    assert [p.estimate.plan for p in result.plans] == [p.estimate.plan for p in one.plans]
    totals = {total for _, total in seen}
    assert totals == {one.stats.enumerated}
    done = sorted({d for d, _ in seen})
    assert len(done) >= 3 and done[-1] == one.stats.enumerated  # three shards came back
    # cancelled before any shard ends: the shards are cancelled and the result says so
    stopped = executors._sharded(
        training,
        cost_model,
        constraints,
        top_k=12,
        progress=lambda *_: None,
        should_stop=lambda: True,
        stored=problem,
        shards=3,
        shard_min_candidates=1,
    )
    assert stopped.stats.status == "cancelled" or stopped.stats.complete


@pytest.fixture
def plugin_in_api_process(plugin_dir: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The test plug-in installed in this process too (the API validates the cost model),
    forgotten again afterwards."""
    import importlib

    from cost_models import registry

    monkeypatch.syspath_prepend(str(plugin_dir))
    importlib.invalidate_caches()
    monkeypatch.setattr(registry, "_ENTRY_POINTS_LOADED", False)
    monkeypatch.setattr(registry, "_ENTRY_POINTS_SCANNED", False)
    monkeypatch.setattr(registry, "_ENTRY_POINTS_ASKED", set())
    monkeypatch.setattr(registry, "_ENTRY_POINTS_TRIED", set())
    yield
    registry._REGISTRY.pop(PLUGIN_NAME, None)


@pytest.mark.usefixtures("local_ray", "plugin_in_api_process")
def test_ray_tasks_load_the_allowed_cost_model_plugins(settings_factory: Any) -> None:
    """A search priced by an allow-listed plug-in runs on Ray as on the local pool, whole
    and sharded. The session's Ray workers already loaded plug-ins once (allow-list []), and
    the ones Ray starts for waiting search tasks never ran a warm-up: each task loads them."""
    body = {**MEDIUM, "cost_model": {"name": PLUGIN_NAME}}
    allowed = {"plugin_allowlist": [PLUGIN_NAME]}
    expected_search, expected = _run(settings_factory(**allowed), body)
    assert expected_search["status"] == "succeeded" and expected
    # the plug-in is the analytical model under another name: the same step times
    _, analytical = _run(settings_factory(), MEDIUM)
    assert [p["metrics"]["step_time_s"] for p in expected] == [
        p["metrics"]["step_time_s"] for p in analytical
    ]
    on_ray = settings_factory(executor="ray", search_shards=1, **allowed)
    sharded = settings_factory(executor="ray", search_shards=3, shard_min_candidates=1, **allowed)
    for settings in (on_ray, sharded):
        search, plans = _run(settings, body)
        assert search["status"] == "succeeded", search
        assert plans == expected
