"""64 concurrent clients against a real service process (uvicorn, SQLite, the process
executor: the `make serve` set-up) answer without a single error, and liveness never
answers 5xx (issue 13, point 4: 40 of 65 health checks answered 500 after 30 s). No
timing asserts: `bench/load.py` measures latency."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from bench import load


def test_64_clients_get_no_errors(tmp_path: Path) -> None:
    process, url = load.start_service(tmp_path, load.ROOT)
    try:
        load.wait_for(url, "/v1/health", timeout_s=90)
        search_id = str(load.seed_search(url)["id"])
        ops = load.operations(search_id)

        async def phases() -> list[load.Phase]:
            health = await load.run_phase(
                url, "single", 64, 2, [("health", *ops["health"])], timeout_s=60
            )
            mixed = await load.run_phase(
                url, "mixed", 64, 4, [(name, *ops[name]) for name in ops], timeout_s=60
            )
            return [*health.values(), *mixed.values()]

        rows = asyncio.run(phases())
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    summary = {(r.mode, r.op): r.statuses for r in rows}
    assert sum(r.errors for r in rows) == 0, summary
    health = [r for r in rows if r.op == "health"]
    assert sum(len(r.latencies) for r in health) == 64 * 2 + 64
    assert all(set(r.statuses) == {"200"} for r in health), summary
    search = next(r for r in rows if r.op == "search")
    assert set(search.statuses) <= {"201", "202"} and len(search.latencies) == 64
