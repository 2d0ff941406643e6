"""SIGTERM / SIGINT to the service's whole process group drains: searches go back to queued
(attempt not counted) and finish after a restart on the same database; none fails."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from bench.live_service import LiveServer
from tests.app.app_support import SLOW_SEARCH, TINY_SEARCH


def _wait_status(client, search_id, wanted, timeout_s=60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(f"/v1/searches/{search_id}").json()
        if body["status"] in wanted:
            return body
        time.sleep(0.1)
    raise AssertionError(f"{search_id} never reached {wanted}: {body}")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_process_group_drains(tmp_path: Path, sig: int) -> None:
    env = {
        "MESHPLAN_DATABASE_URL": f"sqlite:///{tmp_path / 'drain.db'}",
        "MESHPLAN_SEARCH_WORKERS": "1",
    }
    server = LiveServer(env, tmp_path / "server.log").start()
    try:
        with server.client() as client:
            slow = client.post("/v1/searches", json=SLOW_SEARCH).json()["id"]
            queued = client.post("/v1/searches", json=TINY_SEARCH).json()["id"]
            _wait_status(client, slow, {"running"})
            time.sleep(1.0)  # well inside the solver
            assert client.get(f"/v1/searches/{queued}").json()["status"] == "queued"
        server.signal_group(sig)
        # every process of the group is gone (workers were stopped, not orphaned)
        deadline = time.monotonic() + 10
        while server.group_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.group_alive() == []
    finally:
        server.stop()
    log = (tmp_path / "server.log").read_text()
    assert "crashed" not in log, log[-3000:]

    restarted = LiveServer(env, tmp_path / "server2.log")
    # nothing failed at shutdown: both are queued again, the slow one without a counted run
    import sqlite3

    with sqlite3.connect(tmp_path / "drain.db") as db:
        rows = dict(db.execute("SELECT id, status FROM searches").fetchall())
        attempts = dict(db.execute("SELECT id, attempts FROM searches").fetchall())
    assert rows == {slow: "queued", queued: "queued"}, rows
    assert attempts[slow] == 0
    restarted.start()
    try:
        with restarted.client() as client:
            for search_id in (slow, queued):
                body = _wait_status(client, search_id, {"succeeded", "failed", "cancelled"}, 90)
                assert body["status"] == "succeeded", body
                plans = client.get(f"/v1/searches/{search_id}/plans").json()
                assert plans["items"], plans
    finally:
        restarted.stop()
