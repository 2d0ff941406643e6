"""SIGTERM / SIGINT to the service's whole process group drains: searches go back to queued
(attempt not counted) and finish after a restart on the same database; none fails.

One chain of three services on one SQLite file: the first gets SIGTERM while a search runs
in it and another waits; the second resumes both and gets SIGINT while the resumed search
runs again; the third runs both to their end. (Each service costs about 7 s of the two
cores to start: a chain of three instead of two pairs.)"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

from bench.live_service import LiveServer
from tests.app.app_support import MEDIUM_SEARCH, TINY_SEARCH, wait_until


def _interrupt(server: LiveServer, sig: int, medium: str, queued: str) -> None:
    """Once `medium` runs (a progress write of this run) with `queued` behind it, send `sig`
    to the server's process group; every process of the group must be gone and the log
    clean."""
    with server.client() as client:
        seen = client.get(f"/v1/searches/{medium}").json()["progress"]["evaluated"]
        wait_until(
            client,
            medium,
            lambda b: b["status"] == "running" and b["progress"]["evaluated"] != seen,
        )
        assert client.get(f"/v1/searches/{queued}").json()["status"] == "queued"
    server.signal_group(sig)
    # every process of the group is gone (workers were stopped, not orphaned)
    deadline = time.monotonic() + 10
    while server.group_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.group_alive() == []
    log = server.log_path.read_text()
    assert "crashed" not in log, log[-3000:]


def _stored(db: Path) -> tuple[dict[str, str], dict[str, int]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, status, attempts FROM searches").fetchall()
    return {i: s for i, s, _ in rows}, {i: a for i, _, a in rows}


def test_a_signal_to_the_process_group_drains(tmp_path: Path) -> None:
    db = tmp_path / "drain.db"
    env = {
        "MESHPLAN_DATABASE_URL": f"sqlite:///{db}",
        "MESHPLAN_SEARCH_WORKERS": "1",
        "MESHPLAN_PROGRESS_INTERVAL_S": "0.1",
    }
    first = LiveServer(env, tmp_path / "server1.log").start()
    try:
        with first.client() as client:
            medium = client.post("/v1/searches", json=MEDIUM_SEARCH).json()["id"]
            queued = client.post("/v1/searches", json=TINY_SEARCH).json()["id"]
        _interrupt(first, signal.SIGTERM, medium, queued)
    finally:
        first.stop()
    # nothing failed at shutdown: both are queued again, the running one without a counted run
    statuses, attempts = _stored(db)
    assert statuses == {medium: "queued", queued: "queued"}, statuses
    assert attempts == {medium: 0, queued: 0}

    second = LiveServer(env, tmp_path / "server2.log").start()
    try:
        _interrupt(second, signal.SIGINT, medium, queued)
    finally:
        second.stop()
    statuses, attempts = _stored(db)
    assert statuses == {medium: "queued", queued: "queued"}, statuses
    assert attempts == {medium: 0, queued: 0}

    # the last restart only has to run them: searches on threads (no worker processes to
    # start on the two cores)
    third = LiveServer({**env, "MESHPLAN_SEARCH_EXECUTOR": "thread"}, tmp_path / "server3.log")
    third.start()
    try:
        with third.client() as client:
            for search_id in (medium, queued):
                body = wait_until(
                    client, search_id, lambda b: b["status"] not in ("queued", "running"), 90
                )
                assert body["status"] == "succeeded", body
                assert body["attempts"] == 1
                plans = client.get(f"/v1/searches/{search_id}/plans").json()
                assert plans["items"], plans
    finally:
        third.stop()
