"""Solver work off the API process: the API's resident memory across expert placements,
and `/v1/health` latency while heavy serving estimates run (issue 13, point 5).

Starts the service (`uvicorn app.main:app`, process pools, a SQLite file under /tmp) on a
loopback port, then prints:

- the API process's RSS (`/proc/<pid>/status` VmRSS) before and after `--placements`
  calls of a 256-expert, 64-rank placement with 64 redundant copies (Zipf 1.4 loads);
- p50 / p99 of `GET /v1/health` while `--estimates` serving estimates of a plan with
  `--instances` instances run concurrently, and their status codes and wall times.

    .venv/bin/python -m bench.faults [--placements 7] [--estimates 4] [--instances 100000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.live_service import LiveServer
from bench.moe_placement import zipf_loads


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def placement_body(seed: int = 0, experts: int = 256, ranks: int = 64) -> dict[str, Any]:
    """Two layers of Zipf(1.4) loads over `experts` experts, on `ranks` ranks of 8 per node
    with `ranks` redundant copies (bench.moe_placement's largest case by default)."""
    rng = random.Random(seed)
    loads = [zipf_loads(experts, 1.4, experts * 1000, rng) for _ in range(2)]
    return {"loads": loads, "num_ranks": ranks, "ranks_per_node": 8, "num_redundant": ranks}


def serving_estimate_body(instances: int) -> dict[str, Any]:
    nodes = max(1, instances // 8)
    return {
        "model": {"preset": "llama3-8b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": nodes}]},
        "workload": {
            "kind": "serving",
            "prompt_tokens": 512,
            "output_tokens": 128,
            "slo": {"ttft_ms": 300, "tpot_ms": 30, "percentile": 90},
            "num_requests": 5000,
        },
        "plan": {
            "mode": "colocated",
            "instances": [{"role": "both", "count": instances, "parallelism": {"tensor": 1}}],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--placements", type=int, default=7)
    parser.add_argument("--estimates", type=int, default=4)
    parser.add_argument("--instances", type=int, default=100_000)
    parser.add_argument("--health-window-s", type=float, default=30.0)
    parser.add_argument("--env", action="append", default=[], help="MESHPLAN_X=value")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="meshplan-faults-"))
    env = {"MESHPLAN_DATABASE_URL": f"sqlite:///{tmp / 'bench.db'}"}
    env.update(dict(item.split("=", 1) for item in args.env))
    server = LiveServer(env, tmp / "server.log").start()
    assert server.proc is not None
    pid = server.proc.pid
    try:
        with httpx.Client(base_url=server.url, timeout=600) as client:
            before = rss_mb(pid)
            for i in range(args.placements):
                started = time.perf_counter()
                r = client.post("/v1/expert-placements", json=placement_body(i))
                print(
                    f"placement {i + 1}: {r.status_code} {time.perf_counter() - started:.2f} s, "
                    f"API RSS {rss_mb(pid):.0f} MB"
                )
            print(
                f"API RSS before {before:.0f} MB, after {args.placements} placements "
                f"{rss_mb(pid):.0f} MB"
            )

            idle = [_timed_get(client, "/v1/health") for _ in range(50)]
            print(f"health idle: p50 {statistics.median(idle) * 1e3:.1f} ms")
            results: list[tuple[int, float]] = []

            def one() -> None:
                with httpx.Client(base_url=server.url, timeout=600) as c:
                    t = time.perf_counter()
                    code = c.post("/v1/estimate", json=serving_estimate_body(args.instances))
                    results.append((code.status_code, time.perf_counter() - t))

            threads = [threading.Thread(target=one) for _ in range(args.estimates)]
            for t in threads:
                t.start()
            busy: list[float] = []
            deadline = time.monotonic() + args.health_window_s
            while time.monotonic() < deadline and any(t.is_alive() for t in threads):
                busy.append(_timed_get(client, "/v1/health"))
                time.sleep(0.05)
            for t in threads:
                t.join()
            busy.sort()
            print(
                f"health during {args.estimates} serving estimates of {args.instances} "
                f"instances: p50 {statistics.median(busy) * 1e3:.1f} ms, "
                f"p99 {busy[int(0.99 * (len(busy) - 1))] * 1e3:.1f} ms over {len(busy)} calls"
            )
            print("estimates:", [(code, round(s, 1)) for code, s in results])
    finally:
        server.stop()


def _timed_get(client: httpx.Client, path: str) -> float:
    started = time.perf_counter()
    client.get(path).raise_for_status()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
