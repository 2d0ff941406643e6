"""A search worker killed with SIGKILL: the pool is rebuilt, the search is retried once and
then failed with the reason; later searches still run and health shows the restarts."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from tests.app.app_support import SLOW_SEARCH, TINY_SEARCH, wait_until


def test_a_killed_worker_is_replaced_and_its_search_retried_then_failed(fault_server: Any) -> None:
    # after the warm-up: until then a search runs on a thread of the API process
    fault_server.wait_warm()
    with fault_server.client() as client:
        before = client.get("/v1/health").json()["pool"]
        slow = client.post("/v1/searches?dedupe=false", json=SLOW_SEARCH).json()["id"]
        for attempt in (1, 2):
            wait_until(
                client, slow, lambda b, a=attempt: b["status"] == "running" and b["attempts"] == a
            )
            time.sleep(0.5)  # inside the solver
            (pid,) = client.get("/v1/health").json()["pool"]["worker_pids"]
            os.kill(pid, signal.SIGKILL)
        body = wait_until(client, slow, lambda b: b["status"] not in ("queued", "running"))
        assert body["status"] == "failed", body
        assert body["error"]["type"].endswith("/worker-died"), body["error"]
        assert body["error"]["reason"].startswith("worker process died (signal 9"), body
        assert body["error"]["attempts"] == 2
        # the pool works again: a later search runs to its end (a new one: the shared
        # service may hold an equal finished search, hence dedupe=false throughout)
        tiny = client.post("/v1/searches?wait=30&dedupe=false", json=TINY_SEARCH)
        assert tiny.status_code in (200, 201, 202), tiny.text
        done = wait_until(
            client, tiny.json()["id"], lambda b: b["status"] not in ("queued", "running")
        )
        assert done["status"] == "succeeded" and done["attempts"] == 1, done
        pool = client.get("/v1/health").json()["pool"]
        assert pool["state"] == "ok"
        assert pool["restarts"] - before["restarts"] == 2
        assert pool["worker_deaths"] - before["worker_deaths"] == 2
        assert pool["alive"] == 1


def test_health_reports_a_broken_pool_until_it_is_rebuilt(fault_server: Any) -> None:
    """An idle worker killed: liveness says `broken` (the pool cannot take work) until the
    next search rebuilds it; then `ok` with every worker alive again."""
    fault_server.wait_warm()
    with fault_server.client() as client:
        pool = client.get("/v1/health").json()["pool"]
        assert pool["state"] == "ok" and pool["active"] == 0
        os.kill(pool["worker_pids"][0], signal.SIGKILL)
        deadline = time.monotonic() + 15
        states = []
        while time.monotonic() < deadline:
            states.append(client.get("/v1/health").json()["pool"]["state"])
            if states[-1] == "broken":
                break
            time.sleep(0.05)
        assert states[-1] == "broken", states
        time.sleep(0.3)
        assert client.get("/v1/health").json()["pool"]["state"] == "broken"  # until rebuilt
        tiny = client.post("/v1/searches?wait=30&dedupe=false", json=TINY_SEARCH)
        assert tiny.status_code in (200, 201, 202), tiny.text
        done = wait_until(
            client, tiny.json()["id"], lambda b: b["status"] not in ("queued", "running")
        )
        assert done["status"] == "succeeded", done
        after = client.get("/v1/health").json()["pool"]
        assert after["state"] == "ok"
        assert after["alive"] == after["workers"]
        assert after["worker_deaths"] == pool["worker_deaths"] + 1


def test_workers_run_below_the_api_priority(fault_server: Any) -> None:
    """Search workers take `worker_nice` (10) over the API process, so liveness answers
    while searches fill the cores (bench/load.py: health p99 at 64 clients)."""
    fault_server.wait_warm()
    with fault_server.client() as client:
        pids = client.get("/v1/health").json()["pool"]["worker_pids"]
    api = os.getpriority(os.PRIO_PROCESS, fault_server.proc.pid)
    assert pids and all(os.getpriority(os.PRIO_PROCESS, pid) == min(api + 10, 19) for pid in pids)
