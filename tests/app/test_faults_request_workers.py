"""Solver work of requests runs in request workers: the API process does not grow across
expert placements, answers are those of the solver, and a serving estimate past its time
bound answers a 504 problem while `/v1/health` stays fast."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.faults import placement_body, rss_mb, serving_estimate_body
from bench.live_service import LiveServer
from solver.formulations.expert_placement import solve_expert_placement
from specs.placement import ExpertPlacementRequest
from tests.app.app_support import assert_problem

SMALL_PLACEMENT = {
    "loads": [[90, 132, 40, 61], [20, 107, 104, 64]],
    "num_ranks": 2,
    "ranks_per_node": 2,
    "num_redundant": 2,
}


@pytest.mark.slow
def test_request_solver_work_runs_in_bounded_workers(tmp_path: Path) -> None:
    env = {
        "MESHPLAN_DATABASE_URL": f"sqlite:///{tmp_path / 'req.db'}",
        "MESHPLAN_SEARCH_WORKERS": "1",
    }
    server = LiveServer(env, tmp_path / "server.log").start()
    assert server.proc is not None
    pid = server.proc.pid
    try:
        with server.client() as client:
            # the same answer as the solver called directly
            direct = solve_expert_placement(ExpertPlacementRequest(**SMALL_PLACEMENT)).to_dict()
            served = client.post("/v1/expert-placements", json=SMALL_PLACEMENT).json()
            for key in ("assignment", "rank_loads", "imbalance", "status"):
                if key in direct:
                    assert served[key] == direct[key], key
            # the API process does not keep the solver's memory (was ~180 MB a call)
            client.post("/v1/expert-placements", json=placement_body(0, experts=64, ranks=16))
            before = rss_mb(pid)
            for i in range(7):
                r = client.post(
                    "/v1/expert-placements", json=placement_body(i, experts=64, ranks=16)
                )
                assert r.status_code == 200, r.text
            assert rss_mb(pid) - before < 60, (before, rss_mb(pid))

    finally:
        server.stop()


@pytest.mark.slow
def test_a_serving_estimate_past_its_bound_answers_504_while_health_stays_fast(
    tmp_path: Path,
) -> None:
    env = {
        "MESHPLAN_DATABASE_URL": f"sqlite:///{tmp_path / 'req.db'}",
        "MESHPLAN_SEARCH_WORKERS": "1",
        "MESHPLAN_REQUEST_TIMEOUT_S": "0.3",
    }
    server = LiveServer(env, tmp_path / "server.log").start()
    try:
        with server.client() as client:
            # a serving estimate past its bound: a 504 problem; health answers meanwhile
            answer: dict[str, Any] = {}

            def heavy() -> None:
                with httpx.Client(base_url=server.url, timeout=120) as c:
                    started = time.perf_counter()
                    answer["r"] = c.post("/v1/estimate", json=serving_estimate_body(8))
                    answer["s"] = time.perf_counter() - started

            thread = threading.Thread(target=heavy)
            thread.start()
            latencies = []
            while thread.is_alive():
                started = time.perf_counter()
                assert client.get("/v1/health").status_code == 200
                latencies.append(time.perf_counter() - started)
                time.sleep(0.05)
            body = assert_problem(answer["r"], 504, path="/v1/estimate")
            assert body["type"].endswith("/solver-timeout")
            # the bound counts from when a worker takes the job (a fresh worker warms up first)
            assert answer["s"] < 60
            assert statistics.median(latencies) < 0.1, latencies
            # the replaced worker serves the next request
            small = serving_estimate_body(8)
            small["workload"]["num_requests"] = 50
            again = client.post("/v1/estimate", json=small)
            assert again.status_code in (200, 504), again.text
    finally:
        server.stop()
