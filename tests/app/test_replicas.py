"""Several API replicas on one PostgreSQL database (one created for each test and dropped
after it): searches are claimed under a lease, each runs exactly once, a replica that stops
renewing its leases loses its searches to another after `lease_s`, and claims racing from
many connections never hand one search to two replicas. Skips when PostgreSQL is absent."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import func, text
from sqlmodel import Session, col, select

from app.db import crud, leases, migrate
from app.db.models import PlanRecord, SearchRecord
from app.db.session import make_engine
from app.main import create_app
from app.services import planning
from bench.live_service import LiveServer
from tests.app.app_support import MEDIUM_SEARCH, wait_for, wait_until
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
    """A fresh database for the test (dropped afterwards, connections and all), named
    `<MESHPLAN_TEST_PG_PREFIX>_<random>` (default prefix `meshplan_replicas`)."""
    admin = _admin_url()
    if admin is None:
        pytest.skip(f"PostgreSQL is not reachable at {PG} as postgres or root")
    prefix = os.environ.get("MESHPLAN_TEST_PG_PREFIX", "meshplan_replicas")
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
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


REPLICA_ENV = {
    "MESHPLAN_LEASE_S": "2",
    "MESHPLAN_HEARTBEAT_INTERVAL_S": "0.3",
    "MESHPLAN_LEASE_SCAN_INTERVAL_S": "0.3",
    "MESHPLAN_PROGRESS_INTERVAL_S": "0.1",
    "MESHPLAN_SEARCH_WORKERS": "1",
    "MESHPLAN_SEARCH_EXECUTOR": "thread",
    "MESHPLAN_RUN_MIGRATIONS": "false",
}
"""Replicas as subprocesses: 2 s leases renewed every 0.3 s, scans every 0.3 s; searches on
threads of the API process (the replica is what dies here, not a worker; no worker
processes to start on the two cores); the test migrates the database once, so that the
two replicas can start at once."""


@dataclass(frozen=True)
class _Seen:
    """One poll of the search's row."""

    status: str
    attempts: int
    owner: str | None
    expires: Any
    started: Any
    evaluated: int


def _seen(engine: Any, search_id: str) -> _Seen:
    with Session(engine) as session:
        r = session.get(SearchRecord, search_id)
        assert r is not None
        return _Seen(
            r.status,
            r.attempts,
            r.lease_owner,
            r.lease_expires_at,
            r.started_at,
            r.progress_evaluated,
        )


def _poll_until(engine: Any, search_id: str, cond: Any, timeout_s: float = 30.0) -> _Seen:
    deadline = time.monotonic() + timeout_s
    while True:
        seen = _seen(engine, search_id)
        if cond(seen):
            return seen
        assert time.monotonic() < deadline, seen
        time.sleep(0.02)


def test_a_replica_killed_with_its_group_loses_its_search_to_the_other(
    pg_database: str, tmp_path: Any
) -> None:
    """Two `uvicorn` replicas on one database; the one holding a running search gets
    SIGKILL on its whole process group; the other takes the search over once the lease has
    passed and runs it to `succeeded`, and the two never hold it at once."""
    engine = make_engine(pg_database)
    migrate.upgrade(engine)
    names = ("replica-a", "replica-b")
    servers = {
        name: LiveServer(
            {**REPLICA_ENV, "MESHPLAN_DATABASE_URL": pg_database, "MESHPLAN_REPLICA_ID": name},
            tmp_path / f"{name}.log",
        )
        for name in names
    }
    history: list[_Seen] = []
    polling = threading.Event()
    try:
        for server in servers.values():
            server.launch()
        for server in servers.values():
            server.wait_ready()
        with servers["replica-a"].client() as a:
            search_id = a.post("/v1/searches", json=MEDIUM_SEARCH).json()["id"]
        # its holder runs it (inside the solver) and has renewed the lease at least once
        running = _poll_until(
            engine,
            search_id,
            lambda s: s.status == "running" and s.evaluated > 0 and s.owner in names,
        )
        holder = running.owner
        assert holder is not None
        survivor = next(n for n in names if n != holder)
        _poll_until(engine, search_id, lambda s: s.owner == holder and s.expires > running.expires)

        def poll() -> None:
            while not polling.is_set():
                history.append(_seen(engine, search_id))
                time.sleep(0.02)

        poller = threading.Thread(target=poll)
        polling.clear()
        poller.start()
        killed = time.monotonic()
        assert servers[holder].signal_group(signal.SIGKILL) == -signal.SIGKILL
        assert servers[holder].group_alive() == []
        with servers[survivor].client() as client:
            final = wait_until(
                client, search_id, lambda b: b["status"] not in ("queued", "running"), 45
            )
            done_after_s = time.monotonic() - killed
            assert final["status"] == "succeeded", final
            assert final["attempts"] == 2  # the killed run and the survivor's
            plans = client.get(f"/v1/searches/{search_id}/plans").json()["items"]
            assert plans and [p["rank"] for p in plans] == list(range(1, len(plans) + 1))
        polling.set()
        poller.join(timeout=10)
    finally:
        polling.set()
        for server in servers.values():
            server.stop()
        engine.dispose()
    assert done_after_s < 30, done_after_s  # 2 s lease + 0.3 s scan + a ~5 s run
    # one owner at a time: the holder, then the survivor, never back
    owners = [s.owner for s in history]
    switch = owners.index(survivor)
    assert set(owners[:switch]) == {holder} and set(owners[switch:]) == {survivor}, owners
    # the survivor started its run only after the dead holder's last lease had passed
    last_lease = max(s.expires for s in history[:switch])
    restarts = {s.started for s in history[switch:] if s.started is not None}
    assert restarts and all(started >= last_lease for started in restarts), (
        last_lease,
        restarts,
    )
    assert all(s.attempts == 1 for s in history[:switch])
    assert "claimed 1 searches" in servers[survivor].log_path.read_text()
    _check_each_ran_once(pg_database, [search_id], {survivor}, attempts=2)


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
