"""SIGTERM / SIGINT to the service's whole process group drains: searches go back to queued
(attempt not counted) and finish after a restart on the same database; none fails.

One chain of three services on one SQLite file: the shared fault service (`fault_servers`)
gets SIGTERM while a search runs in it and another waits; the second service resumes both
and gets SIGINT while the resumed search runs again; the third runs both to their end and
becomes the shared fault service. (Each service costs about 7 s of the two cores to start:
a chain of three, the first one shared, instead of two pairs.)"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

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


def _assert_drained(db: Path, medium: str, queued: str) -> None:
    """Both searches are queued again, the interrupted one without a counted run; whatever
    else the database holds (the shared service's earlier searches) has ended."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, status, attempts FROM searches").fetchall()
    mine = {i: (s, a) for i, s, a in rows if i in (medium, queued)}
    assert mine == {medium: ("queued", 0), queued: ("queued", 0)}, mine
    others = {s for i, s, _ in rows if i not in mine}
    assert others <= {"succeeded", "failed", "cancelled"}, others


def test_a_signal_to_the_process_group_drains(fault_servers: Any, tmp_path: Path) -> None:
    first: LiveServer = fault_servers.take()
    env = {k: v for k, v in first.env.items() if k.startswith("MESHPLAN_")}
    db = Path(env["MESHPLAN_DATABASE_URL"].removeprefix("sqlite:///"))
    try:
        with first.client() as client:
            medium = client.post("/v1/searches?dedupe=false", json=MEDIUM_SEARCH).json()["id"]
            queued = client.post("/v1/searches?dedupe=false", json=TINY_SEARCH).json()["id"]
        _interrupt(first, signal.SIGTERM, medium, queued)
    finally:
        first.stop()
    _assert_drained(db, medium, queued)

    second = LiveServer(env, tmp_path / "server2.log").start()
    try:
        _interrupt(second, signal.SIGINT, medium, queued)
    finally:
        second.stop()
    _assert_drained(db, medium, queued)

    third = LiveServer(env, tmp_path / "server3.log").start()
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
    except BaseException:
        third.stop()
        raise
    fault_servers.adopt(third)
