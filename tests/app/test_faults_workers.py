"""A search worker killed with SIGKILL: the pool is rebuilt, the search is retried once and
then failed with the reason; later searches still run and health shows the restarts."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from bench.live_service import LiveServer
from tests.app.app_support import SLOW_SEARCH, TINY_SEARCH


def _wait(client, search_id, cond, timeout_s=60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(f"/v1/searches/{search_id}").json()
        if cond(body):
            return body
        time.sleep(0.1)
    raise AssertionError(f"{search_id}: {body}")


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_its_search_retried_then_failed(tmp_path: Path) -> None:
    env = {
        "MESHPLAN_DATABASE_URL": f"sqlite:///{tmp_path / 'workers.db'}",
        "MESHPLAN_SEARCH_WORKERS": "1",
        "MESHPLAN_MAX_ATTEMPTS": "2",
    }
    server = LiveServer(env, tmp_path / "server.log").start()
    assert server.proc is not None
    try:
        with server.client() as client:
            # after the warm-up: until then a search runs on a thread of the API process
            deadline = time.monotonic() + 120
            while not client.get("/v1/health").json()["pool"]["warm"]:
                assert time.monotonic() < deadline, "the worker pool never warmed up"
                time.sleep(0.2)
            slow = client.post("/v1/searches", json=SLOW_SEARCH).json()["id"]
            for attempt in (1, 2):
                _wait(
                    client,
                    slow,
                    lambda b, a=attempt: b["status"] == "running" and b["attempts"] == a,
                )
                time.sleep(0.5)  # inside the solver
                (pid,) = client.get("/v1/health").json()["pool"]["worker_pids"]
                os.kill(pid, signal.SIGKILL)
            body = _wait(client, slow, lambda b: b["status"] not in ("queued", "running"))
            assert body["status"] == "failed", body
            assert body["error"]["type"].endswith("/worker-died"), body["error"]
            assert body["error"]["reason"].startswith("worker process died (signal 9"), body
            assert body["error"]["attempts"] == 2
            # the pool works again: a later search runs to its end
            tiny = client.post("/v1/searches?wait=30", json=TINY_SEARCH)
            assert tiny.status_code in (200, 201, 202), tiny.text
            done = _wait(
                client,
                tiny.json()["id"],
                lambda b: b["status"] != "queued" and b["status"] != "running",
            )
            assert done["status"] == "succeeded", done
            pool = client.get("/v1/health").json()["pool"]
            assert pool["state"] == "ok"
            assert pool["restarts"] == 2
            assert pool["worker_deaths"] == 2
            assert pool["alive"] == 1
    finally:
        server.stop()
