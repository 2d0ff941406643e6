"""Several API replicas on one PostgreSQL database (one created for each test and dropped
after it): searches are claimed under a lease, each runs exactly once, a replica that stops
renewing its leases loses its searches to another after `lease_s`, and claims racing from
many connections never hand one search to two replicas. Skips when PostgreSQL is absent."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, text
from sqlmodel import Session, col, select

from app.db import crud, leases, migrate
from app.db.models import PlanRecord, SearchRecord
from app.db.session import make_engine
from app.main import create_app
from app.services import planning
from tests.app.app_support import wait_for
from tests.support import TestClient

PG = "127.0.0.1:5432"

pytestmark = pytest.mark.postgres


def _admin_url() -> str | None:
    try:
        import psycopg
    except ImportError:
        return None
    for user in ("postgres", "root"):
        try:
            with psycopg.connect(f"postgresql://{user}@{PG}/test", connect_timeout=2):
                return f"postgresql+psycopg://{user}@{PG}"
        except psycopg.Error:
            continue
    return None


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A fresh database for the test (dropped afterwards, connections and all)."""
    admin = _admin_url()
    if admin is None:
        pytest.skip(f"PostgreSQL is not reachable at {PG} as postgres or root")
    name = f"meshplan_replicas_{uuid.uuid4().hex[:10]}"
    engine = make_engine(f"{admin}/test").execution_options(isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{admin}/{name}"
    finally:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


def _replica(settings_factory: Any, url: str, name: str, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "database_url": url,
        "replica_id": name,
        "lease_s": 1.0,
        "heartbeat_interval_s": 0.2,
        "lease_scan_interval_s": 0.2,
    }
    values.update(overrides)
    return create_app(settings_factory(**values))


def _body(tiny: dict[str, Any], i: int) -> dict[str, Any]:
    body = dict(tiny)
    body["top_k"] = 3 + i % 4  # distinct requests (no deduplication)
    body["workload"] = {**tiny["workload"], "global_batch_size": 8 * (1 + i % 3)}
    return body


def _check_each_ran_once(url: str, ids: list[str], owners: set[str], attempts: int = 1) -> None:
    engine = make_engine(url)
    with Session(engine) as session:
        for search_id in ids:
            record = session.get(SearchRecord, search_id)
            assert record is not None and record.status == "succeeded", record
            assert record.attempts == attempts
            assert record.lease_owner in owners
            ranks = session.exec(
                select(PlanRecord.rank).where(col(PlanRecord.search_id) == search_id)
            ).all()
            assert ranks and sorted(ranks) == list(range(1, len(ranks) + 1))  # no duplicates
    engine.dispose()


def _submit_to_both(apps: list[Any], bodies: list[dict[str, Any]]) -> list[str]:
    with TestClient(apps[0]) as a, TestClient(apps[1]) as b:
        clients = [a, b]
        ids = []
        for i, body in enumerate(bodies):
            response = clients[i % 2].post("/v1/searches", json=body)
            assert response.status_code in (201, 202), response.text
            ids.append(response.json()["id"])
        for i, search_id in enumerate(ids):
            assert wait_for(clients[(i + 1) % 2], search_id, timeout_s=60)["status"] == "succeeded"
        return ids


def test_searches_submitted_to_two_replicas_run_exactly_once(
    pg_database: str, settings_factory: Any, tiny: dict[str, Any]
) -> None:
    apps = [_replica(settings_factory, pg_database, n) for n in ("replica-a", "replica-b")]
    ids = _submit_to_both(apps, [_body(tiny, i) for i in range(10)])
    _check_each_ran_once(pg_database, ids, {"replica-a", "replica-b"})


@pytest.mark.usefixtures("local_ray")
def test_two_replicas_on_ray(pg_database: str, settings_factory: Any, tiny: dict[str, Any]) -> None:
    apps = [
        _replica(settings_factory, pg_database, n, executor="ray", search_shards=2)
        for n in ("ray-a", "ray-b")
    ]
    ids = _submit_to_both(apps, [_body(tiny, i) for i in range(4)])
    _check_each_ran_once(pg_database, ids, {"ray-a", "ray-b"})


@pytest.fixture
def slow_search(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Every search first reports progress until the returned event is set (at most 20 s;
    stopping early when told to), then runs the real solver: a search that can lose its
    lease in the middle."""
    real = planning.run_problem
    release = threading.Event()

    def slow(problem: Any, *, progress: Any, should_stop: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline and not release.is_set():
            progress(0, None)
            if should_stop():
                break
            time.sleep(0.02)
        return real(problem, progress=progress, should_stop=should_stop, **kwargs)

    monkeypatch.setattr(planning, "run_problem", slow)
    return release


def _owner(url: str, search_id: str) -> tuple[str | None, str, int]:
    engine = make_engine(url)
    with Session(engine) as session:
        record = session.get(SearchRecord, search_id)
        assert record is not None
        out = (record.lease_owner, record.status, record.attempts)
    engine.dispose()
    return out


def test_a_dead_replicas_search_is_taken_over_after_its_lease(
    pg_database: str, settings_factory: Any, tiny: dict[str, Any], slow_search: threading.Event
) -> None:
    app_a = _replica(settings_factory, pg_database, "replica-a")
    app_b = _replica(settings_factory, pg_database, "replica-b")
    with TestClient(app_a) as a:
        search_id = a.post("/v1/searches", json=tiny).json()["id"]
        deadline = time.monotonic() + 10
        while _owner(pg_database, search_id)[1] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with TestClient(app_b) as b:
            # B's start-up recovery and scans leave A's live search alone
            time.sleep(1.5)  # longer than lease_s: A's heartbeat kept it
            assert _owner(pg_database, search_id) == ("replica-a", "running", 1)
            # A "dies": its heartbeat and scans stop, its worker runs on
            a.app.state.runner._keeper.stop()
            deadline = time.monotonic() + 10
            while _owner(pg_database, search_id) != ("replica-b", "running", 2):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(0.5)  # A's worker sees the lost lease at its next progress write
            assert a.app.state.runner.active() == []
            slow_search.set()
            final = wait_for(b, search_id, timeout_s=30)
            assert final["status"] == "succeeded"
            assert final["attempts"] == 2  # A's run and B's
            assert _owner(pg_database, search_id)[0] == "replica-b"
    _check_each_ran_once(pg_database, [search_id], {"replica-b"}, attempts=2)


def _store_queued(url: str, count: int) -> list[str]:
    engine = make_engine(url)
    migrate.upgrade(engine)
    with Session(engine) as session:
        ids = [
            crud.create_search(
                session=session,
                request={"n": i},
                problem={"n": i},
                request_hash=f"{i:064d}",
                cost_model_name="analytical",
                cost_model_version="1",
            ).id
            for i in range(count)
        ]
    engine.dispose()
    return ids


def test_racing_claims_never_hand_a_search_to_two_replicas(pg_database: str) -> None:
    ids = _store_queued(pg_database, 60)
    claimed: dict[str, list[str]] = {}
    start = threading.Barrier(6)

    def replica(name: str) -> None:
        engine = make_engine(pg_database)
        mine = claimed.setdefault(name, [])
        start.wait()
        with Session(engine) as session:
            while True:
                # as a replica's scan: what it runs already is excluded
                new = leases.claim_available(
                    session=session, owner=name, lease_s=60, limit=4, max_attempts=2, exclude=mine
                ).claimed
                if not new:
                    break
                mine.extend(new)
                for search_id in new:  # and the one-search claim: only the holder wins
                    assert leases.claim(
                        session=session, search_id=search_id, owner=name, lease_s=60
                    )
        engine.dispose()

    threads = [threading.Thread(target=replica, args=(f"r{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    counts = Counter(s for mine in claimed.values() for s in mine)
    assert set(counts) == set(ids) and set(counts.values()) == {1}
    assert sum(1 for mine in claimed.values() if mine) >= 2  # the race was real
    engine = make_engine(pg_database)
    with Session(engine) as session:
        owners = dict(session.exec(select(SearchRecord.id, SearchRecord.lease_owner)).all())
        assert all(owners[s] == name for name, mine in claimed.items() for s in mine)
        # one search, six replicas at once: exactly one claim wins
        target = _store_queued(pg_database, 1)[0]
        results: list[bool] = []
        gate = threading.Barrier(6)

        def grab(name: str) -> None:
            eng = make_engine(pg_database)
            with Session(eng) as s:
                gate.wait()
                results.append(leases.claim(session=s, search_id=target, owner=name, lease_s=60))
            eng.dispose()

        racers = [threading.Thread(target=grab, args=(f"g{i}",)) for i in range(6)]
        for thread in racers:
            thread.start()
        for thread in racers:
            thread.join(timeout=30)
        assert results.count(True) == 1 and len(results) == 6
        assert session.exec(select(func.count()).select_from(SearchRecord)).one() == 61
    engine.dispose()
